"""kvgen.torch's concat_and_cache_mla with kv_cache_dtype "fp8_ds_mla"
(vLLM's DeepSeek V3.2 cache: 656-byte entries, the 512 kv_c values in
e4m3fn per 128-value tile with each tile's float32 scale, then the 64 k_pe
values unquantized; issue 24). kvgen writes it through a #kv.layout with
per-tile scales (scale = per_tile, docs/layout.md "Per-tile scales"), run
on the CPU by the host backend. Checked bit for bit over the whole cache
allocation against torch_ref.concat_and_cache_ds_mla (vLLM's semantics in
plain torch), with torch.library.opcheck, hostile inputs refused before any
write, and out-of-range slots skipped and reported. The read side,
cp_gather_and_upconvert_fp8_kv_cache (vLLM's reader of these caches, its
current schema), runs kvgen's kv.gather_mla with dequantize over the same
layout: write -> read round trips against
torch_ref.cp_gather_and_upconvert_fp8_kv_cache bit for bit, opcheck,
hostile shapes / dtypes, bad block ids and positions skipped and reported.
The per_tile kernels compile warning-free with NVRTC for sm_90 / sm_80
(compile only; skipped, with the reason, without libnvrtc). CUDA runs where
torch sees a GPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed "
                            "(scripts/install-deps.sh installs it)")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvgen  # noqa: E402
import torch_ref  # noqa: E402
from conftest import jit_skip_reason  # noqa: E402

_WHY = jit_skip_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")

import kvgen.torch as kt  # noqa: E402  (registers torch.ops.kvgen)

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="torch sees no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]
L, R, E = 512, 64, 656


def _rows(T, dtype, gen):
    """kv_c [T, 512] / k_pe [T, 64] with tiles of very different
    magnitudes: a zero tile (scale FLT_MIN), a tiny one, large ones."""
    kv_c = torch.randn(T, L, generator=gen) * 3
    kv_c[0, :128] = 0.0
    kv_c[1, 128:256] *= 1e-30
    kv_c[2, 256:384] *= 1e4
    kv_c[:, 384] = -7.5  # a negative extreme in every last tile
    k_pe = torch.randn(T, R, generator=gen)
    return kv_c.to(dtype), k_pe.to(dtype)


def _cache(nb, bs, width, dtype, dev):
    """An [nb, bs, width] byte cache of canaries (0xEE)."""
    c = torch.full((nb, bs, width), 0xEE, dtype=torch.uint8)
    return c.view(dtype).to(dev)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cache", ["dense", "padded", "float8_e4m3fn"])
@pytest.mark.parametrize("slots", [torch.int64, torch.int32])
def test_ds_mla_write_bit_exact(slots, cache, rows, device):
    """Every byte of the allocation equals torch_ref's (vLLM's semantics):
    the fp8 values, the 4 scales and the rope bytes of each written entry,
    the canaries everywhere else (negative slots, padding after each row,
    rows past T of kv_c / k_pe: CUDA-graph padding, NaN here)."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(hash((str(slots), cache, str(rows)))
                                        % 2**31)
    nb, bs, T, pad = 5, 16, 37, 3
    kv_c, k_pe = _rows(T + pad, rows, gen)
    kv_c[T:] = float("nan")
    k_pe[T:] = float("nan")
    width = 704 if cache == "padded" else E
    dt = torch.float8_e4m3fn if cache == "float8_e4m3fn" else torch.uint8
    base = _cache(nb, bs, width, dt, dev)
    want = base.clone()
    view = (lambda c: c[..., :E]) if cache == "padded" else (lambda c: c)
    s = torch.randperm(nb * bs, generator=gen)[:T]
    s[3::5] = -1
    s = s.to(slots).to(dev)
    kv_c, k_pe = kv_c.to(dev), k_pe.to(dev)
    kt.check_errors(dev)
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, view(base), s,
                                         "fp8_ds_mla",
                                         torch.tensor([1.0], device=dev))
    kt.check_errors(dev)  # every slot in range: nothing reported
    # The reference writes a CPU copy (on CUDA, view(want).cpu() was a new
    # tensor: the reference's writes were lost, and all 12 CUDA cases
    # failed on the H100 with every written byte differing).
    want = want.cpu()
    torch_ref.concat_and_cache_ds_mla(kv_c.cpu(), k_pe.cpu(), view(want),
                                      s.cpu())
    got = base.cpu().view(torch.uint8)
    exp = want.view(torch.uint8)
    if not torch.equal(got, exp):
        diff = (got != exp).nonzero()
        pytest.fail(f"{len(diff)} bytes differ, first at {diff[:5].tolist()}")
    # The layout is the per_tile one, not a special case.
    texts = [p.kernel.layout.text for p in kt._plans.values()
             if p.kernel.op == "concat_and_cache_mla"]
    assert any("scale = per_tile, " in t and
               "kv_c_tile_scales = [128, 512]" in t for t in texts), texts


