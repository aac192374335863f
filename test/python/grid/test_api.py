"""The binding's and the runtime's argument checks on every backend:
errors are raised, with the status and text a caller needs, and nothing is
written (the caches equal their reference afterwards). First written for
the H200 (scripts/device_grid.py api_checks).

Run:  python3 -m pytest -q test/python/grid/test_api.py
"""

import numpy as np
import pytest

from grid import cases as C
from grid import harness as H

GRID_GROUP = "api"
CASE = C.case_by_name(C.KV_CASES, "mimo_b16")
FP8_CASE = C.case_by_name(C.KV_CASES, "checked_oob_e4m3")
# Chunked layouts (cases.chunked_cases): vLLM's legacy K + V, aiter's.
CHUNKED_CASES = [C.case_by_name(C.KV_CASES, n) for n in (
    "chunked-vllm-mimo-h4-k192-v128-bs16-bf16-none-K_legacy_k-V_legacy_v-x8"
    "-fused-i64",
    "chunked-aiter-mimo-h4-k192-v128-bs16-bf16-none-K_legacy_k-V_shuffled_v"
    "-x8-fused-i64")]
T, NB = 42, 8


class Setup:
    def __init__(self, backend, case):
        import kvgen
        self.kvgen = kvgen
        X = self.X = backend.X
        self.backend, self.case = backend, case
        lay = case.layout
        gen, rng = X.gen(7), np.random.default_rng(7)
        self.caches = H.Caches(X, case, NB, gen, backend.slack)
        self.rows = H.Rows(X, gen, T, lay.heads, lay.hk, lay.hv, case.io,
                           "dense", "values", lay.dtype)
        self.key, self.value = self.rows.views["k"], self.rows.views["v"]
        self.slots = X.upload(rng.choice(NB * lay.block_size, T,
                                         replace=False).astype(np.int64))
        self.kc, self.vc = self.caches.args()
        ks = case.kernels()
        self.write = backend.kernel(ks["write"])
        self.gather = backend.kernel(ks["gather"])

    def nothing_written(self):
        self.X.sync()
        assert self.caches.check("after the rejected launch") == []


@pytest.fixture
def s(backend, case):
    return Setup(backend, case)


def raises(exc, fn, status=None, text=()):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    if status is not None:
        assert info.value.status_name == status, msg
    for t in text:
        assert t in msg, msg
    return info.value


one_case = pytest.mark.parametrize("case", [CASE], ids=[CASE.name])
# The extent checks, also of chunked layouts: the runtime's extent of a
# chunked side is the harness's (its tensor's) to the byte.
extent_cases = pytest.mark.parametrize(
    "case", [CASE] + CHUNKED_CASES,
    ids=[CASE.name, "chunked-vllm", "chunked-aiter"])
fp8_case = pytest.mark.parametrize("case", [FP8_CASE], ids=[FP8_CASE.name])


@extent_cases
def test_k_cache_one_byte_short(s):
    extent = s.caches.bufs["k"].n
    raises(s.kvgen.KvgenError,
           lambda: s.write.reshape_and_cache(s.key, s.value, s.kc[:-1],
                                             s.vc, s.slots, num_blocks=NB),
           "KVGEN_ERROR_OUT_OF_BOUNDS", (str(extent),))
    s.nothing_written()


@extent_cases
def test_v_cache_short_gather(s):
    lay = s.case.layout
    out = H.Rows(s.X, s.X.gen(3), T, lay.heads, lay.hk, lay.hv, lay.dtype,
                 "dense")
    raises(s.kvgen.KvgenError,
           lambda: s.gather.gather(s.kc, s.vc[:-64], s.slots,
                                   out.views["k"], out.views["v"],
                                   num_blocks=NB),
           "KVGEN_ERROR_OUT_OF_BOUNDS", (str(s.caches.bufs["v"].n),))
    s.nothing_written()
    assert out.check("outputs of the rejected gather", lay.dtype) == []


@pytest.mark.parametrize("lay,text", [
    # x = 7 elements: no divisor of the head size.
    (C.chunked(4, 192, 128, 16, x=7),
     "'k_elem_chunks' chunk size 7 must divide the head size 192"),
    # x = 32 tokens (aiter's V) in blocks of 16.
    (C.chunked(4, 192, 128, 16, "bf16", "aiter", x=32),
     "'v_token_chunks' chunk size 32 must divide block_size 16"),
    # A head stride inside the element chunks' span: rows would overlap.
    (C.chunked(4, 192, 128, 16).replace(k_strides=(12288, 8, 1024)),
     "the head stride 1024 is smaller than"),
    # Chunks in a packed layout.
    (C.chunked(4, 192, 128, 16).replace(packing="packed", v_strides=None),
     "separate layouts only"),
], ids=["elem-chunk-7", "token-chunk-32-of-16", "overlapping-heads",
        "packed"])
