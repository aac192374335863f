"""kv.copy_blocks and kv.swap_blocks on the HOST backend: the emitted kernels
against a numpy reference, bit for bit, over the whole cache buffers (so a
write outside the dst blocks fails too).

Layouts: NHD / HND, separate / packed, explicit strides of a
[num_blocks, 2, block_size, H, D] allocation (K and V views of one tensor),
dynamic ('?') strides, bf16 / f32 / fp8, block sizes 1 and 16, an MLA latent
cache (kv_c + k_pe, packed and separate), and checked kernels given
out-of-range blocks. swap_blocks copies between two cache sets of different
num_blocks. Skipped, with the reason, when
build/bin/kvgen or the runtime library is missing.

Run:  python3 -m pytest -q test/python/test_copy_blocks.py
"""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402
from kvgen_emit import emit_all, host_context  # noqa: E402


H, D, BS = 2, 64, 16
# K and V views of one [num_blocks, 2, BS, H, D] tensor: block stride 2 x
# the K/V block, V starts one K/V block in.
PAIRED = (2 * BS * H * D, H * D, D)
LAYOUTS = {
    "nhd": kvgen.Layout(4, 192, 128, BS, dtype="bf16"),
    "hnd_fp8": kvgen.Layout(H, 64, 32, BS, dtype="f8E4M3FN",
                            scale="per_head", order="hnd"),
    "packed": kvgen.Layout(H, 64, 32, BS, dtype="bf16", packing="packed"),
    "paired_strides": kvgen.Layout(H, D, D, BS, dtype="f16",
                                   k_strides=PAIRED, v_strides=PAIRED),
    "dynamic": kvgen.Layout(H, 64, 32, BS, dtype="bf16",
                            k_strides=(None, None, None),
                            v_strides=(None, None, None)),
    "f32_b1": kvgen.Layout(1, 576, 512, 1, dtype="f32"),
    "mla_packed_fp8": kvgen.Layout(1, block_size=BS, dtype="f8E4M3FN",
                                   components=[("kv_c", 512), ("k_pe", 64)],
                                   packing="packed"),
    "mla_separate": kvgen.Layout(1, block_size=8, dtype="bf16",
                                 components=[("kv_c", 512), ("k_pe", 64)]),
}
OPS = ("copy_blocks", "swap_blocks")
# (name, op, layout key): the default (range-checked) kernels.
KERNELS = [(f"{op}_{k}", op, k) for op in OPS for k in LAYOUTS]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, kvgen_cli, kernel_cache):
    d = tmp_path_factory.mktemp("copy_blocks")
    c = host_context(emit_all(d, [(LAYOUTS[key], op, ())
                                  for _name, op, key in KERNELS]),
                     kernel_cache)
    yield c
    c.close()


def offsets(lay, comp, block, dyn):
    """Element offsets of every (token, head, element) of `block`."""
    sb, st, sh = lay.strides(comp, dyn)
    t = np.arange(lay.block_size)[:, None, None]
    h = np.arange(lay.num_kv_heads)[None, :, None]
    e = np.arange(lay.head_size(comp))[None, None, :]
    return (block * sb + t * st + h * sh + lay.base(comp) + e).ravel()


UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def tensors(lay):
    """Cache tensors (0, and 1 unless packed) and the components each
    holds."""
    n = len(lay.components)
    return [(0, list(range(n)))] if lay.packed else [(c, [c])
                                                      for c in range(n)]


def caches(lay, num_blocks, dyn, rng):
    """Random caches (raw element bits) holding num_blocks blocks: [tensor
    0, tensor 1 or None]."""
    out = []
    for _, comps in tensors(lay):
        n = max(lay.extent_bytes(c, num_blocks, dyn[c]) for c in comps)
        out.append(rng.integers(0, 1 << (8 * lay.element_size),
                                size=n // lay.element_size,
                                dtype=UINT[lay.element_size]))
    if len(out) == 1:
        out.append(None)
    return out


def reference(lay, src, dst, mapping, dyn):
    """dst (copied) after moving every block s of src to block d."""
    want = [None if x is None else x.copy() for x in dst]
    for t, comps in tensors(lay):
        for c in comps:
            for s, d in mapping:
                want[t][offsets(lay, c, d, dyn[c])] = \
                    src[t][offsets(lay, c, s, dyn[c])]
    return want


def dense_dyn(lay):
    """Dense HND-like strides for a layout with '?' strides, each component
    with its own head size; None entries when the layout is static."""
    if not lay.has_dynamic_strides():
        return [(None,) * 3] * len(lay.components), {}
    dyn = [(lay.block_size * lay.num_kv_heads * lay.head_size(c),
            lay.head_size(c), lay.block_size * lay.head_size(c))
           for c in range(len(lay.components))]
    return dyn, {"cache_strides": tuple(dyn)}


def mapping_for(num_blocks, pairs, rng):
    """pairs rows (src, dst): dsts distinct and never a src."""
    perm = rng.permutation(num_blocks)
    return np.stack([perm[:pairs], perm[pairs:2 * pairs]],
                    axis=1).astype(np.int64)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("pairs", [1, 3, 11])
