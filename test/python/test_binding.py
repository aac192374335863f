"""Tests of the Python binding (python/kvgen) on the HOST backend, no GPU.

A small bundle is emitted for target `host` with build/bin/kvgen emit into a
temporary directory, loaded through kvgen.Context("host"), and the kernels
are run on numpy arrays. Results are compared bit for bit with a numpy
reference written here (element offsets from the layout's dense strides,
fp8 through ml_dtypes). Skipped, with the reason, when build/bin/kvgen or
the runtime library is missing.

Run:  python3 -m pytest -q test/python/test_binding.py
"""

import ctypes
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
from kvgen_emit import emit_all, host_context  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

H, DK, DV, BS = 2, 64, 32, 16
BF16 = kvgen.Layout(H, DK, DV, BS, dtype="bf16")
FP8 = kvgen.Layout(H, DK, DV, BS, dtype="f8E4M3FN", scale="per_head",
                   order="hnd")
PACKED = kvgen.Layout(H, DK, DV, BS, dtype="bf16", packing="packed")
DYN = kvgen.Layout(H, DK, DV, BS, dtype="bf16",
                   k_strides=(None, None, None), v_strides=(None, None, None))

# (op, layout, io, slots, checked, dequantize)
SPECS = [
    ("reshape_and_cache", BF16, "bf16", "i64", False, False),
    ("gather", BF16, "bf16", "i64", False, False),
    ("reshape_and_cache", BF16, "bf16", "i32", True, False),
    ("reshape_and_cache", FP8, "bf16", "i64", False, False),
    ("gather", FP8, "bf16", "i64", False, True),
    ("reshape_and_cache", PACKED, "bf16", "i64", False, False),
    ("reshape_and_cache", DYN, "bf16", "i64", False, False),
    # The default kernel (checked): issue 12, case 4.
    ("reshape_and_cache", BF16, "bf16", "i64", True, False),
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, kvgen_cli):
    d = tmp_path_factory.mktemp("binding")
    emit_all(d, [(lay, op, ("--io", io, "--slots", slots) +
                  (() if checked else ("--unchecked",)) +
                  (("--dequantize",) if dq else ()))
                 for op, lay, io, slots, checked, dq in SPECS])
    return d


@pytest.fixture(scope="module")
def ctx(bundle, kernel_cache):
    c = host_context(bundle / "bundle", kernel_cache)
    yield c
    c.close()


def spec_kernel(ctx, i):
    op, lay, io, slots, checked, dq = SPECS[i]
    return ctx.kernel(op, lay, io, slots, checked, dq)


# -- numpy reference ---------------------------------------------------------

def dense_strides(lay, side):
    w = lay.head_size_k + lay.head_size_v if lay.packing == "packed" else \
        (lay.head_size_k if side == "k" else lay.head_size_v)
    h, bs = lay.num_kv_heads, lay.block_size
    if lay.order == "nhd":
        return (bs * h * w, h * w, w)
    return (bs * h * w, w, bs * w)


def offsets(lay, side, slots, strides=None):
    b, t, h = strides or dense_strides(lay, side)
    d = lay.head_size_k if side == "k" else lay.head_size_v
    base = lay.head_size_k if (side == "v" and lay.packing == "packed") else 0
    s = np.asarray(slots, np.int64)
    row = (s // lay.block_size) * b + (s % lay.block_size) * t
    return (row[:, None, None] + (np.arange(lay.num_kv_heads) * h)[None, :,
                                                                     None]
            + base + np.arange(d)[None, None, :])


def extent(lay, side, nb, strides=None):
    return int(offsets(lay, side, [nb * lay.block_size - 1],
                       strides).max()) + 1


def make_inputs(rng, T):
    k = (rng.standard_normal((T, H, DK), np.float32) * 3).astype(
        ml_dtypes.bfloat16)
    v = (rng.standard_normal((T, H, DV), np.float32) * 3).astype(
        ml_dtypes.bfloat16)
    return k, v


def make_slots(rng, T, nb, dtype=np.int64):
    s = rng.choice(nb * BS, T, replace=False).astype(dtype)
    s[3::5] = -1
    return s


# -- tests -------------------------------------------------------------------

def test_layout_reports_its_chunks():
    """Layout.chunks (kvgen_component_info's chunk fields) gives what the
    text states: vLLM's legacy K chunks and V element stride; every
    default component Chunks(1, 0, 0, 0, 0)."""
    lay = kvgen.Layout.parse(
        "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
        "block_size = 16, dtype = bf16, k_strides = [12288, 8, 3072], "
        "k_elem_chunks = [8, 128], v_strides = [8192, 1, 2048], "
        "v_token_chunks = [4, 512], v_elem_stride = 4")
    assert lay.chunks("k") == kvgen.Chunks(1, 0, 0, 8, 128)
    assert lay.chunks("v") == kvgen.Chunks(4, 4, 512, 0, 0)
    assert lay.chunks("v").token_chunk_stride == 512
    assert not lay.chunks("k").is_default
    assert lay.strides("k") == (12288, 8, 3072)
    plain = kvgen.Layout(4, 192, 128, 16)
    assert plain.chunks("k").is_default and plain.chunks("v").is_default
    # The extent follows the chunks: 2 blocks of 4 x 192 x 16 K elements.
    assert lay.extent_bytes("k", 2) == 2 * 12288 * 2


def test_context_properties(ctx):
    assert ctx.backend == "host"
    assert ctx.target == "host"
    assert ctx.cache_dir.endswith("cache")
    assert kvgen.version()
    assert kvgen.__version__ == kvgen.version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvgen.__version__)