def test_ds_mla_reference_decodes_to_the_rows():
    """torch_ref's entries decode (q x scale) to kv_c within e4m3's
    precision and hold k_pe's bits: a check of the reference itself
    (independent of kvgen), so that the bit-exact test compares with
    vLLM's layout and not with a shared mistake."""
    gen = torch.Generator().manual_seed(7)
    kv_c, k_pe = _rows(6, torch.bfloat16, gen)
    cache = torch.zeros(1, 8, E, dtype=torch.uint8)
    torch_ref.concat_and_cache_ds_mla(kv_c, k_pe, cache,
                                      torch.arange(6) + 1)
    flat = cache.view(-1, E)[1:7]
    q = flat[:, :512].view(torch.float8_e4m3fn).float().reshape(6, 4, 128)
    sc = flat[:, 512:528].view(torch.float32)
    want_sc = kv_c.float().reshape(6, 4, 128).abs().amax(2) / 448
    assert torch.equal(sc[:, 1:], want_sc[:, 1:])
    assert sc[0, 0] == torch.finfo(torch.float32).tiny  # the zero tile
    deq = (q * sc[:, :, None]).reshape(6, 512)
    assert torch.allclose(deq, kv_c.float(), rtol=2 ** -3, atol=0)
    assert torch.equal(flat[:, 528:].view(torch.bfloat16), k_pe)


@pytest.mark.parametrize("rows", [torch.bfloat16, torch.float16])
def test_ds_mla_special_values_as_vllm(rows):
    """NaN, +-inf, -0, denormal and all-zero tiles and values at e4m3's
    rounding / saturation boundaries give vLLM's bytes: every NaN byte is
    0x7f whatever the sign of the NaN (torch's bf16 NaN is negative;
    x86's inf / inf too), as __nv_cvt_float_to_fp8 stores it; an
    infinity makes its tile's scale inf, its finite values +-0."""
    T = 8
    kv_c = torch.randn(T, L, generator=torch.Generator().manual_seed(17))
    kv_c[0, :128] = 0.0
    kv_c[0, 128:256] = -0.0
    kv_c[1, 5] = float("nan")
    kv_c[1, 130] = -float("nan")
    kv_c[2, 7] = float("inf")
    kv_c[2, 200] = -float("inf")
    kv_c[3, :128] = 1e-40 if rows == torch.bfloat16 else 6e-8
    kv_c[3, 128:256] *= 1e-38
    kv_c[4, :128] = float("nan")
    kv_c[5] = 448.0
    kv_c[5, 3:6] = torch.tensor([464.0, -463.5, 0.5])
    kv_c[6, :128] = torch.linspace(-448, 448, 128)
    kv_c = kv_c.to(rows)
    k_pe = torch.randn(T, R, generator=torch.Generator().manual_seed(18))
    k_pe = k_pe.to(rows)
    cache = _cache(2, 4, E, torch.uint8, "cpu")
    want = cache.clone()
    slots = torch.arange(T)
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots,
                                         "fp8_ds_mla", torch.tensor([1.0]))
    torch_ref.concat_and_cache_ds_mla(kv_c, k_pe, want, slots)
    flat = cache.view(-1, E)
    x = kv_c.float()
    nan_at = torch.isnan(x) | (torch.isinf(x) & torch.isinf(x).reshape(
        T, 4, 128).any(2, keepdim=True).expand(T, 4, 128).reshape(T, L))
    assert nan_at.sum() == 2 + 2 + 128
    assert torch.all(flat[:, :L][nan_at] == 0x7f), \
        flat[:, :L][nan_at].unique().tolist()
    # tile 0 and 1 of row 2 hold an infinity: scale inf, finite values 0
    assert flat[2, 512:520].view(torch.float32).isinf().all()
    assert torch.all(flat[2, :256][~nan_at[2, :256]] & 0x7f == 0)
    if not torch.equal(cache, want):
        diff = (cache != want).nonzero()
        pytest.fail(f"{len(diff)} bytes differ, first at {diff[:5].tolist()}")


def test_ds_mla_opcheck():
    gen = torch.Generator().manual_seed(3)
    kv_c, k_pe = _rows(9, torch.bfloat16, gen)
    cache = _cache(3, 4, E, torch.uint8, "cpu")
    slots = torch.tensor([0, 5, -1, 11, 2, 7, 6, 1, 3])
    res = torch.library.opcheck(
        torch.ops.kvgen.concat_and_cache_mla.default,
        (kv_c, k_pe, cache, slots, "fp8_ds_mla", torch.tensor([1.0])),
        raise_exception=False)
    bad = {k: v for k, v in res.items() if v != "SUCCESS"}
    assert not bad, bad


@pytest.mark.parametrize("case", [
    "last_dim_655", "last_dim_576", "kv_c_f32", "cache_bf16", "kv_c_448",
    "k_pe_32", "k_pe_f16", "few_rows"])
