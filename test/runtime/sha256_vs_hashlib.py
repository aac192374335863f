"""The runtime's in-tree SHA-256 (runtime/src/Sha256.cpp) against Python's
hashlib on random messages: every length 0..300 (all paddings, around the
55/56 and 63/64/65-byte edges), then random lengths up to 64 KiB; each
hashed in one update() and in pieces (Sha256Check.cpp).

    python3 sha256_vs_hashlib.py <kvgen-sha256-check> [seed]

Prints the count checked; exits 1 naming the first message that differs."""

import hashlib
import random
import subprocess
import sys


def main():
    tool = sys.argv[1]
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 24)
    lengths = list(range(301)) + [rng.randrange(301, 1 << 16)
                                  for _ in range(200)]
    msgs = [rng.randbytes(n) for n in lengths]
    frames = b"".join(len(m).to_bytes(8, "little") + m for m in msgs)
    out = subprocess.run([tool], input=frames, capture_output=True,
                         check=True).stdout.decode().splitlines()
    if len(out) != len(msgs):
        print(f"FAIL: {len(out)} digests for {len(msgs)} messages")
        return 1
    for m, line in zip(msgs, out):
        want = hashlib.sha256(m).hexdigest()
        whole, pieces = line.split()
        if whole != want or pieces != want:
            print(f"FAIL: {len(m)}-byte message {m[:16].hex()}...: "
                  f"hashlib {want}, kvgen {whole} (one update), {pieces} "
                  "(in pieces)")
            return 1
    print(f"ok: {len(msgs)} messages (0..300 bytes, then up to 64 KiB) "
          "match hashlib, whole and in pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
