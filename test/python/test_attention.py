"""kv.paged_attention on the HOST backend: the emitted kernel (the same source
the GPUs compile, run with each CTA's threads as fibers and NVIDIA's
mma.sync m16n8k16 fragments emulated, target_host.h) against a float64
numpy reference written out here: gather each sequence's keys and values
through its block table, softmax (with sinks, sliding window, soft-cap and
the causal mask among a short query's tokens) and the weighted sum.

What the host grid covers: the attention family's kernel body
(codegen/prelude/attention*.h) end to end (block tables, K and V through
their own component maps, the per-lane MMA fragment maps, the online
softmax, the warps' merge, split-KV with the
last-CTA merge and its counter reset, fp8 dequantization in the portable
converters). What it does not: the hardware mma.sync / cvt / ex2 / shfl
instructions and real concurrency between CTAs (test_attention_gpu.py on a
GPU; the sm_90 PTX structure in test/lit/Target/isa-sm90-attention.mlir).

Inputs carry poison: cache rows past each seq_len and every unused
block-table entry point at NaN (the output would be NaN if any were read),
block-table padding also holds out-of-range numbers, and the output rows
sit inside a canary-filled buffer. Tolerances (bf16 output): |out - ref| <=
1e-2 + 1e-2 |ref|. The kernel rounds P to bf16 before P V (relative error
<= 2^-9 per weight) and the output to bf16 (<= 2^-9); the reference uses the
same bf16 / fp8 inputs exactly, so these roundings are the whole error;
1e-2 is about 5x their worst case at these sizes. f16 (10-bit mantissa):
4e-3.

Run:  python3 -m pytest -q test/python/test_attention.py
"""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402
import kvgen_emit  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

NP_TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32,
            "f8E4M3FN": ml_dtypes.float8_e4m3fn,
            "f8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
            "f8E5M2": ml_dtypes.float8_e5m2,
            "f8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz}
STORAGE = {1: np.uint8, 2: np.uint16, 4: np.uint32}


class Geo:
    """One kernel: a layout and the op's options."""

    def __init__(self, heads, dk, dv, bs, q_heads, dtype="bf16",
                 order="nhd", packing="separate", scale=None, io="bf16",
                 sinks=False, soft_cap=False, checked=False, k_strides=None,
                 v_strides=None, dynamic=False):
        self.heads, self.dk, self.dv, self.bs = heads, dk, dv, bs
        self.q_heads, self.dtype, self.order = q_heads, dtype, order
        self.packing, self.io = packing, io
        self.scale = scale or ("per_tensor" if "f8" in dtype else "none")
        self.sinks, self.soft_cap, self.checked = sinks, soft_cap, checked
        self.k_strides, self.v_strides = k_strides, v_strides
        self.dynamic = dynamic

    def layout(self):
        kw = {}
        if self.dynamic:
            kw = dict(k_strides=(None, None, None),
                      v_strides=(None, None, None))
        elif self.k_strides:
            kw = dict(k_strides=self.k_strides, v_strides=self.v_strides)
        return kvgen.Layout(self.heads, self.dk, self.dv, self.bs,
                            dtype=self.dtype, order=self.order,
                            packing=self.packing, scale=self.scale, **kw)

    def strides(self, side):
        """(block, token, head) element strides and the row base, written
        out from the layout rules (docs/layout.md), not asked of kvgen."""
        if self.k_strides and not self.dynamic:
            st = self.k_strides if side == "k" else self.v_strides
            base = self.dk if (side == "v" and self.packing == "packed") \
                else 0
            return st, base
        d = self.dk if side == "k" else self.dv
        w = self.dk + self.dv if self.packing == "packed" else d
        base = self.dk if (side == "v" and self.packing == "packed") else 0
        if self.order == "nhd":
            st = (self.bs * self.heads * w, self.heads * w, w)
        else:
            st = (self.heads * self.bs * w, w, self.bs * w)
        return st, base