def test_ds_mla_hostile_inputs_write_nothing(case):
    """Shapes and dtypes vLLM's op refuses (and one it would read past:
    fewer rows than slots) raise before any write, naming the argument."""
    gen = torch.Generator().manual_seed(5)
    kv_c, k_pe = _rows(6, torch.bfloat16, gen)
    width, cdt = E, torch.uint8
    slots = torch.arange(6)
    if case == "last_dim_655":
        width = 655
    elif case == "last_dim_576":
        width = 576
    elif case == "kv_c_f32":
        kv_c, k_pe = kv_c.float(), k_pe.float()
    elif case == "cache_bf16":
        cdt = torch.bfloat16  # [.., 328]: 656 bytes, as vLLM would take
    elif case == "kv_c_448":
        kv_c = kv_c[:, :448]
    elif case == "k_pe_32":
        k_pe = k_pe[:, :32]
    elif case == "k_pe_f16":
        k_pe = k_pe.half()
    elif case == "few_rows":
        slots = torch.arange(7)
    cache = _cache(2, 4, width, torch.uint8, "cpu")
    if cdt != torch.uint8:
        cache = cache.view(cdt)
    before = cache.clone()
    err = (TypeError if case in ("kv_c_f32", "cache_bf16", "k_pe_f16")
           else ValueError)
    with pytest.raises(err) as e:
        torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots,
                                             "fp8_ds_mla", torch.tensor([1.]))
    name = {"last_dim_655": "kv_cache", "last_dim_576": "kv_cache",
            "kv_c_f32": "kv_c", "cache_bf16": "kv_cache", "kv_c_448": "kv_c",
            "k_pe_32": "k_pe", "k_pe_f16": "k_pe", "few_rows": "kv_c"}[case]
    assert name in str(e.value), str(e.value)
    assert torch.equal(cache.view(torch.uint8), before.view(torch.uint8))


@pytest.mark.parametrize("device", DEVICES)
def test_ds_mla_out_of_range_slot_is_skipped_and_reported(device):
    """A slot >= num_blocks * block_size writes nothing (no byte outside
    the cache or of another entry changes), the other tokens are written,
    and check_errors reports it, as for every writer."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(11)
    kv_c, k_pe = _rows(4, torch.bfloat16, gen)
    nb, bs = 2, 4
    # The cache is the middle of a larger allocation: canaries around it.
    whole = _cache(nb + 2, bs, E, torch.uint8, dev)
    cache = whole[1:nb + 1]
    slots = torch.tensor([1, nb * bs, 6, 10**9], device=dev)
    want = whole.clone().cpu()
    torch_ref.concat_and_cache_ds_mla(
        kv_c, k_pe, want[1:nb + 1],
        torch.tensor([1, -1, 6, -1]))  # the in-range tokens only
    kt.check_errors(dev)
    torch.ops.kvgen.concat_and_cache_mla(kv_c.to(dev), k_pe.to(dev), cache,
                                         slots, "fp8_ds_mla",
                                         torch.tensor([1.0], device=dev))
    with pytest.raises(kvgen.KvgenError) as e:
        kt.check_errors(dev)
    assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
    assert torch.equal(whole.cpu(), want)


def test_ds_mla_other_ops_refuse_it():
    """fp8_ds_mla is a concat_and_cache_mla cache dtype only: the other
    ops raise a ValueError naming it (vLLM's gather_and_maybe_dequant_cache
    would read its 656-byte entries as plain fp8 rows; its reader is
    cp_gather_and_upconvert_fp8_kv_cache, tested below)."""
    src = torch.zeros(2, 4, E, dtype=torch.uint8)
    dst = torch.zeros(3, 576, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="fp8_ds_mla"):
        torch.ops.kvgen.gather_and_maybe_dequant_cache(
            src, dst, torch.zeros(1, 2, dtype=torch.int32),
            torch.tensor([0, 3], dtype=torch.int32),
            torch.zeros(3, dtype=torch.int32), 3, "fp8_ds_mla",
            torch.tensor([1.0]))


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
def test_ds_mla_kernels_compile_with_nvrtc(tmp_path, target):
    """The per_tile write and gather compile warning-free through the
    runtime's NVRTC compile-only context (any warning is an error)."""
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    if not (KVGEN.parent / "kvgen-opt").is_file():
        # `kvgen emit` exists in the MLIR build only (kvgen-opt is built
        # with it); a GPU machine's runtime-only build compiles these
        # kernels through the other tests' JIT instead.
        pytest.skip(f"{KVGEN} is a runtime-only build: no `kvgen emit`")
    try:
        ctx = kvgen.Context.compile_only("cuda", target,
                                         cache_dir=str(tmp_path / "cache"))
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"cuda compiler not loadable here: {e}")
    f = tmp_path / "layout.mlir"
    for stored, extra in (("bf16", []), ("f16", ["--io", "f16"])):
        f.write_text(
            "#kv.layout<num_kv_heads = 1, components = [kv_c: 512, k_pe: "
            "64], block_size = 64, packing = packed, dtype = f8E4M3FN, "
            "scale = per_tile, kv_c_tile_scales = [128, 512], k_pe_dtype = "
            f"{stored}, kv_c_strides = [?, ?, ?]>\n")
        for op, flags in (("concat_and_cache_mla", []),
                          ("gather_mla", ["--dequantize"])):
            r = subprocess.run(
                [str(KVGEN), "emit", "--layout", str(f), "--op", op,
                 "--target", target, "--bundle", str(tmp_path / "bundle")]
                + flags + extra, capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
    names = [line.split("=", 1)[1].strip() for line in
             (tmp_path / "bundle" / "kvgen-manifest.txt").read_text()
             .splitlines() if line.startswith("name")]
    assert len(names) == 4, names
    ctx.load_bundle(tmp_path / "bundle")
    for name in names:
        try:
            ctx.kernel_by_name(name)
        except kvgen.KvgenError as e:
            if e.status_name == "KVGEN_ERROR_BACKEND_UNAVAILABLE":
                pytest.skip(f"cuda compiler not loadable here: {e}")
            raise


def test_ds_mla_gather_kernel_dequantizes_the_written_entries():
    """The read side's kernel (kv.gather_mla with dequantize over the same
    per_tile layout, which cp_gather_and_upconvert_fp8_kv_cache runs):
    launched by hand on the CPU, it returns bf16(q x scale)
    per tile and k_pe's bits, for the entries the write produced; rows of
    negative slots untouched."""
    gen = torch.Generator().manual_seed(13)
    kv_c, k_pe = _rows(6, torch.bfloat16, gen)
    cache = _cache(2, 4, E, torch.uint8, "cpu")
    slots = torch.tensor([3, 0, 7, 5, 1, 6])
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots,
                                         "fp8_ds_mla", torch.tensor([1.0]))
    layout, nb, cache_bytes = kt._ds_mla_layout(cache, "bf16")
    k = kt._kernel(torch.device("cpu"), "gather_mla", layout, io="bf16",
                   slots="i64", dequantize=True)
    out = torch.full((7, L + R), 5.0, dtype=torch.bfloat16)
    p = kt._Plan(k, torch.device("cpu"), num_blocks=nb,
                 kv_c_out_stride_token=out.stride(0), kv_c_out_stride_head=L,
                 k_pe_out_stride_token=out.stride(0), k_pe_out_stride_head=R,
                 kv_cache_bytes=cache_bytes)
    read = torch.tensor([1, 4, -1, 3, 0, 2, 5])
    a = p.args()
    a.kv_cache = cache.data_ptr()
    a.slot_mapping = read.data_ptr()
    a.kv_c_out = out.data_ptr()
    a.k_pe_out = out.data_ptr() + L * out.element_size()
    a.num_tokens = read.numel()
    p.launch(a)
    kt.check_errors("cpu")
    flat = cache.view(-1, E)
    for t, s in enumerate(read.tolist()):
        if s < 0:
            assert torch.all(out[t] == 5.0)
            continue
        q = flat[s, :512].view(torch.float8_e4m3fn).float().reshape(4, 128)
        sc = flat[s, 512:528].view(torch.float32)
        want = (q * sc[:, None]).reshape(512).to(torch.bfloat16)
        assert torch.equal(out[t, :L], want)
        assert torch.equal(out[t, L:].view(torch.int16),
                           flat[s, 528:].view(torch.int16))


