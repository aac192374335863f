"""kv.paged_attention on a CUDA GPU against an fp32 torch reference.

The kernels come from a bundle emitted on an MLIR build (the device machine
has none):

    python3 test/python/test_attention_gpu.py --emit .dev/attn/bundle

(the kvgen CLI of $KVGEN_BUILD_DIR, default build/), and the test runs
where the GPU is (skipped, with the reason, without torch, without CUDA or
without the bundle):

    KVGEN_ATTN_BUNDLE=.dev/attn/bundle KVGEN_LIB=build-dev/lib \\
        python3 -m pytest -q test/python/test_attention_gpu.py

Path covered: the sm_90 kernel as NVRTC builds it (mma.sync, hardware fp8
converts, ex2/tanh.approx, real CTA concurrency for the split-KV merge).

Layouts: NHD / HND, separate / packed, static or launch-time strides
(KERNELS), and chunked ones (CHUNKED_KERNELS: vLLM's legacy K [nb, H, D/x,
bs, x] with its legacy V [nb, H, D, bs] or ROCm aiter's shuffled V [nb, H,
bs/x, D, x]), whose caches are those dense tensors, filled and read through
each element's offset in them (chunked_offsets: numpy-style row-major
indices, not kvgen's address formula).

Reference: each sequence's K and V gathered through its block table from
the cache tensors themselves (torch.as_strided over the layout's strides;
chunked_offsets for chunked layouts),
dequantized in fp32 (fp8 values times their scales), logits in fp32 with
the causal / sliding-window mask, sinks as an extra logit of the softmax,
soft-cap as cap * tanh(x / cap), output = softmax x V.

Tolerance: |out - ref| <= 1.5e-2 + 1e-2 |ref| (the engines' bf16 tolerance).
The kernel's own error is the bf16 rounding of P before P V and of the
output (2^-9 relative each) plus approximate exp2 (2^-22): the reference
uses the same stored (bf16 / fp8) values, so fp8 caches need no looser
bound than bf16 here; their quantization error against an unquantized model
is not what this test measures.

Every output row sits in a buffer whose padding rows hold a canary; cache
rows past each seq_len and unused block-table entries point at NaN.

Without a GPU (pytest here, with a kvgen build and torch; ~20 s): a few
cases of each kind run GpuCase on CPU tensors through the host backend
(kernels emitted for target host) against the same reference, and
chunked_offsets is checked against numpy's indexing of the 5-D / 4-D
arrays (test_cases_on_the_host_backend,
test_chunked_offsets_match_numpy_indexing).
"""

import math
import os
import subprocess
import sys
import time
from pathlib import Path

try:
    import pytest
except ImportError:  # the GPU machine may lack pytest: run() below
    pytest = None

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

# name: (num_kv_heads, Dk, Dv, block, dtype, scale, order, packing,
#        num_q_heads, sinks, soft_cap, dynamic)
KERNELS = {
    "mimo_b16": (4, 192, 128, 16, "bf16", "none", "nhd", "separate", 64,
                 False, False, False),
    "mimo_b64_hnd": (4, 192, 128, 64, "bf16", "none", "hnd", "separate", 64,
                     False, False, False),
    "mimo_packed": (4, 192, 128, 16, "bf16", "none", "nhd", "packed", 64,
                    False, False, False),
    "mimo_fp8_t": (4, 192, 128, 16, "f8E4M3FN", "per_tensor", "nhd",
                   "separate", 64, False, False, False),
    "mimo_fp8_h_b64": (4, 192, 128, 64, "f8E4M3FN", "per_head", "hnd",
                       "separate", 64, False, False, False),
    "mimo_tp4": (1, 192, 128, 16, "bf16", "none", "nhd", "separate", 16,
                 False, False, False),
    "mimo_swa": (8, 192, 128, 16, "bf16", "none", "nhd", "separate", 64,
                 True, False, False),
    "mimo_swa_fp8_h": (8, 192, 128, 64, "f8E4M3FN", "per_head", "hnd",
                       "separate", 64, True, False, False),
    "llama": (8, 128, 128, 16, "bf16", "none", "nhd", "separate", 32, False,
              False, False),
    "llama_fp8_t": (8, 128, 128, 16, "f8E4M3FN", "per_tensor", "nhd",
                    "separate", 32, False, False, False),
    "llama_packed_hnd": (8, 128, 128, 64, "bf16", "none", "hnd", "packed",
                         32, False, False, False),
    "llama_dynamic": (8, 128, 128, 16, "bf16", "none", "nhd", "separate", 32,
                      False, True, True),
    "gptoss": (8, 64, 64, 16, "bf16", "none", "nhd", "separate", 64, True,
               False, False),
    "gptoss_fp8_e5m2": (8, 64, 64, 16, "f8E5M2", "per_tensor", "nhd",
                        "separate", 64, True, False, False),
    # V wider than K (the seed's backend cannot serve it).
    "wide_v": (4, 128, 256, 16, "bf16", "none", "nhd", "separate", 32,
               False, False, False),
}
# Chunked layouts (docs/layout.md "Chunked dimensions"), the same fields;
# order names the cache tensors' forms, x = 16 bytes / element size:
# "legacy" is vLLM's K [nb, H, D/x, bs, x] and V [nb, H, D, bs], "aiter"
# the same K and ROCm aiter's shuffled V [nb, H, bs/x, D, x].
CHUNKED_KERNELS = {
    "mimo_legacy_b16": (4, 192, 128, 16, "bf16", "none", "legacy",
                        "separate", 64, False, False, False),
    # fp8: x = 16; blocks of 32 (at 16, aiter's V would be the legacy V).
    "mimo_fp8_h_aiter_b32": (4, 192, 128, 32, "f8E4M3FN", "per_head",
                             "aiter", "separate", 64, False, False, False),
    "llama_legacy_b32": (8, 128, 128, 32, "bf16", "none", "legacy",
                         "separate", 32, False, False, False),
    "gptoss_aiter": (8, 64, 64, 16, "bf16", "none", "aiter", "separate",
                     64, True, False, False),
}
SPECS = {**KERNELS, **CHUNKED_KERNELS}

