"""kv.copy_blocks on the HOST backend: the emitted kernel against a numpy
reference, bit for bit, over the whole cache buffers (so a write outside the
dst blocks fails too).

Layouts: NHD / HND, separate / packed, explicit strides of a
[num_blocks, 2, block_size, H, D] allocation (K and V views of one tensor),
dynamic ('?') strides, bf16 / f32 / fp8, block sizes 1 and 16, and a checked
kernel given out-of-range blocks. Skipped, with the reason, when
build/bin/kvgen or the runtime library is missing.

Run:  python3 -m pytest -q test/python/test_copy_blocks.py
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

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
}
# (name, layout key, checked)
KERNELS = [(k, k, False) for k in LAYOUTS] + [("checked", "nhd", True)]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    if not (KVGEN.is_file() and os.access(KVGEN, os.X_OK)):
        pytest.skip(f"{KVGEN} not found: build it (ninja -C build kvgen) "
                    "or set KVGEN_BUILD_DIR")
    try:
        kvgen.library_path()
    except OSError as e:
        pytest.skip(f"runtime library not loadable: {e}")
    d = tmp_path_factory.mktemp("copy_blocks")
    for name, key, checked in KERNELS:
        lf = d / f"{name}.mlir"
        lf.write_text(f"#kv.layout<{LAYOUTS[key].text}>\n")
        cmd = [str(KVGEN), "emit", "--layout", str(lf), "--target", "host",
               "--op", "copy_blocks", "--bundle", str(d / "bundle")]
        if checked:
            cmd.append("--checked")
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    c = kvgen.Context("host", cache_dir=str(d / "cache"))
    c.load_bundle(str(d / "bundle"))
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


def caches(lay, num_blocks, dyn, rng):
    """Random caches (raw element bits) holding num_blocks blocks."""
    out = []
    for comp in (("k",) if lay.packed else ("k", "v")):
        n = lay.extent_bytes(comp, num_blocks, dyn[0 if comp == "k" else 1])
        n = max(n, lay.extent_bytes("v", num_blocks, dyn[1])) \
            if lay.packed else n
        out.append(rng.integers(0, 1 << (8 * lay.element_size),
                                size=n // lay.element_size,
                                dtype=UINT[lay.element_size]))
    if lay.packed:
        out.append(None)
    return out


def reference(lay, kc, vc, mapping, dyn):
    want = [kc.copy(), None if vc is None else vc.copy()]
    for comp, i in (("k", 0), ("v", 1)):
        src_buf = kc if (i == 0 or lay.packed) else vc
        dst = want[0] if (i == 0 or lay.packed) else want[1]
        for s, d in mapping:
            dst[offsets(lay, comp, d, dyn[i])] = \
                src_buf[offsets(lay, comp, s, dyn[i])]
    return want


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
    dyn = ((None,) * 3, (None,) * 3)
    kwargs = {}
    if lay.has_dynamic_strides():
        # Dense HND-like strides, K and V with their own head sizes.
        dyn = tuple((lay.block_size * H * lay.head_size(c),
                     lay.head_size(c), lay.block_size * lay.head_size(c))
                    for c in ("k", "v"))
        kwargs["cache_strides"] = dyn
    kc, vc = caches(lay, num_blocks, dyn, rng)
    mapping = mapping_for(num_blocks, pairs, rng)
    want = reference(lay, kc, vc, mapping, dyn)
    # The copy changes the buffers (random bits differ between blocks).
    assert not np.array_equal(want[0], kc)
    k = ctx.kernel("copy_blocks", lay)
    k.copy_blocks(kc, vc, mapping, num_blocks=num_blocks, **kwargs)
    np.testing.assert_array_equal(kc, want[0])
    if vc is not None:
        np.testing.assert_array_equal(vc, want[1])


def test_copy_blocks_checked_skips_out_of_range(ctx):
    lay = LAYOUTS["nhd"]
    rng = np.random.default_rng(7)
    num_blocks = 6
    dyn = ((None,) * 3, (None,) * 3)
    kc, vc = caches(lay, num_blocks, dyn, rng)
    good = np.array([[0, 1]], dtype=np.int64)
    mapping = np.array([[0, 1], [2, num_blocks], [-1, 3], [4, 5]],
                       dtype=np.int64)
    want = reference(lay, kc, vc, np.array([[0, 1], [4, 5]]), dyn)
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


def test_copy_blocks_argument_errors(ctx):
    lay = LAYOUTS["nhd"]
    kc, vc = caches(lay, 4, ((None,) * 3, (None,) * 3),
                    np.random.default_rng(1))
    k = ctx.kernel("copy_blocks", lay)
    with pytest.raises(TypeError, match="int64"):
        k.copy_blocks(kc, vc, np.zeros((1, 2), dtype=np.int32))
    # A cache one block short of num_blocks: the runtime's extent check.
    with pytest.raises(kvgen.KvgenError, match="OUT_OF_BOUNDS"):
        k.copy_blocks(kc, vc, np.array([[0, 1]], dtype=np.int64),
                      num_blocks=5)