def test_ds_mla_layout_info_is_the_address_map():
    """The layout's public description (kvgen_layout_component through
    kvgen.Layout: base, strides, elem_stride) gives the bytes the kernel
    writes: k_pe's element e of the entry of slot s at s * 656 + 528 + 2 e
    (its bf16 elements 2 cache bytes apart), the kv_c values at s * 656 +
    e."""
    layout, nb, _ = kt._ds_mla_layout(_cache(2, 4, E, torch.uint8, "cpu"),
                                      "bf16")
    assert layout.chunks("k_pe").elem_stride == 2
    assert layout.chunks("kv_c").elem_stride == 1
    gen = torch.Generator().manual_seed(19)
    kv_c, k_pe = _rows(3, torch.bfloat16, gen)
    cache = torch.zeros(2, 4, E, dtype=torch.uint8)
    slots = torch.tensor([5, 0, 6])
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots,
                                         "fp8_ds_mla", torch.tensor([1.0]))
    flat = cache.view(-1)
    for t, s in enumerate(slots.tolist()):
        b, o = divmod(s, 4)
        for name, rows, n in (("k_pe", k_pe, R), ("kv_c", kv_c, L)):
            sb, st, _ = layout.strides(name)
            w = layout.chunks(name).elem_stride
            at = (b * sb + o * st + layout.base(name) +
                  w * torch.arange(n))
            got = torch.stack([flat[at + i] for i in range(w)], 1)
            if name == "k_pe":
                assert torch.equal(got.reshape(-1),
                                   rows[t].view(torch.uint8)), name
            else:
                assert torch.equal(got.reshape(-1), flat[
                    s * E:s * E + L]), name


@pytest.mark.parametrize("form", ["raw", "view", "padded_view"])
def test_ds_mla_generic_binding_launch(form):
    """The binding's generic launch (ctx.kernel(...).concat_and_cache_mla)
    over the per_tile layout: no scale argument (the scales are the
    tiles'), the cache as a raw buffer or as its logical [nb, bs, 1, 656]
    view (Layout.span: 528 + 128, not the head sizes' 576), padded rows
    through '?' strides; the bytes are torch_ref's."""
    text = ("num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], "
            "block_size = 4, packing = packed, dtype = f8E4M3FN, scale = "
            "per_tile, kv_c_tile_scales = [128, 512], k_pe_dtype = bf16")
    if form == "padded_view":
        text += ", kv_c_strides = [?, ?, ?]"
    lay = kvgen.Layout.parse(text)
    assert (lay.span("kv_c"), lay.span("k_pe")) == (528, 128)
    gen = torch.Generator().manual_seed(23)
    kv_c, k_pe = _rows(5, torch.bfloat16, gen)
    slots = torch.tensor([6, -1, 0, 3, 7])
    width = 704 if form == "padded_view" else E
    whole = _cache(2, 4, width, torch.uint8, "cpu")
    want = whole.clone()
    torch_ref.concat_and_cache_ds_mla(kv_c, k_pe, want[..., :E], slots)
    cache = (whole.view(-1) if form == "raw" else
             whole.view(2, 4, 1, width)[..., :E])
    w = kt.context(torch.device("cpu")).kernel("concat_and_cache_mla", lay,
                                               io="bf16")
    w.concat_and_cache_mla(kv_c, k_pe, cache, slots, num_blocks=2)
    kt.check_errors("cpu")
    assert torch.equal(whole, want)


