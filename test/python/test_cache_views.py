"""The binding compares cache views with the layout (issue 12, case 5).

The K and V halves of a [num_blocks, 2, block_size, H, D] allocation (what
torch's unbind(1) and FlashInfer-style engines give) passed to a kernel of
the dense layout used to launch, and K of block 1 overwrote V of block 0.
The binding now reads the views' strides and refuses the mismatch, naming
the stride and the strides that would describe the views; with those
strides the same views round-trip exactly. The checks run on the binding's
view of a tensor (shape, strides in elements, allocation), which numpy
arrays and torch tensors both fill; the torch case below runs when torch is
installed.
"""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
import kvgen  # noqa: E402
from kvgen_emit import emit_all, host_context  # noqa: E402


H, D, BS, NB = 2, 32, 16, 5
DENSE = kvgen.Layout(H, D, D, BS, dtype="bf16")
# The halves of a [NB, 2, BS, H, D] allocation: blocks 2 * BS * H * D apart.
HALVES = kvgen.Layout(H, D, D, BS, dtype="bf16",
                      k_strides=(2 * BS * H * D, H * D, D),
                      v_strides=(2 * BS * H * D, H * D, D))
DYNAMIC = kvgen.Layout(H, D, D, BS, dtype="bf16",
                       k_strides=(None, None, None),
                       v_strides=(None, None, None))
HND = kvgen.Layout(H, D, D, BS, dtype="bf16", order="hnd")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, kvgen_cli, kernel_cache):
    d = tmp_path_factory.mktemp("views")
    c = host_context(
        emit_all(d, [(lay, "reshape_and_cache", ("--io", "bf16", "--slots",
                                                 "i64"))
                     for lay in (DENSE, HALVES, DYNAMIC, HND)]),
        kernel_cache)
    yield c
    c.close()


def inputs(T, seed=3):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((T, H, D), np.float32).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((T, H, D), np.float32).astype(ml_dtypes.bfloat16)
    slots = rng.choice(NB * BS, T, replace=False).astype(np.int64)
    return k, v, slots


