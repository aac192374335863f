#!/usr/bin/env python3
"""Block copies and MLA kernels on one CUDA GPU: correctness against torch
and bandwidth against same-run copies of the same bytes.

  # here (MLIR build): emit the kernels into a bundle
  python3 bench/bench_blocks.py emit --out .dev/blocks
  # on the GPU machine (runtime-only build)
  python3 bench/bench_blocks.py run --bundle .dev/blocks \\
      --lib build-dev/lib/libkvgen-runtime.so --out $OUT/blocks

What `run` does, per layout:
* copy_blocks: `pairs` random (src, dst) rows with distinct dsts that are
  never srcs, over a cache of 2 * pairs + 8 blocks; the result is compared
  bit for bit with torch (index_copy of the blocks' bytes, through each
  component's view); bandwidth = 2 * pairs * block bytes per kernel time,
  against a same-run device-to-device torch copy of pairs * block bytes
  (which also reads and writes that many bytes).
* swap_blocks: offload (device cache -> pinned host cache) and reload
  (host -> device) of `pairs` blocks, checked against torch, timed against
  a same-run torch copy of the same bytes between pinned host memory and
  the device (`copy_(non_blocking=True)`, i.e. cudaMemcpyAsync).
* concat_and_cache_mla / gather_mla (DeepSeek-V3's 512 + 64 latent row,
  bf16 and f8E4M3FN with a per-tensor scale): write then gather at random
  slots with padding, against torch (fp8: clamp(x / scale, -448, 448)
  .to(torch.float8_e4m3fn)); bandwidth of the write against a copy of the
  bytes it moves.
Writes blocks.md and blocks.json to --out; exits 1 when a check fails.
Timing: bench.Timer (CUDA events, a spin kernel before each timed op);
the kernels are launched from structs prepared once (Kernel.prepare +
launch_raw; `prepared`), and copy_blocks is also timed through the
binding's checked call (column binding_call_us) to show what the first
measurements of 2026-12-01 included.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import kvgen  # noqa: E402


def mla(dtype, scale="none"):
    return kvgen.Layout(1, block_size=64, dtype=dtype, scale=scale,
                        packing="packed",
                        components=[("kv_c", 512), ("k_pe", 64)])


def block_layouts():
    """(label, layout) of the block copies."""
    return [
        ("mimo_b16_bf16", kvgen.Layout(4, 192, 128, 16)),
        ("mimo_b64_hnd_bf16", kvgen.Layout(4, 192, 128, 64, order="hnd")),
        ("mimo_b16_packed", kvgen.Layout(4, 192, 128, 16, packing="packed")),
        ("mimo_b16_fp8", kvgen.Layout(4, 192, 128, 16, dtype="f8E4M3FN",
                                      scale="per_tensor")),
        ("llama_b16_bf16", kvgen.Layout(8, 128, 128, 16)),
        ("mla_b64_bf16", mla("bf16")),
    ]


def mla_layouts():
    return [("mla_b64_bf16", mla("bf16")),
            ("mla_b64_fp8", mla("f8E4M3FN", "per_tensor"))]


def specs():
    """(op, layout, emit flags) of every kernel `run` uses."""
    out = []
    for _, lay in block_layouts():
        out.append(("copy_blocks", lay, []))
        out.append(("swap_blocks", lay, []))
    for _, lay in mla_layouts():
        out.append(("concat_and_cache_mla", lay, ["--io", "bf16"]))
        out.append(("gather_mla", lay, []))
        if lay.dtype != "bf16":
            out.append(("gather_mla", lay, ["--io", "bf16", "--dequantize"]))
    return out


def emit(args):
    kv = Path(args.kvgen)
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as d:
        for i, (op, lay, flags) in enumerate(specs()):
            f = Path(d) / f"l{i}.mlir"
            f.write_text(f"#kv.layout<{lay.text}>\n")
            r = subprocess.run([str(kv), "emit", "--layout", str(f), "--op",
                                op, "--target", args.target, "--bundle",
                                str(out), *flags],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"emit failed: {r.stdout}{r.stderr}")
    print(f"bench_blocks: {len(specs())} kernels in {out}")


#---------------------------------------------------------------------------
# run
#---------------------------------------------------------------------------

def tensors_of(lay):
    """(tensor index, components) of a layout's cache tensors."""
    n = len(lay.components)
    return [(0, list(range(n)))] if lay.packed else [(c, [c])
                                                      for c in range(n)]


