#!/usr/bin/env python3
"""Decode-step floor (issue 13): what the smallest slot-indirect write of the
same rows costs in CUDA-graph replay, beside kvgen's write and a torch copy
of the same bytes, in one process.

The floor kernel is written here for one geometry (NHD, separate K / V
caches, dense rows, i64 slots): CTA t handles token t, each thread one
16-byte word of the token's K then V rows; it loads slot_mapping[t] and its
word, then stores the word (bf16 caches) or its eight e4m3fn bytes
(x * (1 / scale), cvt.rn.satfinite: not kvgen's exact quotient, a floor)
at slot's row. It has no range test, no alignment test, no other shape.
The bf16 floor's cache is compared with kvgen's after the timing (the same
bits or the script fails); the fp8 one is timing only.

Every kernel is launched GRAPH_LAUNCHES (20) times in one graph, replayed
under bench.py's timer; us per launch, and the ratio to the copy.

  python3 bench/decode_floor.py --bundle .dev/bundle \\
      --lib build-dev/lib/libkvgen-runtime.so --out $OUT/floor

Import order: torch before the kvgen runtime library (bench_pdl.py).
"""

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

FLOOR = r'''
struct alignas(16) W16 { unsigned a, b, c, d; };
struct alignas(8) W8 { unsigned a, b; };
__device__ inline unsigned short pairE4m3(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ inline float bfLo(unsigned w) { return __uint_as_float(w << 16); }
__device__ inline float bfHi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ inline unsigned quad(unsigned w0, unsigned w1, float inv) {
  return unsigned(pairE4m3(bfLo(w0) * inv, bfHi(w0) * inv)) |
         (unsigned(pairE4m3(bfLo(w1) * inv, bfHi(w1) * inv)) << 16);
}
// ROWK16 / ROWV16: 16-byte words of one token's K / V input row (H * D * 2
// bytes / 16); BS: block size. Cache row of slot s: s * H * D elements.
template <int RK, int RV, bool FP8>
__device__ inline void floorWrite(const W16 *key, const W16 *value,
                                  unsigned char *kc, unsigned char *vc,
                                  const long long *slots, const float *ks,
                                  const float *vs) {
  const int t = blockIdx.x, i = threadIdx.x;
  if (i >= RK + RV)
    return;
  const bool isK = i < RK;
  const long long s = slots[t];
  const W16 w = isK ? key[(long long)t * RK + i]
                    : value[(long long)t * RV + (i - RK)];
  if (s < 0)
    return;
  if (!FP8) {
    W16 *dst = isK ? (W16 *)kc + s * RK + i
                   : (W16 *)vc + s * RV + (i - RK);
    *dst = w;
  } else {
    const float inv = 1.0f / (isK ? ks[0] : vs[0]);
    W8 o;
    o.a = quad(w.a, w.b, inv);
    o.b = quad(w.c, w.d, inv);
    W8 *dst = isK ? (W8 *)kc + s * RK + i
                  : (W8 *)vc + s * RV + (i - RK);
    *dst = o;
  }
}
extern "C" __global__ void floor_bf16(const W16 *key, const W16 *value,
    unsigned char *kc, unsigned char *vc, const long long *slots,
    const float *ks, const float *vs) {
  floorWrite<ROWK16, ROWV16, false>(key, value, kc, vc, slots, ks, vs);
}
extern "C" __global__ void floor_fp8(const W16 *key, const W16 *value,
    unsigned char *kc, unsigned char *vc, const long long *slots,
    const float *ks, const float *vs) {
  floorWrite<ROWK16, ROWV16, true>(key, value, kc, vc, slots, ks, vs);
}
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", help="libkvgen-runtime.so (sets KVGEN_LIB)")
    ap.add_argument("--out", default="out/floor")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--tokens", default="1,8,64")
    ap.add_argument("--geoms", default="mimo_b16_bf16,mimo_b16_f8E4M3FN,"
                    "h8x128_b16_bf16,h8x128_b16_f8E4M3FN")
    args = ap.parse_args()
    if args.lib:
        os.environ["KVGEN_LIB"] = str(Path(args.lib).resolve())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import numpy as np
    import torch  # before the kvgen library
    import kvgen
    from cudrv import Driver
    import geometries as G
    from bench import Timer, graph_per_launch, make_slots, moved_bytes
    torch.zeros(1, device="cuda")
    dev = torch.device("cuda")
    ctx = kvgen.Context("cuda")
    ctx.load_bundle(args.bundle)
    drv = Driver(0)
    timer = Timer(torch, args.reps)
    geoms = dict(G.bench_geometries())
    rng = np.random.default_rng(0)
    rows, ok = [], True
    for label in args.geoms.split(","):
        lay = geoms[label]
        H, Dk, Dv, bs = (lay.num_kv_heads, lay.head_size_k, lay.head_size_v,
                         lay.block_size)
        assert lay.order == "nhd" and not lay.packed
        fp8 = lay.dtype != "bf16"
        rowk16, rowv16 = H * Dk * 2 // 16, H * Dv * 2 // 16
        src = f"#define ROWK16 {rowk16}\n#define ROWV16 {rowv16}\n" + FLOOR
        cubin = drv.compile(src, "kvgen_decode_floor", arch=ctx.target)
        fn = drv.function(cubin, "floor_fp8" if fp8 else "floor_bf16")
        k = ctx.kernel("reshape_and_cache", lay, "bf16")
        esz = 1 if fp8 else 2
        for T in (int(t) for t in args.tokens.split(",")):
            nb = max(2 * -(-T // bs), 256)
            key = torch.randn(T, H, Dk, device=dev).to(torch.bfloat16)
            value = torch.randn(T, H, Dv, device=dev).to(torch.bfloat16)
            slots = torch.from_numpy(make_slots(T, bs, nb, rng)).to(dev)
            kc = torch.zeros(nb * bs * H * Dk * esz, dtype=torch.uint8,
                             device=dev)
            vc = torch.zeros(nb * bs * H * Dv * esz, dtype=torch.uint8,
                             device=dev)
            kc2, vc2 = torch.zeros_like(kc), torch.zeros_like(vc)
            sc = torch.full((1,), 0.1, device=dev)
            scales = {"k_scale": sc, "v_scale": sc} if fp8 else {}
            cur = torch.cuda.current_stream().cuda_stream
            prepared = k.prepare(key, value, kc, vc, slots, num_blocks=nb,
                                 stream=cur, **scales)[0]
            keep = [ctypes.c_void_p(x) for x in (
                key.data_ptr(), value.data_ptr(), kc2.data_ptr(),
                vc2.data_ptr(), slots.data_ptr(), sc.data_ptr(),
                sc.data_ptr())]
            params = (ctypes.c_void_p * len(keep))(
                *[ctypes.addressof(c) for c in keep])
            threads = -(-(rowk16 + rowv16) // 32) * 32

            def floor_launch(h):
                r = drv.launcher(fn, T, threads, h, params)()
                if r:
                    raise RuntimeError(f"floor launch: CUresult {r}")
            rd, wr = moved_bytes(lay, T)
            n = -(-(rd + wr) // 2)
            csrc = torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev)
            cdst = torch.empty_like(csrc)
            row = {"geometry": label, "T": T, "bytes_total": rd + wr}
            for name, fnl in (
                    ("copy", lambda h: cdst.copy_(csrc)),
                    ("floor", floor_launch),
                    ("kvgen", lambda h: k.launch_raw(prepared, stream=h)),
                    ("kvgen_pdl", lambda h: k.launch_raw(prepared, stream=h,
                                                         pdl=True))):
                row[name + "_us"] = graph_per_launch(torch, timer,
                                                     fnl)["median"]
            for name in ("floor", "kvgen", "kvgen_pdl"):
                row[name + "_ratio"] = row[name + "_us"] / row["copy_us"]
            torch.cuda.synchronize()
            if not fp8:
                same = bool(torch.equal(kc, kc2) and torch.equal(vc, vc2))
                row["floor_same_bits"] = same
                ok &= same
            rows.append(row)
            print(f"{label:22s} T={T:3d} copy {row['copy_us']:.3f} floor "
                  f"{row['floor_us']:.3f} ({row['floor_ratio']:.2f}x) kvgen "
                  f"{row['kvgen_us']:.3f} ({row['kvgen_ratio']:.2f}x) pdl "
                  f"{row['kvgen_pdl_us']:.3f} ({row['kvgen_pdl_ratio']:.2f}x)"
                  + ("" if fp8 else f" same bits {row['floor_same_bits']}"),
                  flush=True)
    (out / "decode_floor.json").write_text(json.dumps(rows, indent=1))
    print("floor check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
