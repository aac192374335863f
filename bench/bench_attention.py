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

Prefill rows (PREFILL_CASES; `--prefill-only`, `--no-prefill`,
`--prefill-rows ID,...`): one launch over a varlen batch whose sequences
carry query_len of their last tokens as queries (all of them for a full
prefill), timed for the decode-tiled kernel and for the kernel emitted with
the op's `prefill` option (a '-' with a note when the bundle or the runtime
lacks it), beside torch SDPA (cuDNN backend first, then FLASH, then
EFFICIENT; the table says which ran) on the same K/V gathered dense
([count, H, S, D]), with the causal mask aligned to the bottom right (query
i of n at position S - n + i). TFLOPS = 2 x Hq x (Dk + Dv) x attended keys
(summed over query rows: p + 1 keys for position p, at most `window`);
writes attention_prefill.{csv,md}. `--self-test` checks that arithmetic and
the SDPA masks on the CPU (no GPU; with --kvgen, also a host-backend kvgen
launch of the same inputs against the same reference).
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


# Prefill rows: (id, geometry, window, ((count, seq_len, query_len), ...),
# check). Each sequence's queries are its last query_len tokens (query_len =
# seq_len: a full prefill); the groups go into ONE launch in this order.
# check: compare the output with SDPA's (rows without sinks: SDPA has none).
PREFILL_CASES = [
    ("mimo_8k", "mimo_full", 0, ((1, 8192, 8192),), True),
    ("mimo_32k", "mimo_full", 0, ((1, 32768, 32768),), True),
    ("mimo_chunk2k_32k", "mimo_full", 0, ((1, 32768, 2048),), True),
    ("mimo_swa_32k", "mimo_swa", 128, ((1, 32768, 32768),), False),
    ("llama_32k", "llama3_8b", 0, ((1, 32768, 32768),), True),
    ("mimo_mixed", "mimo_full", 0,
     ((1, 16384, 2048), (4, 8192, 4), (32, 8192, 1)), True),
]
PREFILL_GEOMS = tuple(sorted({c[1] for c in PREFILL_CASES}))


def emit_one(kv, out, lay_text, q_heads, sinks, target, prefill=False):
    """`kvgen emit` of one paged_attention kernel into the bundle `out`;
    returns the CompletedProcess (the caller decides what a failure means:
    the prefill option may be missing from an older kvgen)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    f = out / f"layout-{os.getpid()}.mlir"
    f.write_text(f"#kv.layout<{lay_text}>\n")
    cmd = [str(kv), "emit", "--layout", str(f), "--op", "paged_attention",
           "--num_q_heads", str(q_heads), "--target", target,
           "--bundle", str(out)]
    if sinks:
        cmd.append("--sinks")
    if prefill:
        cmd.append("--prefill")
    try:
        return subprocess.run(cmd, capture_output=True, text=True)
    finally:
        f.unlink()


def emit(out, kv=None):
    """The decode kernels of GEOMS and, for the prefill rows' geometries,
    the same kernels with the op's prefill option (a note, not an error,
    when this kvgen has no such option). Returns the number of prefill
    variants that did not emit."""
    import kvgen
    kv = Path(kv) if kv else REPO / "build" / "bin" / "kvgen"
    missing = 0
    for name, g in GEOMS.items():
        text = layout(kvgen, name).text
        r = emit_one(kv, out, text, g[6], g[7], "sm_90")
        r_decode_ok = r.returncode == 0
        if r.returncode and not os.environ.get("KVGEN_PLAN_OPTIONS"):
            sys.exit(f"kvgen emit {name}: {r.stdout}{r.stderr}")
        if r.returncode:
            # A plan override (e.g. threads=256) the decode op refuses:
            # its columns show '-' (the prefill variant may still emit).
            why = (r.stderr or r.stdout).strip().splitlines()
            print(f"note: {name}: the decode kernel did not emit under "
                  f"KVGEN_PLAN_OPTIONS ({why[-1] if why else ''})")
        if name not in PREFILL_GEOMS:
            continue
        r = emit_one(kv, out, text, g[6], g[7], "sm_90", prefill=True)
        if r.returncode:
            missing += 1
            why = (r.stderr or r.stdout).strip().splitlines()
            print(f"note: {name}: the prefill variant did not emit "
                  f"(rc {r.returncode}: {why[0] if why else ''}); its "
                  "prefill columns will show '-'")
        else:
            print(f"{name}: " + ("decode-tiled and prefill kernels"
                                 if r_decode_ok else "the prefill kernel") +
                  " emitted")
    return missing


class Timer:
    """Median device time (us) of fn with CUDA events; a spin kernel and
    the L2 flush precede each timed call (as bench/bench.py's Timer)."""

    def __init__(self, torch, reps, flush_bytes=256 << 20):
        self.torch, self.reps = torch, reps
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8,
                                 device="cuda")
        self.sleep = getattr(torch.cuda, "_sleep", None)

    def __call__(self, fn, reps=None, warmup=3, spin=200_000):
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True))
              for _ in range(reps or self.reps)]
        for s, e in ev:
            if self.sleep is not None:
                self.sleep(spin)
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)

    def budgeted(self, fn, budget_ms, max_reps, fixed_reps=None):
        """(median us, reps) for a long fn: one launch measures it (and
        warms up), then reps = fixed_reps, else as many as fit in
        budget_ms, between 3 and max_reps (a 32k prefill of ~400 ms gets
        a few, a 2 ms one max_reps). The spin kernel in front of each
        timed call is ~10x longer than __call__'s (~1 ms): fn may enqueue
        several launches (SDPA per group of a mixed row)."""
        torch = self.torch
        s, e = (torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True))
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        reps = fixed_reps or reps_for(s.elapsed_time(e), budget_ms, max_reps)
        return self(fn, reps=reps, warmup=1, spin=2_000_000), reps


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


