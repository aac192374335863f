#!/usr/bin/env python3
"""One reshape_and_cache launch and one same-size torch copy per geometry, for
a profiler: run it under Nsight Compute to compare the write with the copy
of the same bytes (issue 13: where the mid-size writes lose to the copy).

  ncu --clock-control none --section SpeedOfLight --section Occupancy \\
      --section LaunchStats --section WarpStateStats \\
      --kernel-name regex:'kvgen|copy|elementwise' \\
      python3 bench/ncu_write.py --bundle .dev/bundle \\
          --lib build-dev/lib/libkvgen-runtime.so --tokens 4096 \\
          --geoms mimo_b16_f8E4M3FN,mimo_b16_bf16

Each geometry: a warm-up launch of both (not what the profiler should look
at: pass --launch-skip / -c as needed), then one write and one copy, slots
and tensors as bench.py makes them (prefill-like slots in shuffled blocks).
The write is launched from a prepared struct (Kernel.prepare + launch_raw),
plainly. Prints the kernel names so the profiler's rows can be matched.
"""

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", help="libkvgen-runtime.so (sets KVGEN_LIB)")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--geoms", default="mimo_b16_f8E4M3FN,mimo_b16_bf16")
    args = ap.parse_args()
    if args.lib:
        os.environ["KVGEN_LIB"] = args.lib
    import numpy as np
    import torch  # before the kvgen library (bench_pdl.py's module doc)
    import kvgen
    import geometries as G
    from bench import make_slots, moved_bytes

    ctx = kvgen.Context("cuda")
    ctx.load_bundle(args.bundle)
    geoms = dict(G.bench_geometries())
    rng = np.random.default_rng(0)
    dev = torch.device("cuda")
    T = args.tokens
    for label in args.geoms.split(","):
        lay = geoms[label]
        k = ctx.kernel("reshape_and_cache", lay, "bf16")
        H, Dk, Dv, bs = (lay.num_kv_heads, lay.head_size_k, lay.head_size_v,
                         lay.block_size)
        nb = max(2 * -(-T // bs), 256)
        key = torch.randn(T, H, Dk, device=dev).to(torch.bfloat16)
        value = torch.randn(T, H, Dv, device=dev).to(torch.bfloat16)
        slots = torch.from_numpy(make_slots(T, bs, nb, rng)).to(dev)
        kc = torch.empty(max(lay.extent_bytes("k", nb),
                             lay.extent_bytes("v", nb)) if lay.packed
                         else lay.extent_bytes("k", nb),
                         dtype=torch.uint8, device=dev)
        vc = None if lay.packed else torch.empty(
            lay.extent_bytes("v", nb), dtype=torch.uint8, device=dev)
        scales = {}
        if lay.scale != "none":
            scales = {"k_scale": torch.full((1,), 0.1, device=dev),
                      "v_scale": torch.full((1,), 0.1, device=dev)}
        stream = torch.cuda.current_stream().cuda_stream
        prepared = k.prepare(key, value, kc, vc, slots, num_blocks=nb,
                             stream=stream, **scales)[0]
        rd, wr = moved_bytes(lay, T)
        n = -(-(rd + wr) // 2)
        src = torch.empty(n, dtype=torch.uint8, device=dev)
        src.random_(0, 256)
        dst = torch.empty_like(src)
        for _ in range(2):  # warm-up, then the launches to profile
            k.launch_raw(prepared, stream=stream)
            dst.copy_(src)
        torch.cuda.synchronize()
        print(f"{label} T={T}: kernel {k.name}, copy of {n} bytes",
              flush=True)
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