# -------------------------------------------------------------------------
# The read side: torch.ops.kvgen.cp_gather_and_upconvert_fp8_kv_cache
# (vLLM's reader of fp8_ds_mla caches, its current schema: src_cache,
# dst, block_table, workspace_starts, batch_size, seq_starts).
# -------------------------------------------------------------------------

D = L + R  # 576: the upconverted row


def _full_cache(nb, bs, dt, dev, gen, width=E):
    """(whole allocation, the [nb, bs, 656] view, kv_c, k_pe, token of
    each slot): every entry written by concat_and_cache_mla, token t at
    a shuffled slot; padded rows (width > 656) keep their canaries."""
    n = nb * bs
    kv_c, k_pe = _rows(n, torch.bfloat16, gen)
    whole = _cache(nb, bs, width, dt, dev)
    view = whole[..., :E]
    perm = torch.randperm(n, generator=gen)
    torch.ops.kvgen.concat_and_cache_mla(kv_c.to(dev), k_pe.to(dev), view,
                                         perm.to(dev), "fp8_ds_mla",
                                         torch.tensor([1.0], device=dev))
    token = torch.empty(n, dtype=torch.int64)
    token[perm] = torch.arange(n)
    return whole, view, kv_c, k_pe, token


def _same_bits(got, want):
    """bf16 tensors equal bit for bit (NaNs included)."""
    g, w = got.cpu().view(torch.int16), want.cpu().view(torch.int16)
    if not torch.equal(g, w):
        diff = (g != w).nonzero()
        pytest.fail(f"{len(diff)} values differ, first at "
                    f"{diff[:5].tolist()}")


def _upconvert(src, dst, bt, ws, B, ss=None):
    torch.ops.kvgen.cp_gather_and_upconvert_fp8_kv_cache(src, dst, bt, ws, B,
                                                         ss)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cache", ["dense", "padded", "float8_e4m3fn"])
@pytest.mark.parametrize("tables", [torch.int32, torch.int64])
@pytest.mark.parametrize("starts", [False, True])
def test_upconvert_round_trip(starts, tables, cache, device):
    """write (concat_and_cache_mla "fp8_ds_mla") -> read: dst equals
    torch_ref's (vLLM's semantics) bit for bit over the whole allocation
    (rows before workspace_starts[0] and the padding after each dst row
    keep their canaries), and each row is its token's (kv_c within e4m3's
    precision, k_pe's bits): three requests, one of them empty, a table
    row past batch_size, blocks in shuffled order, seq_starts mid-block."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(
        hash((starts, str(tables), cache)) % 2**31)
    nb, bs = 8, 16
    dt = torch.float8_e4m3fn if cache == "float8_e4m3fn" else torch.uint8
    whole, src, kv_c, k_pe, token = _full_cache(
        nb, bs, dt, dev, gen, 704 if cache == "padded" else E)
    before = whole.clone()
    bt = torch.tensor([[3, 7, 0, 5], [6, 6, 6, 6], [1, 4, 2, 0],
                       [9, 9, 9, 9]], dtype=tables)
    ws = torch.tensor([2, 22, 22, 99], dtype=tables)  # lengths 20, 0, 13
    ss = torch.tensor([5, 0, 16, 0], dtype=tables) if starts else None
    N, B = 35, 3
    out = torch.full((N, 640), 5.0, dtype=torch.bfloat16)
    want = out.clone()
    full = out.to(dev)
    dst = full[:, :D]  # rows padded to 640: the padding keeps its canaries
    kt.check_errors(dev)
    _upconvert(src, dst, bt.to(dev), ws.to(dev), B,
               ss.to(dev) if starts else None)
    kt.check_errors(dev)  # every index in range: nothing reported
    torch_ref.cp_gather_and_upconvert_fp8_kv_cache(src.cpu(), want[:, :D],
                                                   bt, ws, B, ss)
    _same_bits(full, want)
    assert torch.equal(whole.cpu().view(torch.uint8),
                       before.cpu().view(torch.uint8))  # src only read
    # Independent of torch_ref: each row is the token written there.
    got = dst.cpu()
    for b, (lo, n) in enumerate(((2, 20), (22, 0), (22, 13))):
        for i in range(n):
            p = i + (int(ss[b]) if starts else 0)
            t = int(token[int(bt[b, p // bs]) * bs + p % bs])
            assert torch.equal(got[lo + i, L:], k_pe[t]), (b, i)
            # e4m3: 3 mantissa bits, subnormal step 2^-9 x the tile's scale
            x = kv_c[t].float().reshape(4, 128)
            step = x.abs().amax(1, keepdim=True) / 448 * 2 ** -9
            err = (got[lo + i, :L].float().reshape(4, 128) - x).abs()
            assert torch.all(err <= x.abs() * 2 ** -3 + step), (b, i)


@pytest.mark.parametrize("device", DEVICES)
def test_upconvert_opcheck(device):
    """torch.library.opcheck: the schema's mutation (dst only), the fake
    agrees, AOT dispatch with dynamic shapes traces it."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(29)
    _, src, _, _, _ = _full_cache(3, 4, torch.uint8, dev, gen)
    args = (src, torch.zeros(9, D, dtype=torch.bfloat16, device=dev),
            torch.tensor([[2, 0, 1], [1, 2, 0]], dtype=torch.int32,
                         device=dev),
            torch.tensor([1, 5], dtype=torch.int32, device=dev), 2,
            torch.tensor([3, 0], dtype=torch.int32, device=dev))
    res = torch.library.opcheck(
        torch.ops.kvgen.cp_gather_and_upconvert_fp8_kv_cache.default, args,
        raise_exception=False)
    bad = {k: v for k, v in res.items() if v != "SUCCESS"}
    assert not bad, bad
    kt.check_errors(dev)