# (kernel, batch, context, query length, window)
CASES = [
    *[(k, 1, 1, 1, 0) for k in KERNELS],
    *[(k, 3, 1000, 1, 0) for k in KERNELS],
    *[(k, 8, 4096, 3, 0) for k in KERNELS],
    *[(k, 1, 32768, 1, 0) for k in KERNELS],
    ("mimo_b16", 1, 131072, 1, 0), ("mimo_fp8_t", 1, 131072, 1, 0),
    ("mimo_b16", 1, 131072, 3, 0), ("llama", 1, 131072, 1, 0),
    ("mimo_b16", 64, 2048, 1, 0), ("mimo_b16", 256, 512, 1, 0),
    ("llama", 256, 700, 3, 0), ("gptoss", 64, 3000, 1, 0),
    ("mimo_tp4", 2, 50000, 3, 0),
    ("mimo_swa", 1, 32768, 1, 128), ("mimo_swa", 8, 5000, 3, 128),
    ("mimo_swa", 64, 1000, 1, 128), ("mimo_swa_fp8_h", 16, 3000, 3, 128),
    ("gptoss", 8, 4000, 1, 128), ("gptoss_fp8_e5m2", 4, 3000, 3, 128),
    ("mimo_b16", 5, 17, 3, 0), ("mimo_packed", 2, 20000, 1, 0),
]
# The prefill plan's kernels (option prefill), last field True: every
# kernel's full prefill of 2k tokens and a 512-token chunk at up to 8k
# (with a query of an empty context beside it), windows, long prefills,
# and launches mixing a chunk, verifications and decodes (query lengths
# per sequence, cycled) on both plans.
MIXED = (1024, 4, 1, 1, 1, 8)
PREFILL_CASES = [
    *[(k, 1, 2048, 2048, 0, True) for k in KERNELS],
    *[(k, 2, 8192, 512, 0, True) for k in KERNELS],
    ("mimo_b16", 1, 4096, 4096, 0, True), ("llama", 1, 4096, 4096, 0, True),
    ("mimo_swa", 1, 4096, 4096, 128, True),
    ("mimo_swa_fp8_h", 2, 4096, 1024, 128, True),
    ("gptoss", 1, 3000, 3000, 128, True),
    ("mimo_b16", 12, 4096, MIXED, 0, True),
    ("mimo_b16", 12, 4096, MIXED, 0, False),
    ("mimo_fp8_t", 12, 4096, MIXED, 0, True),
    ("mimo_swa", 12, 4096, MIXED, 128, True),
    ("wide_v", 12, 4096, MIXED, 0, True),
]
# Chunked kernels: a decode at 32k (split), a short batch, an MTP-3 batch,
# a window; every prefill of 2k and chunk at 8k, mixed launches on both
# plans.
CHUNKED_CASES = [
    *[(k, 3, 1000, 1, 0) for k in CHUNKED_KERNELS],
    *[(k, 8, 4096, 3, 0) for k in CHUNKED_KERNELS],
    *[(k, 1, 32768, 1, 0) for k in CHUNKED_KERNELS],
    ("gptoss_aiter", 8, 4000, 3, 128),
    *[(k, 1, 2048, 2048, 0, True) for k in CHUNKED_KERNELS],
    *[(k, 2, 8192, 512, 0, True) for k in CHUNKED_KERNELS],
    ("gptoss_aiter", 1, 3000, 3000, 128, True),
    ("mimo_legacy_b16", 12, 4096, MIXED, 0, True),
    ("mimo_legacy_b16", 12, 4096, MIXED, 0, False),
    ("mimo_fp8_h_aiter_b32", 12, 4096, MIXED, 0, True),
    ("llama_legacy_b32", 12, 4096, MIXED, 0, True),
]
QUICK = ([c for c in CASES + PREFILL_CASES if c[1] * c[2] <= 40000][:40] +
         [c for c in CHUNKED_CASES if c[1] * c[2] <= 40000])
