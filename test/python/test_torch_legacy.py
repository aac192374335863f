"""kvgen.torch's reshape_and_cache: vLLM's legacy paged cache, key_cache
[num_blocks, H, D/x, block_size, x] (x = 16 bytes of elements), value_cache
[num_blocks, H, D, block_size], written through the layout the tensors'
strides give (k_elem_chunks / v_elem_stride, python/kvgen/_views.py), and
gather_cache reading it back; value_cache may also be ROCm aiter's shuffled
[num_blocks, H, block_size / x, D, x] (test_aiter_value_cache_bit_exact).

Checked against a plain-torch reference (torch_ref.write_legacy, itself
checked here against vLLM's index formula) bit for bit over the whole
allocations, which start as random bits (bytes outside the written rows
unchanged): bf16, f16, fp8 (uint8 and float8_e4m3fn caches, per-tensor and
per-head scales), MiMo K 192 / V 128 and 128 / 128, block sizes 16 and 32,
int32 / int64 slots with padding (-1), fewer slots than rows, caches that
are the halves of one [2, ...] allocation or have padded blocks;
torch.library.opcheck; bad shapes raising ValueError naming the argument
and writing nothing; the C++ kernel launching the second call. CUDA
variants (and a CUDA graph capture / replay) run where torch sees a GPU.
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed "
                            "(scripts/install-deps.sh installs it)")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import jit_skip_reason  # noqa: E402

_WHY = jit_skip_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")

import kvgen.torch as kt  # noqa: E402  (registers torch.ops.kvgen)
from kvgen._views import LegacyCacheGeometry  # noqa: E402
import torch_ref  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device visible to torch")
DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]

#: kind -> (cache dtype, kv_cache_dtype)
KINDS = {"bf16": (torch.bfloat16, "auto"),
         "f16": (torch.float16, "float16"),
         "fp8": (torch.uint8, "fp8"),
         "float8_e4m3fn": (torch.float8_e4m3fn, "fp8_e4m3")}
#: (num_kv_heads, head_size_k, head_size_v)
GEOMETRIES = {"mimo": (4, 192, 128), "d128": (2, 128, 128)}


def _x(dtype):
    return 16 // torch.empty((), dtype=dtype).element_size()


def _random(shape, dtype, gen, dev):
    """A tensor of random bits (NaNs included for floats)."""
    n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape).to(dev)


def _bits(t):
    return t.contiguous().view(torch.uint8)


def legacy_caches(nb, H, dk, dv, bs, dtype, gen, dev, arrangement):
    """(allocations, key_cache, value_cache) of vLLM's legacy pair:
    "separate" tensors, "split" (both halves of one [2, nb * H * D * bs]
    allocation, as vLLM's PagedAttention.split_kv_cache views them; needs
    dk == dv), "padded" (blocks of bs + 3 token slots of which the views
    take bs, and an extra head: strides no dense layout has)."""
    x = _x(dtype)
    if arrangement == "separate":
        k = _random((nb, H, dk // x, bs, x), dtype, gen, dev)
        v = _random((nb, H, dv, bs), dtype, gen, dev)
        return [k, v], k, v
    if arrangement == "split":
        assert dk == dv
        kv = _random((2, nb, H * dk * bs), dtype, gen, dev)
        return [kv], kv[0].view(nb, H, dk // x, bs, x), \
            kv[1].view(nb, H, dv, bs)
    assert arrangement == "padded"
    k = _random((nb, H + 1, dk // x, bs + 3, x), dtype, gen, dev)
    v = _random((nb, H + 1, dv, bs + 3), dtype, gen, dev)
    return [k, v], k[:, :H, :, :bs, :], v[:, :H, :, :bs]


def _rows(n, H, d, gen, dev, dtype=torch.bfloat16):
    return ((torch.randn(n, H, d, generator=gen) * 3).to(dtype)).to(dev)


def _slots(T, nb, bs, gen, dtype, dev):
    s = torch.randperm(nb * bs, generator=gen)[:T].to(dtype)
    s[1::4] = -1
    return s.to(dev)


def _scales(kind, H, dev):
    if kind == "per_head":
        return (torch.linspace(0.25, 1.0, H).to(dev),
                torch.linspace(0.5, 2.0, H).to(dev))
    return torch.tensor([0.5], device=dev), torch.tensor([0.25], device=dev)


def _mirror(allocs, key_cache, value_cache):
    """Copies of the allocations and the same views into them."""
    copies = [a.clone() for a in allocs]

    def same(view):
        for a, c in zip(allocs, copies):
            off = view.data_ptr() - a.data_ptr()
            if 0 <= off < a.numel() * a.element_size():
                return c.as_strided(view.shape, view.stride(),
                                    c.storage_offset() +
                                    off // a.element_size())
        raise AssertionError("view outside its allocations")
    return copies, same(key_cache), same(value_cache)


def _gather_matches_reference(kc, vc, slots, T, H, dk, dv, rdt, dev, kvd,
                              ks, vs, where=""):
    """gather_cache of slots' rows from (kc, vc) into fresh [T, H, d]
    outputs of rdt equals torch_ref.gather_legacy's bit for bit; returns
    kvgen's (key_out, value_out)."""
    ko = torch.zeros(T, H, dk, dtype=rdt, device=dev)
    vo = torch.zeros(T, H, dv, dtype=rdt, device=dev)
    wko, wvo = ko.clone(), vo.clone()
    torch.ops.kvgen.gather_cache(kc, vc, slots, ko, vo, kvd, ks, vs)
    torch_ref.gather_legacy(kc, vc, slots, wko, wvo, kvd, ks, vs)
    assert torch.equal(_bits(ko), _bits(wko)), where
    assert torch.equal(_bits(vo), _bits(wvo)), where
    return ko, vo


