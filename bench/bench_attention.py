#!/usr/bin/env python3
"""Paged-attention benchmark (kv.paged_attention) on a CUDA GPU.

For each case (geometry, batch, context, query length) it times the kernel
(CUDA events around one launch, L2 flushed by a 256 MiB write before each
timed launch, a spin kernel in front so the host's enqueue is not timed;
median of --reps) and, in the same run, a device-to-device copy of as many
bytes as the kernel's K/V reads (the roofline: reading the attended K and V
rows once), and torch's scaled_dot_product_attention on pre-gathered dense
K/V (no paging). Writes attention.csv and attention.md to --out.

  # MLIR build: the kernels (sm_90)
  python3 bench/bench_attention.py --emit .dev/attn/bench_bundle
  # on the GPU
  python3 bench/bench_attention.py --bundle .dev/attn/bench_bundle \\
      --lib build-dev/lib --out $OUT/attn

Bytes read = sum over sequences of attended tokens (min(context, window +
query_len - 1)) x num_kv_heads x (Dk + Dv) x element size; ratio =
(bytes / kernel time) / (bytes / copy time) = copy time / kernel time.
"""

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))

# name: (kv heads, Dk, Dv, block, dtype, scale, q heads, sinks)
GEOMS = {
    "mimo_full": (4, 192, 128, 16, "bf16", "none", 64, False),
    "mimo_full_fp8": (4, 192, 128, 16, "f8E4M3FN", "per_tensor", 64, False),
    "mimo_swa": (8, 192, 128, 16, "bf16", "none", 64, True),
    "llama3_8b": (8, 128, 128, 16, "bf16", "none", 32, False),
    "llama3_8b_fp8": (8, 128, 128, 16, "f8E4M3FN", "per_tensor", 32, False),
    "gptoss": (8, 64, 64, 16, "bf16", "none", 64, True),
}
# (geometry, batch, context, query length, window)
CASES = [
    *[("mimo_full", b, c, 1, 0) for b in (1, 8, 64)
      for c in (8192, 32768, 131072)],
    *[("mimo_full", b, 32768, 3, 0) for b in (1, 8)],
    *[("mimo_full_fp8", b, c, 1, 0) for b in (1, 8, 64)
      for c in (32768, 131072)],
    *[("mimo_swa", b, 32768, q, 128) for b in (1, 8, 64) for q in (1, 3)],
    *[("llama3_8b", b, c, 1, 0) for b in (1, 8)
      for c in (8192, 32768, 131072)],
    *[("llama3_8b", 64, c, 1, 0) for c in (8192, 32768)],
    ("llama3_8b", 64, 32768, 3, 0),
    ("llama3_8b_fp8", 64, 131072, 1, 0), ("llama3_8b_fp8", 64, 32768, 1, 0),
    *[("gptoss", b, c, 1, 0) for b in (1, 8, 64) for c in (8192, 32768)],
    *[("gptoss", b, 32768, 1, 128) for b in (1, 64)],
]


def layout(kvgen, name):
    h, dk, dv, bs, dtype, scale, _q, _s = GEOMS[name]
    return kvgen.Layout(h, dk, dv, bs, dtype=dtype, scale=scale)


def emit(out):
    import kvgen
    kv = REPO / "build" / "bin" / "kvgen"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, g in GEOMS.items():
        f = out / f"{name}.mlir"
        f.write_text(f"#kv.layout<{layout(kvgen, name).text}>\n")
        cmd = [str(kv), "emit", "--layout", str(f), "--op", "paged_attention",
               "--num_q_heads", str(g[6]), "--target", "sm_90",
               "--bundle", str(out)]
        if g[7]:
            cmd.append("--sinks")
        subprocess.run(cmd, check=True)
        f.unlink()


class Timer:
    """Median device time (us) of fn with CUDA events; a spin kernel and
    the L2 flush precede each timed call (as bench/bench.py's Timer)."""

    def __init__(self, torch, reps, flush_bytes=256 << 20):
        self.torch, self.reps = torch, reps
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8,
                                 device="cuda")
        self.sleep = getattr(torch.cuda, "_sleep", None)

    def __call__(self, fn):
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True))
              for _ in range(self.reps)]
        for s, e in ev:
            if self.sleep is not None:
                self.sleep(200_000)
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)