def block_views(torch, lay, caches):
    """Per component: an as_strided [num_blocks, block_size, H, D] view of
    its tensor's raw elements."""
    out = []
    for t, comps in tensors_of(lay):
        buf = caches[t]
        for c in comps:
            sb, st, sh = lay.strides(c)
            nb = (buf.numel() - lay.extent_bytes(c, 1) //
                  lay.element_size) // sb + 1
            out.append(buf.as_strided(
                (nb, lay.block_size, lay.num_kv_heads, lay.head_size(c)),
                (sb, st, sh, 1), lay.base(c)))
    return out


def raw_dtype(torch, lay):
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32}[lay.element_size]


def alloc_caches(torch, lay, nb, device, pin=False):
    dt = raw_dtype(torch, lay)
    out = []
    for _, comps in tensors_of(lay):
        n = max(lay.extent_bytes(c, nb) for c in comps) // lay.element_size
        lo = 0 if dt == torch.uint8 else -100
        x = torch.randint(lo, 100, (n,), dtype=dt,
                          device="cpu" if device == "cpu" else device)
        if pin:
            x = x.pin_memory()
        out.append(x)
    return out + [None] * (2 - len(out))


def block_bytes(lay):
    return lay.block_size * lay.num_kv_heads * sum(
        lay.head_size(c) for c in range(len(lay.components))) * \
        lay.element_size


def prepared(torch, kern, method, *args, **kw):
    """A launcher of kern's op with the binding's checks done once
    (Kernel.prepare) and the struct launched by launch_raw on torch's
    current stream: the checks take ~0.1 ms per call on the H200 host,
    longer than the timer's spin, so timing kern.<op>(...) itself measures
    host time for every kernel shorter than that plus the spin."""
    getattr(kern, method)  # the op must be the kernel's
    a, _ = kern.prepare(*args, **kw)

    def launch():
        kern.launch_raw(a, stream=torch.cuda.current_stream().cuda_stream)
    return launch


def run_copy(torch, ctx, timer, label, lay, pairs, res, log):
    dev = "cuda"
    nb = 2 * pairs + 8
    caches = alloc_caches(torch, lay, nb, dev)
    perm = torch.randperm(nb, device=dev)
    mapping = torch.stack([perm[:pairs], perm[pairs:2 * pairs]], 1).contiguous()
    views = block_views(torch, lay, caches)
    want = [v.clone() for v in views]
    for w in want:
        w[mapping[:, 1]] = w[mapping[:, 0]]
    k = ctx.kernel("copy_blocks", lay)
    k.copy_blocks(caches[0], caches[1], mapping)
    torch.cuda.synchronize()
    ok = all(torch.equal(v, w) for v, w in zip(views, want))
    nbytes = pairs * block_bytes(lay)
    t_k = timer(prepared(torch, k, "copy_blocks", caches[0], caches[1],
                         mapping))
    t_b = timer(lambda: k.copy_blocks(caches[0], caches[1], mapping))
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t_c = timer(lambda: dst.copy_(src))
    row = {"op": "copy_blocks", "layout": label, "pairs": pairs,
           "bytes": nbytes, "ok": ok, "kernel_us": t_k["median"],
           "copy_us": t_c["median"], "ratio": t_c["median"] / t_k["median"],
           "binding_call_us": t_b["median"]}
    extra = ""
    if nbytes < (64 << 20):
        # Small copies: also per launch under CUDA-graph replay (no host
        # time in the interval), against a graph of torch copies.
        from bench import graph_per_launch
        g_k = graph_per_launch(torch, timer, lambda h: k.copy_blocks(
            caches[0], caches[1], mapping, stream=h))
        g_c = graph_per_launch(torch, timer, lambda h: dst.copy_(src))
        row.update(graph_kernel_us=g_k["median"], graph_copy_us=g_c["median"])
        extra = (f" graph {g_k['median']:.2f} us vs copy "
                 f"{g_c['median']:.2f} us")
    res.append(row)
    log(f"copy_blocks {label} pairs={pairs} {nbytes / 2**20:.1f} MiB ok={ok} "
        f"kernel {t_k['median']:.1f} us copy {t_c['median']:.1f} us ratio "
        f"{t_c['median'] / t_k['median']:.3f} (through the binding's checks "
        f"{t_b['median']:.1f} us){extra}")