def test_roundtrip_bf16(ctx):
    rng = np.random.default_rng(1)
    T, nb = 37, 6
    key, value = make_inputs(rng, T)
    slots = make_slots(rng, T, nb)
    ek, ev = extent(BF16, "k", nb), extent(BF16, "v", nb)
    kc = rng.integers(0, 2**16, ek, dtype=np.uint16)
    vc = rng.integers(0, 2**16, ev, dtype=np.uint16)
    want_k, want_v = kc.copy(), vc.copy()
    ok = slots >= 0
    want_k[offsets(BF16, "k", slots[ok])] = key[ok].view(np.uint16)
    want_v[offsets(BF16, "v", slots[ok])] = value[ok].view(np.uint16)

    w = spec_kernel(ctx, 0)
    assert w.op == "reshape_and_cache" and w.io_dtype == "bf16"
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
    assert np.array_equal(kc, want_k)
    assert np.array_equal(vc, want_v)

    # Gather back into strided views of one fused output; padding rows and
    # the gap column stay untouched.
    g = spec_kernel(ctx, 1)
    fused = np.full((T, H * DK + H * DV + 3), 0x7777, np.uint16)
    ko = fused[:, :H * DK].reshape(T, H, DK)
    vo = fused[:, H * DK + 3:].reshape(T, H, DV)
    assert np.shares_memory(ko, fused) and np.shares_memory(vo, fused)
    g.gather(kc, vc, slots, ko, vo)  # num_blocks inferred from the caches
    want = np.full_like(fused, 0x7777)
    want[ok, :H * DK] = key[ok].view(np.uint16).reshape(-1, H * DK)
    want[ok, H * DK + 3:] = value[ok].view(np.uint16).reshape(-1, H * DV)
    assert np.array_equal(fused, want)


def test_fp8_per_head_and_dequantize(ctx):
    rng = np.random.default_rng(2)
    T, nb = 29, 4
    key, value = make_inputs(rng, T)
    key[0, 0, :4] = [1e4, -1e4, 1e-9, -1e-9]  # saturate / underflow
    slots = make_slots(rng, T, nb)
    ks = rng.uniform(0.05, 0.5, H).astype(np.float32)
    vs = rng.uniform(0.05, 0.5, H).astype(np.float32)
    kc = np.zeros(extent(FP8, "k", nb), np.uint8)
    vc = np.zeros(extent(FP8, "v", nb), np.uint8)
    spec_kernel(ctx, 3).reshape_and_cache(key, value, kc, vc, slots,
                                          k_scale=ks, v_scale=vs,
                                          num_blocks=nb)
    ok = slots >= 0
    for x, c, s, side in ((key, kc, ks, "k"), (value, vc, vs, "v")):
        q = np.clip(x[ok].astype(np.float32) / s[None, :, None], -448, 448)
        q = q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        assert np.array_equal(c[offsets(FP8, side, slots[ok])], q), side
        untouched = np.ones(c.size, bool)
        untouched[offsets(FP8, side, slots[ok]).ravel()] = False
        assert not c[untouched].any()
    ko = np.zeros((T, H, DK), ml_dtypes.bfloat16)
    vo = np.zeros((T, H, DV), ml_dtypes.bfloat16)
    g = spec_kernel(ctx, 4)
    assert g.dequantize
    with pytest.raises(ValueError, match="k_scale"):
        g.gather(kc, vc, slots, ko, vo, num_blocks=nb)
    g.gather(kc, vc, slots, ko, vo, k_scale=ks, v_scale=vs, num_blocks=nb)
    for o, c, s, side in ((ko, kc, ks, "k"), (vo, vc, vs, "v")):
        q = c[offsets(FP8, side, slots[ok])].view(ml_dtypes.float8_e4m3fn)
        want = (q.astype(np.float32) * s[None, :, None]).astype(
            ml_dtypes.bfloat16)
        assert np.array_equal(o[ok].view(np.uint16), want.view(np.uint16))
        assert not o[~ok].view(np.uint16).any()


def test_packed(ctx):
    rng = np.random.default_rng(3)
    T, nb = 20, 3
    key, value = make_inputs(rng, T)
    slots = make_slots(rng, T, nb)
    n = max(extent(PACKED, "k", nb), extent(PACKED, "v", nb))
    c = np.zeros(n, np.uint16)
    spec_kernel(ctx, 5).reshape_and_cache(key, value, c, None, slots)
    ok = slots >= 0
    want = np.zeros_like(c)
    want[offsets(PACKED, "k", slots[ok])] = key[ok].view(np.uint16)
    want[offsets(PACKED, "v", slots[ok])] = value[ok].view(np.uint16)
    assert np.array_equal(c, want)


def test_dynamic_strides(ctx):
    rng = np.random.default_rng(4)
    T, nb = 12, 3
    key, value = make_inputs(rng, T)
    slots = make_slots(rng, T, nb)
    # Blocks padded by 40 elements.
    ks = (BS * H * DK + 40, H * DK, DK)
    vs = (BS * H * DV + 40, H * DV, DV)
    kc = np.zeros(extent(DYN, "k", nb, ks), np.uint16)
    vc = np.zeros(extent(DYN, "v", nb, vs), np.uint16)
    w = spec_kernel(ctx, 6)
    with pytest.raises(ValueError, match="cache_strides"):
        w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb,
                        cache_strides=(ks, vs))
    ok = slots >= 0
    want_k, want_v = np.zeros_like(kc), np.zeros_like(vc)
    want_k[offsets(DYN, "k", slots[ok], ks)] = key[ok].view(np.uint16)
    want_v[offsets(DYN, "v", slots[ok], vs)] = value[ok].view(np.uint16)
    assert np.array_equal(kc, want_k) and np.array_equal(vc, want_v)


def test_checked_out_of_range(ctx):
    rng = np.random.default_rng(5)
    T, nb = 10, 2
    key, value = make_inputs(rng, T)
    slots = make_slots(rng, T, nb, np.int32)
    slots[1] = nb * BS  # first slot past the cache
    kc = np.zeros(extent(BF16, "k", nb), np.uint16)
    vc = np.zeros(extent(BF16, "v", nb), np.uint16)
    w = spec_kernel(ctx, 2)
    assert w.checked and not w.unchecked
    flag = np.zeros(1, np.int32)
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb,
                        error_flag=flag)
    assert flag[0] == 1
    ok = (slots >= 0) & (slots < nb * BS)
    want_k = np.zeros_like(kc)
    want_k[offsets(BF16, "k", slots[ok])] = key[ok].view(np.uint16)
    assert np.array_equal(kc, want_k)


