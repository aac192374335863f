"""kv.concat_and_cache_mla and kv.gather_mla on the HOST backend: the emitted
kernels against the numpy reference (kvgen_ref.py), bit for bit.

An MLA latent cache holds, per (block, token), one packed row of the
components kv_c (D_c) and k_pe (D_pe): DeepSeek-V3's 512 + 64, plus other
widths. The write is checked over the whole cache buffer (every byte
outside the written rows keeps its random contents); kv_c and k_pe come as
separate arrays or as the two column ranges of one [T, D_c + D_pe] array
(strided views), the gather writes into such views. fp8 caches use one
per-tensor scale for both components (stored = saturate(x / scale)).
Skipped, with the reason, when build/bin/kvgen or the runtime library is
missing.

Run:  python3 -m pytest -q test/python/test_mla.py
"""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvgen  # noqa: E402
from kvgen_emit import emit_all, host_context  # noqa: E402
import kvgen_ref as ref  # noqa: E402



def mla(dc, dpe, bs, dtype="bf16", **kw):
    return kvgen.Layout(1, block_size=bs, dtype=dtype, packing="packed",
                        components=[("kv_c", dc), ("k_pe", dpe)], **kw)


LAYOUTS = {
    # DeepSeek-V3 / R1 (shared/reference/geometries.md).
    "deepseek_bf16": mla(512, 64, 64),
    "deepseek_fp8": mla(512, 64, 64, "f8E4M3FN", scale="per_tensor"),
    "e5m2_b16": mla(512, 64, 16, "f8E5M2", scale="per_tensor"),
    "fnuz_b1": mla(256, 32, 1, "f8E4M3FNUZ", scale="per_tensor"),
    "f16_odd": mla(72, 8, 8, "f16"),
    # Rows padded to 640 elements inside each block (explicit strides).
    "padded": mla(512, 64, 16, strides={"kv_c": (16 * 640, 640, 640)}),
    "dynamic": mla(512, 64, 16, strides={"kv_c": (None, None, None)}),
}
# (layout key, io) of the writes; gathers: raw, and dequantizing to bf16 for
# fp8 caches.
WRITES = [(k, "bf16") for k in LAYOUTS] + [("deepseek_fp8", "f32"),
                                           ("f16_odd", "f32")]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, kvgen_cli, kernel_cache):
    d = tmp_path_factory.mktemp("mla")
    specs = set()
    for key, io in WRITES:
        specs.add((key, "concat_and_cache_mla", ("--io", io)))
    for key, lay in LAYOUTS.items():
        specs.add((key, "gather_mla", ()))
        if lay.dtype.startswith("f8"):
            specs.add((key, "gather_mla", ("--io", "bf16", "--dequantize")))
    c = host_context(emit_all(d, [(LAYOUTS[key], op, extra)
                                  for key, op, extra in sorted(specs)]),
                     kernel_cache)
    yield c
    c.close()


def dyn_strides(lay):
    """Strides used for a '?' layout (a padded row of 600), else None."""
    if not lay.has_dynamic_strides():
        return None
    return (lay.block_size * 600, 600, 600)