def run_swap(torch, ctx, timer, label, lay, pairs, res, log):
    nd, nh = pairs + 8, pairs + 4
    devc = alloc_caches(torch, lay, nd, "cuda")
    hostc = alloc_caches(torch, lay, nh, "cpu", pin=True)
    k = ctx.kernel("swap_blocks", lay)
    nbytes = pairs * block_bytes(lay)
    for direction in ("offload", "reload"):
        src, dst = (devc, hostc) if direction == "offload" else (hostc, devc)
        ns = nd if direction == "offload" else nh
        ndst = nh if direction == "offload" else nd
        m = torch.stack([torch.randperm(ns)[:pairs],
                         torch.randperm(ndst)[:pairs]], 1).contiguous()
        mapping = m.to("cuda")
        sv = [v.cpu() for v in block_views(torch, lay, src)]
        want = [v.cpu().clone() for v in block_views(torch, lay, dst)]
        for w, s in zip(want, sv):
            w[m[:, 1]] = s[m[:, 0]]
        k.swap_blocks(src[0], src[1], dst[0], dst[1], mapping,
                      num_blocks=(ns, ndst))
        torch.cuda.synchronize()
        ok = all(torch.equal(v.cpu(), w)
                 for v, w in zip(block_views(torch, lay, dst), want))
        t_k = timer(prepared(torch, k, "swap_blocks", src[0], src[1], dst[0],
                             dst[1], mapping, num_blocks=(ns, ndst)))
        a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        h = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        if direction == "offload":
            t_c = timer(lambda: h.copy_(a, non_blocking=True))
        else:
            t_c = timer(lambda: a.copy_(h, non_blocking=True))
        res.append({"op": f"swap_blocks_{direction}", "layout": label,
                    "pairs": pairs, "bytes": nbytes, "ok": ok,
                    "kernel_us": t_k["median"], "copy_us": t_c["median"],
                    "ratio": t_c["median"] / t_k["median"]})
        log(f"swap_blocks {direction} {label} pairs={pairs} "
            f"{nbytes / 2**20:.0f} MiB ok={ok} kernel {t_k['median']:.1f} us "
            f"copy {t_c['median']:.1f} us ratio "
            f"{t_c['median'] / t_k['median']:.3f}")