# ---------------------------------------------------------------------------
# Prefill rows
# ---------------------------------------------------------------------------

def attended_keys(seq_len, query_len, window=0):
    """Keys attended by one sequence's query rows, summed over the rows: row
    i of query_len sits at position p = seq_len - query_len + i and attends
    keys [0, p] (p + 1 of them), at most `window` with a sliding window
    (docs/attention.md). ValueError unless 0 <= query_len <= seq_len."""
    if not 0 <= query_len <= seq_len or window < 0:
        raise ValueError(f"attended_keys: query_len {query_len} must be in "
                         f"[0, seq_len {seq_len}], window {window} >= 0")
    lo, hi = seq_len - query_len + 1, seq_len  # keys of the first/last row

    def tri(a, b):  # a + (a + 1) + ... + b
        return (a + b) * (b - a + 1) // 2 if b >= a else 0

    if window == 0:
        return tri(lo, hi)
    return tri(lo, min(hi, window)) + window * max(0, hi - max(lo, window + 1)
                                                   + 1)


def case_keys(groups, window):
    """Attended keys of a prefill row: groups of (count, seq_len, qlen)."""
    return sum(c * attended_keys(s, n, window) for c, s, n in groups)


def attention_flops(num_q_heads, dk, dv, keys):
    """2 x Hq x (Dk + Dv) x attended keys: QK^T and PV, one multiply-add
    (2 flops) per element (issue 23's count)."""
    return 2 * num_q_heads * (dk + dv) * keys


def tflops(flops, us):
    return flops / us / 1e6


def reps_for(first_ms, budget_ms, max_reps):
    """Timed repetitions for a launch that took first_ms once: as many as
    fit in budget_ms, at least 3 (fewer only when max_reps is), at most
    max_reps."""
    fit = int(budget_ms / max(first_ms, 1e-3))
    return max(min(3, max_reps), min(max_reps, fit))