def row_offsets(lay, comp, slots, dyn):
    """[T, D] element offsets of component `comp` at `slots` (>= 0)."""
    sb, st, _ = lay.strides(comp, dyn)
    s = slots.astype(np.int64)
    e = np.arange(lay.head_size(comp))
    return ((s // lay.block_size) * sb + (s % lay.block_size) * st +
            lay.base(comp))[:, None] + e[None, :]


def cache_elems(lay, num_blocks, dyn):
    return max(lay.extent_bytes(c, num_blocks, dyn) for c in (0, 1)) \
        // lay.element_size


def inputs(lay, t, io, rng, joint):
    """kv_c [T, D_c] and k_pe [T, D_pe] io bits; joint: as column ranges of
    one [T, D_c + D_pe + 8] array (strided views)."""
    dc, dpe = lay.head_size(0), lay.head_size(1)
    x = (rng.standard_normal((t, dc + dpe + 8)) * 3).astype(np.float32)
    bits = ref.from_f32(x, io)
    if joint:
        return bits[:, :dc], bits[:, dc:dc + dpe]
    return bits[:, :dc].copy(), bits[:, dc:dc + dpe].copy()


def slots_for(lay, t, num_blocks, rng):
    s = rng.permutation(num_blocks * lay.block_size)[:t].astype(np.int64)
    s[3::5] = -1  # padding (T = 1 keeps its one slot)
    return s


@pytest.mark.parametrize("key,io", WRITES)
@pytest.mark.parametrize("t", [1, 7, 42])
@pytest.mark.parametrize("joint", [False, True])
def test_concat_and_cache_mla_then_gather(ctx, key, io, t, joint):
    lay = LAYOUTS[key]
    rng = np.random.default_rng(hash((key, io, t, joint)) % (1 << 32))
    num_blocks = (t + lay.block_size - 1) // lay.block_size + 2
    dyn = dyn_strides(lay)
    kw = {"cache_strides": dyn} if dyn else {}
    storage = ref.dt(lay.dtype).storage
    cache = rng.integers(0, 1 << (8 * lay.element_size),
                         size=cache_elems(lay, num_blocks, dyn),
                         dtype=storage)
    kv_c, k_pe = inputs(lay, t, io, rng, joint)
    slots = slots_for(lay, t, num_blocks, rng)
    fp8 = lay.dtype.startswith("f8")
    scale = np.array([0.37], np.float32) if fp8 else None

    want = cache.copy()
    v = slots >= 0
    for comp, rows in ((0, kv_c), (1, k_pe)):
        q = ref.input_to_cache(rows[v], io, lay.dtype, scale)
        want[row_offsets(lay, comp, slots[v], dyn)] = q
    w = ctx.kernel("concat_and_cache_mla", lay, io=io)
    w.concat_and_cache_mla(kv_c, k_pe, cache, slots, scale,
                           num_blocks=num_blocks, **kw)
    assert v.any()
    np.testing.assert_array_equal(cache, want)

    # Raw gather: the cache bits back, rows of padding slots untouched.
    dc, dpe = lay.head_size(0), lay.head_size(1)
    out = rng.integers(0, 1 << 16, size=(t, dc + dpe),
                       dtype=np.uint16).astype(storage)
    before = out.copy()
    g = ctx.kernel("gather_mla", lay)
    g.gather_mla(cache, slots, out[:, :dc], out[:, dc:],
                 num_blocks=num_blocks, **kw)
    exp = before.copy()
    exp[v, :dc] = cache[row_offsets(lay, 0, slots[v], dyn)]
    exp[v, dc:] = cache[row_offsets(lay, 1, slots[v], dyn)]
    np.testing.assert_array_equal(out, exp)
    if not fp8:
        # A raw round trip of a same-type write is the input itself.
        if io == lay.dtype:
            np.testing.assert_array_equal(out[v, :dc], kv_c[v])
        return
    # Dequantizing gather: q * scale in bf16.
    dq = np.zeros((t, dc + dpe), np.uint16)
    gd = ctx.kernel("gather_mla", lay, io="bf16", dequantize=True)
    gd.gather_mla(cache, slots, dq[:, :dc], dq[:, dc:], scale,
                  num_blocks=num_blocks, **kw)
    exp = np.zeros_like(dq)
    for comp, cols in ((0, slice(0, dc)), (1, slice(dc, dc + dpe))):
        exp[v, cols] = ref.cache_to_output(
            cache[row_offsets(lay, comp, slots[v], dyn)], lay.dtype, "bf16",
            True, scale)
    np.testing.assert_array_equal(dq, exp)


def test_concat_and_cache_mla_checked(ctx):
    """A slot past the cache is flagged and skipped; the rest is written."""
    lay = LAYOUTS["deepseek_bf16"]
    rng = np.random.default_rng(3)
    num_blocks = 2
    cache = rng.integers(0, 1 << 16, size=cache_elems(lay, num_blocks, None),
                         dtype=np.uint16)
    kv_c, k_pe = inputs(lay, 3, "bf16", rng, False)
    slots = np.array([5, num_blocks * lay.block_size, 70], np.int64)
    want = cache.copy()
    ok = np.array([True, False, True])
    want[row_offsets(lay, 0, slots[ok], None)] = kv_c[ok]
    want[row_offsets(lay, 1, slots[ok], None)] = k_pe[ok]
    flag = np.zeros(1, np.int32)
    w = ctx.kernel("concat_and_cache_mla", lay, io="bf16")
    w.concat_and_cache_mla(kv_c, k_pe, cache, slots, error_flag=flag,
                           num_blocks=num_blocks)
    assert flag[0] == 1
    np.testing.assert_array_equal(cache, want)


def test_mla_argument_errors(ctx):
    lay = LAYOUTS["deepseek_fp8"]
    rng = np.random.default_rng(4)
    cache = np.zeros(cache_elems(lay, 2, None), np.uint8)
    kv_c, k_pe = inputs(lay, 2, "bf16", rng, False)
    slots = np.array([0, 1], np.int64)
    w = ctx.kernel("concat_and_cache_mla", lay, io="bf16")
    # fp8 caches need the scale.
    with pytest.raises(ValueError, match="scale is required"):
        w.concat_and_cache_mla(kv_c, k_pe, cache, slots)
    # k_pe with kv_c's width: the layout's D_pe is 64.
    with pytest.raises(ValueError, match=r"k_pe: shape \[2, 512\]"):
        w.concat_and_cache_mla(kv_c, kv_c, cache, slots,
                               np.ones(1, np.float32))
    # A cache one block short.
    with pytest.raises(kvgen.KvgenError, match="OUT_OF_BOUNDS"):
        w.concat_and_cache_mla(kv_c, k_pe, cache, slots,
                               np.ones(1, np.float32), num_blocks=3)