def test_default_kernel_never_writes_past_the_cache(ctx):
    """Issue 12, case 4: the default kernel given slot = num_blocks *
    block_size overwrote the bytes after the K and V caches and returned
    success; slot 2^40 crashed the process. Now such slots are skipped and
    reported through the context's error word (no error_flag given)."""
    rng = np.random.default_rng(7)
    T, nb, slack = 12, 3, 4096
    key, value = make_inputs(rng, T)
    ek, ev = extent(BF16, "k", nb), extent(BF16, "v", nb)
    w = spec_kernel(ctx, 7)
    assert w.checked
    for bad in (nb * BS, nb * BS + 1, 1 << 40):
        slots = make_slots(rng, T, nb)
        slots[4] = bad
        # Canaries right after each cache's extent.
        kbuf = np.full(ek + slack, 0xA5A5, np.uint16)
        vbuf = np.full(ev + slack, 0xA5A5, np.uint16)
        kc, vc = kbuf[:ek], vbuf[:ev]
        with pytest.raises(kvgen.KvgenError) as e:
            w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
        assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
        assert w.name in e.value.message
        assert (kbuf[ek:] == 0xA5A5).all() and (vbuf[ev:] == 0xA5A5).all()
        ok = (slots >= 0) & (slots < nb * BS)
        want_k = np.full(ek, 0xA5A5, np.uint16)
        want_k[offsets(BF16, "k", slots[ok])] = key[ok].view(np.uint16)
        assert np.array_equal(kc, want_k), "the in-range slots are written"
        # The check cleared the word: in-range slots report nothing.
        w.reshape_and_cache(key, value, kc, vc, np.where(ok, slots, -1),
                            num_blocks=nb)
        ctx.check()
    # Deferred: on request the launch does not check, ctx.check() does.
    slots[4] = nb * BS
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb, check=False)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        ctx.synchronize()
    ctx.check()  # cleared