def test_chunked_layout_refused(lay, text):
    """Chunked layouts kvgen cannot serve are refused when parsed (the
    runtime's validate), naming the field and its limit."""
    import kvgen
    with pytest.raises(ValueError) as info:
        kvgen.Layout.parse(lay.mlir())
    assert text in str(info.value), str(info.value)


@one_case
def test_misaligned_k_cache(s):
    assert s.write.vector_bytes > 2
    off = s.write.vector_bytes // 2
    raises(s.kvgen.KvgenError,
           lambda: s.write.reshape_and_cache(s.key, s.value, s.kc[off:],
                                             s.vc, s.slots,
                                             num_blocks=NB - 1),
           "KVGEN_ERROR_MISALIGNED")
    s.nothing_written()


@one_case
def test_num_blocks_zero(s):
    raises(s.kvgen.KvgenError,
           lambda: s.write.reshape_and_cache(s.key, s.value, s.kc, s.vc,
                                             s.slots, num_blocks=0),
           "KVGEN_ERROR_INVALID_ARGUMENT")
    s.nothing_written()


@one_case
def test_gather_kernel_as_write(s):
    raises(TypeError, lambda: s.gather.reshape_and_cache(
        s.key, s.value, s.kc, s.vc, s.slots), text=("gather",))
    s.nothing_written()


@one_case
def test_wrong_slot_dtype(s):
    raises(TypeError, lambda: s.write.reshape_and_cache(
        s.key, s.value, s.kc, s.vc, s.X.upload(np.zeros(T, np.int32))),
        text=("slot_mapping",))
    s.nothing_written()


@one_case
def test_wrong_key_shape(s):
    raises(ValueError, lambda: s.write.reshape_and_cache(
        s.value, s.key, s.kc, s.vc, s.slots), text=("key",))
    s.nothing_written()


@one_case
def test_empty_launch(s):
    """A launch with T = 0 does nothing."""
    s.backend.launch(lambda: s.write.reshape_and_cache(
        s.key[:0], s.value[:0], s.kc, s.vc, s.slots[:0]))
    s.nothing_written()


@fp8_case
def test_fp8_missing_scale(s):
    flag = s.X.zeros_i32(1)
    raises(ValueError, lambda: s.write.reshape_and_cache(
        s.key, s.value, s.kc, s.vc, s.slots, num_blocks=NB,
        error_flag=flag), text=("k_scale",))
    s.nothing_written()


@fp8_case
def test_c_api_null_scale(s):
    """The runtime's own check (no binding checks): a raw argument struct
    (the binding's, from the op table) with k_scale = NULL."""
    X, lay = s.X, FP8_CASE.layout
    flag = X.zeros_i32(1)
    a = s.write.args_struct()
    a.key, a.value = X.ptr(s.key), X.ptr(s.value)
    a.key_cache, a.value_cache = X.ptr(s.kc), X.ptr(s.vc)
    a.key_cache_bytes = s.caches.bufs["k"].n
    a.value_cache_bytes = s.caches.bufs["v"].n
    a.slot_mapping, a.error_flag = X.ptr(s.slots), X.ptr(flag)
    a.k_scale = a.v_scale = None
    a.num_tokens, a.num_blocks = T, NB
    a.key_stride_token, a.key_stride_head = lay.heads * lay.hk, lay.hk
    a.value_stride_token, a.value_stride_head = lay.heads * lay.hv, lay.hv
    raises(s.kvgen.KvgenError, lambda: s.write.launch_raw(a),
           "KVGEN_ERROR_INVALID_ARGUMENT", ("k_scale",))
    s.nothing_written()


@one_case
@pytest.mark.backends("cuda")
def test_side_stream_write(s):
    """On a side stream the launch goes to torch's current stream."""
    X = s.X
    torch = X.torch
    st = torch.cuda.Stream(device=X.dev)
    st.wait_stream(torch.cuda.current_stream(X.dev))
    with torch.cuda.stream(st):
        s.write.reshape_and_cache(s.key, s.value, s.kc, s.vc, s.slots,
                                  num_blocks=NB)
    st.synchronize()
    for side, x in (("k", s.key), ("v", s.value)):
        H.scatter(X, s.caches, side, s.slots, x, None)
    assert s.caches.check("side-stream write") == []