CASES = CASES + PREFILL_CASES + CHUNKED_CASES


def layout_of(name):
    (h, dk, dv, bs, dtype, scale, order, packing, _q, _s, _c,
     dyn) = SPECS[name]
    if name in CHUNKED_KERNELS:
        return _chunked_layout(h, dk, dv, bs, dtype, scale, order)
    kw = {}
    if dyn:
        kw = dict(k_strides=(None, None, None), v_strides=(None, None, None))
    return kvgen.Layout(h, dk, dv, bs, dtype=dtype, scale=scale, order=order,
                        packing=packing, **kw)


def _chunked_layout(h, dk, dv, bs, dtype, scale, kind):
    """The #kv.layout of the chunked tensors (the fields of docs/layout.md's
    table); the test's cache addressing (chunked_offsets) does not use it."""
    x = 16 // (1 if "f8" in dtype else 2)
    k = (f"k_strides = [{h * dk * bs}, {x}, {dk * bs}], "
         f"k_elem_chunks = [{x}, {bs * x}]")
    if kind == "legacy":
        v = f"v_strides = [{h * dv * bs}, 1, {dv * bs}], v_elem_stride = {bs}"
    else:
        v = (f"v_strides = [{h * dv * bs}, 1, {dv * bs}], "
             f"v_token_chunks = [{x}, {dv * x}], v_elem_stride = {x}")
    return kvgen.Layout.parse(
        f"num_kv_heads = {h}, head_size_k = {dk}, head_size_v = {dv}, "
        f"block_size = {bs}, dtype = {dtype}, scale = {scale}, {k}, {v}")