def test_out_of_bounds_cache_raises(ctx):
    rng = np.random.default_rng(6)
    T, nb = 8, 4
    key, value = make_inputs(rng, T)
    slots = make_slots(rng, T, nb)
    need = extent(BF16, "k", nb) * 2  # bytes
    kc = np.zeros(need // 2 - 1, np.uint16)  # one element short
    vc = np.zeros(extent(BF16, "v", nb), np.uint16)
    w = spec_kernel(ctx, 0)
    with pytest.raises(kvgen.KvgenError) as e:
        w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
    assert e.value.status_name == "KVGEN_ERROR_OUT_OF_BOUNDS"
    assert str(need) in str(e.value), str(e.value)  # names the extent
    assert not kc.any() and not vc.any()


def test_misaligned_cache_raises(ctx):
    rng = np.random.default_rng(7)
    key, value = make_inputs(rng, 4)
    w = spec_kernel(ctx, 0)
    if w.vector_bytes <= 2:
        pytest.skip("kernel needs no more than element alignment")
    buf = np.zeros(extent(BF16, "k", 2) + 64, np.uint16)
    kc = buf[1:]  # 2 bytes past an aligned address
    assert kc.ctypes.data % w.vector_bytes
    vc = np.zeros(extent(BF16, "v", 2), np.uint16)
    with pytest.raises(kvgen.KvgenError) as e:
        w.reshape_and_cache(key, value, kc, vc, np.arange(4, dtype=np.int64),
                            num_blocks=2)
    assert e.value.status_name == "KVGEN_ERROR_MISALIGNED"
    assert "key_cache" in e.value.message


def test_argument_errors(ctx):
    rng = np.random.default_rng(8)
    key, value = make_inputs(rng, 4)
    kc = np.zeros(extent(BF16, "k", 2), np.uint16)
    vc = np.zeros(extent(BF16, "v", 2), np.uint16)
    slots = np.arange(4, dtype=np.int64)
    w = spec_kernel(ctx, 0)
    with pytest.raises(TypeError, match="int64|i64"):
        w.reshape_and_cache(key, value, kc, vc, slots.astype(np.int32))
    with pytest.raises(TypeError, match="bf16"):
        w.reshape_and_cache(key.astype(np.float32), value, kc, vc, slots)
    with pytest.raises(ValueError, match="shape"):
        w.reshape_and_cache(value, key, kc, vc, slots)
    with pytest.raises(TypeError, match="gather"):
        w.gather(kc, vc, slots, key, value)
    with pytest.raises(TypeError, match="torch tensor or a numpy"):
        w.reshape_and_cache(key.tolist(), value, kc, vc, slots)
    # T = 0 launches nothing.
    w.reshape_and_cache(key[:0], value[:0], kc, vc, slots[:0])
    assert not kc.any()


def test_lookup_errors_and_names(ctx, bundle):
    # With the generator library turned off, a spec no bundle has is not
    # found (test_generator_library.py covers the library).
    kvgen.set_generator_path("")
    try:
        with pytest.raises(kvgen.KvgenError) as e:
            ctx.kernel("gather", kvgen.Layout(3, 64, 64, 16), "bf16")
    finally:
        kvgen.set_generator_path(None)
    assert e.value.status_name == "KVGEN_ERROR_NOT_FOUND"
    assert "num_kv_heads = 3" in e.value.message
    assert "no generator" in e.value.message
    with pytest.raises(kvgen.KvgenError) as e:
        ctx.load_bundle(str(bundle / "no-such-dir"))
    assert e.value.status_name == "KVGEN_ERROR_BUNDLE"
    w = spec_kernel(ctx, 0)
    byname = ctx.kernel_by_name(w.name)
    assert byname.name == w.name and byname.io_dtype == "bf16"
    assert byname.slot_dtype == "i64" and byname.layout == BF16
    assert w.layout.text == BF16.text  # the runtime's canonical text
    with pytest.raises(kvgen.KvgenError, match="NOT_FOUND"):
        ctx.kernel_by_name("kvgen_no_such_kernel")


def test_stats_count_hits(ctx):
    before = ctx.stats()
    spec_kernel(ctx, 1)
    op, lay, io, slots, checked, dq = SPECS[1]
    ctx._kernels.clear()  # bypass the binding's memo: ask the runtime
    ctx.kernel(op, lay.text, io, slots, checked, dq)
    after = ctx.stats()
    assert after["memory_hits"] > before["memory_hits"]
    assert after["compiles"] + after["disk_hits"] >= 1
    assert set(after) == {"memory_hits", "disk_hits", "compiles",
                          "disk_writes", "evictions", "last_compile_ms",
                          "last_load_ms"}


def test_layout_text_roundtrip():
    for lay in (BF16, FP8, PACKED, DYN):
        assert kvgen.Layout.parse(lay.text) == lay
        assert kvgen.Layout.parse(f"#kv.layout<{lay.text}>") == lay
    assert "k_strides = [?, ?, ?]" in DYN.text
    assert DYN.extent_bytes("k", 2, (100, 10, 1)) == \
        (100 + 15 * 10 + 1 + DK) * 2
    assert BF16.max_blocks("k", BF16.extent_bytes("k", 5)) == 5
    with pytest.raises(ValueError):
        kvgen.Layout(1, 1, 1, 1, dtype="f64")


def test_status_names_match_the_library():
    """The binding's status names are the library's kvgen_status_string."""
    try:
        lib = kvgen._capi.lib()
    except OSError as e:
        pytest.skip(f"runtime library not loadable: {e}")
    names = kvgen._capi.STATUS_NAMES
    assert names[13] == "KVGEN_ERROR_OUT_OF_MEMORY"
    for code, name in names.items():
        assert lib.kvgen_status_string(code).decode() == name
    assert lib.kvgen_status_string(max(names) + 1) == b"KVGEN_ERROR_UNKNOWN"


def test_alloc_failure_is_out_of_memory(ctx):
    """Memory that is not there raises KVGEN_ERROR_OUT_OF_MEMORY."""
    with pytest.raises(kvgen.KvgenError, match="out of host memory") as e:
        ctx.alloc(1 << 62)
    assert e.value.status_name == "KVGEN_ERROR_OUT_OF_MEMORY"


def test_layout_components_through_the_runtime():
    """Layouts are parsed and checked by the runtime (kvgen_layout_parse):
    named components, their strides and extents, and its messages."""
    mla = kvgen.Layout(1, components=[("kv_c", 512), ("k_pe", 64)],
                       block_size=64, packing="packed", dtype="f8E4M3FN")
    assert mla.components == ("kv_c", "k_pe") and not mla.is_kv
    assert mla.head_size_k is None
    assert "components = [kv_c: 512, k_pe: 64]" in mla.text
    assert mla.scale == "per_tensor"  # the fp8 default
    assert mla.base("k_pe") == 512 and mla.base(0) == 0
    assert mla.strides("k_pe") == (64 * 576, 576, 576)
    # Row 63 of block 2 ends at its last k_pe element.
    assert mla.extent_bytes("k_pe", 3) == (2 * 64 + 63) * 576 + 576
    assert kvgen.Layout.parse(mla.text) == mla
    kv = kvgen.Layout.parse("num_kv_heads = 4, components = [k: 192, "
                            "v: 128], block_size = 16, dtype = bf16")
    assert kv.is_kv and kv == kvgen.Layout(4, 192, 128, 16)
    with pytest.raises(ValueError, match="component 'a' given twice"):
        kvgen.Layout(1, components=[("a", 8), ("a", 8)], block_size=1)
    with pytest.raises(ValueError, match="no component 'x'"):
        mla.head_size("x")


def test_op_structs_match_library():
    """The binding builds every op's argument struct from the runtime's op
    table (kvgen_op_arg); ctypes must place each field where C does."""
    ops = kvgen.ops()
    assert {"reshape_and_cache", "gather"} <= set(ops)
    for op in ops.values():
        st = op.args_struct
        assert ctypes.sizeof(st) == op.args_size, op.name
        names = [a.name for a in op.args]
        assert [f for f, _ in st._fields_] == names
        for a in op.args:
            assert getattr(st, a.name).offset == a.offset, (op.name, a.name)
            assert getattr(st, a.name).size == a.size, (op.name, a.name)
        # Roles the binding fills by name: rows have their two strides,
        # caches their size.
        for a in op.args:
            if a.role == "rows":
                assert op.arg(a.name + "_stride_token").role == "row_stride"
                assert op.arg(a.name + "_stride_head").role == "row_stride"
            if a.role == "cache":
                assert op.arg(a.name + "_bytes").role == "cache_bytes"
        assert op.arg(op.work_from) is not None, op.name


def test_kernel_options_and_unknown_option(ctx):
    k = spec_kernel(ctx, 2)
    assert k.options == {"io": "bf16", "slots": "i32", "unchecked": "0"}
    assert k.checked and k.slot_dtype == "i32"
    with pytest.raises(ValueError, match="no option 'dequantize'"):
        ctx.kernel("reshape_and_cache", BF16, dequantize=True)
    with pytest.raises(ValueError, match="must be one of"):
        ctx.kernel("reshape_and_kache", BF16)


def test_prepare_then_launch_raw_matches_launch(tmp_path, kernel_cache):
    """Kernel.prepare does launch()'s checks and filling without launching;
    launch_raw of its struct writes what launch() writes."""
    kv = KVGEN
    if not kv.is_file():
        pytest.skip(f"{kv} not built")
    lay = kvgen.Layout(4, 192, 128, 16)
    (tmp_path / "l.mlir").write_text(f"#kv.layout<{lay.text}>\n")
    subprocess.run([str(kv), "emit", "--layout", str(tmp_path / "l.mlir"),
                    "--op", "reshape_and_cache", "--io", "bf16", "--target",
                    "host", "--bundle", str(tmp_path / "b")], check=True,
                   capture_output=True)
    ctx = kvgen.Context("host", cache_dir=kernel_cache)
    ctx.load_bundle(str(tmp_path / "b"))
    k = ctx.kernel("reshape_and_cache", lay, io="bf16")
    rng = np.random.default_rng(3)
    key = rng.integers(0, 1 << 15, (5, 4, 192)).astype(np.uint16)
    val = rng.integers(0, 1 << 15, (5, 4, 128)).astype(np.uint16)
    nb = 4
    caches = [np.zeros(lay.extent_bytes(c, nb) // 2, np.uint16)
              for c in ("k", "v")]
    slots = np.array([0, 17, 3, 40, 63], np.int64)
    args, stream = k.prepare(key, val, caches[0], caches[1], slots,
                             num_blocks=nb)
    assert not caches[0].any() and not caches[1].any()  # nothing launched
    k.launch_raw(args, stream)
    want = [np.zeros_like(c) for c in caches]
    k.reshape_and_cache(key, val, want[0], want[1], slots, num_blocks=nb)
    assert want[0].any()
    np.testing.assert_array_equal(caches[0], want[0])
    np.testing.assert_array_equal(caches[1], want[1])
    # The same checks as launch(): a wrong row shape is refused.
    with pytest.raises(ValueError, match="shape"):
        k.prepare(key[:, :, :128], val, caches[0], caches[1], slots)
    ctx.close()


# -- argument safety (fresh-user review) --------------------------------------

def _write_setup(ctx, nb=2):
    rng = np.random.default_rng(21)
    key, value = make_inputs(rng, 4)
    kc = np.zeros(extent(BF16, "k", nb), np.uint16)
    vc = np.zeros(extent(BF16, "v", nb), np.uint16)
    return key, value, kc, vc, np.arange(4, dtype=np.int64)


def test_block_mapping_must_be_n_by_2_int64(ctx):
    """copy_blocks / swap_blocks read block_mapping as [N, 2] int64 rows: a
    1-D view (whose leading dim counted pairs, so the kernel read past the
    view), [N, 3] or a column-major array raise before any launch."""
    lay = kvgen.Layout(H, DK, DV, BS, dtype="bf16")
    nb = 4
    rng = np.random.default_rng(22)
    kc = rng.integers(0, 1 << 16, extent(lay, "k", nb), dtype=np.uint16)
    vc = rng.integers(0, 1 << 16, extent(lay, "v", nb), dtype=np.uint16)
    k0, v0 = kc.copy(), vc.copy()
    cp = ctx.kernel("copy_blocks", lay)
    backing = np.array([0, 1, 2, 3], dtype=np.int64)
    bad = [(backing[:2], r"block_mapping has shape \[2\] and dtype i64, "
                         r"need \[N, 2\] int64"),
           (np.array([[0, 1, 2]], np.int64), r"shape \[1, 3\]"),
           (np.array([[[0, 1]]], np.int64), r"shape \[1, 1, 2\]"),
           (np.asfortranarray(np.array([[0, 1], [2, 3], [1, 2]], np.int64)),
            "must be contiguous"),
           (np.array([[0, 1], [9, 9], [2, 3]], np.int64)[::2],
            "must be contiguous")]
    for m, msg in bad:
        with pytest.raises(ValueError, match=msg):
            cp.copy_blocks(kc, vc, m, num_blocks=nb)
    with pytest.raises(TypeError, match=r"need \[N, 2\] int64"):
        cp.copy_blocks(kc, vc, np.array([[0, 1]], np.int32), num_blocks=nb)
    assert np.array_equal(kc, k0) and np.array_equal(vc, v0)  # no launch
    sw = ctx.kernel("swap_blocks", lay)
    dk, dv = kc.copy(), vc.copy()
    with pytest.raises(ValueError, match=r"block_mapping has shape \[2\]"):
        sw.swap_blocks(kc, vc, dk, dv, backing[:2], num_blocks=(nb, nb))
    assert np.array_equal(dk, k0) and np.array_equal(dv, v0)
    # An [N, 2] row-major mapping still copies.
    cp.copy_blocks(kc, vc, np.array([[0, 1]], np.int64), num_blocks=nb)
    per_block = BS * H * DK
    assert np.array_equal(kc[per_block:2 * per_block], k0[:per_block])
    assert np.array_equal(kc[2 * per_block:], k0[2 * per_block:])


def test_read_only_outputs_are_refused(ctx):
    """Arrays the kernel writes (non-const pointer fields of the op table:
    caches of writes / copies, gather outputs, error_flag) must be
    writeable; a read-only one (np.frombuffer of bytes, a read-only mmap)
    raises ValueError and nothing is written. Read-only inputs are fine."""
    key, value, kc, vc, slots = _write_setup(ctx)
    w = spec_kernel(ctx, 0)
    raw = bytes(kc.nbytes)
    ro = np.frombuffer(raw, dtype=np.uint16)
    assert not ro.flags.writeable
    with pytest.raises(ValueError, match="key_cache: a read-only array"):
        w.reshape_and_cache(key, value, ro, vc, slots, num_blocks=2)
    assert raw == bytes(kc.nbytes) and not vc.any()  # immutable bytes kept
    ro_v = vc.copy()
    ro_v.flags.writeable = False
    with pytest.raises(ValueError, match="value_cache: a read-only array"):
        w.reshape_and_cache(key, value, kc, ro_v, slots, num_blocks=2)
    assert not kc.any()
    flag = np.zeros(1, np.int32)
    flag.flags.writeable = False
    with pytest.raises(ValueError, match="error_flag: a read-only array"):
        spec_kernel(ctx, 2).reshape_and_cache(
            key, value, kc, vc, slots.astype(np.int32), num_blocks=2,
            error_flag=flag)
    # Read-only inputs (rows, slots) are only read.
    for x in (key, value, slots):
        x.flags.writeable = False
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=2)
    assert kc.any()
    # Gather: the outputs are written, the caches only read.
    kc.flags.writeable = vc.flags.writeable = False
    ko = np.zeros((4, H, DK), np.uint16)
    vo = np.zeros((4, H, DV), np.uint16)
    vo.flags.writeable = False
    g = spec_kernel(ctx, 1)
    with pytest.raises(ValueError, match="value_out: a read-only array"):
        g.gather(kc, vc, slots, ko, vo, num_blocks=2)
    assert not ko.any()
    vo = np.zeros_like(vo)
    g.gather(kc, vc, slots, ko, vo, num_blocks=2)
    assert np.array_equal(ko, key.view(np.uint16))
    # swap_blocks: the dst caches are written, the src caches read.
    sw = ctx.kernel("swap_blocks", BF16)
    m = np.array([[0, 1]], np.int64)
    dk, dv = np.zeros_like(kc), np.zeros_like(vc)
    dk.flags.writeable = False
    with pytest.raises(ValueError, match="dst_key_cache: a read-only"):
        sw.swap_blocks(kc, vc, dk, dv, m, num_blocks=(2, 2))
    dk = np.zeros_like(kc)
    sw.swap_blocks(kc, vc, dk, dv, m, num_blocks=(2, 2))
    assert dk.any()


def test_flag_options_take_bools_only(ctx):
    """A truthy string no longer turns a flag on (unchecked="no" gave an
    unchecked kernel): flags take bool, numpy bool or 0 / 1; anything else
    raises TypeError naming the option."""
    for bad in ("no", "yes", "0", None, 2, 1.0):
        with pytest.raises(TypeError, match="option unchecked"):
            ctx.kernel("reshape_and_cache", BF16, unchecked=bad)
    with pytest.raises(TypeError, match="option checked"):
        ctx.kernel("reshape_and_cache", BF16, checked="no")
    with pytest.raises(TypeError, match="option dequantize"):
        ctx.kernel("gather", FP8, "bf16", dequantize="no")
    for on in (True, 1, np.True_):
        k = ctx.kernel("reshape_and_cache", BF16, "bf16", unchecked=on)
        assert k.unchecked
    for off in (False, 0, np.False_):
        k = ctx.kernel("reshape_and_cache", BF16, "bf16", unchecked=off)
        assert k.checked
    assert ctx.kernel("gather", FP8, "bf16", dequantize=np.True_).dequantize


def test_cache_of_the_layout_form_must_match_the_layout(ctx):
    """A contiguous 4-D cache of the layout's form ([N, block_size, H, D]
    for nhd) must have the component's head size (it was taken as a raw
    buffer: a V cache of K's width, or K and V swapped, was accepted) and
    the layout's order; 1-D raw buffers and the right shapes still pass."""
    rng = np.random.default_rng(23)
    T, nb = 4, 3
    key, value = make_inputs(rng, T)
    slots = np.arange(T, dtype=np.int64)
    w = spec_kernel(ctx, 0)  # BF16: nhd, K 64, V 32
    kc = np.zeros((nb, BS, H, DK), ml_dtypes.bfloat16)
    vc = np.zeros((nb, BS, H, DV), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"value_cache: shape \[3, 16, 2, "
                                         r"64\] .*need \[N, 16, 2, 32\]"):
        w.reshape_and_cache(key, value, kc,
                            np.zeros((nb, BS, H, DK), ml_dtypes.bfloat16),
                            slots)
    with pytest.raises(ValueError, match=r"key_cache: shape \[3, 16, 2, 32\]"
                                         r" .*component k"):
        w.reshape_and_cache(key, value, vc, kc, slots)  # swapped
    with pytest.raises(ValueError, match=r"need \[N, 16, 2, 64\]"):
        w.reshape_and_cache(key, value,
                            np.zeros((nb, H, BS, DK), ml_dtypes.bfloat16),
                            vc, slots)  # hnd-shaped for an nhd layout
    assert not kc.view(np.uint16).any() and not vc.view(np.uint16).any()
    w.reshape_and_cache(key, value, kc, vc, slots)
    assert np.array_equal(kc.view(np.uint16)[0, :T], key.view(np.uint16))
    assert np.array_equal(vc.view(np.uint16)[0, :T], value.view(np.uint16))
    # hnd (FP8 layout: uint8 bits) and packed: their own forms pass.
    ks = np.ones(H, np.float32)
    f = spec_kernel(ctx, 3)
    f.reshape_and_cache(key, value, np.zeros((nb, H, BS, DK), np.uint8),
                        np.zeros((nb, H, BS, DV), np.uint8), slots,
                        k_scale=ks, v_scale=ks)
    with pytest.raises(ValueError, match=r"need \[N, 2, 16, 32\]"):
        f.reshape_and_cache(key, value, np.zeros((nb, H, BS, DK), np.uint8),
                            np.zeros((nb, H, BS, DK), np.uint8), slots,
                            k_scale=ks, v_scale=ks)
    p = spec_kernel(ctx, 5)
    pc = np.zeros((nb, BS, H, DK + DV), ml_dtypes.bfloat16)
    p.reshape_and_cache(key, value, pc, None, slots)
    assert pc.view(np.uint16).any()
    with pytest.raises(ValueError, match=r"packed row of k \+ v"):
        p.reshape_and_cache(key, value, kc, None, slots)


# -- pointers hold what the kernel touches (issue 26, rows 3 and 4) -----------

def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def test_pointer_arguments_hold_what_the_kernel_touches(ctx):
    """Issue 26, row 3: a 0-element error_flag (buf[4:4]) was accepted and a
    skipped slot wrote 4 bytes at its pointer, outside the array. Every
    array the binding passes as a plain pointer must hold the elements the
    kernel addresses from it, consecutively: error_flag 1 int32, k_scale /
    v_scale 1 (per_tensor) or num_kv_heads (per_head) contiguous float32.
    Otherwise ValueError naming the argument, nothing launched (canaries
    around the flag, caches untouched); numpy arrays and torch tensors
    alike."""
    rng = np.random.default_rng(31)
    T, nb = 6, 2
    key, value = make_inputs(rng, T)
    slots = make_slots(rng, T, nb, np.int32)
    slots[1] = nb * BS  # out of range: the kernel would set error_flag[0]
    kc = np.zeros(extent(BF16, "k", nb), np.uint16)
    vc = np.zeros(extent(BF16, "v", nb), np.uint16)
    w = spec_kernel(ctx, 2)  # checked, i32 slots
    assert w.checked
    torch = _torch_or_none()
    buf = np.full(8, 0x5A5A5A5A, np.int32)
    flags = [buf[4:4], buf[:0], np.zeros((0, 3), np.int32)]
    if torch is not None:
        tbuf = torch.full((8,), 0x5A5A5A5A, dtype=torch.int32)
        flags.append(tbuf[4:4])
    for flag in flags:
        with pytest.raises(ValueError, match=r"error_flag: .*0 elements.*"
                                             r"1 int32"):
            w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb,
                                error_flag=flag)
        assert (buf == 0x5A5A5A5A).all()
        assert not kc.any() and not vc.any(), "nothing was launched"
    if torch is not None:
        assert (tbuf == 0x5A5A5A5A).all()
    # One int32 is enough, whatever the array's shape or strides. Zeroed
    # first: kernels or their kvgen_error_bit bits into the flag.
    flag = buf[2:3]
    flag[0] = 0
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb,
                        error_flag=flag)
    assert buf[2] == 1 and (np.delete(buf, 2) == 0x5A5A5A5A).all()

    # Per-head scales: num_kv_heads consecutive float32.
    key2, value2 = make_inputs(rng, T)
    slots2 = make_slots(rng, T, nb)
    kc8 = np.zeros(extent(FP8, "k", nb), np.uint8)
    vc8 = np.zeros(extent(FP8, "v", nb), np.uint8)
    f = spec_kernel(ctx, 3)  # per_head fp8
    good = np.full(H, 0.25, np.float32)
    strided = np.array([0.25, 1e30] * H, np.float32)[::2]  # H elements
    assert strided.shape == (H,) and not strided.flags.c_contiguous
    bad = [(strided, r"k_scale: .*not contiguous"),
           (np.ones(H - 1, np.float32), rf"k_scale: .*{H - 1} elements.*"
                                        rf"{H} float32.*per_head"),
           (np.ones((H, 1), np.float32)[:0], r"k_scale: .*0 elements")]
    if torch is not None:
        bad.append((torch.tensor([0.25, 1e30] * H)[::2],
                    r"k_scale: .*not contiguous"))
    for ks, msg in bad:
        with pytest.raises(ValueError, match=msg):
            f.reshape_and_cache(key2, value2, kc8, vc8, slots2, k_scale=ks,
                                v_scale=good, num_blocks=nb)
        assert not kc8.any() and not vc8.any()
    f.reshape_and_cache(key2, value2, kc8, vc8, slots2, k_scale=good,
                        v_scale=good.reshape(1, H), num_blocks=nb)
    assert kc8.any() and vc8.any()