_HOSTILE = {
    # case: (exception, the argument its message names)
    "src_last_dim_655": (ValueError, "src_cache"),
    "src_last_dim_576": (ValueError, "src_cache"),
    "src_2d": (ValueError, "src_cache"),
    "src_bf16_328": (TypeError, "src_cache"),
    "src_e5m2": (TypeError, "src_cache"),
    "dst_f16": (TypeError, "dst"),
    "dst_f32": (TypeError, "dst"),
    "dst_512": (ValueError, "dst"),
    "dst_3d": (ValueError, "dst"),
    "dst_strided_row": (ValueError, "dst"),
    "block_table_f32": (TypeError, "block_table"),
    "block_table_1d": (ValueError, "block_table"),
    "block_table_rows": (ValueError, "block_table"),
    "workspace_starts_short": (ValueError, "workspace_starts"),
    "workspace_starts_2d": (ValueError, "workspace_starts"),
    "seq_starts_short": (ValueError, "seq_starts"),
    "seq_starts_f64": (TypeError, "seq_starts"),
    "batch_negative": (ValueError, "batch_size"),
}


@pytest.mark.parametrize("case", list(_HOSTILE))
def test_upconvert_hostile_inputs_write_nothing(case):
    """Shapes and dtypes vLLM's op refuses or cannot mean (a last
    dimension other than 656, a non-bf16 dst, tables of too few rows)
    raise before any write, naming the argument; nothing changes."""
    gen = torch.Generator().manual_seed(31)
    _, src, _, _, _ = _full_cache(3, 4, torch.uint8, "cpu", gen)
    dst = torch.full((8, D), 5.0, dtype=torch.bfloat16)
    bt = torch.tensor([[2, 0, 1], [1, 2, 0]], dtype=torch.int32)
    ws = torch.tensor([0, 4], dtype=torch.int32)
    ss = torch.tensor([0, 1], dtype=torch.int32)
    B = 2
    if case == "src_last_dim_655":
        src = src[..., :655]
    elif case == "src_last_dim_576":
        src = src[..., :576]
    elif case == "src_2d":
        src = src.reshape(-1, E)
    elif case == "src_bf16_328":
        src = src.view(torch.bfloat16)  # 656 bytes, as vLLM would take
    elif case == "src_e5m2":
        src = src.view(torch.float8_e5m2)
    elif case == "dst_f16":
        dst = dst.half()
    elif case == "dst_f32":
        dst = dst.float()
    elif case == "dst_512":
        dst = dst[:, :512]
    elif case == "dst_3d":
        dst = dst.view(8, 1, D)
    elif case == "dst_strided_row":
        dst = torch.full((8, D, 2), 5.0, dtype=torch.bfloat16)[..., 0]
    elif case == "block_table_f32":
        bt = bt.float()
    elif case == "block_table_1d":
        bt = bt[0]
    elif case == "block_table_rows":
        bt = bt[:1]
    elif case == "workspace_starts_short":
        ws = ws[:1]
    elif case == "workspace_starts_2d":
        ws = ws.view(1, 2)
    elif case == "seq_starts_short":
        ss = ss[:1]
    elif case == "seq_starts_f64":
        ss = ss.double()
    elif case == "batch_negative":
        B = -1
    src_before, dst_before = src.clone(), dst.clone()
    err, name = _HOSTILE[case]
    with pytest.raises(err) as e:
        _upconvert(src, dst, bt, ws, B, ss)
    assert name in str(e.value), str(e.value)
    assert torch.equal(dst.view(torch.int16), dst_before.view(torch.int16))
    assert torch.equal(src.view(torch.uint8), src_before.view(torch.uint8))
    kt.check_errors("cpu")  # nothing launched, nothing reported


