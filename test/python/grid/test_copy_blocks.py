"""kv.copy_blocks on every backend: each CopyBlocksCase of
cases.COPY_BLOCKS_CASES (layouts NHD / HND, separate / packed, K and V
views of one [num_blocks, 2, block_size, H, D] tensor, dynamic strides,
bf16 / f16 / f32 / fp8, block sizes 1..64, up to 2048 pairs, block ids past
65535) against the reference, bit for bit, over the whole cache buffers
(so a write outside the dst blocks fails too). Checked kernels given
out-of-range and negative blocks skip them and set error_flag; given only
valid ones they leave it at 0.

Run:  python3 -m pytest -q test/python/grid/test_copy_blocks.py
"""

import numpy as np
import pytest

from grid import case_params
from grid import cases as C
from grid import harness as H


def block_slots(X, lay, blocks):
    """The slots of every token of `blocks` (numpy ints), block-major."""
    bs = lay.block_size
    s = (np.asarray(blocks, np.int64)[:, None] * bs +
         np.arange(bs, dtype=np.int64)).reshape(-1)
    return X.upload(s)


def setup_caches(backend, case, nb, seed):
    X = backend.X
    gen = X.gen(seed)
    caches = H.Caches(X, case, nb, gen, backend.slack, backend.sparse_min)
    lay = case.layout
    dyn = ((case.strides("k"), case.strides("v"))
           if lay.has_dynamic() else None)
    return caches, dyn


def copy_reference(X, caches, lay, pairs):
    """exp dst blocks := src blocks (dsts are never srcs)."""
    src = block_slots(X, lay, [s for s, _ in pairs])
    dst = block_slots(X, lay, [d for _, d in pairs])
    for side in "kv":
        vals = H.gather_rows(X, caches, side, src)
        H.scatter(X, caches, side, dst, vals, None)


@pytest.mark.parametrize("case,T", case_params(C.COPY_BLOCKS_CASES))
def test_copy_blocks(backend, case, T):
    X, lay = backend.X, case.layout
    n_pairs = T
    nb = case.num_blocks or 2 * n_pairs + 3
    seed = H.seed_of(case.name, T)
    rng = np.random.default_rng(seed)
    caches, dyn = setup_caches(backend, case, nb, seed)
    perm = rng.permutation(nb)
    good = [(int(s), int(d)) for s, d in zip(perm[:n_pairs],
                                              perm[n_pairs:2 * n_pairs])]
    rows = list(good)
    if case.checked:
        # Out of range / negative src or dst; their valid halves are
        # blocks no valid pair touches, so a row not skipped shows.
        spare = [int(b) for b in perm[2 * n_pairs:]]
        bad = [(spare[0], nb), (-1, spare[1]), (nb + 5, spare[2]),
               (spare[1], -3)]
        for i, r in enumerate(bad):
            rows.insert(min(len(rows), 2 * i + 1), r)
    mapping = X.upload(np.array(rows, np.int64).reshape(-1, 2))
    before = [X.clone(b.exp) for b in caches.bufs.values()]
    copy_reference(X, caches, lay, good)
    assert not all(X.equal(b0, b.exp) for b0, b in
                   zip(before, caches.bufs.values())), \
        "the reference copy changed nothing: the case tests nothing"
    flag = X.zeros_i32(4) if case.checked else None
    k = backend.kernel(case.kernels()["copy"])
    kc, vc = caches.args()
    backend.launch(lambda: k.copy_blocks(kc, vc, mapping, flag,
                                         num_blocks=nb, cache_strides=dyn))
    fails = caches.check("copy_blocks")
    if case.checked:
        got = X.download(flag)
        if got[0] != 1 or got[1:].any():
            fails.append(f"error_flag = {list(got)} after out-of-range "
                         "blocks, want [1, 0, 0, 0]")
        # Only valid pairs: the flag stays 0, the copy changes nothing more.
        X.fill(flag, 0)
        gm = X.upload(np.array(good, np.int64).reshape(-1, 2))
        backend.launch(lambda: k.copy_blocks(kc, vc, gm, flag,
                                             num_blocks=nb,
                                             cache_strides=dyn))
        fails += caches.check("copy_blocks again, valid pairs only")
        if X.download(flag).any():
            fails.append(f"error_flag = {list(X.download(flag))} with valid "
                         "pairs only, want 0")
    assert not fails, "\n".join(fails)


CASE = C.case_by_name(C.COPY_BLOCKS_CASES, "nhd")


@pytest.mark.parametrize("case", [CASE], ids=[CASE.name])
def test_copy_blocks_argument_errors(backend, case):
    import kvgen
    X = backend.X
    caches, _ = setup_caches(backend, case, 4, 1)
    kc, vc = caches.args()
    k = backend.kernel(case.kernels()["copy"])
    with pytest.raises(TypeError, match="int64"):
        k.copy_blocks(kc, vc, X.upload(np.zeros((1, 2), np.int32)))
    # A cache one block short of num_blocks: the runtime's extent check.
    with pytest.raises(kvgen.KvgenError, match="OUT_OF_BOUNDS"):
        k.copy_blocks(kc, vc, X.upload(np.array([[0, 1]], np.int64)),
                      num_blocks=5)
    X.sync()
    assert caches.check("rejected launches") == []