def test_cache_bytes_cannot_exceed_the_array(ctx):
    """cache_bytes (the size the runtime's extent check is given) may not
    claim more bytes than the array holds: the kernel could then write
    past it."""
    key, value, kc, vc, slots = _write_setup(ctx)
    w = spec_kernel(ctx, 0)
    with pytest.raises(ValueError, match=rf"key_cache: key_cache_bytes = "
                                         rf"{kc.nbytes + 2} .*{kc.nbytes}"):
        w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=2,
                            cache_bytes=(kc.nbytes + 2, vc.nbytes))
    assert not kc.any() and not vc.any()
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=2,
                        cache_bytes=(kc.nbytes, vc.nbytes))
    assert kc.any() and vc.any()


def test_raw_cache_buffers_must_be_contiguous(ctx):
    """Issue 26, row 4: a 1-D non-contiguous cache (parent[::2]) was taken
    as a dense raw buffer, so the kernel wrote the elements of `parent`
    between the view's. A raw buffer (any array that is not a view of the
    layout's [num_blocks, ...] shape) must be C-contiguous: ValueError
    naming the argument, parent untouched; numpy and torch."""
    rng = np.random.default_rng(33)
    T, nb = 5, 2
    key, value = make_inputs(rng, T)
    slots = np.arange(T, dtype=np.int64)
    ek, ev = extent(BF16, "k", nb), extent(BF16, "v", nb)
    w = spec_kernel(ctx, 0)
    g = spec_kernel(ctx, 1)
    torch = _torch_or_none()
    parents = [np.full(2 * ek, 0xA5A5, np.uint16)]
    if torch is not None:
        parents.append(torch.full((2 * ek,), 0x2525, dtype=torch.int16))
    for parent in parents:
        before = parent.copy() if isinstance(parent, np.ndarray) \
            else parent.clone()
        kc = parent[::2]  # ek elements, stride 2
        vc = np.zeros(ev, np.uint16)
        with pytest.raises(ValueError, match=r"key_cache: .*raw buffer.*"
                                             r"contiguous"):
            w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
        assert (parent == before).all() and not vc.any()
        # The gather reads through the same pointer: refused too.
        ko = np.zeros((T, H, DK), np.uint16)
        vo = np.zeros((T, H, DV), np.uint16)
        with pytest.raises(ValueError, match=r"key_cache: .*contiguous"):
            g.gather(kc, vc, slots, ko, vo, num_blocks=nb)
        assert not ko.any() and not vo.any()
    # A strided byte view (another element size than the layout's) too.
    pb = np.zeros(4 * ek, np.uint8)
    with pytest.raises(ValueError, match=r"key_cache: .*contiguous"):
        w.reshape_and_cache(key, value, pb[::2], np.zeros(ev, np.uint16),
                            slots, num_blocks=nb)
    assert not pb.any()
    # Contiguous raw buffers still work.
    kc = np.zeros(ek, np.uint16)
    vc = np.zeros(ev, np.uint16)
    w.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
    assert np.array_equal(kc[:T * H * DK], key.view(np.uint16).ravel())


