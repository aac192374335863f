"""reshape_and_cache and gather, bit for bit, on every backend: each
KVCase of cases.KV_CASES at each of its T (harness.run_kv_case).

Per item: the write, a raw gather of the written slots and a dequantizing
gather of fresh slots; after each launch the whole of every buffer must
equal the reference (caches incl. canaries and unwritten rows, the inputs
unchanged, output rows of padding slots and the gaps of strided views
untouched), checked kernels must set error_flag exactly when a slot is out
of range; checked kernels given only in-range slots leave it at 0.

Run:  python3 -m pytest -q test/python/grid/test_kv_cache.py
      (--backend cuda --bundle DIR on a GPU; see README.md)
"""

import pytest

from grid import case_params
from grid import cases as C
from grid import harness as H


@pytest.mark.parametrize("case,T", case_params(C.KV_CASES))
def test_write_gather(backend, case, T):
    fails, checks = H.run_kv_case(backend, case, T)
    assert checks >= 6, f"only {checks} checks ran"
    assert not fails, "\n".join(fails)