class ChunkedGeo(Geo):
    """A layout with chunked dimensions (docs/layout.md): vLLM's legacy K
    [nb, H, D/x, bs, x] with V either vLLM's legacy [nb, H, D, bs]
    (v_kind "legacy") or ROCm aiter's shuffled [nb, H, bs/x, D, x]
    ("aiter"), x = 16 bytes of the element. row_offsets places a row by
    the row-major index of those tensor shapes, not by kvgen's formula."""

    def __init__(self, heads, dk, dv, bs, q_heads, v_kind, **kw):
        super().__init__(heads, dk, dv, bs, q_heads, **kw)
        self.v_kind = v_kind
        self.x = 16 // np.dtype(NP_TYPES[self.dtype]).itemsize

    def layout(self):
        H, bs, x, dk, dv = self.heads, self.bs, self.x, self.dk, self.dv
        k = (f"k_strides = [{H * dk * bs}, {x}, {dk * bs}], "
             f"k_elem_chunks = [{x}, {bs * x}]")
        if self.v_kind == "legacy":
            v = f"v_strides = [{H * dv * bs}, 1, {dv * bs}], v_elem_stride = {bs}"
        else:
            v = (f"v_strides = [{H * dv * bs}, 1, {dv * bs}], "
                 f"v_token_chunks = [{x}, {dv * x}], v_elem_stride = {x}")
        return kvgen.Layout.parse(
            f"num_kv_heads = {H}, head_size_k = {dk}, head_size_v = {dv}, "
            f"block_size = {bs}, dtype = {self.dtype}, scale = {self.scale}, "
            f"{k}, {v}")

    def strides(self, side):
        return (0, 0, 0), 0  # unused: row_offsets places the rows

    def extent(self, side, num_blocks):
        """Elements of side's tensor (dense 5-D / 4-D)."""
        return num_blocks * self.heads * \
            (self.dk if side == "k" else self.dv) * self.bs

    def row_offsets(self, side, blk, off, h):
        """Element indices of the row of (block, token offset, head)."""
        H, bs, x = self.heads, self.bs, self.x
        if side == "k":
            e = np.arange(self.dk)
            return ((((blk * H + h) * (self.dk // x) + e // x) * bs + off) *
                    x + e % x)
        e = np.arange(self.dv)
        if self.v_kind == "legacy":
            return ((blk * H + h) * self.dv + e) * bs + off
        return ((((blk * H + h) * (bs // x) + off // x) * self.dv + e) * x +
                off % x)


GEOS = {
    # MiMo's asymmetric heads (192 / 128), GQA 4.
    "mimo_nhd": Geo(2, 192, 128, 16, 8),
    "mimo_hnd_sinks_window": Geo(2, 192, 128, 16, 8, order="hnd",
                                 sinks=True),
    # V wider than K, packed rows, blocks smaller than a 16-token step, f16.
    "packed_wide_v_f16": Geo(2, 64, 96, 8, 4, packing="packed", io="f16",
                             dtype="f16"),
    "fp8_e4m3_head_softcap": Geo(2, 64, 64, 32, 16, dtype="f8E4M3FN",
                                 scale="per_head", soft_cap=True),
    "fp8_e5m2_tensor": Geo(2, 128, 64, 16, 4, dtype="f8E5M2"),
    "fp8_e4m3fnuz_hnd": Geo(1, 64, 128, 16, 2, dtype="f8E4M3FNUZ",
                            order="hnd", sinks=True),
    "dynamic_strides": Geo(2, 64, 32, 16, 4, dynamic=True),
    "block1_mha_checked": Geo(2, 32, 32, 1, 2, checked=True),
    "odd_sizes_b24": Geo(2, 80, 48, 24, 6),
    "group16": Geo(1, 128, 128, 64, 16, sinks=True),
    "group32": Geo(1, 64, 64, 16, 32),
    "f32_cache": Geo(1, 64, 64, 16, 2, dtype="f32"),
    "block256": Geo(1, 64, 64, 256, 4),
    # Blocks 8 MiB apart (explicit strides): offsets past 4 GiB.
    "over_4gib": Geo(1, 64, 64, 16, 2, k_strides=(1 << 22, 64, 64),
                     v_strides=(1 << 22, 64, 64)),
}


def host_context(tmp_path_factory, cache, plan_options=None, names=None,
                 lse=False, prefill=False, geos=None):
    """A host context with every GEOS kernel (or those of `geos`, a dict
    like GEOS; or those in `names`), emitted
    by `kvgen emit` (with KVGEN_PLAN_OPTIONS = plan_options when given;
    with the lse option when lse, planned for prefill when prefill),
    compiled into the disk cache `cache` (conftest.py's kernel_cache); its
    fixtures take kvgen_cli (skipped without a build)."""
    env = dict(os.environ)
    env.pop("KVGEN_PLAN_OPTIONS", None)
    if plan_options:
        env["KVGEN_PLAN_OPTIONS"] = plan_options
    d = tmp_path_factory.mktemp("attention")
    specs = []
    for name, g in (GEOS if geos is None else geos).items():
        if names is not None and name not in names:
            continue
        # Kernels are range-checked by default; the other geometries keep
        # the unchecked kernel, so both are covered.
        flags = [flag for flag, on in (
            ("--sinks", g.sinks), ("--unchecked", not g.checked),
            ("--logits_soft_cap", g.soft_cap), ("--lse", lse),
            ("--prefill", prefill)) if on]
        specs.append((g.layout(), "paged_attention",
                      ("--io", g.io, "--num_q_heads", g.q_heads, *flags)))
    bundle = kvgen_emit.emit_all(d, specs, env=env)
    return kvgen_emit.host_context(bundle, cache), bundle


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, kvgen_cli, kernel_cache):
    c, _ = host_context(tmp_path_factory, kernel_cache)
    yield c
    c.close()


@pytest.fixture(scope="module")
def ctx_mfma(tmp_path_factory, kvgen_cli, kernel_cache):
    """The same kernels planned with mfma (kv-plan option mfma=1): the AMD
    kernels' MFMA path - both warps of a 64-lane wavefront in step, the
    operand permutes and accumulator layout of amdgpu_mfma.h - on the host
    prelude's simulated wavefronts, whose MFMA follows AMD's documented
    layout."""
    c, bundle = host_context(tmp_path_factory, kernel_cache, "mfma=1")
    sources = [f for f in bundle.iterdir() if f.suffix == ".cpp"]
    assert len(sources) == len(GEOS)
    for f in sources:
        assert "static constexpr bool mfma = true;" in f.read_text(), f
    yield c
    c.close()


@pytest.fixture(scope="module")
def ctx_prefill(tmp_path_factory, kvgen_cli, kernel_cache):
    """Every kernel planned for prefill (op option prefill): 64 rows per
    CTA, each warp owning 16, the K/V tiles staged in shared memory."""
    c, bundle = host_context(tmp_path_factory, kernel_cache, prefill=True)
    sources = [f for f in bundle.iterdir() if f.suffix == ".cpp"]
    assert len(sources) == len(GEOS)
    for f in sources:
        text = f.read_text()
        assert "rows_per_cta = 64" in text, f
        # The host plan's tiles: 64 tokens in 2 stages of dynamic shared
        # memory (the most kv-plan chooses; sequences here are longer).
        assert "tile_tokens = 64, tile_stages = 2, dynamic_smem_bytes = " \
            in text, f
    yield c
    c.close()


def test_host_kernels_compile_at_the_default_options(tmp_path, kvgen_cli,
                                                     kernel_cache,
                                                     monkeypatch):
    """The suite compiles host kernels with -Og (conftest.py); the host
    backend's default is -O2, whose loop analyses find warnings -Og does
    not (-Waggressive-loop-optimizations), and the backend fails a compile
    on any warning. So the attention bodies (decode, the mma.sync prefill
    and the warp-specialized wgmma prefill, MiMo's geometry with sinks)
    compile once here with KVGEN_HOST_CXXFLAGS empty: -O2 alone."""
    g = GEOS["mimo_hnd_sinks_window"]
    base = ("--io", g.io, "--num_q_heads", g.q_heads, "--sinks")
    kvgen_emit.emit_all(tmp_path, [
        (g.layout(), "paged_attention", base),
        (g.layout(), "paged_attention", base + ("--prefill",))])
    kvgen_emit.emit(tmp_path, g.layout(), "paged_attention",
                    base + ("--prefill",), bundle_name="ws",
                    env=dict(os.environ, KVGEN_PLAN_OPTIONS=WS_OPTIONS))
    monkeypatch.setenv("KVGEN_HOST_CXXFLAGS", "")
    names = []
    for b in ("bundle", "ws"):
        manifest = (tmp_path / b / "kvgen-manifest.txt").read_text()
        names += [(b, n) for n in re.findall(r"^name = (\S+)$", manifest,
                                              re.M)]
    assert len(names) == 3, names
    for b, name in names:
        c = kvgen.Context.compile_only("host", "host", cache_dir=kernel_cache)
        try:
            c.load_bundle(str(tmp_path / b))
            assert c.kernel_by_name(name).op == "paged_attention"
        finally:
            c.close()


def planned_tile_bytes(hk, hv, elem, most, wgmma=False, ws=False):
    """The prefill tiles' (tokens, stages, bytes) kv-plan should choose: K
    rows padded to 16 bytes and then to 64 modulo 128, V rows to 16 modulo
    64 (a plan on warpgroup MMA, wgmma: sm_90's default for a 16-bit cache
    of the query's type, pads neither beyond 16 bytes); 64 / 32 / 16
    tokens in 2 stages where they fit in `most`, else 16 in 1; a wgmma
    plan takes 3 stages of those tokens where they fit; a warp-specialized
    one (sm_90's default for V rows up to 128 elements: ws) the first of
    64 x 4, 64 x 3, 32 x 4, 32 x 3, 16 x 3 tokens x stages that fits with
    16 bytes of tile barriers per stage (restated here as the test's
    oracle)."""
    k = -(-hk * elem // 16) * 16
    v = -(-hv * elem // 16) * 16
    if not wgmma:
        k += (64 - k % 128 + 128) % 128
        v += (16 - v % 64 + 64) % 64
    if ws:
        shapes = ((64, 4), (64, 3), (32, 4), (32, 3), (16, 3))
        tokens, stages = next(
            ((t, n) for t, n in shapes if n * (t * (k + v) + 16) <= most),
            shapes[-1])
        return tokens, stages, stages * (tokens * (k + v) + 16)
    tokens = next((t for t in (64, 32) if 2 * t * (k + v) <= most), 16)
    stages = 2 if 2 * tokens * (k + v) <= most else 1
    if wgmma and 3 * tokens * (k + v) <= most:
        stages = 3
    return tokens, stages, stages * tokens * (k + v)


@pytest.mark.parametrize("hk,hv,dtype,elem", [
    (192, 128, "bf16", 2),  # MiMo: 92160 bytes; gfx90a 32 tokens
    (128, 128, "f16", 2),  # Llama
    (80, 48, "bf16", 2),  # odd sizes: padded rows (unpadded on sm_90: wgmma)
    (64, 256, "f8E4M3FN, scale = per_head", 1),  # V wider, 1-byte
    (64, 96, "f32", 4),  # V wider, 4-byte
    (512, 512, "f32", 4),  # 16 tokens exceed gfx90a's LDS: refused
])
def test_prefill_dynamic_smem_is_the_tiles_bytes(tmp_path, kvgen_cli,
                                                 kernel_cache, hk, hv, dtype,
                                                 elem):
    """kv-plan's dynamic_smem_bytes for a prefill plan is exactly the
    prelude's sizeof(AttnTileSmem) (the host compile of each kernel checks
    that in a static_assert), and is the tiles the oracle above sizes for
    each target's limit: 64 tokens x 2 stages where they fit (sm_90 227
    KiB, sm_80 163 KiB, the host), fewer on gfx90a's 64 KiB; a tile of 16
    tokens beyond the limit is refused."""
    layout = (f"num_kv_heads = 2, head_size_k = {hk}, head_size_v = {hv}, "
              f"block_size = 16, dtype = {dtype}")
    f = tmp_path / "layout.mlir"
    f.write_text(f"#kv.layout<{layout}>\n")
    for target, most in (("host", 2**31 - 1), ("sm_90", 227 * 1024),
                         ("sm_80", 163 * 1024), ("gfx90a", 64 * 1024)):
        out = tmp_path / target
        r = subprocess.run(
            [str(KVGEN), "emit", "--layout", str(f), "--target", target,
             "--op", "paged_attention", "--num_q_heads", "4", "--prefill",
             "--bundle", str(out)],
            capture_output=True, text=True)
        # sm_90 plans wgmma for a bf16 cache (the query's type) with head
        # sizes of whole k16 steps (kv::wgmmaUnfit), not for the others.
        wgmma = (target == "sm_90" and dtype == "bf16" and hk % 16 == 0 and
                 hv % 16 == 0 and hv <= 256)
        ws = wgmma and hv <= 128
        tokens, stages, size = planned_tile_bytes(hk, hv, elem, most, wgmma,
                                                  ws)
        if size > most:
            assert r.returncode != 0
            assert (f"a prefill CTA's K/V tile of 16 tokens takes {size} "
                    f"bytes of shared memory") in r.stderr, r.stderr
            assert f"more than the {most} a CTA of target '{target}'" \
                in r.stderr, r.stderr
            continue
        assert r.returncode == 0, r.stdout + r.stderr
        manifest = (out / "kvgen-manifest.txt").read_text()
        assert f"dynamic_smem_bytes = {size}\n" in manifest, manifest
        src = next(p for p in out.iterdir() if p.name != "kvgen-manifest.txt")
        assert (f"tile_tokens = {tokens}, tile_stages = {stages}, "
                f"dynamic_smem_bytes = {size};") in src.read_text()
        if target == "host":
            c = kvgen.Context("host", cache_dir=kernel_cache)
            try:
                c.load_bundle(str(out))
                name = manifest.split("name = ")[1].split("\n")[0]
                assert c.kernel_by_name(name).op == "paged_attention"
            finally:
                c.close()


@pytest.fixture(scope="module")
def ctx_wide_split(tmp_path_factory, kvgen_cli, kernel_cache):
    """mimo_nhd and a checked kernel planned with split_ctas = 264 (an
    H200's 2 x 132 SMs; the host plan's default is 8): a launch splits
    while it has fewer than 264 units, so launches of 2 to 200 units all
    use the split workspace, as on the GPU."""
    c, _ = host_context(tmp_path_factory, kernel_cache, "split-ctas=264",
                        names=("mimo_nhd", "block1_mha_checked"))
    yield c
    c.close()


def kernel_for(ctx, g, lse=False, prefill=False):
    opts = dict(io=g.io, num_q_heads=g.q_heads)
    for name, on in (("sinks", g.sinks), ("unchecked", not g.checked),
                     ("logits_soft_cap", g.soft_cap), ("lse", lse),
                     ("prefill", prefill)):
        if on:
            opts[name] = True
    return ctx.kernel("paged_attention", g.layout(), **opts)


class Case:
    """Sequences, their cache and the reference output."""

    def __init__(self, g, seq_lens, q_lens, rng, window=0, num_blocks=None,
                 spare_blocks=3, poison=True):
        self.g = g
        self.seq_lens = np.array(seq_lens, np.int32)
        self.q_lens = np.array(q_lens, np.int32)
        self.window = window
        bs = g.bs
        need = [max(1, -(-int(s) // bs)) for s in seq_lens]
        self.max_blocks = max(need) + 2  # padding columns in every row
        total = sum(need) + spare_blocks
        self.num_blocks = num_blocks or total
        # Block 0 is the poison block (NaN everywhere); the others are
        # handed out in random order.
        perm = rng.permutation(np.arange(1, self.num_blocks))
        if not poison:  # the highest blocks, in random order
            perm = rng.permutation(np.arange(self.num_blocks - sum(need),
                                             self.num_blocks))
        self.table = np.zeros((len(seq_lens), self.max_blocks + 1), np.int32)
        at = 0
        for s, n in enumerate(need):
            self.table[s, :n] = perm[at:at + n]
            at += n
            # Unused entries: the poison block, then out-of-range numbers.
            self.table[s, n:] = 0
            self.table[s, n + 1:] = 1 << 30
        self.table_view = self.table[:, :self.max_blocks]  # row stride > width
        self.qsl = np.concatenate([[0], np.cumsum(self.q_lens)]).astype(
            np.int32)
        self.num_tokens = int(self.qsl[-1])
        self._caches(rng, poison)
        qh, dk, dv = g.q_heads, g.dk, g.dv
        io = NP_TYPES[g.io]
        self.query = rng.standard_normal((self.num_tokens, qh, dk)).astype(
            np.float32).astype(io)
        self.sinks = (rng.standard_normal(qh) * 2).astype(np.float32)
        self.scale = np.float32(1.0 / math.sqrt(dk))
        self.cap = np.float32(3.0)
        # Output rows inside a canary-filled buffer: a token stride with
        # slack, a head stride with slack.
        self.canary = np.array(7.25, io)
        self.out_buf = np.full((self.num_tokens + 2, qh, dv + 8),
                               self.canary, io)
        self.output = self.out_buf[1:1 + self.num_tokens, :, 4:4 + dv]

    def _caches(self, rng, poison):
        g = self.g
        cdt = NP_TYPES[g.dtype]
        esize = np.dtype(cdt).itemsize
        (kst, kbase), (vst, vbase) = g.strides("k"), g.strides("v")
        self.dyn = (kst, vst)
        ext = {}
        for side, (st, base), d in (("k", (kst, kbase), g.dk),
                                    ("v", (vst, vbase), g.dv)):
            last = ((self.num_blocks - 1) * st[0] + (g.bs - 1) * st[1] +
                    (g.heads - 1) * st[2] + base + d)
            if isinstance(g, ChunkedGeo):  # its own tensor shapes
                last = g.extent(side, self.num_blocks)
            ext[side] = last
        packed = g.packing == "packed"
        n_k = max(ext["k"], ext["v"]) if packed else ext["k"]
        # Everything NaN (poison) first; valid rows are written below.
        nan = np.array(np.nan, np.float32).astype(cdt).view(STORAGE[esize])
        if poison:
            self.kc = np.full(n_k, nan, STORAGE[esize])
            self.vc = None if packed else np.full(ext["v"], nan,
                                                  STORAGE[esize])
        else:  # lazily mapped zero pages: only the written rows are touched
            self.kc = np.zeros(n_k, STORAGE[esize])
            self.vc = None if packed else np.zeros(ext["v"], STORAGE[esize])
        self.k_scale = self.v_scale = None
        if "f8" in g.dtype:
            n = g.heads if g.scale == "per_head" else 1
            self.k_scale = rng.uniform(0.02, 0.1, n).astype(np.float32)
            self.v_scale = rng.uniform(0.02, 0.1, n).astype(np.float32)
        # Per sequence: float K / V of its tokens (as the cache holds them).
        self.k_vals, self.v_vals = [], []
        for s, L in enumerate(self.seq_lens):
            kv = []
            for side, (st, base), d, buf in (
                    ("k", (kst, kbase), g.dk, self.kc),
                    ("v", (vst, vbase), g.dv,
                     self.kc if packed else self.vc)):
                if "f8" in g.dtype:
                    x = rng.standard_normal((L, g.heads, d)).astype(
                        np.float32) * 4
                    q = x.astype(cdt)  # RNE, finite for these magnitudes
                else:
                    q = rng.standard_normal((L, g.heads, d)).astype(
                        np.float32).astype(cdt)
                bits = q.view(STORAGE[esize])
                for t in range(L):
                    blk = int(self.table[s, t // g.bs])
                    off = t % g.bs
                    for h in range(g.heads):
                        if isinstance(g, ChunkedGeo):
                            buf[g.row_offsets(side, blk, off, h)] = bits[t, h]
                            continue
                        o = blk * st[0] + off * st[1] + h * st[2] + base
                        buf[o:o + d] = bits[t, h]
                f = q.astype(np.float64)
                if "f8" in g.dtype:
                    sc = (self.k_scale if side == "k" else self.v_scale)
                    f = f * (sc[:, None] if g.scale == "per_head"
                             else sc[0])[None].astype(np.float64)
                kv.append(f)
            self.k_vals.append(kv[0])
            self.v_vals.append(kv[1])

    def reference(self):
        return self.reference_with_lse()[0]

    def reference_with_lse(self):
        """(output, lse) in float64: lse[t, h] = ln(sum_j e^(x_j) +
        e^(sink_h)) over the row's attended keys (the sink term with
        sinks; -inf for a row with neither)."""
        g = self.g
        G = g.q_heads // g.heads
        out = np.zeros((self.num_tokens, g.q_heads, g.dv))
        lse = np.full((self.num_tokens, g.q_heads), -np.inf)
        q = self.query.astype(np.float64)
        for s in range(len(self.seq_lens)):
            L, n = int(self.seq_lens[s]), int(self.q_lens[s])
            for i in range(n):
                p = L - n + i
                lo = max(0, p - self.window + 1) if self.window else 0
                keys = np.arange(lo, p + 1) if p >= 0 else np.arange(0)
                for h in range(g.q_heads):
                    kvh = h // G
                    row = q[self.qsl[s] + i, h]
                    if len(keys):
                        lg = (self.k_vals[s][keys, kvh] @ row) * \
                            float(self.scale)
                        if g.soft_cap:
                            lg = float(self.cap) * np.tanh(lg / float(
                                self.cap))
                    else:
                        lg = np.zeros(0)
                    m = max([*lg, float(self.sinks[h])] if g.sinks
                            else [*lg, -np.inf])
                    if m == -np.inf:
                        continue  # no keys and no sink: zeros
                    w = np.exp(lg - m)
                    den = w.sum() + (np.exp(float(self.sinks[h]) - m)
                                     if g.sinks else 0.0)
                    lse[self.qsl[s] + i, h] = m + math.log(den)
                    if len(keys):
                        out[self.qsl[s] + i, h] = \
                            (w @ self.v_vals[s][keys, kvh]) / den
        return out, lse

    def run(self, k, **extra):
        kw = dict(softmax_scale=float(self.scale),
                  sliding_window=self.window)
        if self.g.soft_cap:
            kw["logits_soft_cap"] = float(self.cap)
        if self.g.sinks:
            kw["sinks"] = self.sinks
        if self.k_scale is not None:
            kw["k_scale"], kw["v_scale"] = self.k_scale, self.v_scale
        if self.g.dynamic:
            kw["cache_strides"] = self.dyn
        if self.g.checked:
            self.flag = np.zeros(1, np.int32)
            kw["error_flag"] = self.flag
        kw.update(extra)
        k.paged_attention(query=self.query, output=self.output,
                          key_cache=self.kc, value_cache=self.vc,
                          block_tables=self.table_view,
                          seq_lens=self.seq_lens,
                          query_start_loc=self.qsl,
                          num_blocks=self.num_blocks, **kw)

    def check(self):
        g = self.g
        got = self.output.astype(np.float64)
        want = self.reference()
        tol = 4e-3 if g.io == "f16" else 1e-2
        assert np.isfinite(got).all(), "NaN/inf in the output: a poisoned " \
            "row or block-table entry was read, or a 0/0"
        np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
        # Canaries around the output rows are intact.
        mask = np.ones(self.out_buf.shape, bool)
        mask[1:1 + self.num_tokens, :, 4:4 + g.dv] = False
        assert (self.out_buf[mask] == self.canary).all(), \
            "a write outside the output rows"
        if g.checked:
            assert self.flag[0] == 0


def seqs(rng, n, max_len, bs):
    """n context lengths: 0, 1, a multiple of bs and random ones."""
    base = [0, 1, bs, bs + 1, max_len]
    lens = [base[i] if i < len(base) else int(rng.integers(1, max_len + 1))
            for i in range(n)]
    return lens


CASES = {
    # name: (batch, max context, query lengths, window)
    "decode": (6, 100, 1, 0),
    "decode_split": (1, 300, 1, 0),
    "decode_window": (3, 200, 1, 37),
    "mtp3": (4, 90, 3, 0),
    "mtp3_split_window": (1, 400, 3, 64),
    "mixed_q": (5, 70, None, 0),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("geo", [n for n in GEOS if n != "over_4gib"])
def test_attention_matches_reference(ctx, geo, case):
    g = GEOS[geo]
    batch, max_len, qlen, window = CASES[case]
    rng = np.random.default_rng(abs(hash((geo, case))) % (1 << 32))
    lens = seqs(rng, batch, max_len, g.bs)
    if qlen is None:
        q_lens = [int(rng.integers(1, 5)) for _ in lens]
    else:
        q_lens = [qlen] * batch
    # A query needs its tokens in the context (seq_len counts them) except
    # the empty sequences, which must give zeros, not NaN.
    lens = [max(L, q) if L > 0 else 0 for L, q in zip(lens, q_lens)]
    c = Case(g, lens, q_lens, rng, window=window)
    k = kernel_for(ctx, g)
    c.run(k)
    c.check()


PREFILL_CASES = {
    # name: (batch, max context, query lengths, window)
    "prefill": (3, 150, "all", 0),
    "chunk": (2, 300, 70, 0),
    "chunk_window": (2, 300, 45, 29),
    "mixed_prefill": (6, 200, "mixed", 0),
}


def run_case(ctx, geo, batch, max_len, qlen, window, prefill=False,
             seed=None, geos=None):
    g = (GEOS if geos is None else geos)[geo]
    rng = np.random.default_rng(abs(hash((geo, seed))) % (1 << 32))
    lens = seqs(rng, batch, max_len, g.bs)
    if qlen == "all":  # whole sequences: prefill
        q_lens = [max(L, 1) for L in lens]
    elif qlen == "mixed":  # a chunk, verifications, decodes in one launch
        q_lens = [[40, 3, 1, 1, 8, 1][i % 6] for i in range(batch)]
    elif qlen is None:
        q_lens = [int(rng.integers(1, 5)) for _ in lens]
    else:
        q_lens = [qlen] * batch
    lens = [max(L, q) if L > 0 else 0 for L, q in zip(lens, q_lens)]
    c = Case(g, lens, q_lens, rng, window=window)
    c.run(kernel_for(ctx, g, prefill=prefill))
    c.check()


@pytest.mark.parametrize("case", list(CASES) + list(PREFILL_CASES))
@pytest.mark.parametrize("geo", [n for n in GEOS if n != "over_4gib"])
def test_prefill_path_matches_reference(ctx_prefill, geo, case):
    """The prefill plan's kernel body (attentionTileCta: 16 rows per warp,
    K/V tiles in shared memory, no split) against the reference: decodes,
    verifications, whole-sequence prefills, chunks at a longer context,
    windows, and a launch mixing them."""
    spec = CASES.get(case) or PREFILL_CASES[case]
    run_case(ctx_prefill, geo, *spec, prefill=True, seed=case)


#: GEOS whose prefill plan can take wgmma (16-bit caches of the query's
#: type, head sizes multiples of 16): kv-plan's wgmma=1 plans them so on
#: the host, whose prelude does each warpgroup MMA as m16n8k16 MMAs with
#: B read through the same core-matrix layout and strides as sm_90a's
#: descriptors (attention_mma.h wgmmaRun).
WGMMA_GEOS = [n for n, g in GEOS.items()
              if g.dtype in ("bf16", "f16") and g.dtype == g.io and
              g.dk % 16 == 0 and g.dv % 16 == 0]


@pytest.fixture(scope="module")
def ctx_prefill_wgmma(tmp_path_factory, kvgen_cli, kernel_cache):
    c, bundle = host_context(tmp_path_factory, kernel_cache, "wgmma=1",
                             names=WGMMA_GEOS, prefill=True)
    sources = [f for f in bundle.iterdir() if f.suffix == ".cpp"]
    assert len(sources) == len(WGMMA_GEOS) >= 8
    for f in sources:
        assert "static constexpr bool wgmma = true;" in f.read_text(), f
    yield c
    c.close()


@pytest.mark.parametrize("case", list(CASES) + list(PREFILL_CASES))
@pytest.mark.parametrize("geo", [n for n in WGMMA_GEOS if n != "over_4gib"])
def test_prefill_wgmma_path_matches_reference(ctx_prefill_wgmma, geo, case):
    """The prefill plan with wgmma (attnWgmmaStep over CoreMatrixOrder
    tiles: one warpgroup's 64 rows per product) against the reference on
    the same cases as test_prefill_path_matches_reference."""
    spec = CASES.get(case) or PREFILL_CASES[case]
    run_case(ctx_prefill_wgmma, geo, *spec, prefill=True, seed=case)


def test_prefill_wgmma_cache_over_4gib(ctx_prefill_wgmma):
    """test_prefill_cache_over_4gib_uses_64bit_offsets on the wgmma plan."""
    test_prefill_cache_over_4gib_uses_64bit_offsets(ctx_prefill_wgmma)


def test_prefill_wgmma_checked_flags_bad_block_numbers(ctx_prefill_wgmma):
    """test_prefill_checked_flags_bad_block_numbers on the wgmma plan."""
    test_prefill_checked_flags_bad_block_numbers(ctx_prefill_wgmma)


#: Warp specialization (kv-plan producer-warps=4 with wgmma=1 threads=384):
#: the last warpgroup only stages the tiles, signalling each tile's arrival
#: and waiting for its release through tile barriers (mbarriers; on the
#: host, fibers that yield until the phase completes), the first two only
#: compute (128 rows per CTA) in the pipelined wgmma loop, issuing their
#: products in turns (named barriers; on the host, fibers too), over 4
#: tile stages.
WS_OPTIONS = "wgmma=1 threads=384 producer-warps=4"


@pytest.fixture(scope="module")
def ctx_prefill_ws(tmp_path_factory, kvgen_cli, kernel_cache):
    c, bundle = host_context(tmp_path_factory, kernel_cache, WS_OPTIONS,
                             names=WGMMA_GEOS, prefill=True)
    sources = [f for f in bundle.iterdir() if f.suffix == ".cpp"]
    assert len(sources) == len(WGMMA_GEOS) >= 8
    for f in sources:
        text = f.read_text()
        assert "static constexpr int producer_warps = 4;" in text and \
            "static constexpr int rows_per_cta = 128," in text and \
            "tile_stages = 4," in text, f
    yield c
    c.close()


@pytest.mark.parametrize("case", list(CASES) + list(PREFILL_CASES))
@pytest.mark.parametrize("geo", [n for n in WGMMA_GEOS if n != "over_4gib"])
def test_prefill_ws_path_matches_reference(ctx_prefill_ws, geo, case):
    """The warp-specialized prefill plan (producer warps, tile barriers)
    against the reference on the cases of
    test_prefill_path_matches_reference."""
    spec = CASES.get(case) or PREFILL_CASES[case]
    run_case(ctx_prefill_ws, geo, *spec, prefill=True, seed=case)


def test_prefill_ws_cache_over_4gib(ctx_prefill_ws):
    """test_prefill_cache_over_4gib_uses_64bit_offsets on the
    warp-specialized plan."""
    test_prefill_cache_over_4gib_uses_64bit_offsets(ctx_prefill_ws)


def test_prefill_ws_checked_flags_bad_block_numbers(ctx_prefill_ws):
    """test_prefill_checked_flags_bad_block_numbers on the warp-specialized
    plan."""
    test_prefill_checked_flags_bad_block_numbers(ctx_prefill_ws)


#: kv-plan's tile-stages: K/V tile buffers other than the planned two (the
#: kernel loads tile_stages - 1 tiles ahead, committing empty groups past
#: the last tile), on the mma.sync body (3, 4) and the wgmma body (1, 3, 4);
#: tile-tokens: tiles of 128 tokens (both bodies) and of 32 and 96 (the
#: pipelined wgmma loop).
#: The contexts of one module load kernels of the same names with other
#: plans side by side: before the host prelude's symbols were hidden
#: (Emit.cpp preludeFor), the second library used the first one's
#: shared-memory buffer (a GNU unique symbol), sized for two stages, and
#: the process died of heap corruption.
STAGES_GEOS = ["mimo_nhd", "mimo_hnd_sinks_window", "block256"]


@pytest.fixture(scope="module", params=["tile-stages=3", "tile-stages=4",
                                        "tile-stages=1 wgmma=1",
                                        "tile-stages=3 wgmma=1",
                                        "tile-stages=4 wgmma=1",
                                        "tile-stages=2 tile-tokens=128",
                                        "tile-stages=2 tile-tokens=128 "
                                        "wgmma=1",
                                        "tile-stages=3 tile-tokens=32 "
                                        "wgmma=1",
                                        "tile-stages=3 tile-tokens=96 "
                                        "wgmma=1"])
def ctx_prefill_stages(request, tmp_path_factory, kvgen_cli, kernel_cache):
    c, bundle = host_context(tmp_path_factory, kernel_cache, request.param,
                             names=STAGES_GEOS, prefill=True)
    opts = dict(o.split("=") for o in request.param.split())
    sources = [f for f in bundle.iterdir() if f.suffix == ".cpp"]
    assert len(sources) == len(STAGES_GEOS)
    for f in sources:
        text = f.read_text()
        assert f"tile_stages = {opts['tile-stages']}," in text, f
        if "tile-tokens" in opts:
            assert f"tile_tokens = {opts['tile-tokens']}," in text, f
    yield c
    c.close()


@pytest.mark.parametrize("case", ["prefill", "chunk_window", "mixed_prefill"])
@pytest.mark.parametrize("geo", STAGES_GEOS)
def test_prefill_tile_stages(ctx_prefill_stages, geo, case):
    """The prefill plan with 1, 3 or 4 tile buffers against the reference
    (the buffer of tile k is k % tile_stages; a wrong prefetch distance or
    buffer reads another tile's keys)."""
    run_case(ctx_prefill_stages, geo, *PREFILL_CASES[case], prefill=True,
             seed=case)


#: wgmma-fit geometries whose cache rows are only 8-byte aligned (static
#: token strides of 68 and 132 elements): kv-plan proves that alignment
#: (vector_bytes = 8) and still plans wgmma with wgmma=1, so the
#: core-matrix staging (CoreMatrixOrder) must copy 8 bytes at a time.
WGMMA_ROWS8_GEOS = {
    "wgmma_rows8": Geo(1, 64, 64, 16, 2, k_strides=(16 * 68, 68, 68),
                       v_strides=(16 * 68, 68, 68)),
    "wgmma_rows8_k48_v80_checked": Geo(
        2, 48, 80, 16, 6, sinks=True, checked=True,
        k_strides=(2 * 16 * 132, 132, 16 * 132),
        v_strides=(2 * 16 * 132, 132, 16 * 132)),
}


#: Also in tiles of 96 tokens: 12 token groups, which the 32 thread groups
#: of 256 threads do not divide (CoreMatrixOrder's partial round; before it
#: a static_assert refused the kernel, first seen on an H100); and of 80
#: tokens with 128 threads (10 token groups, 16 thread groups: one each,
#: 6 idle).
@pytest.fixture(scope="module",
                params=["wgmma=1", "wgmma=1 tile-tokens=96 tile-stages=3",
                        "wgmma=1 threads=128 tile-tokens=80 tile-stages=3"])
def ctx_prefill_wgmma_rows8(request, tmp_path_factory, kvgen_cli,
                            kernel_cache):
    c, bundle = host_context(tmp_path_factory, kernel_cache, request.param,
                             prefill=True, geos=WGMMA_ROWS8_GEOS)
    sources = [f for f in bundle.iterdir() if f.suffix == ".cpp"]
    assert len(sources) == len(WGMMA_ROWS8_GEOS)
    for f in sources:
        text = f.read_text()
        assert "vector_bytes = 8," in text and \
            "static constexpr bool wgmma = true;" in text, f
        if "tile-tokens" in request.param:
            tokens = request.param.split("tile-tokens=")[1].split()[0]
            assert f"tile_tokens = {tokens}," in text, f
    yield c
    c.close()


@pytest.mark.parametrize("case", ["prefill", "chunk_window", "mixed_prefill"])
@pytest.mark.parametrize("geo", list(WGMMA_ROWS8_GEOS))
def test_prefill_wgmma_rows_8byte_aligned(ctx_prefill_wgmma_rows8, geo,
                                          case):
    """The wgmma plan over cache rows 8-byte aligned (vector_bytes 8):
    before the fix CoreMatrixOrder staged every row in 16-byte copies
    whatever the plan's alignment (a misaligned 16-byte load: the host
    process died of SIGSEGV; on the GPU a misaligned cp.async)."""
    run_case(ctx_prefill_wgmma_rows8, geo, *PREFILL_CASES[case],
             prefill=True, seed=case, geos=WGMMA_ROWS8_GEOS)


@pytest.mark.parametrize("case", list(PREFILL_CASES))
@pytest.mark.parametrize("geo", ["mimo_nhd", "block1_mha_checked"])
def test_decode_path_serves_prefill_cases(ctx, geo, case):
    """The same long-query cases through the decode plan's body."""
    run_case(ctx, geo, *PREFILL_CASES[case], seed=case)


#: Prefill-only geometries (checked kernels): V widths of an odd number of
#: 8-column n-tiles (HV % 16 == 8: the decode path's P V step, not
#: attnWideStep), K not a multiple of 16, GQA 3 (a warp's and a CTA's rows
#: straddle query tokens, so their windows differ within a warp).
PREFILL_GEOS = {
    "v24_k40": Geo(2, 40, 24, 16, 4, checked=True),
    "v40_k48_b8": Geo(1, 48, 40, 8, 2, checked=True),
    "group3_hnd_sinks": Geo(2, 64, 64, 16, 6, order="hnd", sinks=True,
                            checked=True),
}


@pytest.fixture(scope="module")
def ctx_prefill_geos(tmp_path_factory, kvgen_cli, kernel_cache):
    c, _ = host_context(tmp_path_factory, kernel_cache, prefill=True,
                        geos=PREFILL_GEOS)
    yield c
    c.close()


@pytest.mark.parametrize("case", ["mtp3", "prefill", "chunk_window"])
@pytest.mark.parametrize("geo", list(PREFILL_GEOS))
def test_prefill_odd_geometries(ctx_prefill_geos, geo, case):
    """The prefill body over PREFILL_GEOS. Before the fix a V width of an
    odd number of n-tiles (24, 40) did not compile: attnWideStep (which
    needs n-tile pairs) was instantiated for it though never called."""
    g = PREFILL_GEOS[geo]
    spec = CASES.get(case) or PREFILL_CASES[case]
    batch, max_len, qlen, window = spec
    rng = np.random.default_rng(abs(hash((geo, case))) % (1 << 32))
    lens = seqs(rng, batch, max_len, g.bs)
    q_lens = [max(L, 1) for L in lens] if qlen == "all" else [qlen] * batch
    lens = [max(L, q) if L > 0 else 0 for L, q in zip(lens, q_lens)]
    c = Case(g, lens, q_lens, rng, window=window)
    c.run(kernel_for(ctx_prefill_geos, g, prefill=True))
    c.check()


#: Chunked layouts (ChunkedGeo): vLLM's legacy caches and ROCm aiter's.
CHUNKED_GEOS = {
    "legacy_mimo": ChunkedGeo(2, 192, 128, 16, 8, "legacy"),
    "legacy_f16_b32_checked": ChunkedGeo(1, 64, 64, 32, 2, "legacy",
                                         dtype="f16", io="f16",
                                         checked=True),
    "aiter_bf16_sinks": ChunkedGeo(2, 64, 128, 16, 4, "aiter", sinks=True),
    "aiter_fp8_head": ChunkedGeo(2, 128, 64, 32, 4, "aiter",
                                 dtype="f8E4M3FN", scale="per_head"),
}


class ElemStrideGeo(ChunkedGeo):
    """NHD K; V element-major, its elements `elem` apart ([D, pool] with
    the pool's (block, token, head) inside: v_elem_stride = elem, the
    block stride the span of a block's elements)."""

    def __init__(self, heads, dk, dv, bs, q_heads, elem, **kw):
        super().__init__(heads, dk, dv, bs, q_heads, "elem_stride", **kw)
        self.elem = elem
        self.v_block = (dv - 1) * elem + bs * heads

    def layout(self):
        H, bs, dk, dv = self.heads, self.bs, self.dk, self.dv
        return kvgen.Layout.parse(
            f"num_kv_heads = {H}, head_size_k = {dk}, head_size_v = {dv}, "
            f"block_size = {bs}, dtype = {self.dtype}, scale = {self.scale}, "
            f"k_strides = [{bs * H * dk}, {H * dk}, {dk}], "
            f"v_strides = [{self.v_block}, {H}, 1], "
            f"v_elem_stride = {self.elem}")

    def extent(self, side, num_blocks):
        if side == "k":
            return num_blocks * self.bs * self.heads * self.dk
        return num_blocks * self.v_block

    def row_offsets(self, side, blk, off, h):
        H, bs = self.heads, self.bs
        if side == "k":
            return ((blk * bs + off) * H + h) * self.dk + np.arange(self.dk)
        return (blk * self.v_block + off * H + h +
                np.arange(self.dv) * self.elem)


def test_prefill_elem_stride_beyond_copy_offsets(kvgen_cli, tmp_path_factory,
                                                 kernel_cache):
    """A V side whose elements are 2^18 apart (a legal element stride, up
    to kMaxStride): the prefill tile's copies of one V row are up to 2^24
    bytes apart, past the immediate offsets stageCopies gives them. Before
    the fix the prefill kernel did not compile (a static_assert, "offsets
    within a row"); now those copies compute their addresses and the
    output matches the reference."""
    geos = {"v_elem_2p18": ElemStrideGeo(1, 64, 64, 16, 2, 1 << 18)}
    c, _ = host_context(tmp_path_factory, kernel_cache, prefill=True,
                        geos=geos)
    try:
        g = geos["v_elem_2p18"]
        k = kernel_for(c, g, prefill=True)
        for lens, q_lens, window in (([70, 33], [70, 20], 0),
                                     ([90], [40], 17)):
            case = Case(g, lens, q_lens, np.random.default_rng(len(lens)),
                        window=window, poison=False)
            case.run(k)
            case.check()
    finally:
        c.close()


@pytest.fixture(scope="module", params=[False, True], ids=["decode",
                                                          "prefill"])
def ctx_chunked(request, tmp_path_factory, kvgen_cli, kernel_cache):
    c, _ = host_context(tmp_path_factory, kernel_cache,
                        prefill=request.param, geos=CHUNKED_GEOS)
    yield c, request.param
    c.close()


@pytest.mark.parametrize("case", ["decode", "mtp3_split_window", "mixed_q",
                                  "prefill", "chunk_window"])
@pytest.mark.parametrize("geo", list(CHUNKED_GEOS))
def test_chunked_layouts_match_reference(ctx_chunked, geo, case):
    """Both plans (decode, prefill) read K and V through the layout's
    chunk terms: element by element where a run is not adjacent (legacy
    V's element stride bs, aiter V's x), vectors within K's chunks."""
    c, prefill = ctx_chunked
    spec = CASES.get(case) or PREFILL_CASES[case]
    run_case(c, geo, *spec, prefill=prefill, seed=case, geos=CHUNKED_GEOS)


@pytest.mark.parametrize("geo", list(PREFILL_GEOS))
def test_prefill_checked_hostile_tables(ctx_prefill_geos, geo):
    """The prefill body's checked kernels on an engine's bad inputs: a bad
    block id (negative, num_blocks) inside a sequence's attended keys sets
    the error flag, writes nothing outside the output and leaves the other
    sequence right; bad ids in the blocks before every row's window are
    never read (no flag, right output); a seq_len past the block table
    sets the flag; a seq_len shorter than the query gives its rows before
    the context zeros (or the sink), as the reference does."""
    g = PREFILL_GEOS[geo]
    k = kernel_for(ctx_prefill_geos, g, prefill=True)

    def outside_ok(c):
        mask = np.ones(c.out_buf.shape, bool)
        mask[1:1 + c.num_tokens, :, 4:4 + g.dv] = False
        assert (c.out_buf[mask] == c.canary).all(), \
            "a write outside the output rows"

    for bad in (-1, "num_blocks"):
        c = Case(g, [130, 90], [130, 20], np.random.default_rng(30))
        c.table[0, 1] = c.num_blocks if bad == "num_blocks" else bad
        c.run(k)
        assert c.flag[0] == 1, bad
        got = c.output.astype(np.float64)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got[130:], c.reference()[130:],
                                   atol=1e-2, rtol=1e-2)
        outside_ok(c)
    # Window 7 over the last 20 of 300 tokens: keys from 274 on.
    c = Case(g, [300, 90], [20, 20], np.random.default_rng(31), window=7)
    c.table[0, :274 // g.bs] = -5
    c.table[0, 274 // g.bs - 1] = 1 << 30
    c.run(k)
    c.check()
    c = Case(g, [100, 50], [100, 10], np.random.default_rng(32))
    c.seq_lens[0] = c.max_blocks * g.bs + 5
    c.run(k)
    assert c.flag[0] == 1
    outside_ok(c)
    c = Case(g, [5, 40], [20, 64], np.random.default_rng(33), window=3)
    c.run(k)
    c.check()


@pytest.mark.parametrize("case", ["decode", "decode_split",
                                  "mtp3_split_window", "mixed_q"])
@pytest.mark.parametrize("geo", [n for n in GEOS if n != "over_4gib"])
def test_attention_mfma_path_matches_reference(ctx_mfma, geo, case):
    """The MFMA plan's kernel body (simulated MFMA, host) against the same
    reference: odd numbers of 16-token steps per wavefront (the second warp's
    masked extra step), splits, windows, multi-token queries."""
    test_attention_matches_reference(ctx_mfma, geo, case)


def test_split_is_used_and_counters_reset(ctx):
    """A batch-1 decode of 300 tokens splits on the host plan (split_ctas
    8): the kernel's workspace counters are zero after each launch, and a
    second launch with the same workspace gives the same output."""
    g = GEOS["mimo_nhd"]
    rng = np.random.default_rng(1)
    c = Case(g, [300], [1], rng)
    k = kernel_for(ctx, g)
    ws = np.zeros(1 << 20, np.uint8)
    c.run(k, workspace=ws)
    c.check()
    first = c.output.copy()
    # Counters: the first units x 4 bytes (here 2 units).
    assert (ws[:256] == 0).all()
    assert ws[256:].any(), "no partials were written: not a split launch"
    c.output[...] = 0
    c.run(k, workspace=ws)
    np.testing.assert_array_equal(c.output, first)


def _random_shape(rng, g):
    """A batch as an engine's step has it: 1..40 sequences, decode, a
    verification of 2-3 tokens or a mix, contexts up to 600, sometimes a
    window."""
    batch = int(rng.choice([1, 1, 2, 3, 8, 17, 40]))
    kind = rng.choice(["decode", "verify", "mixed"])
    if kind == "decode":
        q = [1] * batch
    elif kind == "verify":
        q = [int(rng.integers(2, 4))] * batch
    else:
        q = [int(rng.integers(1, 4)) for _ in range(batch)]
    lens = [int(rng.integers(n, 601)) for n in q]
    window = int(rng.choice([0, 0, 0, 37]))
    return lens, q, window


def test_one_workspace_serves_a_random_sequence_of_shapes(ctx_wide_split):
    """Issue 26, row 0: one kernel and one workspace (zeroed once, as an
    engine keeps it) through a random sequence of launch shapes, every
    launch against the reference. Before the fix the counters' end, and so
    the partials' start, moved with the launch's unit count: a launch of
    few units left partials where a later launch of more units expected
    zeroed counters (wrong rows). The sequence starts with the issue's
    order (query length 3 at batch 1, decode at batch 8, query length 3 at
    batch 8) and goes on at random."""
    g = GEOS["mimo_nhd"]
    k = kernel_for(ctx_wide_split, g)
    most = k.max_workspace_bytes
    assert most > 0
    ws = np.zeros(most, np.uint8)
    counters = (264 * 4 + 255) // 256 * 256
    rng = np.random.default_rng(26)
    shapes = [([600], [3], 0), ([600] * 8, [1] * 8, 0),
              ([600] * 8, [3] * 8, 0), ([500] * 40, [1] * 40, 0),
              ([300], [1], 0), ([590] * 40, [2] * 40, 0)]
    shapes += [_random_shape(rng, g) for _ in range(14)]
    split_launches = 0
    for lens, q, window in shapes:
        c = Case(g, lens, q, rng, window=window)
        need = ctypes_workspace_bytes(k, c)
        assert need <= most, (lens, q, need, most)
        split_launches += need > 0
        c.run(k, workspace=ws)
        c.check()
        assert not ws[:counters].any(), "counters left non-zero"
    assert split_launches >= 10, split_launches


def test_binding_workspace_is_not_shared_by_concurrent_launches(ctx):
    """Issue 26 review, F4: without workspace=, the binding keeps the split
    workspace of a launch; two Python threads launching one kernel at the
    same time on the host backend (each its own arrays, batch 1, context
    600, decode: a split launch) shared one, and their counters and
    partials mixed (44 of 80 outputs wrong). The binding keeps one per
    (stream, calling thread) on the host backend: every output matches the
    reference, and prepare() hands the two threads different workspaces
    (one thread the same one each time)."""
    import threading
    g = GEOS["mimo_nhd"]
    k = kernel_for(ctx, g)
    cases = [Case(g, [600], [1], np.random.default_rng(40 + i))
             for i in range(2)]
    wants = [c.reference() for c in cases]
    ws_name = next(a.name for a in k._op.args if a.role == "workspace")
    start = threading.Barrier(2)
    wrong, failed, pointers = [], [], [set(), set()]

    def worker(i):
        c = cases[i]
        try:
            start.wait()
            for r in range(20):
                c.output[...] = 0
                c.run(k)
                got = c.output.astype(np.float64)
                if not (np.isfinite(got).all() and np.allclose(
                        got, wants[i], atol=1e-2, rtol=1e-2)):
                    wrong.append((i, r))
            for _ in range(2):
                args, _stream = k.prepare(
                    query=c.query, output=c.output, key_cache=c.kc,
                    value_cache=c.vc, block_tables=c.table_view,
                    seq_lens=c.seq_lens, query_start_loc=c.qsl,
                    num_blocks=c.num_blocks,
                    softmax_scale=float(c.scale))
                pointers[i].add(getattr(args, ws_name))
        except BaseException as e:  # reported below, not lost in a thread
            failed.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    assert not wrong, f"{len(wrong)} of 40 outputs wrong: {wrong[:5]}"
    assert len(pointers[0]) == 1 and len(pointers[1]) == 1, pointers
    assert pointers[0] != pointers[1], "both threads got one workspace"
    for c in cases:
        c.check()


def ctypes_workspace_bytes(k, c):
    """kvgen_kernel_workspace_bytes for Case c's launch."""
    import ctypes
    S = k._op.args_struct
    a = S(num_seqs=len(c.seq_lens), num_tokens=c.num_tokens,
          max_query_len=max(1, int(c.q_lens.max())),
          max_seq_len=int(c.seq_lens.max()), sliding_window=c.window)
    n = ctypes.c_uint64()
    r = k._lib.kvgen_kernel_workspace_bytes(k._handle, ctypes.byref(a),
                                            ctypes.sizeof(a), ctypes.byref(n))
    assert r == 0
    return int(n.value)


def test_workspace_too_small_is_refused(ctx):
    g = GEOS["mimo_nhd"]
    rng = np.random.default_rng(2)
    c = Case(g, [300], [1], rng)
    k = kernel_for(ctx, g)
    with pytest.raises(kvgen.KvgenError) as e:
        c.run(k, workspace=np.zeros(64, np.uint8))
    assert e.value.status_name == "KVGEN_ERROR_OUT_OF_BOUNDS"
    assert "workspace" in e.value.message


def test_sinks_are_required(ctx):
    g = GEOS["mimo_hnd_sinks_window"]
    rng = np.random.default_rng(3)
    c = Case(g, [20], [1], rng)
    k = kernel_for(ctx, g)
    with pytest.raises(ValueError, match="sinks"):
        c.run(k, sinks=None)


def test_checked_flags_bad_block_numbers(ctx):
    g = GEOS["block1_mha_checked"]
    rng = np.random.default_rng(4)
    c = Case(g, [5, 3], [1, 1], rng)
    c.table[1, 0] = c.num_blocks + 5  # a block past the cache
    k = kernel_for(ctx, g)
    c.run(k)
    assert c.flag[0] == 1
    # The other sequence is unaffected.
    want = c.reference()
    np.testing.assert_allclose(c.output[0].astype(np.float64), want[0],
                               atol=1e-2, rtol=1e-2)


def test_checked_flags_name_the_query_error(ctx):
    """A query longer than max_query_len sets ERROR_BIT_QUERY_LEN, one
    ending past num_tokens ERROR_BIT_QUERY_RANGE, a bad block id
    ERROR_BIT_INDEX (kvgen.h's kvgen_error_bit; every cause was 1, so
    kvgen_context_check named a slot or block id for a short
    max_query_len): the bits are or-ed, so the flag keeps each cause of
    one launch."""
    g = GEOS["block1_mha_checked"]
    k = kernel_for(ctx, g)
    c = Case(g, [5, 3], [3, 1], np.random.default_rng(6))
    c.run(k, max_query_len=1)
    assert c.flag[0] == kvgen.ERROR_BIT_QUERY_LEN
    c = Case(g, [5, 3], [1, 1], np.random.default_rng(6))
    c.qsl[-1] = c.num_tokens + 1  # the last query ends past the tokens
    c.table[0, 0] = c.num_blocks + 5
    c.run(k)
    assert c.flag[0] == kvgen.ERROR_BIT_QUERY_RANGE | kvgen.ERROR_BIT_INDEX


def test_cache_over_4gib_uses_64bit_offsets(ctx):
    """A K/V block stride that puts the used blocks past 4 GiB: the
    buffers are lazily-zeroed pages, only the used rows are written."""
    g = GEOS["over_4gib"]
    blk = g.k_strides[0]
    rng = np.random.default_rng(5)
    num_blocks = 600  # 600 x 8 MiB = 4.7 GiB per cache
    try:
        c = Case(g, [40, 17], [1, 2], rng, num_blocks=num_blocks,
                 poison=False)
    except MemoryError:
        pytest.skip("cannot reserve 2 x 4.7 GiB of (lazily mapped) memory")
    assert c.kc.nbytes > (1 << 32)
    # Every used block starts past 4 GiB.
    assert int(c.table[:, 0].min()) * blk * 2 > (1 << 32)
    c.run(kernel_for(ctx, g))
    c.check()


def test_prefill_checked_flags_bad_block_numbers(ctx_prefill):
    """The prefill plan stages K/V through the block table: a bad entry in
    the attended range sets the error flag and its rows are staged as
    zeros (nothing read outside the cache); the other sequence, in other
    CTAs, is unaffected."""
    g = GEOS["block1_mha_checked"]
    rng = np.random.default_rng(4)
    c = Case(g, [45, 40], [45, 20], rng)
    c.table[1, 30] = c.num_blocks + 5  # past the cache, attended
    c.table[1, 31] = -3                # negative, attended
    c.run(kernel_for(ctx_prefill, g, prefill=True))
    assert c.flag[0] == 1
    want = c.reference()
    np.testing.assert_allclose(c.output[:45].astype(np.float64), want[:45],
                               atol=1e-2, rtol=1e-2)


def test_prefill_cache_over_4gib_uses_64bit_offsets(ctx_prefill):
    """test_cache_over_4gib_uses_64bit_offsets through the prefill plan: a
    40-token prefill and a 2-token query, every used block past 4 GiB."""
    g = GEOS["over_4gib"]
    blk = g.k_strides[0]
    rng = np.random.default_rng(5)
    try:
        c = Case(g, [40, 17], [40, 2], rng, num_blocks=600, poison=False)
    except MemoryError:
        pytest.skip("cannot reserve 2 x 4.7 GiB of (lazily mapped) memory")
    assert c.kc.nbytes > (1 << 32)
    assert int(c.table[:, 0].min()) * blk * 2 > (1 << 32)
    c.run(kernel_for(ctx_prefill, g, prefill=True))
    c.check()


def _raw_args(c, g):
    """The fields of a raw paged_attention argument struct for Case c (two
    decode sequences of 20 and 5 tokens), filled by hand as a C caller
    would."""
    return dict(query=c.query.ctypes.data, output=c.output.ctypes.data,
                key_cache=c.kc.ctypes.data, value_cache=c.vc.ctypes.data,
                block_tables=c.table.ctypes.data,
                seq_lens=c.seq_lens.ctypes.data,
                query_start_loc=c.qsl.ctypes.data,
                sinks=c.sinks.ctypes.data, num_seqs=2, num_tokens=2,
                max_query_len=1, max_seq_len=20, num_blocks=c.num_blocks,
                max_blocks_per_seq=c.max_blocks,
                block_tables_stride=c.table.shape[1],
                query_stride_token=g.q_heads * g.dk, query_stride_head=g.dk,
                output_stride_token=c.output.strides[0] // 2,
                output_stride_head=c.output.strides[1] // 2,
                softmax_scale=float(c.scale), key_cache_bytes=c.kc.nbytes,
                value_cache_bytes=c.vc.nbytes)


def test_runtime_checks_by_role(ctx):
    """The runtime's role-driven checks on a raw argument struct: a NULL
    sinks pointer (need OPTION), a max_query_len of 0 (WORK_ROWS), a
    misaligned block table (BLOCK_TABLES: 4 bytes)."""
    g = GEOS["mimo_hnd_sinks_window"]
    rng = np.random.default_rng(6)
    c = Case(g, [20, 5], [1, 1], rng)
    k = kernel_for(ctx, g)
    good = _raw_args(c, g)
    S = k._op.args_struct
    k.launch_raw(S(**good))
    want = c.reference()
    np.testing.assert_allclose(c.output.astype(np.float64), want, atol=1e-2,
                               rtol=1e-2)
    for bad, status, words in (
            (dict(sinks=0), "KVGEN_ERROR_INVALID_ARGUMENT", "'sinks' is NULL"),
            (dict(max_query_len=0), "KVGEN_ERROR_INVALID_ARGUMENT",
             "max_query_len = 0 must be >= 1"),
            (dict(block_tables=c.table.ctypes.data + 2),
             "KVGEN_ERROR_MISALIGNED", "'block_tables'"),
            (dict(num_tokens=-1), "KVGEN_ERROR_INVALID_ARGUMENT",
             "num_tokens = -1")):
        with pytest.raises(kvgen.KvgenError) as e:
            k.launch_raw(S(**{**good, **bad}))
        assert e.value.status_name == status
        assert words in e.value.message, e.value.message


def test_launch_rule_inputs_are_bounded(ctx):
    """Issue 26, row 1: max_query_len had no upper bound, and the launch
    rule's products wrapped near 2^63 (SIGFPE in the kernel, or success
    with no output row written); query_start_loc = [0, 1, 2^31 - 1] made
    the binding derive ~1e9 CTAs and the host backend ran on and on. Each
    is refused before anything runs, the output canaries untouched, and
    the workspace query refuses the same inputs."""
    import ctypes
    g = GEOS["mimo_hnd_sinks_window"]
    rng = np.random.default_rng(7)
    c = Case(g, [20, 5], [1, 1], rng)
    k = kernel_for(ctx, g)
    good = _raw_args(c, g)
    S = k._op.args_struct
    before = c.out_buf.copy()
    for bad, words in (
            (dict(max_query_len=3), "max_query_len = 3 exceeds num_tokens = 2"),
            (dict(max_query_len=(1 << 63) - 1), "exceeds num_tokens"),
            (dict(max_query_len=1 << 62, num_tokens=1 << 62),
             "needs more than 2147483647 CTAs"),
            (dict(max_query_len=(1 << 62) + 5, num_tokens=(1 << 63) - 1),
             "needs more than 2147483647 CTAs"),
            (dict(num_seqs=(1 << 63) - 1), "num_seqs = 9223372036854775807"),
            (dict(num_seqs=1 << 31), "needs more than 2147483647 CTAs"),
            (dict(sliding_window=(1 << 63) - 1, max_seq_len=(1 << 63) - 1,
                  max_query_len=2), None)):
        args = S(**{**good, **bad})
        if words is None:  # in range: the window cap must not overflow
            n = ctypes.c_uint64()
            assert k._lib.kvgen_kernel_workspace_bytes(
                k._handle, ctypes.byref(args), ctypes.sizeof(args),
                ctypes.byref(n)) == 0
            continue
        with pytest.raises(kvgen.KvgenError) as e:
            k.launch_raw(args)
        assert e.value.status_name == "KVGEN_ERROR_INVALID_ARGUMENT"
        assert words in e.value.message, e.value.message
        n = ctypes.c_uint64()
        assert k._lib.kvgen_kernel_workspace_bytes(
            k._handle, ctypes.byref(args), ctypes.sizeof(args),
            ctypes.byref(n)) != 0, bad
    np.testing.assert_array_equal(c.out_buf.view(np.uint16),
                                  before.view(np.uint16))
    # The binding derives max_query_len from query_start_loc: a last entry
    # of 2^31 - 1 over 2 query rows is refused, not launched.
    c.qsl = np.array([0, 1, (1 << 31) - 1], np.int32)
    with pytest.raises(kvgen.KvgenError) as e:
        c.run(k)
    assert "exceeds num_tokens = 2" in e.value.message, e.value.message
    np.testing.assert_array_equal(c.out_buf.view(np.uint16),
                                  before.view(np.uint16))


def test_pointer_arguments_hold_what_the_kernel_touches(ctx):
    """Issue 26, rows 3 and 4, for attention's own pointer roles: sinks
    (num_q_heads consecutive float32), the error flag (one int32) and a
    caller's workspace (a raw buffer: contiguous) are checked where the
    binding turns arrays into pointers: ValueError naming the argument,
    nothing written (output canaries, the workspace's parent)."""
    g = GEOS["mimo_hnd_sinks_window"]
    rng = np.random.default_rng(7)
    c = Case(g, [300], [1], rng)  # splits on the host plan: a workspace
    k = kernel_for(ctx, g)
    out0 = c.out_buf.copy()
    strided = np.repeat(c.sinks, 2)[::2]  # the right values, stride 2
    assert np.array_equal(strided, c.sinks)
    for sinks, msg in ((strided, r"sinks: .*contiguous"),
                       (strided.reshape(-1, 1), r"sinks: .*not contiguous"),
                       (c.sinks[:-1], r"sinks: .*num_q_heads = 8")):
        with pytest.raises(ValueError, match=msg):
            c.run(k, sinks=sinks)
        assert np.array_equal(c.out_buf, out0)
    parent = np.zeros(1 << 21, np.uint8)
    with pytest.raises(ValueError, match=r"workspace: .*contiguous"):
        c.run(k, workspace=parent[::2])
    assert not parent.any() and np.array_equal(c.out_buf, out0)
    flag = np.full(4, 9, np.int32)
    with pytest.raises(ValueError, match=r"error_flag: .*0 elements"):
        c.run(k, error_flag=flag[2:2])
    assert (flag == 9).all() and np.array_equal(c.out_buf, out0)
    c.run(k, workspace=parent[:1 << 20])
    c.check()


def test_index_arrays_of_the_wrong_rank_say_so(ctx):
    """Issue 26 review, F7: a 0-d seq_lens was refused with 'seq_lens:
    shape [], need [>= 0]', which reads as a size problem; the message says
    the array must be 1-D (block_tables 2-D), and nothing is written."""
    g = GEOS["mimo_nhd"]
    c = Case(g, [20, 7], [1, 1], np.random.default_rng(6))
    k = kernel_for(ctx, g)
    before = c.out_buf.copy()
    for kw, msg in ((dict(seq_lens=np.array(20, np.int32)),
                     r"seq_lens: shape \[\], need a 1-D array"),
                    (dict(query_start_loc=np.array(0, np.int32)),
                     r"query_start_loc: shape \[\], need a 1-D array"),
                    (dict(block_tables=c.table[0]),
                     r"block_tables: shape \[\d+\], need a 2-D array")):
        args = dict(query=c.query, output=c.output, key_cache=c.kc,
                    value_cache=c.vc, block_tables=c.table_view,
                    seq_lens=c.seq_lens, query_start_loc=c.qsl,
                    num_blocks=c.num_blocks, softmax_scale=float(c.scale))
        args.update(kw)
        with pytest.raises(ValueError, match=msg):
            k.paged_attention(**args)
        np.testing.assert_array_equal(c.out_buf, before)


#---------------------------------------------------------------------------
# The lse option: each row's log-sum-exp
#---------------------------------------------------------------------------

#: Geometries whose lse kernels the tests below run: GQA 4 / 16 / 32,
#: sinks (with a window), fp8 with per-head scales and soft cap, fp8 per
#: tensor, f16 packed V wider than K, the checked kernel.
LSE_GEOS = ("mimo_nhd", "mimo_hnd_sinks_window", "fp8_e4m3_head_softcap",
            "fp8_e5m2_tensor", "packed_wide_v_f16", "group16", "group32",
            "block1_mha_checked")


@pytest.fixture(scope="module")
def ctx_lse(tmp_path_factory, kvgen_cli, kernel_cache):
    c, _ = host_context(tmp_path_factory, kernel_cache, names=LSE_GEOS,
                        lse=True)
    yield c
    c.close()


class LseOut:
    """An lse view as vLLM keeps it ([num_q_heads, T], passed transposed:
    token stride 1, head stride T + 3) inside a canary-filled buffer."""
    CANARY = np.float32(-12345.5)

    def __init__(self, c):
        qh, t = c.g.q_heads, c.num_tokens
        self.buf = np.full((qh + 1, t + 3), self.CANARY, np.float32)
        self.view = self.buf[:qh, 1:1 + t].T
        assert self.view.strides == (4, (t + 3) * 4)

    def check(self, want):
        got = self.view.astype(np.float64)
        # Rows without keys (and without a sink): -inf on both sides.
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
        fin = np.isfinite(want)
        assert np.isfinite(got[fin]).all()
        # The logits are exact products of the bf16 / f16 / fp8 inputs
        # summed in float32, the sums float32 too: ~1e-6 relative.
        np.testing.assert_allclose(got[fin], want[fin], atol=2e-4, rtol=1e-5)
        mask = np.ones(self.buf.shape, bool)
        mask[:-1, 1:-2] = False
        assert (self.buf[mask] == self.CANARY).all(), \
            "a write outside the lse rows"


def run_lse_case(ctx_lse, geo, case, lens=None, q_lens=None, window=0,
                 prefill=False, **extra):
    """Case `case` of CASES (or, case None, the given lens, q_lens and
    window) through geo's lse kernel: output and lse against the
    reference, lse's canaries intact. Returns (the Case, the reference
    lse)."""
    g = GEOS[geo]
    rng = np.random.default_rng(abs(hash((geo, case, "lse"))) % (1 << 32))
    if case is not None:
        batch, max_len, qlen, window = CASES[case]
        lens = seqs(rng, batch, max_len, g.bs)
        q_lens = [int(rng.integers(1, 5)) for _ in lens] if qlen is None \
            else [qlen] * batch
        lens = [max(L, q) if L > 0 else 0 for L, q in zip(lens, q_lens)]
    c = Case(g, lens, q_lens, rng, window=window)
    lse = LseOut(c)
    c.run(kernel_for(ctx_lse, g, lse=True, prefill=prefill), lse=lse.view,
          **extra)
    c.check()  # the output is unchanged by the option
    want = c.reference_with_lse()[1]
    lse.check(want)
    return c, want


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("geo", LSE_GEOS)
def test_lse_matches_reference(ctx_lse, geo, case):
    """lse against the float64 reference: decode (with empty sequences:
    -inf, or the sink's logit with sinks), split-KV decode (the last CTA's
    merged m and l), windows, 3-token verification, mixed query lengths."""
    c, want = run_lse_case(ctx_lse, geo, case)
    if CASES[case][0] > 1:  # seqs() gives the batch an empty sequence
        g = GEOS[geo]
        empty = int(np.flatnonzero(c.seq_lens == 0)[0])
        rows = want[c.qsl[empty]:c.qsl[empty + 1]]
        if g.sinks:
            np.testing.assert_allclose(
                rows, np.broadcast_to(c.sinks.astype(np.float64),
                                      rows.shape))
        else:
            assert np.isneginf(rows).all()


@pytest.fixture(scope="module", params=["mma", "wgmma"])
def ctx_lse_prefill(request, tmp_path_factory, kvgen_cli, kernel_cache):
    """LSE_GEOS' lse kernels planned for prefill: on the mma.sync body, and
    (those that fit) on the wgmma body (kv-plan wgmma=1)."""
    wg = request.param == "wgmma"
    names = [n for n in LSE_GEOS if not wg or n in WGMMA_GEOS]
    c, bundle = host_context(tmp_path_factory, kernel_cache,
                             "wgmma=1" if wg else None, names=names,
                             lse=True, prefill=True)
    for f in bundle.iterdir():
        if f.suffix == ".cpp":
            assert ("static constexpr bool wgmma = true;" in f.read_text()) \
                == wg, f
    yield c, names
    c.close()


@pytest.mark.parametrize("case", list(CASES) + ["prefill", "chunk_window"])
@pytest.mark.parametrize("geo", LSE_GEOS)
def test_lse_of_prefill_plans(ctx_lse_prefill, geo, case):
    """lse of the prefill body (each warp's own m and l over all of the
    CTA's keys, no merge) against the reference, on both products' paths;
    decodes, verifications, windows, whole prefills and chunks."""
    ctx, names = ctx_lse_prefill
    if geo not in names:
        pytest.skip(f"{geo} does not fit the wgmma plan")
    if case in CASES:
        run_lse_case(ctx, geo, case, prefill=True)
        return
    g = GEOS[geo]
    rng = np.random.default_rng(abs(hash((geo, case, "lse-p"))) % (1 << 32))
    batch, max_len, qlen, window = PREFILL_CASES[case]
    lens = seqs(rng, batch, max_len, g.bs)
    q_lens = [max(L, 1) for L in lens] if qlen == "all" else [qlen] * batch
    lens = [max(L, q) if L > 0 else 0 for L, q in zip(lens, q_lens)]
    run_lse_case(ctx, geo, None, lens, q_lens, window, prefill=True)


@pytest.mark.parametrize("shape", ["decode", "verify_window", "with_empty"])
@pytest.mark.parametrize("geo", LSE_GEOS)
def test_lse_of_split_launches(ctx_lse, geo, shape):
    """Launches that split on the host plan (CASES' batch-1 "split" cases
    draw an empty sequence, which does not): decode at 300 tokens, 2-token
    verification at 400 with a window of 200, and a decode beside an empty
    sequence (-inf, or the sink): the workspace holds partials, the
    counters are zero again, and lse comes from the last CTA's merge of m
    and l."""
    lens, q_lens, window = {
        "decode": ([300], [1], 0),
        "verify_window": ([400], [2], 200),
        "with_empty": ([290, 0], [1, 1], 0)}[shape]
    ws = np.zeros(1 << 20, np.uint8)
    run_lse_case(ctx_lse, geo, None, lens, q_lens, window, workspace=ws)
    assert ws[256:].any(), "no partials were written: not a split launch"
    assert not ws[:256].any(), "counters left non-zero"


def test_lse_is_the_merge_state_of_the_output(ctx_lse):
    """What cascade / context-parallel merges do with lse: attend the first
    and second halves of a context separately (the second with sinks, the
    first without: the sink joins once), merge (out_a, lse_a) and (out_b,
    lse_b) with weights exp(lse - max), and get the whole context's
    attention with sinks. Checked against the float64 reference of the
    whole context."""
    g = GEOS["mimo_hnd_sinks_window"]
    rng = np.random.default_rng(23)
    c = Case(g, [96], [1], rng)
    want = c.reference()
    k = kernel_for(ctx_lse, g, lse=True)
    # The halves as their own sequences: block-table columns 0..2 and
    # 3..5 (block size 16), one query row each (the last token's).
    q = c.query
    parts = []
    for cols, use_sinks in ((slice(0, 3), False), (slice(3, 6), True)):
        table = np.ascontiguousarray(c.table[:, cols])
        out = np.zeros_like(c.output)
        lse = np.zeros((1, g.q_heads), np.float32)
        sinks = c.sinks if use_sinks else np.full(g.q_heads, -np.inf,
                                                  np.float32)
        k.paged_attention(query=q, output=out, key_cache=c.kc,
                          value_cache=c.vc, block_tables=table,
                          seq_lens=np.array([48], np.int32),
                          query_start_loc=c.qsl, num_blocks=c.num_blocks,
                          softmax_scale=float(c.scale), sinks=sinks,
                          lse=lse)
        parts.append((out.astype(np.float64), lse.astype(np.float64)))
    (oa, la), (ob, lb) = parts
    m = np.maximum(la, lb)
    wa, wb = np.exp(la - m), np.exp(lb - m)
    merged = (oa * wa[..., None] + ob * wb[..., None]) / \
        (wa + wb)[..., None]
    # Each half's query row (position 47 of its 48 keys) is the whole
    # context's last token (position 95) seeing that half's keys.
    np.testing.assert_allclose(merged, want, atol=1e-2, rtol=1e-2)


def test_lse_argument_checks(ctx, ctx_lse):
    """The binding's and the runtime's checks of lse, each refused before
    anything is written (output and lse canaries intact): lse given to a
    kernel without the option (which would not write it), an lse kernel
    without lse, wrong shape / dtype / negative strides; raw structs: NULL
    lse, a misaligned one, negative strides, a span past 2^63 bytes, and
    lse overlapping the output or the query. A kernel without the option
    ignores a raw lse pointer (nothing written there)."""
    g = GEOS["mimo_nhd"]
    c = Case(g, [20, 5], [1, 1], np.random.default_rng(8))
    k_lse = kernel_for(ctx_lse, g, lse=True)
    k_plain = kernel_for(ctx, g)
    lse = LseOut(c)
    out0, lse0 = c.out_buf.copy(), lse.buf.copy()

    def untouched():
        np.testing.assert_array_equal(c.out_buf.view(np.uint16),
                                      out0.view(np.uint16))
        np.testing.assert_array_equal(lse.buf, lse0)

    for k, kw, err, msg in (
            (k_plain, dict(lse=lse.view), ValueError,
             r"lse: kernel .* has no option lse"),
            (k_lse, {}, ValueError, r"has option lse: pass lse"),
            (k_lse, dict(lse=lse.view[:1]), ValueError,
             r"lse: shape \[1, 8\], the kernel needs \[2, 8\]"),
            (k_lse, dict(lse=lse.view.astype(np.float64)), TypeError,
             r"lse: dtype float64, need float32"),
            (k_lse, dict(lse=lse.buf[:8, 1:3].T[::-1]), ValueError,
             r"lse: negative strides")):
        with pytest.raises(err, match=msg):
            c.run(k, **kw)
        untouched()

    S = k_lse._op.args_struct
    good = dict(_raw_args(c, g), sinks=0, lse=lse.view.ctypes.data,
                lse_stride_token=1, lse_stride_head=lse.buf.shape[1])
    out_ptr = c.output.ctypes.data
    for bad, status, words in (
            (dict(lse=0), "KVGEN_ERROR_INVALID_ARGUMENT",
             "'lse' is NULL but the kernel has option 'lse'"),
            (dict(lse=lse.view.ctypes.data + 2), "KVGEN_ERROR_MISALIGNED",
             "'lse'"),
            (dict(lse_stride_head=-1), "KVGEN_ERROR_INVALID_ARGUMENT",
             "lse_stride_token = 1 and lse_stride_head = -1 must be >= 0"),
            (dict(lse_stride_token=1 << 61), "KVGEN_ERROR_OUT_OF_BOUNDS",
             "the rows of 'lse'"),
            (dict(lse=out_ptr + c.output.strides[0]),  # token 1's row
             "KVGEN_ERROR_INVALID_ARGUMENT", "'lse' ("),
            (dict(lse=c.query.ctypes.data), "KVGEN_ERROR_INVALID_ARGUMENT",
             "and 'query' (")):
        with pytest.raises(kvgen.KvgenError) as e:
            k_lse.launch_raw(S(**{**good, **bad}))
        assert e.value.status_name == status, e.value.message
        assert words in e.value.message, e.value.message
        untouched()
    # The overlap message names both arguments and says why.
    with pytest.raises(kvgen.KvgenError, match=r"'lse' \(\d+ bytes from "
                       r"0x[0-9a-f]+\) and 'output' \(\d+ bytes from "
                       r"0x[0-9a-f]+\) overlap; the kernel writes 'lse'"):
        k_lse.launch_raw(S(**{**good, "lse": out_ptr}))
    untouched()
    # The good struct launches and writes; without the option the same
    # struct's lse is ignored.
    k_plain.launch_raw(k_plain._op.args_struct(**good))
    np.testing.assert_array_equal(lse.buf, lse0)
    c.check()
    k_lse.launch_raw(S(**good))
    lse.check(c.reference_with_lse()[1])