def run_case(torch, kvgen, ctx, timer, case, log):
    name, batch, ctxlen, qlen, window = case
    h, dk, dv, bs, dtype, scale, qh, sinks = GEOMS[name]
    lay = layout(kvgen, name)
    k = ctx.kernel("paged_attention", lay, io="bf16", num_q_heads=qh,
                   **({"sinks": True} if sinks else {}))
    esize = 1 if "f8" in dtype else 2
    blocks_per = -(-ctxlen // bs)
    nb = batch * blocks_per + 1
    fdt = torch.float8_e4m3fn if "f8" in dtype else torch.bfloat16
    kc = torch.empty(lay.extent_bytes("k", nb) // esize, dtype=fdt,
                     device="cuda")
    vc = torch.empty(lay.extent_bytes("v", nb) // esize, dtype=fdt,
                     device="cuda")
    kc.view(torch.uint8).random_(0, 64)  # finite fp8 / small bf16 values
    vc.view(torch.uint8).random_(0, 64)
    table = (torch.randperm(nb - 1, device="cuda")[:batch * blocks_per] + 1
             ).to(torch.int32).view(batch, blocks_per)
    seq_lens = torch.full((batch,), ctxlen, dtype=torch.int32, device="cuda")
    qsl = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * qlen
    T = batch * qlen
    q = torch.randn((T, qh, dk), device="cuda").to(torch.bfloat16)
    out = torch.empty((T, qh, dv), device="cuda", dtype=torch.bfloat16)
    kw = dict(softmax_scale=1.0 / math.sqrt(dk), sliding_window=window,
              max_query_len=qlen, max_seq_len=ctxlen, num_blocks=nb)
    if sinks:
        kw["sinks"] = torch.zeros(qh, device="cuda")
    if "f8" in dtype:
        kw["k_scale"] = kw["v_scale"] = torch.ones(1, device="cuda")

    k.paged_attention(query=q, output=out, key_cache=kc, value_cache=vc,
                      block_tables=table, seq_lens=seq_lens,
                      query_start_loc=qsl, **kw)
    torch.cuda.synchronize()
    # The binding's checks (~0.1 ms) run once, in prepare(): timed launches
    # go through launch_raw with the filled struct, so the spin kernel in
    # front covers the host's enqueue and the events see device time only.
    args, stream = k.prepare(query=q, output=out, key_cache=kc,
                             value_cache=vc, block_tables=table,
                             seq_lens=seq_lens, query_start_loc=qsl, **kw)

    def launch():
        k.launch_raw(args, stream)

    t_kernel = timer(launch)
    attended = min(ctxlen, window + qlen - 1) if window else ctxlen
    nbytes = batch * attended * h * (dk + dv) * esize
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t_copy = timer(lambda: dst.copy_(src))
    del src, dst
    row = dict(geometry=name, batch=batch, context=ctxlen, query_len=qlen,
               window=window, kv_bytes=nbytes, kernel_us=t_kernel,
               copy_us=t_copy, ratio_to_copy=t_copy / t_kernel,
               kernel_GBps=nbytes / t_kernel / 1e3,
               copy_GBps=nbytes / t_copy / 1e3)
    # torch SDPA on pre-gathered dense K/V (bf16, same bytes as bf16 cache).
    if batch * ctxlen * h * (dk + dv) * 2 <= (24 << 30):
        try:
            F = torch.nn.functional
            kd = torch.randn((batch, h, attended, dk), device="cuda",
                             dtype=torch.bfloat16)
            vd = torch.randn((batch, h, attended, dv), device="cuda",
                             dtype=torch.bfloat16)
            qd = torch.randn((batch, qh, qlen, dk), device="cuda",
                             dtype=torch.bfloat16)
            row["sdpa_us"] = timer(lambda: F.scaled_dot_product_attention(
                qd, kd, vd, is_causal=False, enable_gqa=True))
            del kd, vd, qd
        except Exception as e:  # noqa: BLE001
            row["sdpa_error"] = f"{type(e).__name__}: {e}"[:200]
    del kc, vc
    torch.cuda.empty_cache()
    log(f"{name:14s} b={batch:<3d} ctx={ctxlen:<6d} q={qlen} w={window:<3d} "
        f"kernel {t_kernel:9.1f} us  copy {t_copy:8.1f} us  ratio "
        f"{row['ratio_to_copy']:.2f}  ({row['kernel_GBps']:.0f} GB/s)"
        + (f"  sdpa {row['sdpa_us']:.1f} us" if "sdpa_us" in row else ""))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emit")
    ap.add_argument("--bundle")
    ap.add_argument("--lib")
    ap.add_argument("--out", default="attn-bench")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--only", default="", help="comma-separated geometries")
    a = ap.parse_args()
    if a.emit:
        return emit(a.emit)
    if a.lib:
        os.environ["KVGEN_LIB"] = a.lib
    import torch
    import kvgen
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "attention.log", "w")

    def log(m):
        print(m, flush=True)
        logf.write(m + "\n")
        logf.flush()

    ctx = kvgen.Context("cuda", cache_dir="")
    ctx.load_bundle(a.bundle)
    timer = Timer(torch, a.reps)
    log(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    only = set(filter(None, a.only.split(",")))
    for case in CASES:
        if only and case[0] not in only:
            continue
        try:
            rows.append(run_case(torch, kvgen, ctx, timer, case, log))
        except Exception as e:  # noqa: BLE001
            log(f"{case}: {type(e).__name__}: {e}")
            rows.append(dict(geometry=case[0], batch=case[1],
                             context=case[2], query_len=case[3],
                             window=case[4], error=str(e)[:300]))
            torch.cuda.empty_cache()
    keys = ["geometry", "batch", "context", "query_len", "window",
            "kv_bytes", "kernel_us", "copy_us", "ratio_to_copy",
            "kernel_GBps", "copy_GBps", "sdpa_us", "sdpa_error", "error"]
    with open(out / "attention.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in keys})
    with open(out / "attention.md", "w") as f:
        f.write("| geometry | batch | ctx | q | window | kernel us | copy us "
                "| ratio | GB/s | SDPA dense us |\n|---|---|---|---|---|---|"
                "---|---|---|---|\n")
        for r in rows:
            if "error" in r:
                f.write(f"| {r['geometry']} | {r['batch']} | {r['context']} "
                        f"| {r['query_len']} | {r['window']} | error: "
                        f"{r['error'][:60]} |||||\n")
                continue
            f.write(f"| {r['geometry']} | {r['batch']} | {r['context']} | "
                    f"{r['query_len']} | {r['window']} | "
                    f"{r['kernel_us']:.1f} | {r['copy_us']:.1f} | "
                    f"{r['ratio_to_copy']:.2f} | {r['kernel_GBps']:.0f} | "
                    + (f"{r['sdpa_us']:.1f}" if "sdpa_us" in r else "-")
                    + " |\n")


if __name__ == "__main__":
    main()
