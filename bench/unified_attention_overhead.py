"""Host time per call of torch.ops.kvgen.unified_attention against a raw
launch of the same kernel (issue 24: <= 5 us over a raw launch, H200, 1
token).

Variants, each called N times in a loop, taking turns for R rounds; per
variant the median and the best round in microseconds per call:
  c_api       kvgen_launch through ctypes with the argument struct built
              once (the raw launch, plus ctypes' call)
  op          torch.ops.kvgen.unified_attention, arguments positional (its
              C++ kernel,
              kvgen/_torch_fast.cpp, or the Python one where it is not in
              use: KVGEN_TORCH_FAST=0)
  op.default  torch.ops.kvgen.unified_attention.default
  op.kw       op.default with every argument by keyword (as vLLM's Triton
              backend calls unified_attention)
  python      kvgen.torch.unified_attention (the op where the C++ kernel is
              in use, else the Python implementation without the
              dispatcher)
  py_path     the Python implementation called directly (_torch_attention
              ._impl: signature, checks, struct fill, ctypes launch)
  op_cpp_noop an op of the same schema whose C++ kernel returns at once
              (torch's own cost of calling a C++ kernel with these 18
              arguments; needs the C++ library)

--no-kernel replaces kvgen_launch by a C function that returns 0 (the C++
library's kvgen_torch_fast_no_launch; a Python function without it), in
every variant alike: what is left is the host time above the launch.

  python3 bench/unified_attention_overhead.py --device cpu --no-kernel
  python3 bench/unified_attention_overhead.py --device cuda
  KVGEN_TORCH_FAST=0 python3 bench/unified_attention_overhead.py ...

Geometry: MiMo-V2 (4 kv heads, 16 q heads, K 192 / V 128, packed bf16
cache, block 16), sinks, one sequence of --context tokens, --tokens query
tokens (1: decode).
"""

import argparse
import ctypes
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import kvgen.torch as kt  # noqa: E402
from kvgen import _torch_attention as ta  # noqa: E402
from torch_overhead import launcher, time_variants  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("-n", type=int, default=20000, help="calls per round")
    ap.add_argument("-r", type=int, default=7, help="rounds")
    ap.add_argument("--no-kernel", action="store_true")
    a = ap.parse_args()
    dev = torch.device(a.device)
    T, L, H, HQ, DK, DV, BS = a.tokens, max(a.context, a.tokens), 4, 16, \
        192, 128, 16
    nb = -(-L // BS) + 1
    bf = torch.bfloat16
    kv = torch.randn(nb, BS, H, DK + DV, dtype=bf, device=dev)
    k, v = kv[..., :DK], kv[..., DK:]
    q = torch.randn(T, HQ, DK, dtype=bf, device=dev)
    out = torch.empty(T, HQ, DV, dtype=bf, device=dev)
    i32 = dict(dtype=torch.int32, device=dev)
    cu = torch.tensor([0, T], **i32)
    seqused = torch.tensor([L], **i32)
    bt = torch.arange(nb, **i32).reshape(1, nb)
    sinks = torch.zeros(HQ, device=dev)
    ws = torch.zeros(kt.unified_attention_workspace_bytes(q, k, v,
                                                          sinks=sinks),
                     dtype=torch.uint8, device=dev)
    args = (q, k, v, out, cu, T, seqused, L, DK ** -0.5, True, [-1, -1], bt,
            0.0, None, None, None, sinks, ws)
    names = ("q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q",
             "seqused_k", "max_seqlen_k", "softmax_scale", "causal",
             "window_size", "block_table", "softcap", "q_descale",
             "k_descale", "v_descale", "sinks", "workspace")
    kw = dict(zip(names, args))
    op = torch.ops.kvgen.unified_attention
    op(*args)  # JIT once; the C++ kernel remembers the plan
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    plan, cargs = ta._impl(*args)  # the plan and struct of this call
    launch, note = launcher(a.no_kernel)
    handle, ref, size = plan.handle, ctypes.byref(cargs), plan.size
    stream = 0 if dev.type == "cpu" else \
        torch.cuda.current_stream(dev).cuda_stream
    default = op.default
    lib = torch.library.Library("kvgen_bench_ua", "DEF")
    variants = {
        "c_api": lambda: launch(handle, ref, size, stream),
        "op": lambda: op(*args),
        "op.default": lambda: default(*args),
        "op.kw": lambda: default(**kw),
        "python": lambda: kt.unified_attention(*args),
        "py_path": lambda: ta._impl(*args),
    }
    if kt._cpp is not None:
        lib.define("cpp_noop" + ta.SCHEMA)
        kt._cpp.register_noop("kvgen_bench_ua", "cpp_noop")
        noop = torch.ops.kvgen_bench_ua.cpp_noop.default
        variants["op_cpp_noop"] = lambda: noop(*args)
    times = time_variants(variants, a.n, a.r, sync)
    info = kt.fast_path_info()
    res = {n: statistics.median(t) for n, t in times.items()}
    best = {n: min(t) for n, t in times.items()}
    tag = f"device={dev} tokens={T} context={L}" + (
        " no-kernel" if a.no_kernel else "")
    print(f"kvgen kernel: {info['kernel']}"
          + (f" ({info['reason']})" if info["reason"] else "") + note)
    for name, t in times.items():
        print(f"{name:12s} {res[name]:8.2f} us/call (median of {a.r}; best "
              f"{best[name]:.2f}) {tag}")
    print(f"op - c_api: {res['op'] - res['c_api']:.2f} us (op.default - "
          f"c_api {res['op.default'] - res['c_api']:.2f}; best rounds "
          f"{best['op'] - best['c_api']:.2f}; goal <= 5 us)")
    if "op_cpp_noop" in res:
        print(f"parts: torch's call of a C++ kernel of this schema "
              f"(op_cpp_noop) {res['op_cpp_noop']:.2f} us, kvgen's C++ "
              f"kernel (op.default - op_cpp_noop) "
              f"{res['op.default'] - res['op_cpp_noop']:.2f} us")
    print(f"hits {info['hits']}, misses {info['misses']}")
    del lib


if __name__ == "__main__":
    main()
