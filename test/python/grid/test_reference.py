"""Self-checks of the harness's references: the numpy reference
(kvgen_ref.py) against ml_dtypes' notion of the formats, and the torch
reference (the cuda backend's) against the numpy one, conversion by
conversion, on every fp8 bit pattern and random 16-/32-bit inputs."""

import numpy as np
import pytest

import kvgen_ref as R
from grid import harness as H
from kvgen_ref import Layout


def test_reference_sanity():
    """The reference's constants and rounding agree with ml_dtypes' own
    notion of the formats, and saturation clips rather than producing NaN."""
    import ml_dtypes
    for name, d in R.DTYPES.items():
        if d.is_fp8:
            assert float(ml_dtypes.finfo(d.np_type).max) == d.max_finite, name
            q = R.quantize(np.array([1e9, -1e9, np.inf, -np.inf], np.float32),
                           np.float32(1.0), name)
            back = R.to_f32(q, name)
            assert list(back) == [d.max_finite, -d.max_finite, d.max_finite, -d.max_finite], name
            assert np.isnan(R.to_f32(R.quantize(np.array([np.nan], np.float32), 1.0, name), name))[0]
    # RNE to bf16: 1 + 2^-8 is a tie -> 1.0; 1 + 3*2^-8 -> 1 + 2^-6... (ties to even)
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)
    assert list(R.from_f32(x, "bf16")) == [0x3F80, 0x3F82]
    # A strided cache view addresses what the layout text says.
    lay = Layout(2, 3, 2, 4, "hnd", "packed", "bf16", "none")
    body = np.arange(2 * 2 * 4 * 5 * 2, dtype=np.uint16).view(np.uint8)
    v = R.cache_side_view(lay, "v", body, 2, lay.dense_strides("v"))
    # block 1, token 2, head 1, element 1: ((1*2 + 1)*4 + 2)*5 + 3 + 1
    assert v[1, 2, 1, 1] == ((1 * 2 + 1) * 4 + 2) * 5 + 3 + 1


def test_chunked_reference_addresses():
    """The reference's addresses of chunked layouts (harness.Caches.offsets
    and the buffers' extents) are numpy's own indexing of the engines'
    tensors: vLLM's legacy K [nb, H, D/x, bs, x] and V [nb, H, D, bs],
    aiter's shuffled V [nb, H, bs/x, D, x], with a padded block too."""
    from grid import cases as C
    nb, Hh, Dk, Dv, bs = 3, 2, 32, 24, 16
    blk = np.repeat(np.arange(nb), bs)
    tok = np.tile(np.arange(bs), nb)
    b3, t3 = blk[:, None, None], tok[:, None, None]
    h3 = np.arange(Hh)[None, :, None]
    for eng, pad in (("vllm", 0), ("aiter", 0), ("vllm", 40), ("aiter", 8)):
        lay = C.chunked(Hh, Dk, Dv, bs, "bf16", eng, block_pad=pad)
        x = lay.x
        assert x == 8
        caches = H.Caches(H.NumpyX(), C.KVCase("t", "t", lay), nb,
                          np.random.default_rng(0), 0)
        for side, D in (("k", Dk), ("v", Dv)):
            shape = {"legacy_k": (Hh, D // x, bs, x), "legacy_v": (Hh, D, bs),
                     "shuffled_v": (Hh, bs // x, D, x)}[lay.form(side)]
            n = int(np.prod(shape))
            # Element indices of the tensor [nb, *shape] in a buffer of
            # blocks n + pad elements apart.
            idx = (np.arange(nb)[:, None] * (n + pad) +
                   np.arange(n)[None, :]).reshape(nb, *shape)
            e3 = np.arange(D)[None, None, :]
            want = {"legacy_k": lambda: idx[b3, h3, e3 // x, t3, e3 % x],
                    "legacy_v": lambda: idx[b3, h3, e3, t3],
                    "shuffled_v": lambda: idx[b3, h3, t3 // x, e3, t3 % x]
                    }[lay.form(side)]()
            got = caches.offsets(side, np.arange(nb * bs))
            assert np.array_equal(got, want), (eng, pad, side)
            assert caches.bufs[side].n == ((nb - 1) * (n + pad) + n) * 2


def _torch_x(request):
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed: the torch reference (the cuda "
                    "backend's) is checked where it is")
    dev = "cuda:0" if torch.cuda.is_available() else "cpu"
    return H.TorchX(dev)


def _agree(tx, nx, got, want, dt):
    got = tx.download(got).view(nx.INT[H.ESIZE[dt]])
    bad = R.mismatches(got, want, dt, strict=False)
    assert not len(bad), R.describe_mismatch(f"torch vs numpy ({dt})", got,
                                             want, dt, bad)


def test_torch_reference_matches_numpy(request):
    tx, nx = _torch_x(request), H.NumpyX()
    rng = np.random.default_rng(11)
    H4 = 4
    scale = rng.uniform(0.02, 2.0, H4).astype(np.float32).reshape(H4, 1)
    for io in ("bf16", "f16", "f32"):
        shape = (257, H4, 16)
        bits = nx.values(rng, shape, io, "f8E4M3FN")
        tbits = tx.upload(bits.view(tx_np_int(io)))
        for cd in H.ESIZE:
            sc = scale if cd in H.FP8 else None
            _agree(tx, nx, tx.to_cache(tbits, io, cd, sc),
                   nx.to_cache(bits, io, cd, sc), cd)
    for cd in H.FP8:
        allq = np.tile(np.arange(256, dtype=np.uint8), H4 * 4).reshape(
            -1, H4, 4)
        for out in ("bf16", "f16", "f32"):
            _agree(tx, nx, tx.to_output(tx.upload(allq), cd, out, True,
                                        scale),
                   nx.to_output(allq, cd, out, True, scale), out)


def tx_np_int(dt):
    return {2: np.int16, 4: np.int32, 1: np.uint8}[H.ESIZE[dt]]