def reference(c, k, v, slots):
    """What a correct write leaves in the [NB, 2, BS, H, D] allocation."""
    want = c.copy()
    for t, s in enumerate(slots):
        want[s // BS, 0, s % BS] = k[t]
        want[s // BS, 1, s % BS] = v[t]
    return want


def test_unbind_halves_refused_for_a_dense_layout(ctx):
    k, v, slots = inputs(2 * BS)
    c = np.zeros((NB, 2, BS, H, D), ml_dtypes.bfloat16)
    kc, vc = c[:, 0], c[:, 1]  # torch: c.unbind(1)
    w = ctx.kernel("reshape_and_cache", DENSE, io="bf16", slots="i64")
    with pytest.raises(ValueError) as e:
        w.reshape_and_cache(k, v, kc, vc, slots)
    msg = str(e.value)
    # The stride, its relation to the layout's, and the layout that fits.
    assert (f"block stride of key_cache is {2 * BS * H * D} elements "
            f"(2 x the layout's), the layout's is {BS * H * D}") in msg
    assert "block stride of value_cache" in msg
    assert (f"k_strides = [{2 * BS * H * D}, {H * D}, {D}], "
            f"v_strides = [{2 * BS * H * D}, {H * D}, {D}]") in msg
    assert not c.view(np.uint16).any(), "refused, yet the cache was written"


def test_unbind_halves_with_the_strides_that_fit(ctx):
    k, v, slots = inputs(3 * BS)
    c = np.zeros((NB, 2, BS, H, D), ml_dtypes.bfloat16)
    want = reference(c, k, v, slots)
    w = ctx.kernel("reshape_and_cache", HALVES, io="bf16", slots="i64")
    w.reshape_and_cache(k, v, c[:, 0], c[:, 1], slots)
    assert np.array_equal(c.view(np.uint16), want.view(np.uint16))


def test_dynamic_strides_are_read_from_the_views(ctx):
    k, v, slots = inputs(BS + 3)
    c = np.zeros((NB, 2, BS, H, D), ml_dtypes.bfloat16)
    want = reference(c, k, v, slots)
    w = ctx.kernel("reshape_and_cache", DYNAMIC, io="bf16", slots="i64")
    w.reshape_and_cache(k, v, c[:, 0], c[:, 1], slots)  # no cache_strides
    assert np.array_equal(c.view(np.uint16), want.view(np.uint16))
    # Given cache_strides must agree with the views.
    with pytest.raises(ValueError, match="token stride of key_cache is 64 "
                                         "elements, the layout's is 128"):
        w.reshape_and_cache(k, v, c[:, 0], c[:, 1], slots,
                            cache_strides=((2 * BS * H * D, 2 * H * D, D),
                                           (2 * BS * H * D, H * D, D)))


def test_order_mismatch_and_odd_views(ctx):
    k, v, slots = inputs(4)
    # An nhd-shaped view for an hnd layout: [NB, BS, H, D] is not
    # [NB, H, BS, D] (and not contiguous, so not a raw buffer either).
    c = np.zeros((NB, 2, BS, H, D), ml_dtypes.bfloat16)
    w = ctx.kernel("reshape_and_cache", HND, io="bf16", slots="i64")
    with pytest.raises(ValueError, match=r"neither a raw buffer .* "
                                         r"\[N, 2, 16, 32\] view"):
        w.reshape_and_cache(k, v, c[:, 0], c[:, 1], slots)
    # A view of the logical shape with a padded last dimension.
    wide = np.zeros((NB, BS, H, 2 * D), ml_dtypes.bfloat16)[..., ::2]
    d = ctx.kernel("reshape_and_cache", DENSE, io="bf16", slots="i64")
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        d.reshape_and_cache(k, v, wide, wide.copy(), slots)
    # Contiguous caches of any shape stay raw buffers.
    kc = np.zeros((NB, BS, H, D), ml_dtypes.bfloat16)
    vc = np.zeros((NB * BS * H * D,), np.uint16)
    d.reshape_and_cache(k, v, kc, vc, slots)
    assert kc.view(np.uint16).any() and vc.any()


def test_overlapping_k_and_v_views_refused(ctx):
    k, v, slots = inputs(4)
    c = np.zeros((NB, 2, BS, H, D), ml_dtypes.bfloat16)
    w = ctx.kernel("reshape_and_cache", HALVES, io="bf16", slots="i64")
    # The same half twice: V would overwrite K.
    with pytest.raises(ValueError, match="key_cache and value_cache "
                                         "overlap: value_cache starts 0 "
                                         "bytes after key_cache"):
        w.reshape_and_cache(k, v, c[:, 0], c[:, 0], slots)
    # V shifted by one row into K's half of each block.
    flat = c.reshape(-1)
    shifted = np.lib.stride_tricks.as_strided(
        flat[D:], shape=(NB, BS, H, D), strides=c[:, 0].strides)
    with pytest.raises(ValueError, match="overlap"):
        w.reshape_and_cache(k, v, c[:, 0], shifted, slots)
    assert not c.view(np.uint16).any()


def test_torch_views(ctx):
    torch = pytest.importorskip(
        "torch", reason="torch is not installed: the torch path of the "
                        "cache view check is covered through numpy only")
    k, v, slots = inputs(2 * BS)
    c = torch.zeros((NB, 2, BS, H, D), dtype=torch.bfloat16)
    kc, vc = c.unbind(1)
    kt = torch.from_numpy(k.view(np.uint16).astype(np.int16)).view(
        torch.bfloat16)
    vt = torch.from_numpy(v.view(np.uint16).astype(np.int16)).view(
        torch.bfloat16)
    st = torch.from_numpy(slots)
    w = ctx.kernel("reshape_and_cache", DENSE, io="bf16", slots="i64")
    with pytest.raises(ValueError, match="block stride of key_cache"):
        w.reshape_and_cache(kt, vt, kc, vc, st)
    assert not c.view(torch.int16).any()
    w = ctx.kernel("reshape_and_cache", HALVES, io="bf16", slots="i64")
    w.reshape_and_cache(kt, vt, kc, vc, st)
    want = reference(np.zeros((NB, 2, BS, H, D), ml_dtypes.bfloat16), k, v,
                     slots)
    assert np.array_equal(c.view(torch.int16).numpy().view(np.uint16),
                          want.view(np.uint16))