def test_every_pointer_field_has_a_checked_role():
    """The one check where arrays become pointers (Kernel._fill_pointers)
    knows every pointer field of the op table: a new pointer role without
    an extent there fails here, not silently at a launch."""
    from kvgen import _capi
    lay = kvgen.Layout(H, DK, DV, BS, dtype="f8E4M3FN", scale="per_head")
    seen = set()
    for op in kvgen.ops().values():
        for a in op.args:
            if _capi._ARG_TYPES[a.type] is not ctypes.c_void_p:
                continue
            assert a.type in kvgen._POINTER_TYPES, (op.name, a.name)
            ext = kvgen._dense_extent(a, 3, lay, 8, 8)
            assert ext is not None or a.role in kvgen._VIEW_ROLES + \
                kvgen._RAW_ROLES, (op.name, a.name)
            seen.add(a.role)
    assert {"error_flag", "scale", "slots", "cache"} <= seen


def test_strings_with_a_nul_are_refused(ctx, bundle, tmp_path):
    """Issue 26 review, F6: string arguments reach the C API as `const char
    *`, which ends at the first NUL; the binding cut every string there
    silently (a layout parsed without the fields after the NUL, a cache
    directory that is a prefix of the one given, another bundle or kernel
    name, an option value cut short). Each entry point now raises
    ValueError naming the argument, and nothing changes."""
    with pytest.raises(ValueError, match="layout text.*NUL.*index 1"):
        kvgen.Layout.parse(BF16.text + "\0, k_strides = [1, 1, 1]")
    with pytest.raises(ValueError, match="dtype = 'bf16.x00f32' is not one "
                       "word"):
        kvgen.Layout(H, DK, DV, BS, dtype="bf16\0f32")
    with pytest.raises(ValueError, match="cache_dir.*NUL"):
        kvgen.Context("host", cache_dir=f"{tmp_path}/x\0/etc")
    before = ctx.cache_dir
    with pytest.raises(ValueError, match="cache_dir.*NUL"):
        ctx.set_cache_dir(f"{tmp_path}/y\0/etc")
    assert ctx.cache_dir == before
    with pytest.raises(ValueError, match="load_bundle: path.*NUL"):
        ctx.load_bundle(str(bundle / "bundle") + "\0/elsewhere")
    w = spec_kernel(ctx, 1)
    with pytest.raises(ValueError, match="kernel_by_name: name.*NUL"):
        ctx.kernel_by_name(w.name + "\0junk")
    op, lay, io, slots, checked, dq = SPECS[1]
    with pytest.raises(ValueError, match="option io.*NUL"):
        ctx.kernel(op, lay, "bf16\0f32", slots, checked, dq)
    with pytest.raises(ValueError, match="option slots.*NUL"):
        ctx.kernel(op, lay, io=io, slots="i64\0i32", unchecked=not checked)
    with pytest.raises(ValueError, match="target.*NUL"):
        kvgen.Context.compile_only("host", "host\0sm_90")
    try:
        with pytest.raises(ValueError, match="set_generator_path.*NUL"):
            kvgen.set_generator_path(f"{tmp_path}/gen\0/lib")
    finally:
        kvgen.set_generator_path(None)
    # The same strings without the NUL part still work.
    assert kvgen.Layout.parse(BF16.text) == BF16
    assert ctx.kernel_by_name(w.name).name == w.name


