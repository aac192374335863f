"""Per-call host overhead of kvgen's torch op against the C API (issue 11).

Times, on one device, the same reshape_and_cache kernel launched
  c_api      kvgen_launch through ctypes with a prebuilt argument struct
             (what an engine calling the C API directly pays, plus ctypes'
             call: 0.6-0.8 us on the H200 host, the --no-kernel row);
  op         torch.ops.kvgen.reshape_and_cache_flash (torch's dispatcher,
             then kvgen's kernel: the C++ one of kvgen/_torch_fast.cpp, or
             the Python one where it could not be built);
  op.default torch.ops.kvgen.reshape_and_cache_flash.default (the same
             without the OpOverloadPacket's Python __call__);
  python     kvgen.torch.reshape_and_cache_flash, the Python function (with
             the C++ kernel it calls op.default; without it, py_path);
  py_path    kvgen.torch's Python implementation called directly (plan
             found by tensor identity, checks, struct fill, ctypes launch):
             what the op costs on top of torch's dispatch when the Python
             kernel is registered;
and, to show the parts (nothing is launched by these):
  py_noop    a Python function with the op's 8 arguments that returns;
  op_py_noop an op of the same schema whose Python kernel returns (torch's
             cost of calling a Python kernel);
  op_cpp_noop an op of the same schema whose C++ kernel returns (torch's
             cost of calling a C++ kernel from Python; needs the C++
             library).
Each variant is called N times in a loop, the variants take turns, R rounds;
per variant the median and the best round are reported, in microseconds of
host time per call. On CUDA the launches are asynchronous, so this is host
time; the device queue is drained before each round.

  python3 bench/torch_overhead.py --device cpu --no-kernel   # the binding
  python3 bench/torch_overhead.py --device cpu               # host backend
  python3 bench/torch_overhead.py --device cuda              # GPU (H200)

Prints one line per variant, the parts (torch's entry to a C++ / Python
kernel, kvgen's C++ kernel's own work) and op - c_api (goal: <= 3 us).

--no-kernel launches nothing, in every variant alike: the C API variant and
the Python path call a C function that returns 0 through ctypes (the same
call as kvgen_launch's), the C++ kernel calls it directly; so the numbers are
what the binding costs above the kernel launch itself (the host backend's
launch allocates one fiber stack per CTA thread: hundreds of microseconds,
codegen/prelude/target_host.h). Without the C++ library it falls back to a
Python function (the C API line then lacks ctypes' 0.6-0.8 us).

Measured (us per call, medians; docs/torch.md has the tables and parts),
1 token, MiMo-V2 geometry (4 kv heads, K 192, V 128, bf16):
  H200 host, CUDA, scripts/device_torch_check.sh: before (issue 11) c_api
  5.3, python 8.9, op 12.6; with the C++ kernel c_api 5.36, op 7.72,
  op.default 7.65, python 7.79: op - c_api 2.36 (64 tokens 2.05,
  --no-kernel 2.05); a second session 2.43 (64 tokens 3.22 at the median,
  2.09 from the best rounds; --no-kernel 1.46).
  2-core CI machine, CPU, --no-kernel -n 5000 -r 5, load ~1, three runs:
  before (main) c_api 0.14-0.24, python 3.77-6.73, op 8.24-14.80; with the
  C++ kernel c_api 0.78-0.98, op 2.78-4.45, python 3.12-3.89: op - c_api
  2.01-3.47 (2.32 and 2.86 in two 9-round runs).
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

_SCHEMA = ("(Tensor key, Tensor value, Tensor(a!) key_cache, "
           "Tensor(b!) value_cache, Tensor slot_mapping, str kv_cache_dtype, "
           "Tensor k_scale, Tensor v_scale, bool pdl=False) -> ()")


def _noop(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
          k_scale, v_scale, pdl=False):
    pass


def reference_ops():
    """{name: callable} of the ops that launch nothing (py_noop's kin)."""
    lib = torch.library.Library("kvgen_bench", "DEF")
    lib.define("py_noop" + _SCHEMA)
    lib.impl("py_noop", _noop, "CPU")
    lib.impl("py_noop", _noop, "CUDA")
    ops = {"op_py_noop": torch.ops.kvgen_bench.py_noop.default}
    if kt._cpp is not None:
        lib.define("cpp_noop" + _SCHEMA)
        kt._cpp.register_noop("kvgen_bench", "cpp_noop")
        ops["op_cpp_noop"] = torch.ops.kvgen_bench.cpp_noop.default
    return lib, ops


def launcher(no_kernel):
    """(kvgen_launch as a ctypes function, note): with no_kernel, a C
    function that returns 0 (the C++ library's no-op launch; a Python
    function without it), also installed as the launch of kvgen.torch's
    C++ kernel and Python implementation."""
    launch = kvgen._capi.lib().kvgen_launch
    note = ""
    if no_kernel:
        if kt._cpp is not None:
            fn, fn_ex = kt._cpp.no_launch()
            launch = ctypes.CFUNCTYPE(
                ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                ctypes.c_uint64, ctypes.c_void_p)(fn)
            kt._cpp.set_launch(fn, fn_ex, ctypes.addressof(kt._PDL_OPTIONS))
        else:
            def launch(*_):
                return 0
            note = " (no C++ library: the no-op launch is a Python function)"
        kt._launch = launch
    return launch, note


def time_variants(variants, n, rounds, sync):
    """{name: [us per call of each round]}: the variants take turns, n
    calls each per round, after a warm-up; sync() drains the device queue
    around each timed loop."""
    for f in variants.values():  # warm-up (plans, caches)
        for _ in range(50):
            f()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, f in variants.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            t1 = time.perf_counter()
            sync()
            times[name].append((t1 - t0) / n * 1e6)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("-n", type=int, default=20000, help="calls per round")
    ap.add_argument("-r", type=int, default=7, help="rounds")
    ap.add_argument("--no-kernel", action="store_true",
                    help="time everything but the kernel (kvgen_launch "
                    "replaced by a C function returning 0)")
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
    args = (key, value, kc, vc, slots, "auto", one, one)
    op(*args)  # JIT once (and the C++ kernel remembers the plan)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    # The same kernel through the C API, struct built once.
    plan = next(iter(p for k, p in kt._plans.items() if k[0] == "w"))
    cargs = plan.args()
    cargs.key, cargs.value = key.data_ptr(), value.data_ptr()
    cargs.key_cache, cargs.value_cache = kc.data_ptr(), vc.data_ptr()
    cargs.slot_mapping, cargs.num_tokens = slots.data_ptr(), T
    launch, note = launcher(a.no_kernel)
    handle, ref, size = plan.handle, ctypes.byref(cargs), plan.size
    stream = 0 if dev.type == "cpu" else \
        torch.cuda.current_stream(dev).cuda_stream
    lib, refs = reference_ops()
    default = op.default
    write = kt.reshape_and_cache_flash
    py_path = kt._write_fast

    variants = {
        "c_api": lambda: launch(handle, ref, size, stream),
        "op": lambda: op(*args),
        "op.default": lambda: default(*args),
        "python": lambda: write(*args),
        "py_path": lambda: py_path(*args),
        "py_noop": lambda: _noop(*args),
    }
    for name, f in refs.items():
        variants[name] = (lambda f=f: f(*args))
    times = time_variants(variants, a.n, a.r, sync)
    info = kt.fast_path_info()
    res = {n: statistics.median(t) for n, t in times.items()}
    tag = f"device={dev} tokens={T}" + (" no-kernel" if a.no_kernel else "")
    print(f"kvgen kernel: {info['kernel']}"
          + (f" ({info['reason']})" if info["reason"] else "") + note)
    for name, t in times.items():
        print(f"{name:12s} {res[name]:8.2f} us/call (median of {a.r}; best "
              f"{min(t):.2f}) {tag}")
    print("parts (medians):")
    print(f"  torch, Python -> Python kernel: "
          f"{res['op_py_noop'] - res['py_noop']:.2f} us")
    if "op_cpp_noop" in res:
        print(f"  torch, Python -> C++ kernel:    "
              f"{res['op_cpp_noop'] - res['py_noop']:.2f} us")
    if info["kernel"] == "c++":
        print(f"  kvgen's C++ kernel (op.default - op_cpp_noop): "
              f"{res['op.default'] - res['op_cpp_noop']:.2f} us"
              + ("" if a.no_kernel else " with the launch"))
    print(f"  kvgen's Python path (py_path - py_noop): "
          f"{res['py_path'] - res['py_noop']:.2f} us"
          + ("" if a.no_kernel else " with the launch"))
    best = {n: min(t) for n, t in times.items()}
    print(f"overhead op - c_api: {res['op'] - res['c_api']:.2f} us "
          f"(op.default - c_api: {res['op.default'] - res['c_api']:.2f}; "
          f"python - c_api: {res['python'] - res['c_api']:.2f}; goal "
          f"<= 3 us); best rounds: {best['op'] - best['c_api']:.2f} us")
    del lib


if __name__ == "__main__":
    main()