def _ref_rows(src, want, bt, ws, B, ss):
    """torch_ref's rows for the rows kvgen can serve, row by row (a
    one-row request each): a row whose position is negative, past its
    block_table row or whose block id is outside the cache is left as
    it is (torch_ref would read outside the tables or the cache)."""
    nb, bs = src.shape[0], src.shape[1]
    N = want.shape[0]
    for b in range(B):
        lo = int(ws[b])
        hi = int(ws[b + 1]) if b + 1 < B else N
        for i in range(hi - lo):
            p = i + (int(ss[b]) if ss is not None else 0)
            if p < 0 or p // bs >= bt.shape[1]:
                continue
            if not 0 <= int(bt[b, p // bs]) < nb:
                continue
            torch_ref.cp_gather_and_upconvert_fp8_kv_cache(
                src, want[lo + i:lo + i + 1], bt[b:b + 1],
                torch.tensor([0]), 1, torch.tensor([p]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["block_id_past_cache", "block_id_negative",
                                  "seq_past_table", "seq_start_negative",
                                  "seq_start_huge"])
def test_upconvert_bad_ids_are_skipped_and_reported(case, device):
    """A row whose block id is outside [0, num_blocks), whose position is
    past its block_table row (a request longer than its table: vLLM reads
    the next row or past the table) or negative is not gathered (its dst
    row keeps its canary; nothing outside dst changes), the other rows
    are, and check_errors reports it (KVGEN_ERROR_INDEX_OUT_OF_RANGE)."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(37)
    nb, bs = 4, 4
    _, src, _, _, _ = _full_cache(nb, bs, torch.uint8, dev, gen)
    bt = torch.tensor([[2, 0, 1], [1, 3, 0]], dtype=torch.int32)
    ws = torch.tensor([0, 7], dtype=torch.int32)
    ss = torch.tensor([1, 0], dtype=torch.int32)
    N = 15  # request 0: rows 0..6, request 1: rows 7..14
    if case == "block_id_past_cache":
        bt[0, 1] = nb
    elif case == "block_id_negative":
        bt[1, 0] = -1
    elif case == "seq_past_table":
        ss[1] = 6  # positions 6..13: 12, 13 past the 3 x 4 of the row
    elif case == "seq_start_negative":
        ss[0] = -3
    elif case == "seq_start_huge":
        bt, ws, ss = bt.long(), ws.long(), ss.long()
        ss[1] = 2 ** 63 - 3  # p = i + start wraps past 2^63 - 1
    whole = torch.full((N + 2, D), 5.0, dtype=torch.bfloat16)
    want = whole.clone()
    _ref_rows(src.cpu(), want[1:N + 1], bt, ws, 2, ss)
    assert not torch.equal(want, whole)  # some rows are gathered
    whole = whole.to(dev)
    kt.check_errors(dev)
    _upconvert(src, whole[1:N + 1], bt.to(dev), ws.to(dev), 2, ss.to(dev))
    with pytest.raises(kvgen.KvgenError) as e:
        kt.check_errors(dev)
    assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
    _same_bits(whole, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["decreasing", "first_negative",
                                  "start_past_dst", "empty_dst_claimed"])
def test_upconvert_bad_workspace_starts_write_nothing(case, device):
    """workspace_starts that is not nondecreasing (vLLM: rows written
    twice, by two requests), starts below 0 (vLLM: rows before dst) or
    past dst's rows (vLLM clamps: the requests are cut short without a
    word) makes the call write nothing, and check_errors reports it."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(41)
    _, src, _, _, _ = _full_cache(3, 4, torch.uint8, dev, gen)
    bt = torch.tensor([[2, 0, 1], [1, 2, 0], [0, 1, 2]], dtype=torch.int32)
    ws = {"decreasing": [0, 5, 3], "first_negative": [-1, 4, 6],
          "start_past_dst": [0, 4, 9], "empty_dst_claimed": [0, 0, 1]}[case]
    N = 0 if case == "empty_dst_claimed" else 8
    dst = torch.full((N, D), 5.0, dtype=torch.bfloat16, device=dev)
    before = dst.clone()
    kt.check_errors(dev)
    _upconvert(src, dst, bt.to(dev),
               torch.tensor(ws, dtype=torch.int32, device=dev), 3)
    with pytest.raises(kvgen.KvgenError) as e:
        kt.check_errors(dev)
    assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
    _same_bits(dst, before)


@pytest.mark.parametrize("device", DEVICES)
def test_upconvert_batch_zero_and_empty_requests(device):
    """batch_size 0 writes nothing and reports nothing, whatever the
    tables hold (none of their rows belongs to a request, as in vLLM);
    requests of length 0 (equal starts, one at dst's end) are served; a
    dst of 0 rows with every start 0 is a no-op."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(43)
    _, src, _, _, _ = _full_cache(3, 4, torch.uint8, dev, gen)
    i32 = dict(dtype=torch.int32, device=dev)
    dst = torch.full((6, D), 5.0, dtype=torch.bfloat16, device=dev)
    before = dst.clone()
    kt.check_errors(dev)
    _upconvert(src, dst, torch.full((1, 2), 99, **i32),
               torch.tensor([-5], **i32), 0, torch.tensor([-9], **i32))
    _upconvert(src, dst, torch.zeros((0, 0), **i32),
               torch.zeros(0, **i32), 0)
    _upconvert(src, dst[:0], torch.zeros((2, 1), **i32),
               torch.zeros(2, **i32), 2)
    kt.check_errors(dev)
    _same_bits(dst, before)
    bt = torch.tensor([[1, 1], [2, 0], [0, 2]], dtype=torch.int32)
    ws = torch.tensor([0, 0, 6], dtype=torch.int32)  # rows: 0, 6, 0
    _upconvert(src, dst, bt.to(dev), ws.to(dev), 3)
    kt.check_errors(dev)
    want = before.cpu().clone()
    torch_ref.cp_gather_and_upconvert_fp8_kv_cache(src.cpu(), want, bt, ws,
                                                   3)
    assert not torch.equal(want, before.cpu())
    _same_bits(dst, want)


@pytest.mark.parametrize("device", DEVICES)
def test_ds_mla_random_sequence_of_shapes(device):
    """kvgen.torch's remembered plans (per argument shapes, strides and
    dtypes) over an engine's changing calls: one process drives 20 calls
    drawn at random - the fp8_ds_mla write (block sizes 1 / 16 / 64, dense
    / padded / float8 caches, bf16 / f16 rows, int32 / int64 slots, token
    counts 1..40) each followed by the reader (1-3 requests, int32 / int64
    tables, with and without seq_starts), and between them plain
    concat_and_cache_mla writes ("auto", a 576-wide bf16 cache of the same
    block size) that take the same op with another plan; repeats included,
    so remembered plans are reused. Every call is checked bit for bit
    against torch_ref over the whole allocations."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(2027)
    pick = __import__("random").Random(13)
    seen = {"ds_mla": 0, "auto": 0}
    for call in range(20):
        bs = pick.choice((1, 16, 64))
        nb = pick.choice((3, 5))
        T = pick.choice((1, 7, 17, 40))
        T = min(T, nb * bs)
        rows = pick.choice((torch.bfloat16, torch.float16))
        sdt = pick.choice((torch.int32, torch.int64))
        kv_c, k_pe = _rows(max(T, 3), rows, gen)
        kv_c, k_pe = kv_c[:T], k_pe[:T]
        slots = torch.randperm(nb * bs, generator=gen)[:T].to(sdt)
        where = f"call {call}: bs {bs} nb {nb} T {T} {rows} {sdt}"
        if pick.random() < 0.3:
            # The same op, kv_cache_dtype "auto": another plan in between.
            seen["auto"] += 1
            base = torch.full((nb, bs, D), 3.0, dtype=rows)
            want = base.clone()
            c = base.to(dev)
            torch.ops.kvgen.concat_and_cache_mla(
                kv_c.to(dev), k_pe.to(dev), c, slots.to(dev), "auto",
                torch.tensor([1.0], device=dev))
            flat = want.view(nb * bs, D)
            flat[slots.long(), :L] = kv_c
            flat[slots.long(), L:] = k_pe
            assert torch.equal(c.cpu().view(torch.int16),
                               want.view(torch.int16)), where
            continue
        seen["ds_mla"] += 1
        form = pick.choice(("dense", "padded", "float8_e4m3fn"))
        dt = torch.float8_e4m3fn if form == "float8_e4m3fn" else torch.uint8
        width = 704 if form == "padded" else E
        whole = _cache(nb, bs, width, dt, dev)
        want = whole.cpu().clone()
        src = whole[..., :E]
        kt.check_errors(dev)
        torch.ops.kvgen.concat_and_cache_mla(
            kv_c.to(dev), k_pe.to(dev), src, slots.to(dev), "fp8_ds_mla",
            torch.tensor([1.0], device=dev))
        kt.check_errors(dev)
        torch_ref.concat_and_cache_ds_mla(kv_c, k_pe, want[..., :E], slots)
        assert torch.equal(whole.cpu().view(torch.uint8),
                           want.view(torch.uint8)), where
        # The reader: B requests over random table rows of this cache.
        B = pick.choice((1, 2, 3))
        tdt = pick.choice((torch.int32, torch.int64))
        M = pick.choice((1, 2))
        bt = torch.randint(0, nb, (B, M), generator=gen).to(tdt)
        lens = [pick.randint(0, M * bs) for _ in range(B)]
        starts = pick.random() < 0.5
        ss = [pick.randint(0, M * bs - n) for n in lens] if starts else None
        ws = [0]
        for n in lens:
            ws.append(ws[-1] + n)
        N = ws[-1]
        ws_t = torch.tensor(ws[:B], dtype=tdt)
        ss_t = torch.tensor(ss, dtype=tdt) if starts else None
        out = torch.full((N, D), 7.0, dtype=torch.bfloat16)
        ref = out.clone()
        got = out.to(dev)
        _upconvert(src, got, bt.to(dev), ws_t.to(dev), B,
                   ss_t.to(dev) if starts else None)
        kt.check_errors(dev)
        torch_ref.cp_gather_and_upconvert_fp8_kv_cache(
            want[..., :E], ref, bt, ws_t, B, ss_t)
        # NaN where the reference has NaN (a tile with an inf: f16 rows
        # overflow), its payload aside (kvgen's host code 0x7fc0, torch's
        # product 0xffff), every other value bit for bit.
        g = got.cpu()
        nan = ref.isnan()
        assert torch.equal(g.isnan(), nan), where
        _same_bits(g.masked_fill(nan, 0.0), ref.masked_fill(nan, 0.0))
    assert seen["ds_mla"] >= 6 and seen["auto"] >= 3, seen