def run_mla(torch, ctx, timer, label, lay, T, res, log):
    dev = "cuda"
    bs, dc, dpe = lay.block_size, 512, 64
    nb = -(-T // bs) * 2 + 4
    fp8 = lay.dtype != "bf16"
    x = torch.randn(T, dc + dpe + 64, device=dev).to(torch.bfloat16)
    kv_c, k_pe = x[:, :dc], x[:, dc:dc + dpe]  # strided views
    slots = torch.randperm(nb * bs, device=dev)[:T].to(torch.int64)
    slots[3::7] = -1
    scale = torch.full((1,), 0.05, device=dev)
    raw = raw_dtype(torch, lay)
    cache = torch.randint(0 if raw == torch.uint8 else -100, 100,
                          (nb * bs * (dc + dpe),), dtype=raw, device=dev)
    want = cache.clone().view(nb * bs, dc + dpe)
    v = slots >= 0
    rows = torch.cat([kv_c, k_pe], 1)[v].float()
    if fp8:
        q = (rows / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        want[slots[v]] = q.view(torch.uint8)
    else:
        want[slots[v]] = rows.to(torch.bfloat16).view(torch.int16)
    w = ctx.kernel("concat_and_cache_mla", lay, io="bf16")
    args = (kv_c, k_pe, cache, slots) + ((scale,) if fp8 else ())
    w.concat_and_cache_mla(*args)
    torch.cuda.synchronize()
    ok_w = torch.equal(cache.view(nb * bs, dc + dpe), want)
    out = torch.zeros(T, dc + dpe, dtype=raw, device=dev)
    g = ctx.kernel("gather_mla", lay)
    g.gather_mla(cache, slots, out[:, :dc], out[:, dc:])
    torch.cuda.synchronize()
    ok_g = torch.equal(out[v], want[slots[v]]) and not out[~v].any()
    ok_d = True
    if fp8:
        dq = torch.zeros(T, dc + dpe, dtype=torch.bfloat16, device=dev)
        gd = ctx.kernel("gather_mla", lay, io="bf16", dequantize=True)
        gd.gather_mla(cache, slots, dq[:, :dc], dq[:, dc:], scale)
        torch.cuda.synchronize()
        ref = (want[slots[v]].view(torch.float8_e4m3fn).float() *
               scale).to(torch.bfloat16)
        ok_d = torch.equal(dq[v].view(torch.int16), ref.view(torch.int16))
    # Bandwidth of the write: rows read (bf16) + slots + rows written.
    nv = int(v.sum())
    moved = nv * (dc + dpe) * (2 + lay.element_size) + T * 8
    t_k = timer(prepared(torch, w, "concat_and_cache_mla", *args))
    a = torch.empty(moved // 2, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    t_c = timer(lambda: b.copy_(a))
    ok = ok_w and ok_g and ok_d
    res.append({"op": "concat_and_cache_mla", "layout": label, "T": T,
                "bytes": moved, "ok": ok, "write_ok": ok_w,
                "gather_ok": ok_g, "dequant_ok": ok_d,
                "kernel_us": t_k["median"], "copy_us": t_c["median"],
                "ratio": t_c["median"] / t_k["median"]})
    log(f"mla {label} T={T} write_ok={ok_w} gather_ok={ok_g} "
        f"dequant_ok={ok_d} kernel {t_k['median']:.1f} us copy "
        f"{t_c['median']:.1f} us ratio {t_c['median'] / t_k['median']:.3f}")


def run(args):
    # torch before the runtime library: importing torch after
    # libkvgen-runtime.so was loaded crashed in torch's import (H200 image,
    # torch 2.11).
    import torch
    from bench import Timer
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "blocks.log", "w")

    def log(m):
        print(m, flush=True)
        logf.write(m + "\n")
    if args.lib:
        os.environ["KVGEN_LIB"] = args.lib
    ctx = kvgen.Context("cuda", cache_dir=str(out / "cache")
                        if args.cache_dir is None else args.cache_dir)
    ctx.load_bundle(args.bundle)
    timer = Timer(torch, args.reps)
    res = []
    failures = 0
    for label, lay in block_layouts():
        for pairs in (8, args.large_bytes // block_bytes(lay)):
            for fn in (run_copy, run_swap):
                try:
                    fn(torch, ctx, timer, label, lay, pairs, res, log)
                except Exception as e:  # noqa: BLE001
                    log(f"{fn.__name__} {label} pairs={pairs}: ERROR {e!r}")
                    failures += 1
    for label, lay in mla_layouts():
        for T in (7, 4096, 65536):
            try:
                run_mla(torch, ctx, timer, label, lay, T, res, log)
            except Exception as e:  # noqa: BLE001
                log(f"mla {label} T={T}: ERROR {e!r}")
                failures += 1
    failures += sum(1 for r in res if not r["ok"])
    (out / "blocks.json").write_text(json.dumps(res, indent=1))
    with open(out / "blocks.md", "w") as f:
        f.write("| op | layout | size | MiB | kernel us | copy us | ratio | "
                "ok |\n|---|---|---|---|---|---|---|---|\n")
        for r in res:
            size = r.get("pairs", r.get("T"))
            f.write(f"| {r['op']} | {r['layout']} | {size} | "
                    f"{r['bytes'] / 2**20:.1f} | {r['kernel_us']:.1f} | "
                    f"{r['copy_us']:.1f} | {r['ratio']:.3f} | {r['ok']} |\n")
    log(f"bench_blocks: {len(res)} rows, {failures} failure(s)")
    return 1 if failures else 0


def variants(args):
    """copy_blocks of the block layouts (large case; --layouts picks labels,
    default the first) from several bundles that hold variants of the same
    kernels (same names), each bundle in its own context, the bundles
    interleaved in --rounds rounds: same-call A/B. Prints one line per run
    and a table of ratios (layout x bundle, each round) at the end."""
    import torch
    from bench import Timer
    if args.lib:
        os.environ["KVGEN_LIB"] = args.lib
    timer = Timer(torch, args.reps)
    layouts = block_layouts()
    if args.layouts == "all":
        pass
    elif args.layouts:
        want = args.layouts.split(",")
        layouts = [(l, y) for l, y in layouts if l in want]
    else:
        layouts = layouts[:1]
    bundles = args.bundles.split(",")
    res = []
    ctxs = {}
    for b in bundles:
        ctxs[b] = kvgen.Context("cuda", cache_dir=tempfile.mkdtemp())
        ctxs[b].load_bundle(b)
    table = {}
    for rnd in range(args.rounds):
        for label, lay in layouts:
            for b in bundles:
                before = len(res)
                run_copy(torch, ctxs[b], timer, f"{label}@{Path(b).name}",
                         lay, args.large_bytes // block_bytes(lay), res,
                         lambda m: print(m, flush=True))
                for r in res[before:]:
                    table.setdefault((label, Path(b).name), []).append(
                        r["ratio"])
    for c in ctxs.values():
        c.close()
    names = [Path(b).name for b in bundles]
    print("| layout | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, _ in layouts:
        print(f"| {label} | " + " | ".join(
            " / ".join(f"{x:.3f}" for x in table.get((label, n), []))
            for n in names) + " |")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "variants.json").write_text(json.dumps(
            [{"layout": l, "bundle": n, "ratios": v}
             for (l, n), v in table.items()], indent=1))
    return 0 if all(r["ok"] for r in res) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("emit")
    e.add_argument("--out", default=str(REPO / ".dev" / "blocks"))
    e.add_argument("--target", default="sm_90")
    e.add_argument("--kvgen", default=str(Path(os.environ.get(
        "KVGEN_BUILD_DIR", REPO / "build")) / "bin" / "kvgen"))
    r = sub.add_parser("run")
    r.add_argument("--bundle", required=True)
    r.add_argument("--lib", default=None)
    r.add_argument("--out", required=True)
    r.add_argument("--cache-dir", default=None)
    r.add_argument("--reps", type=int, default=50)
    r.add_argument("--large-bytes", type=int, default=256 << 20,
                   help="bytes of blocks in the large case (default 256 MiB)")
    v = sub.add_parser("variants")
    v.add_argument("--bundles", required=True)
    v.add_argument("--lib", default=None)
    v.add_argument("--reps", type=int, default=50)
    v.add_argument("--large-bytes", type=int, default=256 << 20)
    v.add_argument("--layouts", default="",
                   help="comma-separated labels of block_layouts(), 'all', "
                        "or empty: the first")
    v.add_argument("--rounds", type=int, default=2)
    v.add_argument("--out", default=None, help="writes variants.json here")
    a = p.parse_args()
    sys.exit({"emit": emit, "run": run, "variants": variants}[a.cmd](a))


if __name__ == "__main__":
    main()