def test_empty_arrays_pass_the_stride_checks(ctx):
    """Issue 26 review, F7: numpy reports 0 strides for arrays of 0
    elements (np.zeros((0, H, D)).strides == (0, 0, 0)), and a 0-token
    launch was refused ("key: the last dimension must be contiguous
    (stride 0, need 1)") while a torch one passed. An empty array addresses
    nothing: a launch of 0 tokens runs (writes nothing) for numpy arrays of
    0 elements. The size checks still hold: a 0-element error_flag is
    refused, as are 0-element rows for a launch of tokens."""
    import ml_dtypes as mld
    kc = np.full(extent(BF16, "k", 2), 0x1234, np.uint16)
    vc = np.full(extent(BF16, "v", 2), 0x1234, np.uint16)
    key = np.zeros((0, H, DK), mld.bfloat16)
    value = np.zeros((0, H, DV), mld.bfloat16)
    assert key.strides == (0, 0, 0)
    w = spec_kernel(ctx, 0)
    w.reshape_and_cache(key=key, value=value, key_cache=kc, value_cache=vc,
                        slot_mapping=np.zeros(0, np.int64))
    w.reshape_and_cache(key=np.zeros((0, H, DK), np.uint16),
                        value=np.zeros((0, H, DV), np.uint16), key_cache=kc,
                        value_cache=vc, slot_mapping=np.zeros(0, np.int64))
    g = spec_kernel(ctx, 1)
    g.gather(kc, vc, np.zeros(0, np.int64), np.zeros((0, H, DK), np.uint16),
             np.zeros((0, H, DV), np.uint16))
    assert (kc == 0x1234).all() and (vc == 0x1234).all()
    # What the kernel addresses is still checked.
    c = spec_kernel(ctx, 2)  # checked, i32 slots
    rng = np.random.default_rng(5)
    k1, v1 = make_inputs(rng, 1)
    with pytest.raises(ValueError, match=r"error_flag: .*0 elements"):
        c.reshape_and_cache(k1, v1, kc, vc, np.zeros(1, np.int32),
                            error_flag=np.zeros((0, 4), np.int32))
    with pytest.raises(ValueError, match=r"key: shape \[0, 2, 64\]"):
        w.reshape_and_cache(np.zeros((0, H, DK), np.uint16), v1, kc, vc,
                            np.zeros(1, np.int64))
    assert (kc == 0x1234).all() and (vc == 0x1234).all()