def bottom_right_mask(torch, n, seq_len, window, device, dtype):
    """(attn_mask, is_causal) for SDPA of n queries at the last positions of
    seq_len keys: query i at p = seq_len - n + i attends keys (p - window, p]
    (window 0: [0, p]). A full causal prefill is is_causal (SDPA's top-left
    alignment is the bottom-right one when n = seq_len), a single query
    without a window needs no mask; else an additive [1, 1, n, seq_len]
    mask of `dtype` (0 / -inf; made once, so no per-call conversion)."""
    if window == 0 and n == seq_len:
        return None, True
    if window == 0 and n == 1:
        return None, False
    p = torch.arange(seq_len - n, seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    ok = j <= p
    if window:
        ok &= j > p - window
    m = torch.zeros((n, seq_len), dtype=dtype, device=device)
    m.masked_fill_(~ok, float("-inf"))
    return m[None, None], False


def prefill_inputs(torch, lay, groups, q_heads, device, seed=0):
    """The kvgen arguments of one varlen launch over `groups` ((count,
    seq_len, query_len), ...) on a bf16 / f16 cache of layout `lay`, and
    the same K/V dense: dense[g] = (k [count, seq_len, H, Dk], v [...,
    Dv]) of group g, written into the cache's blocks (shuffled block ids,
    block 0 unused) through the layout's strides."""
    h, bs = lay.num_kv_heads, lay.block_size
    dk, dv = lay.head_size_k, lay.head_size_v
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[lay.dtype]
    gen = torch.Generator(device=device).manual_seed(seed)
    seqs = [(s, n) for c, s, n in groups for _ in range(c)]
    bps = [-(-s // bs) for s, _ in seqs]
    nb = sum(bps) + 1
    perm = torch.randperm(nb - 1, generator=gen, device=device) + 1
    table = torch.zeros((len(seqs), max(bps)), dtype=torch.int32,
                        device=device)
    caches, views = {}, {}
    for side, d in (("k", dk), ("v", dv)):
        caches[side] = torch.zeros(lay.extent_bytes(side, nb) //
                                   lay.element_size, dtype=dt, device=device)
        views[side] = caches[side].as_strided(
            (nb, bs, h, d), lay.strides(side) + (1,), lay.base(side))
    dense, at, row = [], 0, 0
    for c, s, _n in groups:
        b = -(-s // bs)
        ids = perm[at:at + c * b].view(c, b)
        at += c * b
        table[row:row + c, :b] = ids.to(torch.int32)
        row += c
        kv = []
        for side, d in (("k", dk), ("v", dv)):
            x = torch.randn((c, b * bs, h, d), generator=gen,
                            device=device).to(dt)
            x[:, s:] = 0
            views[side][ids.flatten().long()] = x.view(c * b, bs, h, d)
            kv.append(x[:, :s])
        dense.append(tuple(kv))
    qlens = [n for _s, n in seqs]
    qsl = torch.tensor([0] + qlens, dtype=torch.int64).cumsum(0)
    T = int(qsl[-1])
    q = torch.randn((T, q_heads, dk), generator=gen, device=device).to(dt)
    return dict(
        query=q, output=torch.zeros((T, q_heads, dv), dtype=dt,
                                    device=device),
        key_cache=caches["k"], value_cache=caches["v"], block_tables=table,
        seq_lens=torch.tensor([s for s, _n in seqs], dtype=torch.int32,
                              device=device),
        query_start_loc=qsl.to(torch.int32).to(device), num_blocks=nb,
        max_query_len=max(qlens), max_seq_len=max(s for s, _ in seqs),
        dense=dense, views=views)


def kvgen_args(torch_, inp, window, dk, q_heads, sinks):
    """Keyword arguments of Kernel.paged_attention / prepare for inp."""
    kw = {k: inp[k] for k in ("query", "output", "key_cache", "value_cache",
                              "block_tables", "seq_lens", "query_start_loc",
                              "num_blocks", "max_query_len", "max_seq_len")}
    kw.update(softmax_scale=1.0 / math.sqrt(dk), sliding_window=window)
    if sinks:
        kw["sinks"] = torch_.zeros(q_heads, device=inp["query"].device)
    return kw


def group_slices(torch_, inp, groups):
    """Per group: its own kvgen arguments (the group's sequences alone)."""
    out, row, t0 = [], 0, 0
    for c, s, n in groups:
        t1 = t0 + c * n
        g = dict(inp)
        g.update(query=inp["query"][t0:t1], output=inp["output"][t0:t1],
                 block_tables=inp["block_tables"][row:row + c],
                 seq_lens=inp["seq_lens"][row:row + c],
                 query_start_loc=(torch_.arange(c + 1, dtype=torch_.int32,
                                                device=inp["query"].device)
                                  * n),
                 max_query_len=n, max_seq_len=s)
        out.append(g)
        row, t0 = row + c, t1
    return out


def separate_launches(torch_, k, inp, groups, window, dk, q_heads, sinks):
    """(run, keep): run() launches kernel k once per group (launch_raw of
    prepared arguments); keep holds the groups' own tensors (their
    query_start_loc, sinks), which the prepared arguments point at but do
    not own: keep it alive while run is used."""
    keep = [kvgen_args(torch_, g, window, dk, q_heads, sinks)
            for g in group_slices(torch_, inp, groups)]
    prepared = [k.prepare(**kw) for kw in keep]

    def run():
        for args, stream in prepared:
            k.launch_raw(args, stream)
    return run, keep


def sdpa_operands(torch, q, k, v, count, n, q_heads, pad, expand):
    """SDPA's (q [count, Hq, n, D], k [count, H or Hq, S, D], v [...]) from
    kvgen's rows q [count * n, Hq, Dk] and dense k/v [count, S, H, D]:
    pad: zero-pad the narrower of (q, k) and v to the wider head size (the
    padded columns add 0 to every dot product; the output's extra columns
    are dropped); expand: repeat each kv head for its GQA group (else
    enable_gqa)."""
    F = torch.nn.functional
    dk, dv = k.shape[-1], v.shape[-1]
    qg = q.view(count, n, q_heads, dk).transpose(1, 2)
    kg, vg = k.transpose(1, 2), v.transpose(1, 2)
    if pad and dk != dv:
        d = max(dk, dv)
        qg, kg = F.pad(qg, (0, d - dk)), F.pad(kg, (0, d - dk))
        vg = F.pad(vg, (0, d - dv))
    if expand and q_heads != kg.shape[1]:
        g = q_heads // kg.shape[1]
        kg, vg = kg.repeat_interleave(g, 1), vg.repeat_interleave(g, 1)
    return qg.contiguous(), kg.contiguous(), vg.contiguous()


def sdpa_group_call(torch, inp, groups, gi, window, q_heads, pad, expand):
    """A function running SDPA on group gi's dense K/V; returns the output
    as kvgen rows [count * n, Hq, Dv]."""
    F = torch.nn.functional
    c, s, n = groups[gi]
    t0 = sum(cc * nn for cc, _ss, nn in groups[:gi])
    k, v = inp["dense"][gi]
    dk, dv = k.shape[-1], v.shape[-1]
    qg, kg, vg = sdpa_operands(torch, inp["query"][t0:t0 + c * n], k, v, c,
                               n, q_heads, pad, expand)
    mask, causal = bottom_right_mask(torch, n, s, window, qg.device, qg.dtype)
    gqa = kg.shape[1] != q_heads

    def call():
        o = F.scaled_dot_product_attention(
            qg, kg, vg, attn_mask=mask, is_causal=causal,
            scale=1.0 / math.sqrt(dk), **({"enable_gqa": True} if gqa
                                          else {}))
        return o[..., :dv].transpose(1, 2).reshape(c * n, q_heads, dv)
    what = ("enable_gqa" if gqa else "GQA expanded" if q_heads !=
            k.shape[2] else "MHA")
    if pad and dk != dv:
        what += f", V zero-padded to {max(dk, dv)}"
    if mask is not None:
        what += ", additive bottom-right mask"
    return call, what


def sdpa_refusal(caught, err):
    """Why torch ran no kernel: its warnings' specific lines (not the
    "... not used because:" headers nor "No viable backend"), else the
    error, at most 200 characters."""
    lines = []
    for x in caught:
        m = str(x.message).split("(Triggered internally")[0].strip()
        m = " ".join(m.split())
        if m and not m.endswith("because:") and not m.startswith(
                "No viable backend") and m not in lines:
            lines.append(m)
    return (" / ".join(lines) or f"{type(err).__name__}: {err}")[:200]


def sdpa_pick(torch, inp, groups, gi, window, q_heads):
    """(call, description, refusals) of the first SDPA backend that runs
    group gi: cuDNN, then FLASH, then EFFICIENT; per backend GQA native
    before expanded and V as is before zero-padded. refusals: one line per
    backend that ran nothing (torch's first warning, else its error)."""
    import warnings
    from torch.nn.attention import SDPBackend, sdpa_kernel
    k, v = inp["dense"][gi]
    pads = (False, True) if k.shape[-1] != v.shape[-1] else (False,)
    expands = (False, True) if k.shape[2] != q_heads else (False,)
    refusals = []
    for name, be in (("cuDNN", SDPBackend.CUDNN_ATTENTION),
                     ("FLASH", SDPBackend.FLASH_ATTENTION),
                     ("EFFICIENT", SDPBackend.EFFICIENT_ATTENTION)):
        why = None
        for pad in pads:
            for expand in expands:
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    try:
                        call, what = sdpa_group_call(
                            torch, inp, groups, gi, window, q_heads, pad,
                            expand)

                        def fn(call=call, be=be):
                            with sdpa_kernel(be):
                                return call()
                        fn()
                        torch.cuda.synchronize()
                        return fn, f"{name} ({what})", refusals
                    except RuntimeError as e:
                        if why is None:
                            why = sdpa_refusal(w, e)
                call = fn = None
                torch.cuda.empty_cache()
        refusals.append(f"SDPA {name} refused: {why}")
    return None, None, refusals


def check_close(out, ref, atol=2e-2, rtol=1e-2):
    """(max |out - ref|, ok): ok when every element is within atol + rtol
    |ref| (bf16 output) and nothing is NaN."""
    o, r = out.float(), ref.float()
    d = (o - r).abs()
    ok = bool((d <= atol + rtol * r.abs()).all()) and not bool(
        o.isnan().any())
    return float(d.max()) if d.numel() else 0.0, ok


def run_prefill_case(torch, kvgen, ctx, timer, case, a, log):
    pid, name, window, groups, check = case
    h, dk, dv, bs, dtype, scale, qh, sinks = GEOMS[name]
    lay = layout(kvgen, name)
    keys = case_keys(groups, window)
    flops = attention_flops(qh, dk, dv, keys)
    row = dict(id=pid, geometry=name, window=window,
               groups="+".join(f"{c}x(ctx {s}, q {n})" for c, s, n in groups),
               query_tokens=sum(c * n for c, _s, n in groups),
               attended_keys=keys, gflop=flops / 1e9)
    notes = []
    inp = prefill_inputs(torch, lay, groups, qh, "cuda")
    # SDPA first: its output is the reference of the check.
    ref, sdpa_fns = [], []
    for gi in range(len(groups)):
        fn, what, refusals = sdpa_pick(torch, inp, groups, gi, window, qh)
        notes += refusals
        if fn is None:
            sdpa_fns = None
            break
        sdpa_fns.append(fn)
        ref.append(fn())
        row.setdefault("sdpa_backend", []).append(what)
    if sdpa_fns:
        ref = torch.cat(ref)
        row["sdpa_backend"] = "; ".join(dict.fromkeys(row["sdpa_backend"]))
        row["sdpa_us"], row["sdpa_reps"] = timer.budgeted(
            lambda: [f() for f in sdpa_fns], a.prefill_budget_ms, a.reps,
            a.prefill_reps)
        row["sdpa_tflops"] = tflops(flops, row["sdpa_us"])
    else:
        ref = None
        row["sdpa_backend"] = "none ran"
    if sinks:
        notes.append("SDPA has no sinks: its softmax lacks the sink term")
    if window:
        notes.append("SDPA has no sliding window: it computes every query x "
                     "key logit under a band mask; TFLOPS count attended "
                     "keys only")
    for kind, opts in (("tiled", {}), ("prefill", {"prefill": True})):
        try:
            k = ctx.kernel("paged_attention", lay, io="bf16", num_q_heads=qh,
                           **({"sinks": True} if sinks else {}), **opts)
        except Exception as e:  # noqa: BLE001
            row[f"{kind}_note"] = f"no kernel: {type(e).__name__}: {e}"[:160]
            notes.append(f"{kind}: {row[f'{kind}_note']}")
            continue
        kw = kvgen_args(torch, inp, window, dk, qh, sinks)
        try:
            inp["output"].zero_()
            k.paged_attention(**kw)
            torch.cuda.synchronize()
            if check and ref is not None:
                diff, ok = check_close(inp["output"], ref)
                row[f"{kind}_maxdiff"], row[f"{kind}_ok"] = diff, ok
            args, stream = k.prepare(**kw)
            row[f"{kind}_us"], row[f"{kind}_reps"] = timer.budgeted(
                lambda: k.launch_raw(args, stream), a.prefill_budget_ms,
                a.reps, a.prefill_reps)
            row[f"{kind}_tflops"] = tflops(flops, row[f"{kind}_us"])
            if "sdpa_us" in row:
                row[f"{kind}_vs_sdpa"] = row["sdpa_us"] / row[f"{kind}_us"]
            if len(groups) > 1:
                # The same groups launched one after another (what one
                # launch of the mix must not be much slower than).
                run_sep, keep = separate_launches(torch, k, inp, groups,
                                                  window, dk, qh, sinks)
                inp["output"].zero_()
                row[f"{kind}_separate_us"], _ = timer.budgeted(
                    run_sep, a.prefill_budget_ms, a.reps, a.prefill_reps)
                if f"{kind}_ok" in row:  # the separate launches' rows too
                    diff, ok = check_close(inp["output"], ref)
                    row[f"{kind}_maxdiff"] = max(diff,
                                                 row[f"{kind}_maxdiff"])
                    row[f"{kind}_ok"] = ok and row[f"{kind}_ok"]
                del keep
        except Exception as e:  # noqa: BLE001
            row[f"{kind}_note"] = f"{type(e).__name__}: {e}"[:160]
            notes.append(f"{kind}: {row[f'{kind}_note']}")
    if check and ref is None:
        notes.append("not checked: no SDPA backend ran")
    row["notes"] = "; ".join(dict.fromkeys(notes))
    del inp, ref, sdpa_fns
    torch.cuda.empty_cache()

    def col(kind):
        if f"{kind}_us" not in row:
            return f"{kind} -"
        s = (f"{kind} {row[f'{kind}_us'] / 1e3:8.2f} ms "
             f"{row[f'{kind}_tflops']:6.1f} TF")
        if f"{kind}_vs_sdpa" in row:
            s += f" x{row[f'{kind}_vs_sdpa']:.2f}"
        if f"{kind}_ok" in row:
            s += (f" diff {row[f'{kind}_maxdiff']:.1e}"
                  + ("" if row[f"{kind}_ok"] else " FAILED"))
        if f"{kind}_separate_us" in row:
            s += f" (separate {row[f'{kind}_separate_us'] / 1e3:.2f} ms)"
        return s
    log(f"prefill {pid:17s} | {col('tiled')} | {col('prefill')} | sdpa "
        + (f"{row['sdpa_us'] / 1e3:.2f} ms {row['sdpa_tflops']:.1f} TF "
           f"[{row['sdpa_backend']}]" if "sdpa_us" in row else "-")
        + (f" | {row['notes']}" if row["notes"] else ""))
    return row


PREFILL_KEYS = [
    "id", "geometry", "window", "groups", "query_tokens", "attended_keys",
    "gflop", "tiled_us", "tiled_tflops", "tiled_reps", "tiled_vs_sdpa",
    "tiled_maxdiff", "tiled_ok", "tiled_separate_us", "tiled_note",
    "prefill_us", "prefill_tflops", "prefill_reps", "prefill_vs_sdpa",
    "prefill_maxdiff", "prefill_ok", "prefill_separate_us", "prefill_note",
    "sdpa_us", "sdpa_tflops", "sdpa_reps", "sdpa_backend", "notes", "error"]


def write_prefill(out, rows):
    with open(out / "attention_prefill.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=PREFILL_KEYS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in PREFILL_KEYS})

    def cell(r, kind):
        if f"{kind}_us" not in r:
            return "- | - | -"
        t = f"{r[f'{kind}_us'] / 1e3:.2f}"
        if f"{kind}_separate_us" in r:
            t += f" (separate {r[f'{kind}_separate_us'] / 1e3:.2f})"
        tf = f"{r[f'{kind}_tflops']:.1f}"
        if r.get(f"{kind}_ok") is False:
            tf = f"FAILED (max diff {r[f'{kind}_maxdiff']:.2g})"
        ratio = (f"{r[f'{kind}_vs_sdpa']:.2f}" if f"{kind}_vs_sdpa" in r
                 else "-")
        return f"{t} | {tf} | {ratio}"

    with open(out / "attention_prefill.md", "w") as f:
        f.write("| row | geometry | window | sequences | attended keys | "
                "decode-tiled ms | TFLOPS | x SDPA | prefill ms | TFLOPS | "
                "x SDPA | SDPA ms | TFLOPS | SDPA backend | check max diff "
                "| notes |\n|" + "---|" * 16 + "\n")
        for r in rows:
            if "error" in r:
                f.write(f"| {r['id']} | {r['geometry']} | {r['window']} | "
                        f"{r.get('groups', '')} | | error: "
                        f"{r['error'][:80]} ||||||||||\n")
                continue
            sd = ("- | -" if "sdpa_us" not in r else
                  f"{r['sdpa_us'] / 1e3:.2f} | {r['sdpa_tflops']:.1f}")
            chk = ", ".join(
                f"{kind} {r[f'{kind}_maxdiff']:.1e}"
                + ("" if r[f"{kind}_ok"] else " FAILED")
                for kind in ("tiled", "prefill") if f"{kind}_ok" in r) or "-"
            f.write(f"| {r['id']} | {r['geometry']} | {r['window']} | "
                    f"{r['groups']} | {r['attended_keys']} | "
                    f"{cell(r, 'tiled')} | {cell(r, 'prefill')} | {sd} | "
                    f"{r.get('sdpa_backend', '-')} | {chk} | "
                    f"{r.get('notes', '')} |\n")
        f.write("\nTFLOPS = 2 x Hq x (Dk + Dv) x attended keys / time (the "
                "real Dv, also where SDPA ran with V zero-padded); x SDPA = "
                "SDPA time / kvgen time (throughput ratio). Check: |kvgen - "
                "SDPA| <= 2e-2 + 1e-2 |SDPA| on every output element, else "
                "FAILED. separate = the mixed row's groups launched one "
                "after another.\n")


def self_test(kv=None):
    """No GPU: the prefill rows' arithmetic, the SDPA operands and masks on
    the CPU against a float64 loop, the paged cache round trip, and (with a
    kvgen CLI and runtime) a host-backend kvgen launch of a small mixed
    batch against the same SDPA reference, decode-tiled and (when it emits)
    prefill kernels. Returns 0, or raises AssertionError."""
    # attended_keys: closed form against the per-row count.
    for s, n, w in ((1, 1, 0), (5, 5, 0), (12, 5, 0), (12, 5, 4), (12, 12, 4),
                    (12, 3, 20), (100, 0, 0), (300, 37, 128), (200, 200, 128),
                    (129, 2, 128), (128, 128, 128), (4096, 1000, 333)):
        loop = sum(min(p + 1, w) if w else p + 1 for p in range(s - n, s))
        assert attended_keys(s, n, w) == loop, (s, n, w, loop)
    for bad in ((4, 5, 0), (4, -1, 0), (4, 2, -1)):
        try:
            attended_keys(*bad)
        except ValueError:
            continue
        raise AssertionError(f"attended_keys{bad} did not raise")
    # issue 23's measurements: MiMo full 32k prefill, kvgen 436 ms = 50.5
    # TFLOPS, SDPA cuDNN 36.7 ms = 598.7.
    f32k = attention_flops(64, 192, 128, attended_keys(32768, 32768))
    assert attended_keys(32768, 32768) == 32768 * 32769 // 2
    assert abs(tflops(f32k, 436e3) - 50.4) < 0.1, tflops(f32k, 436e3)
    assert abs(tflops(f32k, 36.7e3) - 599.2) < 0.1, tflops(f32k, 36.7e3)
    # Window-limited: 32k rows of 128 keys but the first 127.
    assert attended_keys(32768, 32768, 128) == 32768 * 128 - 127 * 128 // 2
    mixed = dict((c[0], c) for c in PREFILL_CASES)["mimo_mixed"]
    assert case_keys(mixed[3], 0) == (2048 * (16384 - 2048) + 2048 * 2049 //
                                      2 + 4 * (4 * 8188 + 10) + 32 * 8192)
    assert reps_for(436.0, 2000, 40) == 4 and reps_for(2.0, 2000, 40) == 40
    assert reps_for(900.0, 2000, 40) == 3 and reps_for(900.0, 2000, 1) == 1
    print("self-test: attended keys, TFLOPS, reps: ok")

    import numpy as np
    import torch
    F = torch.nn.functional

    def reference(q, k, v, s, n, w):
        # float64 loop: q [n, Hq, Dk], k [s, H, Dk], v [s, H, Dv]
        q, k, v = (x.double().numpy() for x in (q, k, v))
        hq, g = q.shape[1], q.shape[1] // k.shape[1]
        o = np.zeros((n, hq, v.shape[-1]))
        for i in range(n):
            p = s - n + i
            lo = max(0, p - w + 1) if w else 0
            for h in range(hq):
                x = k[lo:p + 1, h // g] @ q[i, h] / math.sqrt(q.shape[-1])
                e = np.exp(x - x.max())
                o[i, h] = e @ v[lo:p + 1, h // g] / e.sum()
        return o

    gen = torch.Generator().manual_seed(1)
    for s, n, w in ((12, 12, 0), (12, 5, 0), (12, 1, 0), (12, 12, 4),
                    (12, 5, 4), (9, 1, 3)):
        for pad in (False, True):
            for expand in (False, True):
                q = torch.randn((2 * n, 4, 16), generator=gen)
                k = torch.randn((2, s, 2, 16), generator=gen)
                v = torch.randn((2, s, 2, 8), generator=gen)
                inp = dict(query=q, dense=[(k, v)])
                # SDPA math takes Dk != Dv as it is; padded must agree.
                call, what = sdpa_group_call(torch, inp, [(2, s, n)], 0, w,
                                             4, pad, expand)
                assert pad == ("V zero-padded to 16" in what), what
                got = call().double().numpy().reshape(2, n, 4, 8)
                for c in range(2):
                    ref = reference(q[c * n:(c + 1) * n], k[c], v[c], s, n, w)
                    err = np.abs(got[c] - ref).max()
                    assert err < 1e-5, (s, n, w, pad, expand, err)
    print("self-test: SDPA operands and bottom-right masks vs float64 loop: "
          "ok")

    import kvgen
    groups = ((1, 40, 40), (1, 64, 16), (2, 48, 4), (3, 33, 1))
    lay = kvgen.Layout(2, 64, 32, 16, dtype="bf16")
    inp = prefill_inputs(torch, lay, groups, 8, "cpu", seed=3)
    for gi, row in enumerate((0, 1, 2, 4)):
        c, s, _n = groups[gi]
        for side, x in zip("kv", inp["dense"][gi]):
            t = inp["block_tables"][row:row + c].long()
            back = inp["views"][side][t].flatten(1, 2)[:, :s]
            assert torch.equal(back, x), (gi, side)
    assert int(inp["block_tables"].max()) == inp["num_blocks"] - 1
    assert 0 not in inp["block_tables"][:, 0].tolist()
    print("self-test: dense K/V -> paged cache -> gathered back: equal")

    kv = Path(kv) if kv else REPO / "build" / "bin" / "kvgen"
    if not kv.exists():
        print(f"self-test: no kvgen CLI at {kv}: host-backend launch "
              "skipped")
        return 0
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        have = {"tiled": True, "prefill": True}
        for kind in have:
            r = emit_one(kv, d, lay.text, 8, False, "host",
                         prefill=kind == "prefill")
            if r.returncode:
                assert kind == "prefill", r.stdout + r.stderr
                have[kind] = False
                why = (r.stderr or r.stdout).strip()[:200]
                print("self-test: the prefill variant did not emit (rc "
                      f"{r.returncode}): {why}")
        ctx = kvgen.Context("host", cache_dir=str(Path(d) / "cache"))
        ctx.load_bundle(d)
        # The reference: the bench's SDPA path on float32 copies of the
        # same bf16 inputs.
        finp = dict(query=inp["query"].float(), dense=[
            tuple(x.float() for x in kv) for kv in inp["dense"]])
        refs = {w: torch.cat([
            sdpa_group_call(torch, finp, groups, gi, w, 8, False, False)[0]()
            for gi in range(len(groups))]) for w in (0, 8)}
        for w, ref in refs.items():
            for kind, ok in have.items():
                if not ok:
                    continue
                k = ctx.kernel("paged_attention", lay, io="bf16",
                               num_q_heads=8,
                               **({"prefill": True} if kind == "prefill"
                                  else {}))
                inp["output"].fill_(float("nan"))
                k.paged_attention(**kvgen_args(torch, inp, w, 64, 8, False))
                diff, good = check_close(inp["output"], ref)
                assert good, (kind, w, diff)
                # The check can fail: the other window's reference (and
                # SDPA's top-left causal mask on the 16-query chunk).
                bad, good = check_close(inp["output"], refs[8 - w])
                assert not good, (kind, w, "passes the wrong window", bad)
                c = finp["dense"][1]
                tl = F.scaled_dot_product_attention(
                    finp["query"][40:56].view(1, 16, 8, 64).transpose(1, 2),
                    c[0].transpose(1, 2), c[1].transpose(1, 2),
                    is_causal=True, enable_gqa=True).transpose(1, 2)[0]
                assert w or not check_close(inp["output"][40:56], tl)[1]
                # The mixed row's "separate" timing: one launch per group
                # of prepared arguments.
                inp["output"].fill_(float("nan"))
                run, keep = separate_launches(torch, k, inp, groups, w, 64,
                                              8, False)
                run()
                ctx.check()
                diff2, good = check_close(inp["output"], ref)
                assert good, (kind, w, "separate launches", diff2)
                del keep
                print(f"self-test: host kvgen {kind} kernel, window {w}: "
                      f"max |kvgen - SDPA| = {diff:.2e}, groups launched "
                      f"separately {diff2:.2e}: ok")
        ctx.close()
    return 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="kv.paged_attention benchmark: decode rows (CASES) and "
        "prefill rows (PREFILL_CASES) beside a copy and torch SDPA.")
    ap.add_argument("--emit", metavar="DIR",
                    help="emit the sm_90 kernels (decode and prefill "
                    "variants) into the bundle DIR and stop (MLIR build)")
    ap.add_argument("--kvgen", metavar="PATH",
                    help="the kvgen CLI for --emit / --self-test (default "
                    "build/bin/kvgen of this checkout)")
    ap.add_argument("--bundle")
    ap.add_argument("--lib")
    ap.add_argument("--out", default="attn-bench")
    ap.add_argument("--reps", type=int, default=40,
                    help="timed repetitions (prefill rows: at most this "
                    "many, see --prefill-budget-ms)")
    ap.add_argument("--only", default="", help="comma-separated geometries "
                    "(decode and prefill rows)")
    ap.add_argument("--prefill-only", action="store_true",
                    help="only the prefill rows")
    ap.add_argument("--no-prefill", action="store_true",
                    help="only the decode rows")
    ap.add_argument("--prefill-rows", default="",
                    help="comma-separated prefill row ids (" +
                    ", ".join(c[0] for c in PREFILL_CASES) + ")")
    ap.add_argument("--prefill-budget-ms", type=float, default=2000.0,
                    help="per prefill measurement: reps = what fits in this "
                    "many ms after one launch, 3..--reps (default 2000: a "
                    "~400 ms launch gets 5)")
    ap.add_argument("--prefill-reps", type=int, default=0,
                    help="fixed timed reps for every prefill measurement "
                    "(overrides the budget)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the prefill rows' arithmetic and SDPA masks "
                    "on the CPU (no GPU) and, with a kvgen CLI, a host-"
                    "backend launch against the same reference; then stop")
    a = ap.parse_args(argv)
    ids = {c[0] for c in PREFILL_CASES}
    bad = set(filter(None, a.prefill_rows.split(","))) - ids
    if bad:
        ap.error(f"--prefill-rows {','.join(sorted(bad))}: no such row "
                 f"(rows: {', '.join(c[0] for c in PREFILL_CASES)})")
    if a.prefill_only and a.no_prefill:
        ap.error("--prefill-only and --no-prefill exclude each other")
    if a.reps < 1 or a.prefill_reps < 0 or a.prefill_budget_ms <= 0:
        ap.error("--reps must be >= 1, --prefill-reps >= 0, "
                 "--prefill-budget-ms > 0")
    return a


def main():
    a = parse_args()
    if a.lib:
        os.environ["KVGEN_LIB"] = a.lib
    if a.self_test:
        return self_test(a.kvgen)
    if a.emit:
        emit(a.emit, a.kvgen)
        return 0
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
    for case in CASES if not a.prefill_only else ():
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
    if not a.prefill_only:
        write_decode(out, rows)
    if a.no_prefill:
        return 0
    sel = set(filter(None, a.prefill_rows.split(",")))
    prows = []
    for case in PREFILL_CASES:
        if (sel and case[0] not in sel) or (only and case[1] not in only):
            continue
        try:
            prows.append(run_prefill_case(torch, kvgen, ctx, timer, case, a,
                                          log))
        except Exception as e:  # noqa: BLE001
            log(f"prefill {case[0]}: {type(e).__name__}: {e}")
            prows.append(dict(id=case[0], geometry=case[1], window=case[2],
                              error=f"{type(e).__name__}: {e}"[:300]))
            torch.cuda.empty_cache()
    write_prefill(out, prows)
    failed = [r["id"] for r in prows
              if r.get("tiled_ok") is False or r.get("prefill_ok") is False]
    if failed:
        log(f"FAILED check (kvgen output differs from SDPA's): "
            f"{', '.join(failed)}")
        return 1
    return 0


def write_decode(out, rows):
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
    sys.exit(main())
