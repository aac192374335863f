"""Per-call host overhead of kvgen's torch op against the C API.

Times, on one device, the same reshape_and_cache kernel launched
  c_api    kvgen_launch through ctypes with a prebuilt argument struct (what
           an engine calling the C API directly pays, plus ctypes' call);
  python   kvgen.torch.reshape_and_cache_flash (the op's implementation:
           table lookup, struct fill, launch) called as a Python function;
  op       torch.ops.kvgen.reshape_and_cache_flash (through the dispatcher).
Each is called N times in a loop and the host time per call is reported
(median of R repeats, microseconds). On CUDA the launches are asynchronous,
so this is host time; the device queue is drained before each repeat.

  python3 bench/torch_overhead.py --device cpu     # host backend
  python3 bench/torch_overhead.py --device cuda    # GPU (lead's H200)

Prints one line per variant and the difference op - c_api (goal: <= 3 us).

--no-kernel replaces kvgen_launch by a Python function that returns success
(in all three variants), so the numbers are what the binding costs above the
C call: use it where the kernel itself is slow compared with the overhead
(the host backend's launch allocates one fiber stack per CTA thread:
hundreds of microseconds, codegen/prelude/target_host.h).
"""

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch  # noqa: E402

import kvgen  # noqa: E402
import kvgen.torch as kt  # noqa: E402


def timed(fn, n, r, sync):
    out = []
    for _ in range(r):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        out.append((t1 - t0) / n * 1e6)
        sync()
    return statistics.median(out), min(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("-r", type=int, default=7)
    ap.add_argument("--no-kernel", action="store_true",
                    help="time everything but the kernel (kvgen_launch "
                    "replaced by a no-op returning 0)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    T, H, DK, DV, BS, NB = a.tokens, 4, 192, 128, 16, 64
    bf = torch.bfloat16
    key = torch.randn(T, H, DK, dtype=bf, device=dev)
    value = torch.randn(T, H, DV, dtype=bf, device=dev)
    kc = torch.zeros(NB, BS, H, DK, dtype=bf, device=dev)
    vc = torch.zeros(NB, BS, H, DV, dtype=bf, device=dev)
    slots = torch.arange(T, dtype=torch.int64, device=dev)
    one = torch.ones(1, device=dev)
    op = torch.ops.kvgen.reshape_and_cache_flash
    op(key, value, kc, vc, slots, "auto", one, one)  # JIT once
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    # The same kernel through the C API, struct built once.
    plan = next(iter(p for k, p in kt._plans.items() if k[0] == "w"))
    args = plan.args()
    args.key, args.value = key.data_ptr(), value.data_ptr()
    args.key_cache, args.value_cache = kc.data_ptr(), vc.data_ptr()
    args.slot_mapping, args.num_tokens = slots.data_ptr(), T
    launch = kvgen._capi.lib().kvgen_launch
    if a.no_kernel:
        def launch(*_):
            return 0
        kt._launch = launch
    handle, ref, size = plan.handle, ctypes.byref(args), plan.size
    stream = 0 if dev.type == "cpu" else \
        torch.cuda.current_stream(dev).cuda_stream

    def c_api():
        launch(handle, ref, size, stream)

    def python():
        kt.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", one,
                                   one)

    def through_op():
        op(key, value, kc, vc, slots, "auto", one, one)

    res = {}
    for name, fn in (("c_api", c_api), ("python", python),
                     ("op", through_op)):
        med, best = timed(fn, a.n, a.r, sync)
        res[name] = med
        print(f"{name:8s} {med:8.2f} us/call (median of {a.r}; best "
              f"{best:.2f}) device={dev} tokens={T}"
              + (" no-kernel" if a.no_kernel else ""))
    print(f"overhead op - c_api: {res['op'] - res['c_api']:.2f} us "
          f"(python - c_api: {res['python'] - res['c_api']:.2f} us; goal "
          "<= 3 us)")


if __name__ == "__main__":
    main()
