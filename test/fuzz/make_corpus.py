#!/usr/bin/env python3
"""Writes the layout fuzzer's seed corpus: the body of every #kv.layout<...>
in the given .mlir files (examples/layouts), one file each, plus a few
layouts that reach the grammar's other forms (components, '?' strides,
packed, hnd) and one with launch argument bytes after a NUL.

  make_corpus.py OUT_DIR FILE.mlir...
"""
import hashlib
import pathlib
import re
import sys

EXTRA = [
    "num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], block_size = 64,"
    " packing = packed, dtype = bf16",
    "num_kv_heads = 8, head_size_k = 128, head_size_v = 128, block_size = 16,"
    " dtype = bf16, k_strides = [32768, 1024, 128],"
    " v_strides = [32768, 1024, 128]",
    "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 64,"
    " order = hnd, packing = packed, dtype = f8E4M3FN, scale = per_head,"
    " k_strides = [?, 320, 20480]",
    "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 16,"
    " dtype = bf16, k_strides = [?, ?, ?], v_strides = [8192, ?, 128]",
    # Chunked dimensions: vLLM's legacy K / V, aiter's shuffled V, '?'.
    "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 16,"
    " dtype = bf16, k_strides = [12288, 8, 3072], k_elem_chunks = [8, 128],"
    " v_strides = [8192, 1, 2048], v_elem_stride = 16",
    "num_kv_heads = 2, head_size_k = 128, head_size_v = 128, block_size = 16,"
    " dtype = f8E4M3FN, scale = per_head, k_strides = [4096, 16, 2048],"
    " k_elem_chunks = [16, 256], v_strides = [4096, 1, 2048],"
    " v_token_chunks = [16, 2048], v_elem_stride = 16",
    "num_kv_heads = 2, head_size_k = 64, head_size_v = 64, block_size = 16,"
    " dtype = bf16, k_strides = [?, ?, ?], k_elem_chunks = [8, 128],"
    " v_strides = [?, 1, ?], v_elem_stride = 16",
]

# Inputs the fuzzer once failed on, kept as seeds (hex): a launch of
# INT64_MAX work items overflowed launchShape's (work + n - 1) / n
# (UBSan, 2026-12-03; Launch.h ceilDiv since).
REGRESSIONS = [
    "".join([
        "6e756d5f6b765f6865616473203d20382c20686561645f73697a655f6b203d20",
        "3132382c20686561645f73697a655f76203d203132382c20626c6f636b5f7369",
        "7a65203d2031362c206474797065203d20626631362c206b5f73747269646573",
        "203d205b33323438352c20313032342c203132385d2c20765f73747269646573",
        "203d205b33323736382c20313032342c203132385d006f636b5f73697a65203d",
        "2031362c20000000ff65203d20626631362c206b5f73747269646573203d205b",
        "33323438352c20313032342c203132385d2c20000000000000000b765f737472",
        "69646573382c20313032342c203132385d00000000010203ffffffffffffff7f",
        "6f6d706f6e656e747315161718191a1b1c1d1e1f202122232425262728292a2b",
        "2c2d2e2f30313233343592939495969798999a9be5e6e7e8e9eaebecedeeeff0",
        "f1f2f3f4f5f6f7f8f9fafbfcfdfeff",
    ]),
    # The text parser ended a `//` comment at '\n' only, MLIR's lexer also
    # at '\r': one accepted what the other refused (2026-12-05, with the
    # chunk fields in the dictionary).
    "".join([
        "0d2f2f2f2f2f2f2f2f2f2f2f2f2f2f2f6b5f746f6b656e5f6368756e6b732f2f",
        "2f0d6e756d5f6b765f6865616473203d20342c20686561645f73697a655f6b20",
        "3d203039372c20686561645f73697a655f76203d203032382c20626c6f636b5f",
        "73697a65203d2036342c206f72646572203d20686e642c207061636b696e6720",
        "3d207061636b65642c206474797065203d20663845344d33464e2c207363616c",
        "65203d207065725f68656164000a000000000000000000000000000000000000",
        "00000000000000000000000000000000000000000000000000000d0000000000",
        "000000000001",
    ]),
]


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    seeds = []
    for f in sys.argv[2:]:
        text = pathlib.Path(f).read_text()
        for m in re.finditer(r"#kv\.layout<(.*?)>", text, re.S):
            seeds.append(" ".join(m.group(1).split()).encode())
    if not seeds:
        sys.exit("make_corpus.py: no #kv.layout in the given files")
    seeds += [s.encode() for s in EXTRA]
    # A layout, NUL, an op index, option bits and argument bytes.
    seeds.append(EXTRA[1].encode() + b"\0\x00\x00" + bytes(range(256)))
    seeds.append(EXTRA[3].encode() + b"\0\x02\x00" + b"\x01" * 200)
    seeds += [bytes.fromhex(r) for r in REGRESSIONS]
    # paged_attention (op 6 of allOps()) with its launch-rule fields set:
    # kvgen_paged_attention_args (kernel_abi.h) has 12 pointers (96 bytes),
    # then num_seqs, num_tokens, max_query_len, max_seq_len, sliding_window,
    # num_blocks, ... as int64. Large, near-limit values to start from
    # (issue 26, row 1: the row-tiled launch rule was never reached).
    for work, tokens, rows, span, window in (
            (1, 4, 4, 1 << 40, 0), (8, 1 << 62, 1 << 62, 32768, 128),
            (1 << 31, 1 << 31, 1, 1 << 17, 0),
            ((1 << 63) - 1, (1 << 63) - 1, (1 << 63) - 1, (1 << 63) - 1,
             (1 << 63) - 2)):
        args = bytearray((0x100).to_bytes(8, "little") * 12)
        for v in (work, tokens, rows, span, window, 100, 10, 10):
            args += v.to_bytes(8, "little")
        args += bytes(272 - len(args))
        seeds.append(EXTRA[2].encode() + b"\0\x06\x00" + bytes(args) +
                     b"\x0f\x01")
    for s in seeds:
        (out / hashlib.sha1(s).hexdigest()).write_bytes(s)
    print(f"make_corpus.py: {len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