def test_reference_is_vllms_index_formula():
    """torch_ref.write_legacy against vLLM's reshape_and_cache_kernel
    index formula (contiguous caches), element by element."""
    gen = torch.Generator().manual_seed(1)
    nb, H, D, bs, x = 3, 2, 16, 4, 8
    key, value = _rows(5, H, D, gen, "cpu"), _rows(5, H, D, gen, "cpu")
    slots = torch.tensor([7, -1, 0, 11, 5])
    kc = torch.zeros(nb, H, D // x, bs, x, dtype=torch.bfloat16)
    vc = torch.zeros(nb, H, D, bs, dtype=torch.bfloat16)
    torch_ref.write_legacy(key, value, kc, vc, slots, "auto", None, None)
    wk, wv = torch.zeros(kc.numel()), torch.zeros(vc.numel())
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, bs)
        for h in range(H):
            for d in range(D):
                wk[(((b * H + h) * (D // x) + d // x) * bs + o) * x +
                   d % x] = key[t, h, d].float()
                wv[((b * H + h) * D + d) * bs + o] = value[t, h, d].float()
    assert torch.equal(kc.reshape(-1).float(), wk)
    assert torch.equal(vc.reshape(-1).float(), wv)


CASES = [(kind, geo, bs) for kind in KINDS for geo in GEOMETRIES
         for bs in (16, 32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind,geo,bs", CASES,
                         ids=[f"{k}-{g}-b{b}" for k, g, b in CASES])
def test_write_and_gather_bit_exact(kind, geo, bs, device):
    """The whole allocations equal the reference's after the write (T =
    slot_mapping.numel() < key rows, padding rows NaN, slots -1 skipped);
    gather_cache reads the rows back as the reference does. Slots int64
    for block size 16, int32 for 32; fp8 with per-tensor scales for block
    size 16, per-head for 32."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(CASES.index((kind, geo, bs)))
    cdt, kvd = KINDS[kind]
    H, dk, dv = GEOMETRIES[geo]
    nb, T, pad = 5, 11, 4
    rdt = torch.float16 if kind == "f16" else torch.bfloat16
    allocs, kc, vc = legacy_caches(nb, H, dk, dv, bs, cdt, gen, dev,
                                   "separate")
    ks, vs = _scales("per_tensor" if bs == 16 else "per_head", H, dev)
    slot_dt = torch.int64 if bs == 16 else torch.int32
    for entry in ("torch.ops", "kvgen.torch"):
        write = torch.ops.kvgen.reshape_and_cache if entry == "torch.ops" \
            else kt.reshape_and_cache
        key, value = _rows(T + pad, H, dk, gen, dev, rdt), \
            _rows(T + pad, H, dv, gen, dev, rdt)
        key[T:], value[T:] = float("nan"), float("nan")
        slots = _slots(T, nb, bs, gen, slot_dt, dev)
        want, wk, wv = _mirror(allocs, kc, vc)
        torch_ref.write_legacy(key, value, wk, wv, slots, kvd, ks, vs)
        write(key, value, kc, vc, slots, kvd, ks, vs)
        for a, w in zip(allocs, want):
            assert torch.equal(_bits(a), _bits(w)), entry
        ko, vo = _gather_matches_reference(kc, vc, slots, T, H, dk, dv, rdt,
                                           dev, kvd, ks, vs, entry)
        if kvd == "auto":
            ok = (slots >= 0).cpu()
            assert torch.equal(ko.cpu()[ok], key.cpu()[:T][ok])
            assert torch.equal(vo.cpu()[ok], value.cpu()[:T][ok])
    kt.check_errors(dev)


AITER_CASES = [(kind, bs) for kind in ("bf16", "float8_e4m3fn")
               for bs in (16, 32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind,bs", AITER_CASES,
                         ids=[f"{k}-b{b}" for k, b in AITER_CASES])
def test_aiter_value_cache_bit_exact(kind, bs, device):
    """reshape_and_cache and gather_cache with ROCm aiter's shuffled value
    cache [num_blocks, H, block_size / x, Dv, x] (5-D): after the same
    write, the aiter V holds the legacy V's bytes permuted (V[b, h, d, t]
    at [b, h, t / x, d, t % x]) over the whole allocation, which starts as
    random bits (unwritten bytes unchanged), the key caches are equal, and
    gather_cache reads the same rows from both pairs. MiMo K 192 / V 128,
    bf16 or fp8 with per-head scales."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(AITER_CASES.index((kind, bs)) + 50)
    cdt, kvd = KINDS[kind]
    H, dk, dv = GEOMETRIES["mimo"]
    nb, T, x = 5, 13, _x(cdt)
    _, kc, vl = legacy_caches(nb, H, dk, dv, bs, cdt, gen, dev, "separate")
    kc2 = kc.clone()
    shuffle = (lambda v: v.view(nb, H, dv, bs // x, x)
               .permute(0, 1, 3, 2, 4).contiguous())
    va = shuffle(vl)
    ks, vs = _scales("per_head", H, dev)
    key, value = _rows(T, H, dk, gen, dev), _rows(T, H, dv, gen, dev)
    slots = _slots(T, nb, bs, gen, torch.int64, dev)
    torch.ops.kvgen.reshape_and_cache(key, value, kc, vl, slots, kvd, ks, vs)
    kt.reshape_and_cache(key, value, kc2, va, slots, kvd, ks, vs)
    assert torch.equal(_bits(kc2), _bits(kc))
    assert torch.equal(_bits(va), _bits(shuffle(vl)))
    outs = []
    for v in (vl, va):
        ko = torch.zeros(T, H, dk, dtype=torch.bfloat16, device=dev)
        vo = torch.zeros(T, H, dv, dtype=torch.bfloat16, device=dev)
        torch.ops.kvgen.gather_cache(kc, v, slots, ko, vo, kvd, ks, vs)
        outs.append((ko, vo))
    assert torch.equal(_bits(outs[0][0]), _bits(outs[1][0]))
    assert torch.equal(_bits(outs[0][1]), _bits(outs[1][1]))
    if kvd == "auto":
        ok = (slots >= 0).cpu()
        assert torch.equal(outs[1][1].cpu()[ok], value.cpu()[ok])
    kt.check_errors(dev)


@pytest.mark.parametrize("device", DEVICES)
def test_random_sequence_of_shapes(device):
    """The op's remembered plans (per argument shapes and strides) over an
    engine's changing calls: one process drives reshape_and_cache and
    gather_cache through 24 calls drawn at random from token counts,
    geometries, block sizes, cache dtypes, arrangements and value cache
    forms (vLLM's legacy V or aiter's shuffled V; repeats included, so
    remembered plans are reused), each checked bit for bit against the
    reference over the whole allocations (aiter's V: against the
    reference's legacy V permuted)."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(2026)
    pick = __import__("random").Random(12)
    forms = {"legacy": 0, "aiter": 0}
    for call in range(24):
        kind = pick.choice(list(KINDS))
        geo = pick.choice(list(GEOMETRIES))
        bs = pick.choice((16, 32))
        arrangement = pick.choice(("separate", "padded"))
        T = pick.choice((1, 3, 17, 40))
        cdt, kvd = KINDS[kind]
        H, dk, dv = GEOMETRIES[geo]
        nb = max(3, -(-T // bs) + 2)
        allocs, kc, vc = legacy_caches(nb, H, dk, dv, bs, cdt, gen, dev,
                                       arrangement)
        ks, vs = _scales(pick.choice(("per_tensor", "per_head")), H, dev)
        rdt = torch.float16 if kind == "f16" else torch.bfloat16
        key, value = (_rows(T + 2, H, dk, gen, dev, rdt),
                      _rows(T + 2, H, dv, gen, dev, rdt))
        slots = _slots(T, nb, bs, gen, pick.choice((torch.int32,
                                                    torch.int64)), dev)
        want, wk, wv = _mirror(allocs, kc, vc)
        torch_ref.write_legacy(key, value, wk, wv, slots, kvd, ks, vs)
        aiter = pick.random() < 0.5
        forms["aiter" if aiter else "legacy"] += 1
        where = (f"call {call}: {kind} {geo} b{bs} {arrangement} T={T} "
                 f"{'aiter' if aiter else 'legacy'} V")
        if not aiter:
            torch.ops.kvgen.reshape_and_cache(key, value, kc, vc, slots, kvd,
                                              ks, vs)
            for a, w in zip(allocs, want):
                assert torch.equal(_bits(a), _bits(w)), where
            _gather_matches_reference(kc, vc, slots, T, H, dk, dv, rdt, dev,
                                      kvd, ks, vs, where)
            continue
        # aiter's V [nb, H, bs / x, Dv, x]: its own allocation holding the
        # legacy V's bits permuted.
        x = _x(cdt)

        def shuffle(v):
            return v.unflatten(3, (bs // x, x)).permute(0, 1, 3, 2, 4) \
                .contiguous()
        va = shuffle(vc)
        torch.ops.kvgen.reshape_and_cache(key, value, kc, va, slots, kvd, ks,
                                          vs)
        assert torch.equal(_bits(allocs[0]), _bits(want[0])), where
        assert torch.equal(_bits(va), _bits(shuffle(wv))), where
        outs = []
        for k_, v_, op in ((kc, va, torch.ops.kvgen.gather_cache),
                           (wk, wv, torch_ref.gather_legacy)):
            ko = torch.zeros(T, H, dk, dtype=rdt, device=dev)
            vo = torch.zeros(T, H, dv, dtype=rdt, device=dev)
            op(k_, v_, slots, ko, vo, kvd, ks, vs)
            outs.append((ko, vo))
        assert torch.equal(_bits(outs[0][0]), _bits(outs[1][0])), where
        assert torch.equal(_bits(outs[0][1]), _bits(outs[1][1])), where
    assert min(forms.values()) >= 4, forms  # both forms, several times
    kt.check_errors(dev)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arrangement", ["split", "padded"])
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_strided_cache_views(kind, arrangement, device):
    """The halves of one [2, ...] allocation (vLLM's split_kv_cache) and
    views with padded blocks and an extra head: the layout takes the
    views' strides (k_elem_chunks' stride is (bs + 3) * x for the padded
    ones); the padding and the other half stay as they were."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(7)
    cdt, kvd = KINDS[kind]
    H, D, bs, nb, T = 2, 128, 16, 4, 9
    allocs, kc, vc = legacy_caches(nb, H, D, D, bs, cdt, gen, dev,
                                   arrangement)
    ks, vs = _scales("per_tensor", H, dev)
    key, value = _rows(T, H, D, gen, dev), _rows(T, H, D, gen, dev)
    slots = _slots(T, nb, bs, gen, torch.int64, dev)
    want, wk, wv = _mirror(allocs, kc, vc)
    torch_ref.write_legacy(key, value, wk, wv, slots, kvd, ks, vs)
    torch.ops.kvgen.reshape_and_cache(key, value, kc, vc, slots, kvd, ks, vs)
    for a, w in zip(allocs, want):
        assert torch.equal(_bits(a), _bits(w))
    if arrangement == "padded":
        x = _x(cdt)
        text = LegacyCacheGeometry(kc, vc, "bf16", "none").text
        assert f"k_elem_chunks = [{x}, {(bs + 3) * x}]" in text, text
        assert f"v_elem_stride = {bs + 3}" in text, text
    kt.check_errors(dev)


def test_cpp_kernel_launches_the_second_call():
    """The second call of a call site is launched from the remembered plan
    (the C++ kernel where it is in use), the rows' token count checked
    there: T = slot_mapping.numel() <= rows."""
    gen = torch.Generator().manual_seed(11)
    H, D, bs, nb = 2, 128, 16, 4
    _, kc, vc = legacy_caches(nb, H, D, D, bs, torch.bfloat16, gen, "cpu",
                              "separate")
    one = torch.tensor([1.0])
    hits = []
    for T in (6, 3):
        key, value = _rows(8, H, D, gen, "cpu"), _rows(8, H, D, gen, "cpu")
        slots = _slots(T, nb, bs, gen, torch.int64, "cpu")
        wk, wv = kc.clone(), vc.clone()
        torch_ref.write_legacy(key, value, wk, wv, slots, "auto", one, one)
        torch.ops.kvgen.reshape_and_cache(key, value, kc, vc, slots, "auto",
                                          one, one)
        assert torch.equal(_bits(kc), _bits(wk))
        assert torch.equal(_bits(vc), _bits(wv))
        hits.append(kt.fast_path_info()["hits"])
    if kt.fast_path_info()["kernel"] == "c++":
        assert hits[1] == hits[0] + 1


def test_python_fast_path_sees_a_cache_dtype_changed_in_place(monkeypatch):
    """The Python kernels' identity table (kt._cpp None: KVGEN_TORCH_FAST=0
    or no C++ kernel) remembers a plan per cache tensor; a cache whose
    dtype changed in place (`.data =` a same-size view: same pointer,
    shape and strides) must go through the checks again, as the C++
    kernel's signature (which has the dtype) makes it: a bf16 write into
    an f16 key_cache raises TypeError instead of storing bf16 bits."""
    monkeypatch.setattr(kt, "_cpp", None)
    key, value, kc, vc, slots = _bad_setup()
    x = _x(torch.bfloat16)
    va = vc.view(4, 2, 64, 16 // x, x).permute(0, 1, 3, 2, 4).contiguous()
    one = torch.tensor([1.0])
    for v in (vc, va):  # vLLM's legacy V, aiter's shuffled V
        kt.reshape_and_cache(key, value, kc, v, slots, "auto", one, one)
        kc.data = kc.data.view(torch.float16)
        kc.zero_()
        with pytest.raises(TypeError, match=r"key_cache has dtype "
                           r"torch.float16; with kv_cache_dtype 'auto' it "
                           r"must be torch.bfloat16"):
            kt.reshape_and_cache(key, value, kc, v, slots, "auto", one, one)
        assert not kc.any()
        kc.data = kc.data.view(torch.bfloat16)


def _bad_setup():
    gen = torch.Generator().manual_seed(13)
    H, D, bs, nb = 2, 64, 16, 4
    key, value = _rows(5, H, D, gen, "cpu"), _rows(5, H, D, gen, "cpu")
    kc = torch.zeros(nb, H, D // 8, bs, 8, dtype=torch.bfloat16)
    vc = torch.zeros(nb, H, D, bs, dtype=torch.bfloat16)
    slots = torch.tensor([3, -1, 17, 40, 2])
    return key, value, kc, vc, slots


# name -> (change of (key, value, key_cache, value_cache, slots), exception,
# message pattern)
BAD = {
    "flash_key_cache": (
        lambda k, v, kc, vc, s: (k, v, kc.view(4, 16, 2, 64), vc, s),
        ValueError, r"key_cache has shape \[4, 16, 2, 64\], need 5 dims"),
    # A 5-D value_cache is aiter's shuffled V [nb, H, bs / x, Dv, x]: its
    # block size (dims 2 x 4) and x (dim 4) are checked.
    "value_cache_5d": (
        lambda k, v, kc, vc, s: (k, v, kc, vc.view(4, 2, 8, 8, 16), s),
        ValueError, r"value_cache \[4, 2, 8, 8, 16\] 8 x 16 = 128 \(dims 2 "
        r"and 4\)"),
    "aiter_value_x": (
        lambda k, v, kc, vc, s: (k, v, kc, vc.view(4, 2, 4, 64, 4), s),
        ValueError, r"value_cache has shape \[4, 2, 4, 64, 4\]: its last "
        r"dimension must be x = 16 bytes / 2-byte elements = 8 \(aiter's"),
    "value_cache_6d": (
        lambda k, v, kc, vc, s: (k, v, kc, vc.view(4, 2, 8, 8, 2, 8), s),
        ValueError, r"value_cache has shape \[4, 2, 8, 8, 2, 8\], need 4 "
        r"dims"),
    "x_not_16_bytes": (
        lambda k, v, kc, vc, s: (k, v, kc.view(4, 2, 4, 16, 16), vc, s),
        ValueError, r"key_cache has shape \[4, 2, 4, 16, 16\]: its last "
        r"dimension must be x = 16 bytes / 2-byte elements = 8"),
    "head_size_not_a_multiple_of_x": (
        lambda k, v, kc, vc, s: (k[..., :60], v, kc[:, :, :7], vc, s),
        ValueError, r"key has head_size 60, key_cache 7 chunks x 8 = 56"),
    "key_head_size": (
        lambda k, v, kc, vc, s: (k, v, kc[:, :, :4], vc, s),
        ValueError, r"key has head_size 64, key_cache 4 chunks x 8 = 32"),
    "value_head_size": (
        lambda k, v, kc, vc, s: (k, v, kc, vc[:, :, :32], s),
        ValueError, r"value has head_size 64, value_cache 32"),
    "block_size": (
        lambda k, v, kc, vc, s: (k, v, kc, vc[..., :8], s),
        ValueError, r"block_size 16 \(dim 3\), value_cache \[4, 2, 64, 8\] "
        r"8"),
    "heads": (
        lambda k, v, kc, vc, s: (k, v, kc, vc[:, :1], s),
        ValueError, r"differ in \[num_blocks, num_kv_heads\]"),
    "kv_overlap": (
        lambda k, v, kc, vc, s: (k, v, kc, kc.view(4, 2, 64, 16), s),
        ValueError, r"key_cache and value_cache overlap"),
    "rows_dtype": (
        lambda k, v, kc, vc, s: (k.half(), v.half(), kc, vc, s),
        TypeError, r"key_cache has dtype torch.bfloat16; with kv_cache_dtype "
        r"'auto' it must be torch.float16"),
    "value_dtype": (
        lambda k, v, kc, vc, s: (k, v, kc, vc.half(), s),
        TypeError, r"value_cache has dtype torch.float16"),
}


@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_shapes_raise_and_write_nothing(case, entry):
    """Shapes that are not the legacy pair raise (naming the argument)
    before anything is written, also after a good call of the same caches
    remembered its plan."""
    write = torch.ops.kvgen.reshape_and_cache if entry == "torch.ops" \
        else kt.reshape_and_cache
    key, value, kc, vc, slots = _bad_setup()
    one = torch.tensor([1.0])
    write(key, value, kc, vc, slots, "auto", one, one)
    kc.zero_()
    vc.zero_()
    change, exc, pattern = BAD[case]
    args = change(key, value, kc, vc, slots)
    with pytest.raises(exc, match=pattern):
        write(*args, "auto", one, one)
    assert not kc.any() and not vc.any()


def test_flash_op_refuses_legacy_caches():
    """reshape_and_cache_flash keeps its [nb, bs, H, D] caches."""
    key, value, kc, vc, slots = _bad_setup()
    one = torch.tensor([1.0])
    with pytest.raises(ValueError, match=r"key_cache has shape "
                       r"\[4, 2, 8, 16, 8\], need \[num_blocks, block_size"):
        torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                                "auto", one, one)


def _opcheck_args(kvd, aiter=False):
    gen = torch.Generator().manual_seed(17)
    cdt = torch.uint8 if kvd == "fp8" else torch.bfloat16
    _, kc, vc = legacy_caches(4, 2, 64, 64, 16, cdt, gen, "cpu", "separate")
    if aiter:  # aiter's shuffled V [nb, H, bs / x, Dv, x]
        x = _x(cdt)
        vc = vc.view(4, 2, 64, 16 // x, x).permute(0, 1, 3, 2, 4).contiguous()
    one = torch.tensor([0.5])
    return (_rows(9, 2, 64, gen, "cpu"), _rows(9, 2, 64, gen, "cpu"), kc, vc,
            torch.tensor([5, -1, 40, 2, 63, 9]), kvd, one, one)


def _opcheck(op, args):
    res = torch.library.opcheck(op, args, raise_exception=False)
    bad = {k: v for k, v in res.items() if v != "SUCCESS"}
    assert not bad, bad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aiter", [False, True], ids=["legacy_v", "aiter_v"])
@pytest.mark.parametrize("kvd", ["auto", "bfloat16", "fp8"])
def test_opcheck(kvd, aiter, device):
    """torch.library.opcheck of reshape_and_cache and of gather_cache on
    legacy caches (V legacy or aiter's shuffled): the schema's mutations,
    the fake implementation, AOT dispatch."""
    args = [a.to(device) if isinstance(a, torch.Tensor) else a
            for a in _opcheck_args(kvd, aiter)]
    _opcheck(torch.ops.kvgen.reshape_and_cache.default, args)
    key, value, kc, vc, slots, _, ks, vs = args
    out = (torch.zeros(6, 2, 64, device=device),
           torch.zeros(6, 2, 64, device=device))
    _opcheck(torch.ops.kvgen.gather_cache.default,
             (kc, vc, slots) + out + (kvd, ks, vs))
    kt.check_errors(device)


@cuda
def test_cuda_graph_capture_and_replay():
    """reshape_and_cache captured in a CUDA graph (after one eager call
    made its plan) and replayed with new rows and slots: each replay
    writes what the reference writes onto the cache as it was before."""
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(23)
    T, H, dk, dv, bs, nb = 64, 4, 192, 128, 16, 32
    _, kc, vc = legacy_caches(nb, H, dk, dv, bs, torch.bfloat16, gen, dev,
                              "separate")
    key, value = _rows(T, H, dk, gen, dev), _rows(T, H, dv, gen, dev)
    slots = _slots(T, nb, bs, gen, torch.int64, dev)
    one = torch.ones(1, device=dev)
    op = torch.ops.kvgen.reshape_and_cache
    op(key, value, kc, vc, slots, "auto", one, one)  # JIT before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        op(key, value, kc, vc, slots, "auto", one, one)
    for step in range(3):
        key.copy_(_rows(T, H, dk, gen, dev))
        value.copy_(_rows(T, H, dv, gen, dev))
        slots.copy_(_slots(T, nb, bs, gen, torch.int64, dev))
        wk, wv = kc.clone(), vc.clone()
        torch_ref.write_legacy(key, value, wk, wv, slots, "auto", one, one)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(_bits(kc), _bits(wk)), step
        assert torch.equal(_bits(vc), _bits(wv)), step
    kt.check_errors(dev)


def test_python_kernels_without_the_cpp_kernel():
    """KVGEN_TORCH_FAST=0: the op's Python kernel and the Python function
    (both through the identity table after the first call) write what the
    reference writes."""
    import os
    import subprocess
    here = Path(__file__).resolve().parent
    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(here)!r})\n"
        "import kvgen.torch as kt, torch_ref\n"
        "from test_torch_legacy import legacy_caches, _rows, _slots\n"
        "assert kt.fast_path_info()['kernel'] == 'python'\n"
        "gen = torch.Generator().manual_seed(3)\n"
        "_, kc, vc = legacy_caches(4, 2, 64, 64, 16, torch.uint8, gen, "
        "'cpu', 'separate')\n"
        "s = torch.tensor([0.5])\n"
        "for f in [torch.ops.kvgen.reshape_and_cache, kt.reshape_and_cache]"
        " * 2:\n"
        "    k, v = _rows(7, 2, 64, gen, 'cpu'), _rows(7, 2, 64, gen, 'cpu')\n"
        "    sl = _slots(5, 4, 16, gen, torch.int32, 'cpu')\n"
        "    wk, wv = kc.clone(), vc.clone()\n"
        "    torch_ref.write_legacy(k, v, wk, wv, sl, 'fp8', s, s)\n"
        "    f(k, v, kc, vc, sl, 'fp8', s, s)\n"
        "    assert torch.equal(kc, wk) and torch.equal(vc, wv), f\n"
        "print('ok')\n")
    env = dict(os.environ, KVGEN_TORCH_FAST="0",
               PYTHONPATH=str(here.parents[1] / "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, env=env, cwd=str(here))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_cuda_kernels_compile_with_nvrtc(tmp_path):
    """Without a GPU: the write and gather kernels of the legacy layouts
    that kvgen.torch derives (bf16 and fp8, MiMo and 128 / 128, blocks 16
    and 32) compile with NVRTC for sm_90 through a compile-only context
    (any compiler warning is an error); skipped where libnvrtc cannot be
    loaded."""
    import kvgen
    try:
        ctx = kvgen.Context.compile_only("cuda", "sm_90",
                                         cache_dir=str(tmp_path))
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"cuda compiler not loadable here: {e}")
    for cdt, dt, scale in ((torch.bfloat16, "bf16", "none"),
                           (torch.uint8, "f8E4M3FN", "per_tensor")):
        x = _x(cdt)
        for H, dk, dv in GEOMETRIES.values():
            for bs in (16, 32):
                geo = LegacyCacheGeometry(
                    torch.empty(3, H, dk // x, bs, x, dtype=cdt),
                    torch.empty(3, H, dv, bs, dtype=cdt), dt, scale)
                for op, opts in (("reshape_and_cache", {}),
                                 ("gather", {"dequantize": scale != "none"})):
                    try:
                        k = ctx.kernel(op, geo.layout, io="bf16",
                                       slots="i64", **opts)
                    except kvgen.KvgenError as e:
                        if e.status_name == "KVGEN_ERROR_BACKEND_UNAVAILABLE":
                            pytest.skip(f"cuda compiler not loadable: {e}")
                        raise
                    assert k.op == op