def chunked_offsets(torch, kind, side, nb, bs, h, d, x, device):
    """[nb, bs, h, d] int64: the element offset of (block, token, head,
    element) in a dense row-major tensor of the engine's form (vLLM legacy
    K [nb, h, d/x, bs, x], legacy V [nb, h, d, bs], aiter V [nb, h, bs/x, d,
    x]): an arange of the tensor's shape, its axes permuted to (block,
    token, head, element), not kvgen's address formula."""
    n = torch.arange(nb * h * d * bs, device=device)
    if side == "k":
        t = n.view(nb, h, d // x, bs, x).permute(0, 3, 1, 2, 4)
    elif kind == "legacy":
        t = n.view(nb, h, d, bs).permute(0, 3, 1, 2)
    else:
        t = n.view(nb, h, bs // x, d, x).permute(0, 2, 4, 1, 3)
    return t.reshape(nb, bs, h, d)


class OffsetView:
    """A cache component addressed through an offset tensor (chunked_offsets)
    with the subset of a [nb, bs, h, d] view that GpuCase uses: indexing
    (a gather), item assignment and copy_. Reads and writes go through the
    buffer's raw bits (fp8 tensors lack index_put on some torch builds)."""

    def __init__(self, torch, buf, offsets):
        self.buf, self.offsets = buf, offsets
        self.bits = buf.view(torch.uint8 if buf.element_size() == 1
                             else torch.int16)
        self.shape = tuple(offsets.shape)

    def __getitem__(self, key):
        return self.bits[self.offsets[key]].view(self.buf.dtype)

    def __setitem__(self, key, value):
        idx = self.offsets[key]
        if not hasattr(value, "view"):  # a Python scalar
            value = self.buf.new_full((), value)
        self.bits[idx] = value.to(self.buf.dtype).view(
            self.bits.dtype).expand(idx.shape)

    def copy_(self, src):
        self[...] = src
        return self


def emit(out, target="sm_90", names=None, build=None):
    """Emits every SPECS kernel (or those in `names`) for `target`, decode
    and prefill plans, into the bundle `out`, with the kvgen CLI of `build`
    (default $KVGEN_BUILD_DIR, else <repo>/build)."""
    build = Path(build or os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
    kv = build / "bin" / "kvgen"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, spec in SPECS.items():
        if names is not None and name not in names:
            continue
        f = out / f"{name}.mlir"
        f.write_text(f"#kv.layout<{layout_of(name).text}>\n")
        cmd = [str(kv), "emit", "--layout", str(f), "--op", "paged_attention",
               "--num_q_heads", str(spec[8]), "--target", target,
               "--bundle", str(out)]
        if spec[9]:
            cmd.append("--sinks")
        if spec[10]:
            cmd.append("--logits_soft_cap")
        # A plan override the op refuses (threads=384 producer-warps=4 on
        # a decode plan, wgmma=1 on an fp8 cache): that kernel keeps the
        # default plan.
        for what, extra in (("decode", []), ("prefill", ["--prefill"])):
            r = subprocess.run(cmd + extra, capture_output=True, text=True)
            if r.returncode and os.environ.get("KVGEN_PLAN_OPTIONS"):
                why = (r.stderr or r.stdout).strip().splitlines()
                print(f"note: {name}: {what} without KVGEN_PLAN_OPTIONS "
                      f"({why[-1] if why else ''})")
                env = dict(os.environ)
                env.pop("KVGEN_PLAN_OPTIONS")
                r = subprocess.run(cmd + extra, capture_output=True,
                                   text=True, env=env)
            if r.returncode:
                sys.exit(f"kvgen emit {' '.join(extra)} {name}: "
                         f"{r.stdout}{r.stderr}")
        f.unlink()


def make_env(skip):
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    if not torch.cuda.is_available():
        skip("no CUDA device")
    bundle = Path(os.environ.get("KVGEN_ATTN_BUNDLE",
                                 REPO / ".dev" / "attn" / "bundle"))
    if not (bundle / "kvgen-manifest.txt").is_file():
        skip(f"no attention bundle at {bundle} (emit it with "
             "test_attention_gpu.py --emit on an MLIR build)")
    ctx = kvgen.Context("cuda", cache_dir="")
    ctx.load_bundle(str(bundle))
    return torch, ctx


TORCH_FP8 = {"f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2"}


class GpuCase:
    """One launch's inputs on `device` ("cuda"; "cpu" for the host
    backend's self-check below) and its reference."""

    def __init__(self, torch, name, batch, ctxlen, qlen, window, seed,
                 device="cuda"):
        (h, dk, dv, bs, dtype, scale, order, packing, qh, sinks, cap,
         dyn) = SPECS[name]
        self.torch, self.name = torch, name
        self.h, self.dk, self.dv, self.bs, self.qh = h, dk, dv, bs, qh
        self.dtype, self.scale_kind = dtype, scale
        self.sinks_on, self.cap_on, self.window = sinks, cap, window
        g = torch.Generator(device=device).manual_seed(seed)
        self.g = g
        lay = layout_of(name)
        self.lay = lay
        dev = self.dev = device
        chunked = name in CHUNKED_KERNELS
        # Context lengths: the given one, and shorter ones for batch > 1
        # (0 for the second sequence of small batches: zeros, not NaN).
        # qlen: one query length, or one per sequence (cycled).
        want = [qlen[i % len(qlen)] if isinstance(qlen, tuple) else qlen
                for i in range(batch)]
        lens = [max(ctxlen, want[0])] + [int(x) for x in torch.randint(
            max(max(want), 1), ctxlen + 1, (batch - 1,), generator=g,
            device=dev).tolist()]
        if 2 <= batch <= 8:
            lens[1] = 0
        qlens = [n if L > 0 else 0 for n, L in zip(want, lens)]
        if 2 <= batch <= 8:
            qlens[1] = want[1]  # queries with an empty context
        self.lens, self.qlens = lens, qlens
        need = [max(1, -(-L // bs)) for L in lens]
        self.num_blocks = sum(need) + 1
        perm = torch.randperm(self.num_blocks - 1, generator=g,
                              device=dev) + 1
        maxb = max(need) + 1
        table = torch.zeros(batch, maxb + 3, dtype=torch.int32, device=dev)
        at = 0
        for s, n in enumerate(need):
            table[s, :n] = perm[at:at + n].to(torch.int32)
            table[s, n + 1:] = 1 << 30  # never read
            at += n
        self.table = table
        self.table_view = table[:, :maxb]
        self.seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        self.qsl = torch.tensor([0] + list(
            __import__("itertools").accumulate(qlens)), dtype=torch.int32,
            device=dev)
        self.T = int(sum(qlens))
        self.dyn = None
        # Caches: the layout's extent, random values, block 0 NaN.
        esize = 1 if "f8" in dtype else 2
        fdt = getattr(torch, TORCH_FP8[dtype]) if "f8" in dtype \
            else torch.bfloat16
        if dyn:  # dense NHD strides passed at launch
            self.dyn = tuple((bs * h * d, h * d, d) for d in (dk, dv))
        ext = [lay.extent_bytes(c, self.num_blocks,
                                self.dyn[i] if self.dyn else None)
               for i, c in enumerate(("k", "v"))]
        if lay.packed:
            ext = [max(ext), 0]
        if chunked:  # the dense 5-D / 4-D tensors
            dense = [self.num_blocks * h * d * bs * esize for d in (dk, dv)]
            assert ext[0] <= dense[0] and ext[1] <= dense[1], \
                f"kvgen's extents {ext} exceed the tensors' {dense}"
            ext = dense
        self.kc = torch.empty(ext[0] // esize, dtype=fdt, device=dev)
        self.vc = None if lay.packed else torch.empty(ext[1] // esize,
                                                      dtype=fdt, device=dev)
        self.ks = self.vs = None
        if "f8" in dtype:
            n = h if scale == "per_head" else 1
            self.ks = (torch.rand(n, generator=g, device=dev) * 0.05 +
                       0.02).float()
            self.vs = (torch.rand(n, generator=g, device=dev) * 0.05 +
                       0.02).float()
        self.views = {}
        for i, (c, d) in enumerate((("k", dk), ("v", dv))):
            buf = self.kc if (i == 0 or lay.packed) else self.vc
            if chunked:
                v = OffsetView(torch, buf, chunked_offsets(
                    torch, order, c, self.num_blocks, bs, h, d, 16 // esize,
                    dev))
            else:
                st = lay.strides(c, self.dyn[i] if self.dyn else None)
                v = buf.as_strided((self.num_blocks, bs, h, d),
                                   (st[0], st[1], st[2], 1), lay.base(c))
            x = torch.randn((self.num_blocks, bs, h, d), generator=g,
                            device=dev)
            if "f8" in dtype:
                x = x * 4
            v.copy_(x.to(fdt))
            v[0] = float("nan")  # the poison block
            self.views[c] = v
        # Rows past seq_len in each sequence's last block: NaN.
        for s, L in enumerate(lens):
            if L % bs:
                blk = int(table[s, (L - 1) // bs])
                for c in ("k", "v"):
                    self.views[c][blk, L % bs:] = float("nan")
        self.q = torch.randn((self.T, qh, dk), generator=g, device=dev).to(
            torch.bfloat16)
        self.sinks = (torch.randn(qh, generator=g, device=dev) * 2).float()
        self.softmax_scale = 1.0 / math.sqrt(dk)
        self.cap = 30.0
        self.out_buf = torch.full((self.T + 2, qh, dv), 7.25,
                                  dtype=torch.bfloat16, device=dev)
        self.out = self.out_buf[1:1 + self.T]

    def run(self, k, ctx, **extra):
        kw = dict(softmax_scale=self.softmax_scale,
                  sliding_window=self.window)
        if self.sinks_on:
            kw["sinks"] = self.sinks
        if self.cap_on:
            kw["logits_soft_cap"] = self.cap
        if self.ks is not None:
            kw["k_scale"], kw["v_scale"] = self.ks, self.vs
        if self.dyn:
            kw["cache_strides"] = self.dyn
        kw.update(extra)
        k.paged_attention(query=self.q, output=self.out, key_cache=self.kc,
                          value_cache=self.vc, block_tables=self.table_view,
                          seq_lens=self.seq_lens, query_start_loc=self.qsl,
                          max_query_len=max(self.qlens),
                          max_seq_len=max(self.lens),
                          num_blocks=self.num_blocks, **kw)

    def reference(self):
        torch = self.torch
        out = torch.zeros((self.T, self.qh, self.dv), device=self.dev)
        G = self.qh // self.h
        for s, (L, n) in enumerate(zip(self.lens, self.qlens)):
            if n == 0:
                continue
            q0 = int(self.qsl[s])
            q = self.q[q0:q0 + n].float()  # [n, qh, dk]
            if L > 0:
                t = torch.arange(L, device=self.dev)
                blk = self.table[s, t // self.bs].long()
                kk = self.views["k"][blk, t % self.bs].float()
                vv = self.views["v"][blk, t % self.bs].float()
                if self.ks is not None:
                    ksc = self.ks.view(-1, 1) if self.ks.numel() > 1 \
                        else self.ks
                    vsc = self.vs.view(-1, 1) if self.vs.numel() > 1 \
                        else self.vs
                    kk, vv = kk * ksc, vv * vsc
                kk = kk.repeat_interleave(G, dim=1)  # [L, qh, dk]
                vv = vv.repeat_interleave(G, dim=1)
                lg = torch.einsum("nhd,lhd->hnl", q, kk) * self.softmax_scale
                if self.cap_on:
                    lg = self.cap * torch.tanh(lg / self.cap)
                pos = (L - n + torch.arange(n, device=self.dev)).view(
                    1, n, 1)
                j = t.view(1, 1, L)
                ok = j <= pos
                if self.window:
                    ok = ok & (j > pos - self.window)
                lg = lg.masked_fill(~ok, float("-inf"))
            else:
                lg = torch.full((self.qh, n, 0), float("-inf"),
                                device=self.dev)
                vv = torch.zeros((0, self.qh, self.dv), device=self.dev)
            if self.sinks_on:
                sk = self.sinks.view(self.qh, 1, 1).expand(self.qh, n, 1)
                full = torch.cat([lg, sk], dim=2)
            else:
                full = lg
            if full.shape[2] == 0:
                continue  # no keys and no sinks: the rows stay 0
            m = full.max(dim=2, keepdim=True).values
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            w = torch.exp(full - m)
            den = w.sum(dim=2, keepdim=True)
            w = w[..., :lg.shape[2]] / torch.where(den > 0, den,
                                                   torch.ones_like(den))
            out[q0:q0 + n] = torch.einsum("hnl,lhd->nhd", w, vv)
        return out

    def check(self):
        torch = self.torch
        got = self.out.float()
        assert torch.isfinite(got).all(), "NaN/inf in the output"
        want = self.reference()
        torch.testing.assert_close(got, want, atol=1.5e-2, rtol=1e-2)
        assert (self.out_buf[0] == 7.25).all() and \
            (self.out_buf[-1] == 7.25).all(), "canary rows overwritten"


def kernel_of(ctx, name, prefill=False):
    spec = SPECS[name]
    opts = dict(io="bf16", num_q_heads=spec[8])
    if prefill:
        opts["prefill"] = True
    if spec[9]:
        opts["sinks"] = True
    if spec[10]:
        opts["logits_soft_cap"] = True
    return ctx.kernel("paged_attention", layout_of(name), **opts)


def _ids(c):
    q = "x".join(map(str, c[3])) if isinstance(c[3], tuple) else c[3]
    return (f"{c[0]}-b{c[1]}-ctx{c[2]}-q{q}-w{c[4]}" +
            ("-prefill" if len(c) > 5 and c[5] else ""))


def check_case(env, case):
    torch, ctx = env
    name, batch, ctxlen, qlen, window = case[:5]
    prefill = len(case) > 5 and case[5]
    c = GpuCase(torch, name, batch, ctxlen, qlen, window,
                seed=abs(hash(case)) % (1 << 31))
    k = kernel_of(ctx, name, prefill)
    c.run(k, ctx)
    torch.cuda.synchronize()
    c.check()


def check_graph_replay(env):
    """A split launch (batch 1, 32k tokens: 64 splits on sm_90) captured in
    a CUDA graph and replayed three times, the context shrinking between
    replays: each replay matches the reference, so the merging CTA left the
    counters at zero each time."""
    torch, ctx = env
    c = GpuCase(torch, "mimo_b16", 1, 32768, 1, 0, seed=11)
    k = kernel_of(ctx, "mimo_b16")
    c.run(k, ctx)  # allocates the kernel's workspace, compiles
    torch.cuda.synchronize()
    c.check()
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            c.run(k, ctx)
    for L in (32768, 20000, 777):
        c.lens[0] = L
        c.seq_lens.fill_(L)
        c.out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        c.check()


def _shape_sequence(seed, n):
    """The issue's order (MiMo packed: query length 3 at batch 1, decode at
    batch 8, query length 3 at batch 8, all at 32k), then n random engine
    steps: batch 1..64, query length 1..3, context up to 32k, sometimes a
    window."""
    import random
    r = random.Random(seed)
    seq = [(1, 32768, 3, 0), (8, 32768, 1, 0), (8, 32768, 3, 0)]
    for _ in range(n):
        seq.append((r.choice([1, 2, 3, 5, 8, 16, 33, 64]),
                    r.choice([300, 2000, 9000, 32768]), r.choice([1, 2, 3]),
                    r.choice([0, 0, 0, 128])))
    return seq


def check_workspace_sequence(env):
    """Issue 26, row 0: one kernel, one workspace of max_workspace_bytes
    (zeroed once, as an engine keeps it) through a sequence of launch
    shapes; every launch matches the reference and leaves the counter area
    zero. Before the fix the issue's first three shapes gave 9 of 24 rows
    NaN on the third launch."""
    torch, ctx = env
    k = kernel_of(ctx, "mimo_packed")
    most = k.max_workspace_bytes
    counters = _counter_bytes(k)
    assert 0 < counters < most
    ws = torch.zeros(most, dtype=torch.uint8, device="cuda")
    splits = 0
    for i, (batch, ctxlen, qlen, window) in enumerate(_shape_sequence(26,
                                                                       17)):
        c = GpuCase(torch, "mimo_packed", batch, ctxlen, qlen, window,
                    seed=1000 + i)
        c.run(k, ctx, workspace=ws)
        torch.cuda.synchronize()
        c.check()
        assert int(ws[:counters].count_nonzero()) == 0, \
            f"counters left non-zero after shape {i}"
        splits += int(ws[counters:].count_nonzero()) > 0
    assert splits > 0, "no launch of the sequence split"


def _counter_bytes(k):
    """The counter area of the kernel's workspace: split_ctas int32s
    rounded up to 256 bytes (Launch.h splitCounterBytes), from the
    kernel's geometry in its bundle manifest."""
    m = (Path(os.environ.get("KVGEN_ATTN_BUNDLE", REPO / ".dev" / "attn" /
                             "bundle")) / "kvgen-manifest.txt").read_text()
    block = m.split(f"name = {k.name}\n", 1)[1].split("[", 1)[0]
    for line in block.splitlines():
        key, _, val = line.partition("=")
        if key.strip() == "split_ctas":
            return (int(val) * 4 + 255) // 256 * 256
    raise AssertionError(f"no split_ctas for {k.name} in the manifest")


def check_graph_after_other_shapes(env):
    """A CUDA graph captured at one shape (batch 8, query length 3, 9000
    tokens: a split launch), then other shapes launched eagerly on the
    same kernel and workspace, then the graph replayed: the replay matches
    the reference, and so does a second replay after more shapes."""
    torch, ctx = env
    k = kernel_of(ctx, "mimo_packed")
    ws = torch.zeros(k.max_workspace_bytes, dtype=torch.uint8,
                     device="cuda")
    c = GpuCase(torch, "mimo_packed", 8, 9000, 3, 0, seed=77)
    c.run(k, ctx, workspace=ws)  # compiles
    torch.cuda.synchronize()
    c.check()
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            c.run(k, ctx, workspace=ws)
    for round_, shapes in enumerate(([(1, 32768, 3, 0), (64, 2000, 1, 0)],
                                     [(3, 20000, 2, 128), (16, 9000, 1, 0)])):
        for j, (batch, ctxlen, qlen, window) in enumerate(shapes):
            o = GpuCase(torch, "mimo_packed", batch, ctxlen, qlen, window,
                        seed=200 + 10 * round_ + j)
            o.run(k, ctx, workspace=ws)
            torch.cuda.synchronize()
            o.check()
        c.out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        c.check()


if pytest is not None:
    @pytest.fixture(scope="module")
    def env():
        return make_env(pytest.skip)

    @pytest.mark.parametrize("case", QUICK if os.environ.get(
        "KVGEN_ATTN_QUICK") else CASES, ids=_ids)
    def test_attention_gpu(env, case):
        check_case(env, case)

    def test_graph_replay_resets_split_counters(env):
        check_graph_replay(env)

    def test_one_workspace_serves_a_sequence_of_shapes(env):
        check_workspace_sequence(env)

    def test_graph_replays_after_other_shapes(env):
        check_graph_after_other_shapes(env)

    # The CPU self-check: GpuCase's inputs and reference on CPU tensors,
    # the kernels emitted for the host backend (the same kernel source the
    # GPU compiles, CTAs as fibers), so the cache fill and the reference's
    # gather (chunked and not) are checked where there is no GPU.
    HOST_CASES = [
        ("mimo_legacy_b16", 3, 40, 1, 0),
        ("mimo_fp8_h_aiter_b32", 2, 70, 3, 0),
        ("llama_legacy_b32", 3, 100, 3, 0),
        ("gptoss_aiter", 2, 90, 3, 24),
        ("llama_legacy_b32", 1, 96, 96, 0, True),
        ("mimo_legacy_b16", 4, 80, (33, 3, 1, 1), 0, True),
        ("gptoss_aiter", 2, 120, 50, 32, True),
        ("mimo_b16", 3, 40, 1, 0),
        ("llama_fp8_t", 2, 50, 3, 0),
        ("mimo_packed", 1, 64, 64, 0, True),
    ]

    @pytest.fixture(scope="module")
    def host_env(tmp_path_factory, kvgen_cli, kernel_cache):
        torch = pytest.importorskip(
            "torch", reason="torch is not installed: no CPU self-check")
        d = tmp_path_factory.mktemp("attention_gpu_host")
        emit(d, target="host", names={c[0] for c in HOST_CASES},
             build=kvgen_cli.parents[1])
        ctx = kvgen.Context("host", cache_dir=kernel_cache)
        ctx.load_bundle(str(d))
        yield torch, ctx
        ctx.close()

    @pytest.mark.parametrize("case", HOST_CASES, ids=_ids)
    def test_cases_on_the_host_backend(host_env, case):
        """GpuCase on CPU tensors through the host backend: the output
        matches GpuCase.reference, the canary rows stay."""
        torch, ctx = host_env
        name, batch, ctxlen, qlen, window = case[:5]
        prefill = len(case) > 5 and case[5]
        c = GpuCase(torch, name, batch, ctxlen, qlen, window, seed=5,
                    device="cpu")
        c.run(kernel_of(ctx, name, prefill), ctx)
        c.check()

    @pytest.mark.parametrize("name", list(CHUNKED_KERNELS))
    def test_chunked_offsets_match_numpy_indexing(name):
        """chunked_offsets against numpy's indexing of the engine's 5-D /
        4-D arrays: element (block, token, head, e) of a dense tensor
        filled with 0..n-1 is the offset chunked_offsets gives."""
        torch = pytest.importorskip(
            "torch", reason="torch is not installed")
        import numpy as np
        h, dk, dv, bs, dtype, _s, kind = SPECS[name][:7]
        x = 16 // (1 if "f8" in dtype else 2)
        nb = 3
        for side, d in (("k", dk), ("v", dv)):
            off = chunked_offsets(torch, kind, side, nb, bs, h, d, x,
                                  "cpu").numpy()
            n = np.arange(nb * h * d * bs)
            if side == "k":
                a = n.reshape(nb, h, d // x, bs, x)
                at = (lambda b, t, hh, e: a[b, hh, e // x, t, e % x])
            elif kind == "legacy":
                a = n.reshape(nb, h, d, bs)
                at = (lambda b, t, hh, e: a[b, hh, e, t])
            else:
                a = n.reshape(nb, h, bs // x, d, x)
                at = (lambda b, t, hh, e: a[b, hh, t // x, e, t % x])
            b, t, hh, e = np.meshgrid(np.arange(nb), np.arange(bs),
                                      np.arange(h), np.arange(d),
                                      indexing="ij")
            np.testing.assert_array_equal(off, at(b, t, hh, e))
            assert sorted(off.ravel()) == list(n)  # each element once


def run(select=""):
    """Without pytest: every case (or those whose id contains one of the
    comma-separated `select` words), a line per case, exit status 1 on any
    failure."""
    def skip(why):
        print(f"SKIPPED: {why}")
        sys.exit(0)
    e = make_env(skip)
    words = [w for w in select.split(",") if w]
    cases = QUICK if os.environ.get("KVGEN_ATTN_QUICK") else CASES
    failed = 0
    named = {"graph_replay": check_graph_replay,
             "workspace_sequence": check_workspace_sequence,
             "graph_after_other_shapes": check_graph_after_other_shapes}
    for c in cases + list(named):
        cid = c if isinstance(c, str) else _ids(c)
        if words and not any(w in cid for w in words):
            continue
        t = time.time()
        try:
            named[c](e) if isinstance(c, str) else check_case(e, c)
            print(f"PASS {cid} ({time.time() - t:.1f} s)", flush=True)
        except Exception as ex:  # noqa: BLE001
            failed += 1
            print(f"FAIL {cid}: {type(ex).__name__}: {str(ex)[:600]}",
                  flush=True)
    print(f"{failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--emit":
        emit(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "--run":
        run(sys.argv[2] if len(sys.argv) > 2 else "")
    else:
        print(__doc__)