def test_copy_blocks_matches_reference(ctx, name, pairs):
    lay = LAYOUTS[name]
    rng = np.random.default_rng(hash((name, pairs)) % (1 << 32))
    num_blocks = 2 * pairs + 3
    dyn, kwargs = dense_dyn(lay)
    kc, vc = caches(lay, num_blocks, dyn, rng)
    mapping = mapping_for(num_blocks, pairs, rng)
    want = reference(lay, [kc, vc], [kc, vc], mapping, dyn)
    # The copy changes the buffers (random bits differ between blocks).
    assert not np.array_equal(want[0], kc)
    k = ctx.kernel("copy_blocks", lay)
    k.copy_blocks(kc, vc, mapping, num_blocks=num_blocks, **kwargs)
    np.testing.assert_array_equal(kc, want[0])
    if vc is not None:
        np.testing.assert_array_equal(vc, want[1])


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("pairs", [1, 5])
def test_swap_blocks_matches_reference(ctx, name, pairs):
    """Blocks of a src set (num_blocks 2 * pairs + 1) into a dst set of
    another size (pairs + 4): every dst byte but the mapped blocks kept,
    src untouched."""
    lay = LAYOUTS[name]
    rng = np.random.default_rng(hash((name, pairs, "swap")) % (1 << 32))
    ns, nd = 2 * pairs + 1, pairs + 4
    dyn, kwargs = dense_dyn(lay)
    src = caches(lay, ns, dyn, rng)
    dst = caches(lay, nd, dyn, rng)
    mapping = np.stack([rng.permutation(ns)[:pairs],
                        rng.permutation(nd)[:pairs]],
                       axis=1).astype(np.int64)
    want = reference(lay, src, dst, mapping, dyn)
    src_before = [None if x is None else x.copy() for x in src]
    assert not np.array_equal(want[0], dst[0])
    k = ctx.kernel("swap_blocks", lay)
    k.swap_blocks(src[0], src[1], dst[0], dst[1], mapping,
                  num_blocks=(ns, nd), **kwargs)
    for t in (0, 1):
        if dst[t] is None:
            continue
        np.testing.assert_array_equal(dst[t], want[t])
        np.testing.assert_array_equal(src[t], src_before[t])


def test_copy_blocks_checked_skips_out_of_range(ctx):
    lay = LAYOUTS["nhd"]
    rng = np.random.default_rng(7)
    num_blocks = 6
    dyn, _ = dense_dyn(lay)
    kc, vc = caches(lay, num_blocks, dyn, rng)
    good = np.array([[0, 1]], dtype=np.int64)
    mapping = np.array([[0, 1], [2, num_blocks], [-1, 3], [4, 5]],
                       dtype=np.int64)
    want = reference(lay, [kc, vc], [kc, vc], np.array([[0, 1], [4, 5]]),
                     dyn)
    flag = np.zeros(1, dtype=np.int32)
    k = ctx.kernel("copy_blocks", lay, checked=True)
    k.copy_blocks(kc, vc, mapping, flag, num_blocks=num_blocks)
    assert flag[0] == 1
    np.testing.assert_array_equal(kc, want[0])
    np.testing.assert_array_equal(vc, want[1])
    # In range only: the flag stays clear.
    flag[0] = 0
    k.copy_blocks(kc, vc, good, flag, num_blocks=num_blocks)
    assert flag[0] == 0


def test_swap_blocks_checked_uses_each_sides_block_count(ctx):
    """A dst block that is valid for the src set but not for the smaller
    dst set is flagged and skipped; so is a src block past the src set."""
    lay = LAYOUTS["nhd"]
    rng = np.random.default_rng(11)
    ns, nd = 8, 3
    dyn, _ = dense_dyn(lay)
    src = caches(lay, ns, dyn, rng)
    dst = caches(lay, nd, dyn, rng)
    mapping = np.array([[7, 0], [1, 5], [ns, 1], [2, 2]], dtype=np.int64)
    want = reference(lay, src, dst, np.array([[7, 0], [2, 2]]), dyn)
    flag = np.zeros(1, dtype=np.int32)
    k = ctx.kernel("swap_blocks", lay, checked=True)
    k.swap_blocks(src[0], src[1], dst[0], dst[1], mapping, flag,
                  num_blocks=(ns, nd))
    assert flag[0] == 1
    np.testing.assert_array_equal(dst[0], want[0])
    np.testing.assert_array_equal(dst[1], want[1])


def test_copy_blocks_argument_errors(ctx):
    lay = LAYOUTS["nhd"]
    kc, vc = caches(lay, 4, dense_dyn(lay)[0], np.random.default_rng(1))
    k = ctx.kernel("copy_blocks", lay)
    with pytest.raises(TypeError, match="int64"):
        k.copy_blocks(kc, vc, np.zeros((1, 2), dtype=np.int32))
    # A cache one block short of num_blocks: the runtime's extent check.
    with pytest.raises(kvgen.KvgenError, match="OUT_OF_BOUNDS"):
        k.copy_blocks(kc, vc, np.array([[0, 1]], dtype=np.int64),
                      num_blocks=5)


def test_swap_blocks_argument_errors(ctx):
    """Each set's caches are checked against that set's num_blocks."""
    lay = LAYOUTS["nhd"]
    rng = np.random.default_rng(2)
    dyn, _ = dense_dyn(lay)
    src = caches(lay, 4, dyn, rng)
    dst = caches(lay, 2, dyn, rng)
    k = ctx.kernel("swap_blocks", lay)
    m = np.array([[0, 1]], dtype=np.int64)
    with pytest.raises(kvgen.KvgenError, match="dst_key_cache_bytes"):
        k.swap_blocks(src[0], src[1], dst[0], dst[1], m, num_blocks=(4, 3))
    with pytest.raises(kvgen.KvgenError, match="src_key_cache_bytes"):
        k.swap_blocks(src[0], src[1], dst[0], dst[1], m, num_blocks=(5, 2))
    with pytest.raises(ValueError, match="dst_value_cache is required"):
        k.swap_blocks(src[0], src[1], dst[0], None, m)