def test_option_values_cannot_add_options_and_int_fields_do_not_wrap(
        tmp_path):
    """Second hostile review (issue 26): an option value holding ',' or '='
    added options of its own (io="bf16, unchecked = 1" gave an unchecked
    kernel), and a Python int outside int64 / uint64 kept its low bits in
    the argument struct (sliding_window = 2**64 + 3 ran with a window of
    3). Both raise ValueError naming what was given."""
    import kvgen._capi as capi
    op = capi.op("paged_attention")
    S = op.args_struct
    for field, bad in (("sliding_window", 2**64 + 3), ("max_query_len", 2**63),
                       ("num_blocks", -(2**63) - 1), ("key_cache_bytes", -1),
                       ("key_cache_bytes", 2**64), ("query", 2**64)):
        with pytest.raises(ValueError, match=field):
            S(**{field: bad})
        a = S()
        with pytest.raises(ValueError, match=field):
            setattr(a, field, bad)
    # In range still works, the extremes included.
    a = S(sliding_window=2**63 - 1, key_cache_bytes=2**64 - 1,
          num_blocks=-(2**63))
    assert a.sliding_window == 2**63 - 1 and a.key_cache_bytes == 2**64 - 1
    ctx = kvgen.Context("host", cache_dir="")
    lay = kvgen.Layout(4, 192, 128, 16)
    for opts in (dict(io="bf16, unchecked = 1"), dict(slots="i64,unchecked=1"),
                 dict(io="bf16 = 1")):
        with pytest.raises(ValueError, match="not one value"):
            ctx.kernel("reshape_and_cache", lay, **opts)
    ctx.close()


def test_layout_keywords_are_words_and_stride_triples_do_not_wrap():
    """Third hostile review (issue 26): Layout(..., packing='separate,
    k_strides = [?, ?, ?]') added a field through a keyword, and the
    [block, token, head] stride fields kept the low bits of 2**64 + 3."""
    import kvgen._capi as capi
    for kw in (dict(packing="separate, k_strides = [?, ?, ?]"),
               dict(order="nhd, dtype = f32"), dict(dtype="bf16 "),
               dict(scale="none,")):
        with pytest.raises(ValueError, match="is not one word"):
            kvgen.Layout(4, 128, 128, 16, **kw)
    with pytest.raises(ValueError, match="component name"):
        kvgen.Layout(1, components=[("kv_c, x", 512)], block_size=64)
    assert kvgen.Layout(4, 128, 128, 16, packing="packed").packed
    S = capi.op("paged_attention").args_struct
    with pytest.raises(ValueError, match=r"k_cache_strides\[0\]"):
        S(k_cache_strides=(2**64 + 3, 0, 0))
    a = S()
    with pytest.raises(ValueError, match=r"v_cache_strides\[2\]"):
        a.v_cache_strides = (1, 2, -(2**63) - 1)
    a.v_cache_strides = (1, 2, 3)
    assert list(a.v_cache_strides) == [1, 2, 3]
