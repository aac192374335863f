"""kvgen.torch: the torch.library ops on CPU tensors (kvgen's host backend,
JIT-generated through libkvgen-generator.so, no bundle) against the numpy
reference (kvgen_ref.py), bit for bit over the whole cache allocations, for
every preset (runtime/lib/Presets.cpp, read from `kvgen presets`) in the
preset's own arrangement, as an HND permute, and as a [num_blocks, 2, ...]
allocation; torch.compile(fullgraph=True) of a function calling the write
op; bad inputs raising a clear error and writing nothing; MLA (through
kv.concat_and_cache_mla / kv.gather_mla: bf16, fp8 with a scale, strided
kv_c / k_pe and padded caches), copy and swap ops against the torch
reference (torch_ref.py, itself checked against numpy here); out-of-range
slots and block ids skipped, nothing written outside the cache, reported by
kvgen.torch.check_errors; the set_unchecked / KVGEN_TORCH_UNCHECKED
opt-out. The device-parametrized tests run the same paths on CUDA. CUDA tests (torch ops on the GPU vs torch_ref, CUDA graph
capture and replay) run when torch sees a GPU and are skipped otherwise.

Skipped, with the reason, without torch, the `kvgen` CLI or the generator
library.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed "
                            "(scripts/install-deps.sh installs it)")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvgen  # noqa: E402
import kvgen_ref as ref  # noqa: E402
import torch_ref  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"


from conftest import jit_skip_reason  # noqa: E402

_WHY = jit_skip_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")

import kvgen.torch as kt  # noqa: E402  (registers torch.ops.kvgen)

TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16,
               "f32": torch.float32, "f8E4M3FN": torch.uint8,
               "f8E5M2": torch.uint8}
STORAGE = {torch.bfloat16: torch.int16, torch.float16: torch.int16,
           torch.float32: torch.int32, torch.uint8: torch.uint8,
           torch.float8_e4m3fn: torch.uint8}


def presets():
    """{name: layout dict} from `kvgen presets` (a name line, then the
    layout text)."""
    if not (KVGEN.is_file() and os.access(KVGEN, os.X_OK)):
        return {}
    lines = subprocess.run([str(KVGEN), "presets"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    out = {}
    for i, line in enumerate(lines[:-1]):
        nxt = lines[i + 1].strip()
        if line and not line[0].isspace() and nxt.startswith("num_kv_heads"):
            if "components = [" in nxt:
                continue  # MLA presets: the MLA tests below cover them
            f = dict(p.split(" = ") for p in nxt.split(", "))
            out[line.split()[0]] = f
    return out


PRESETS = presets()
cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device visible to torch")
DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]


def bits(t):
    """The raw bytes of a contiguous tensor as a numpy uint8 array."""
    return t.detach().reshape(-1).view(torch.uint8).numpy().copy()


def np_bits(t):
    """A tensor's element bits as numpy unsigned ints."""
    s = STORAGE[t.dtype]
    a = t.detach().contiguous().view(s).numpy()
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.itemsize])


class Caches:
    """The allocations and the K/V views of one arrangement."""

    def __init__(self, f, arrangement, nb, gen):
        H, dk, dv, bs = (int(f[k]) for k in ("num_kv_heads", "head_size_k",
                                              "head_size_v", "block_size"))
        self.H, self.dk, self.dv, self.bs, self.nb = H, dk, dv, bs, nb
        self.dtype = f["dtype"]
        dt = TORCH_DTYPE[self.dtype]
        packed = f["packing"] == "packed"
        hnd = (f["order"] == "hnd") != (arrangement == "hnd")

        def alloc(*shape):
            raw = torch.randint(0, 256, (int(np.prod(shape)) *
                                         torch.empty((), dtype=dt)
                                         .element_size(),),
                                dtype=torch.uint8, generator=gen)
            return raw.view(dt).reshape(shape)

        def nhd(t):  # [nb, H, bs, D] -> [nb, bs, H, D] view
            return t.permute(0, 2, 1, 3) if hnd else t

        shape = (lambda d: (nb, H, bs, d)) if hnd else \
            (lambda d: (nb, bs, H, d))
        if arrangement == "nb2":
            assert not packed and dk == dv
            base = alloc(nb, 2, *shape(dk)[1:])
            self.allocs = [base]
            self.k = nhd(base[:, 0])
            self.v = nhd(base[:, 1])
        elif packed:
            base = alloc(*shape(dk + dv))
            self.allocs = [base]
            self.k = nhd(base)[..., :dk]
            self.v = nhd(base)[..., dk:]
        else:
            kb, vb = alloc(*shape(dk)), alloc(*shape(dv))
            self.allocs = [kb, vb]
            self.k, self.v = nhd(kb), nhd(vb)

    def where(self, view):
        """(allocation index, element offset, (b, t, h) strides)."""
        for i, a in enumerate(self.allocs):
            lo = a.data_ptr()
            hi = lo + a.numel() * a.element_size()
            if lo <= view.data_ptr() < hi:
                return i, (view.data_ptr() - lo) // a.element_size(), \
                    tuple(view.stride()[:3])
        raise AssertionError("view outside its allocations")

    def ref_layout(self):
        # Separate with each side's own strides: the views say where.
        return ref.Layout(self.H, self.dk, self.dv, self.bs,
                          dtype=self.dtype, scale="none")

    def ref_views(self, expected):
        lay = self.ref_layout()
        out = {}
        for side, view in (("k", self.k), ("v", self.v)):
            i, off, st = self.where(view)
            out[side] = ref.cache_side_view(lay, side, expected[i], self.nb,
                                            st, off)
        return out

    def snapshot(self):
        return [bits(a) for a in self.allocs]

    def now(self):
        return [bits(a) for a in self.allocs]


def same_bits(a, b):
    """Bit equality (random-bit caches hold NaNs)."""
    return torch.equal(a.contiguous().view(STORAGE[a.dtype]),
                       b.contiguous().view(STORAGE[b.dtype]))


def kv_dtype_arg(dtype):
    return {"f8E4M3FN": "fp8", "f8E5M2": "fp8_e5m2"}.get(dtype, "auto")


def make_rows(T, H, d, gen, dtype=torch.bfloat16):
    return (torch.randn(T, H, d, generator=gen) * 3).to(dtype)


def make_slots(T, nb, bs, gen, dtype):
    s = torch.randperm(nb * bs, generator=gen)[:T].to(dtype)
    s[3::5] = -1
    return s


ARRANGEMENTS = ["preset", "hnd", "nb2"]
CASES = [(name, arr) for name in PRESETS for arr in ARRANGEMENTS
         if not (arr == "nb2" and (PRESETS[name]["packing"] == "packed" or
                                   PRESETS[name]["head_size_k"] !=
                                   PRESETS[name]["head_size_v"]))]


# fp8 presets with per-tensor and per-head scales, the others without.
SCALED = [(n, a, k) for n, a in CASES
          for k in (("per_tensor", "per_head")
                    if PRESETS[n]["dtype"].startswith("f8") else ("none",))]


@pytest.mark.skipif(not PRESETS, reason=f"{KVGEN} not built: no preset list")
@pytest.mark.parametrize("name,arrangement,scale_kind", SCALED,
                         ids=[f"{n}-{a}-{k}" for n, a, k in SCALED])
def test_presets_write_and_gather_bit_exact(name, arrangement, scale_kind):
    f = PRESETS[name]
    fp8 = f["dtype"].startswith("f8")
    gen = torch.Generator().manual_seed(
        sum(map(ord, name + arrangement + scale_kind)))
    T, nb = 37, 5
    c = Caches(f, arrangement, nb, gen)
    key = make_rows(T, c.H, c.dk, gen)
    value = make_rows(T, c.H, c.dv, gen)
    slot_t = torch.int32 if arrangement == "hnd" else torch.int64
    slots = make_slots(T, nb, c.bs, gen, slot_t)
    n = c.H if scale_kind == "per_head" else 1
    ks = torch.rand(n, generator=gen) * 0.5 + 0.05
    vs = torch.rand(n, generator=gen) * 0.5 + 0.05

    # numpy reference over copies of the allocations' bytes
    expected = c.snapshot()
    views = c.ref_views(expected)
    sk = ref.scale_for_rows(ks.numpy(), scale_kind if fp8 else "none", c.H)
    sv = ref.scale_for_rows(vs.numpy(), scale_kind if fp8 else "none", c.H)
    for side, rows, s in (("k", key, sk), ("v", value, sv)):
        want = ref.input_to_cache(np_bits(rows), "bf16", c.dtype, s)
        ref.ref_reshape_and_cache(views[side], want, slots.numpy(), c.bs)

    torch.ops.kvgen.reshape_and_cache_flash(
        key, value, c.k, c.v, slots, kv_dtype_arg(c.dtype), ks, vs)
    for i, (got, want) in enumerate(zip(c.now(), expected)):
        bad = np.nonzero(got != want)[0]
        assert len(bad) == 0, (f"allocation {i}: {len(bad)} bytes differ, "
                               f"first at {bad[:8]}")

    # gather back (dequantizing fp8 to bf16), into outputs of random bits
    ko = torch.randint(-2**15, 2**15, (T, c.H, c.dk), generator=gen,
                       dtype=torch.int16).view(torch.bfloat16)
    vo = torch.randint(-2**15, 2**15, (T, c.H, c.dv), generator=gen,
                       dtype=torch.int16).view(torch.bfloat16)
    want_k, want_v = np_bits(ko).copy(), np_bits(vo).copy()
    views = c.ref_views(c.now())
    for side, out, s in (("k", want_k, sk), ("v", want_v, sv)):
        ref.ref_gather(out, lambda b: ref.cache_to_output(
            b, c.dtype, "bf16", fp8, s), views[side], slots.numpy(), c.bs)
    torch.ops.kvgen.gather_cache(c.k, c.v, slots, ko, vo,
                                 kv_dtype_arg(c.dtype), ks, vs)
    assert np.array_equal(np_bits(ko), want_k)
    assert np.array_equal(np_bits(vo), want_v)


def test_torch_reference_matches_numpy():
    """torch_ref (used for the GPU checks) agrees with kvgen_ref."""
    gen = torch.Generator().manual_seed(5)
    f = {"num_kv_heads": "2", "head_size_k": "64", "head_size_v": "32",
         "block_size": "16", "order": "hnd", "packing": "separate",
         "dtype": "f8E4M3FN"}
    c = Caches(f, "preset", 4, gen)
    key, value = make_rows(20, 2, 64, gen), make_rows(20, 2, 32, gen)
    slots = make_slots(20, 4, 16, gen, torch.int64)
    ks, vs = torch.tensor([0.3, 0.7]), torch.tensor([0.2, 0.9])
    expected = c.snapshot()
    views = c.ref_views(expected)
    for side, rows, s in (("k", key, ks), ("v", value, vs)):
        want = ref.input_to_cache(np_bits(rows), "bf16", "f8E4M3FN",
                                  ref.scale_for_rows(s.numpy(), "per_head",
                                                     2))
        ref.ref_reshape_and_cache(views[side], want, slots.numpy(), 16)
    torch_ref.write(key, value, c.k, c.v, slots, "fp8", ks, vs)
    for got, want in zip(c.now(), expected):
        assert np.array_equal(got, want)


# -- layouts from views --------------------------------------------------

def test_derived_layouts():
    nb, bs, H, D = 3, 16, 2, 64
    kc = torch.zeros(nb, bs, H, D, dtype=torch.bfloat16)
    geo = kt.CacheGeometry(kc, kc.clone(), "bf16", "none")
    assert "order = nhd" in geo.text and "strides" not in geo.text
    hnd = torch.zeros(nb, H, bs, D, dtype=torch.bfloat16).permute(0, 2, 1, 3)
    geo = kt.CacheGeometry(hnd, hnd.clone(), "bf16", "none")
    assert "order = hnd" in geo.text and "strides" not in geo.text
    both = torch.zeros(nb, 2, bs, H, D, dtype=torch.bfloat16)
    geo = kt.CacheGeometry(both[:, 0], both[:, 1], "bf16", "none")
    assert f"k_strides = [{2 * bs * H * D}, {H * D}, {D}]" in geo.text
    packed = torch.zeros(nb, bs, H, D + 32, dtype=torch.bfloat16)
    geo = kt.CacheGeometry(packed[..., :D], packed[..., D:], "bf16", "none")
    assert geo.packed and "packing = packed" in geo.text
    assert geo.key_bytes == packed.numel() * 2


def test_layout_that_cannot_be_expressed():
    # Blocks that overlap: a block stride smaller than one block's span.
    base = torch.zeros(4096, dtype=torch.bfloat16)
    kc = base.as_strided((4, 16, 2, 64), (64, 128, 64, 1))
    key = make_rows(2, 2, 64, torch.Generator().manual_seed(1))
    slots = torch.tensor([0, 1])
    one = torch.ones(1)
    before = base.clone()
    with pytest.raises(ValueError, match="cannot be expressed"):
        torch.ops.kvgen.reshape_and_cache_flash(key, key, kc, kc.clone(),
                                                slots, "auto", one, one)
    assert torch.equal(base, before)


# -- bad inputs: clear errors, nothing written ----------------------------

def _setup_bad():
    gen = torch.Generator().manual_seed(9)
    kc = torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16)
    vc = torch.zeros(4, 16, 2, 32, dtype=torch.bfloat16)
    key, value = make_rows(5, 2, 64, gen), make_rows(5, 2, 32, gen)
    slots = torch.tensor([1, 2, 3, -1, 60])
    return key, value, kc, vc, slots, torch.ones(1), torch.ones(1)


BAD = {
    "wrong dtype": (lambda a: a.__setitem__(0, a[0].double()),
                    TypeError, "key has dtype torch.float64"),
    "cache dtype under auto": (
        lambda a: a.__setitem__(2, a[2].half()), TypeError,
        "with kv_cache_dtype 'auto' it must be torch.bfloat16"),
    "mismatched head sizes": (
        lambda a: a.__setitem__(1, make_rows(5, 2, 64,
                                             torch.Generator())),
        ValueError, "value has head_size 64, value_cache 32"),
    "non-contiguous last dim": (
        lambda a: a.__setitem__(0, make_rows(5, 2, 128,
                                             torch.Generator())[..., ::2]),
        ValueError, "last dimension must be contiguous"),
    "slots on another device": (
        lambda a: a.__setitem__(4, a[4].to("meta")), ValueError,
        "slot_mapping is on meta"),
    "non-contiguous slots": (
        lambda a: a.__setitem__(4, torch.arange(10)[::2]), ValueError,
        "slot_mapping must be contiguous"),
    "slot dtype": (lambda a: a.__setitem__(4, a[4].float()), TypeError,
                   "slot_mapping has dtype torch.float32"),
    "kv_cache_dtype": (lambda a: a.__setitem__(5, "fp4"), ValueError,
                       "kv_cache_dtype 'fp4'"),
    "fp8 scale size": (lambda a: (a.__setitem__(5, "fp8"),
                                  a.__setitem__(2, a[2].view(torch.uint8)
                                                [..., :64].clone()),
                                  a.__setitem__(3, torch.zeros(
                                      4, 16, 2, 32, dtype=torch.uint8)),
                                  a.__setitem__(6, torch.ones(3))),
                       ValueError, "k_scale has 3 elements"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_raise_and_write_nothing(case):
    args = list(_setup_bad())
    args.insert(5, "auto")
    mutate, exc, msg = BAD[case]
    mutate(args)
    key, value, kc, vc, slots, kvd, ks, vs = args
    before = [kc.clone(), vc.clone()]
    with pytest.raises(exc, match=msg):
        torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                                kvd, ks, vs)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_after_a_remembered_plan(case, entry):
    """The same bad inputs after a good call with the same caches (whose
    plan the C++ kernel, or kvgen.torch's identity table, then holds): the
    same error, nothing written."""
    args = list(_setup_bad())
    args.insert(5, "auto")
    write = torch.ops.kvgen.reshape_and_cache_flash \
        if entry == "torch.ops" else kt.reshape_and_cache_flash
    write(*args)
    mutate, exc, msg = BAD[case]
    mutate(args)
    key, value, kc, vc, slots, kvd, ks, vs = args
    before = [kc.clone(), vc.clone()]
    with pytest.raises(exc, match=msg):
        write(key, value, kc, vc, slots, kvd, ks, vs)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


def test_good_call_of_the_bad_input_setup_writes():
    key, value, kc, vc, slots, ks, vs = _setup_bad()
    slots[4] = 63
    torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                            "auto", ks, vs)
    assert torch.equal(kc.view(-1, 2, 64)[63], key[4])


@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
def test_remembered_plan_still_checks_the_value_dtype(entry):
    """After a good call, the same caches with value in another dtype than
    key: TypeError and nothing written (the plan remembered by the cache
    tensors' identity used to skip this check and launch the bf16 kernel on
    f16 rows)."""
    key, value, kc, vc, slots, ks, vs = _setup_bad()
    slots[4] = 10
    write = torch.ops.kvgen.reshape_and_cache_flash \
        if entry == "torch.ops" else kt.reshape_and_cache_flash
    write(key, value, kc, vc, slots, "auto", ks, vs)
    assert torch.equal(vc.view(-1, 2, 32)[10], value[4])
    before = [kc.clone(), vc.clone()]
    with pytest.raises(TypeError, match="value has dtype torch.float16, key "
                       "torch.bfloat16"):
        write(key, value.half(), kc, vc, slots, "auto", ks, vs)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


@pytest.mark.parametrize("entry", ["python", "torch.ops"])
def test_remembered_plan_follows_caches_changed_in_place(entry):
    """Issue 26, row 3's class in kvgen.torch: the Python kernels remember
    a write's plan by the identity of the cache tensors; a cache changed in
    place (set_ onto a smaller storage: same tensor, 1 block instead of 4)
    kept the 4-block plan, and slot 63 was written 3 blocks past the new
    storage's view. Now the remembered pointers, shapes and strides must
    match too: the call is planned for 1 block, slot 63 is skipped and
    reported, nothing written past the view (canaries)."""
    nb, bs, H, D = 4, 16, 2, 64
    kc = torch.zeros(nb, bs, H, D, dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    gen = torch.Generator().manual_seed(5)
    key, value = make_rows(3, H, D, gen), make_rows(3, H, D, gen)
    slots = torch.tensor([0, 1, nb * bs - 1])
    one = torch.ones(1)
    write = kt._write_fast if entry == "python" else \
        torch.ops.kvgen.reshape_and_cache_flash
    write(key, value, kc, vc, slots, "auto", one, one)
    write(key, value, kc, vc, slots, "auto", one, one)  # remembered now
    assert torch.equal(kc[nb - 1, bs - 1], key[2])
    kt.check_errors("cpu")
    canary = 7.0
    bigs = [torch.full((nb * bs * H * D,), canary, dtype=torch.bfloat16)
            for _ in range(2)]
    block = bs * H * D
    for t, big in zip((kc, vc), bigs):
        t.set_(big.untyped_storage(), 0, (1, bs, H, D), (block, H * D, D, 1))
    write(key, value, kc, vc, slots, "auto", one, one)
    with pytest.raises(kvgen.KvgenError) as e:
        kt.check_errors("cpu")
    assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
    for big in bigs:
        assert (big[block:] == canary).all(), "written past the 1-block view"
    assert torch.equal(kc[0, 1], key[1]) and torch.equal(vc[0, 0], value[0])


# -- K and V caches that share memory ---------------------------------------
#
# The rule (kvgen/_views.py, CacheGeometry.check_disjoint): the byte ranges
# [data_ptr, data_ptr + span) of key_cache and value_cache may intersect only
# where no element is in both, decided exactly for views with the same
# (block, token, head) strides (column ranges of one tensor, the halves of a
# [num_blocks, 2, ...] allocation); else ValueError before anything is
# written, the numpy binding's wording.

_OVERLAP = "key_cache and value_cache overlap"
_KV_H, _KV_BS, _KV_NB = 4, 16, 2


def _kv_rows(gen, dk=192, dv=192, T=5):
    key = make_rows(T, _KV_H, dk, gen, torch.float32)
    value = make_rows(T, _KV_H, dv, gen, torch.float32) + 100
    slots = torch.tensor([0, 5, 17, -1, 31][:T])
    return key, value, slots


def _kv_views(case):
    """(allocations, key_cache, value_cache) of one arrangement over a
    [2, 16, 4, 320] float32 tensor (or a [.., 192] one)."""
    if case == "same tensor":
        kc = torch.zeros(_KV_NB, _KV_BS, _KV_H, 192)
        return kc, kc, kc
    kv = torch.zeros(_KV_NB, _KV_BS, _KV_H, 320)
    return kv, {"overlapping columns": kv[..., :192],
                "disjoint columns": kv[..., :192],
                "packed columns": kv[..., :192]}[case], \
        {"overlapping columns": kv[..., 128:256],
         "disjoint columns": kv[..., 200:320],
         "packed columns": kv[..., 192:320]}[case]


_KV_BAD = ["same tensor", "overlapping columns"]
_KV_GOOD = ["disjoint columns", "packed columns"]
_KV_ENTRIES = {"torch.ops": lambda: torch.ops.kvgen.reshape_and_cache_flash,
               "kvgen.torch": lambda: kt.reshape_and_cache_flash}


@pytest.mark.parametrize("remembered", [False, True],
                         ids=["first", "after-a-good-call"])
@pytest.mark.parametrize("entry", list(_KV_ENTRIES))
@pytest.mark.parametrize("case", _KV_BAD)
def test_overlapping_kv_caches_are_refused(case, entry, remembered):
    """The same tensor as both caches, or column ranges of one tensor that
    intersect: ValueError naming the overlap, nothing written -- also after
    a good call with disjoint caches of the same shapes and strides (whose
    plan the Python table, the identity table and the C++ kernel hold)."""
    write = _KV_ENTRIES[entry]()
    gen = torch.Generator().manual_seed(61)
    base, kc, vc = _kv_views(case)
    key, value, slots = _kv_rows(gen, kc.shape[3], vc.shape[3])
    one = torch.ones(1)
    if remembered:
        # Separate tensors with exactly the caches' shapes and strides.
        gk = torch.zeros(base.shape).as_strided(kc.shape, kc.stride())
        gv = torch.zeros(base.shape).as_strided(vc.shape, vc.stride())
        for _ in range(2):
            write(key, value, gk, gv, slots, "auto", one, one)
        assert torch.equal(gk[0, 5], key[1]) and torch.equal(gv[0, 5],
                                                             value[1])
    before = base.clone()
    with pytest.raises(ValueError, match=_OVERLAP):
        write(key, value, kc, vc, slots, "auto", one, one)
    assert torch.equal(base, before)
    with pytest.raises(ValueError, match=_OVERLAP):  # and again
        write(key, value, kc, vc, slots, "auto", one, one)
    assert torch.equal(base, before)


@pytest.mark.parametrize("entry", list(_KV_ENTRIES))
@pytest.mark.parametrize("case", _KV_GOOD)
def test_disjoint_column_views_of_one_tensor(case, entry):
    """Column ranges of one tensor whose elements interleave but do not
    intersect (with a gap, or packed K|V): accepted, bit-exact against the
    reference, also when launched from a remembered plan."""
    write = _KV_ENTRIES[entry]()
    gen = torch.Generator().manual_seed(62)
    base, kc, vc = _kv_views(case)
    want = base.clone()
    wk, wv = (want.as_strided(t.shape, t.stride(),
                              t.storage_offset()) for t in (kc, vc))
    one = torch.ones(1)
    for _ in range(3):
        key, value, slots = _kv_rows(gen, kc.shape[3], vc.shape[3])
        write(key, value, kc, vc, slots, "auto", one, one)
        torch_ref.write(key, value, wk, wv, slots, "auto", one, one)
        assert torch.equal(base, want)
    ko, vo = torch.zeros_like(key), torch.zeros_like(value)
    torch.ops.kvgen.gather_cache(kc, vc, slots, ko, vo, "auto", one, one)
    ok = slots >= 0
    assert torch.equal(ko[ok], key[ok]) and torch.equal(vo[ok], value[ok])


@pytest.mark.parametrize("case", _KV_BAD)
def test_overlapping_kv_caches_refused_by_gather_and_copy(case):
    """gather_cache and copy_blocks (the other ops with a key_cache and a
    value_cache) refuse them too, first call or after a good one."""
    gen = torch.Generator().manual_seed(63)
    base, kc, vc = _kv_views(case)
    key, value, slots = _kv_rows(gen, kc.shape[3], vc.shape[3])
    one = torch.ones(1)
    mapping = torch.tensor([[0, 1]])
    gk = torch.zeros(base.shape).as_strided(kc.shape, kc.stride())
    gv = torch.zeros(base.shape).as_strided(vc.shape, vc.stride())
    ko, vo = torch.zeros_like(key), torch.zeros_like(value)
    before = base.clone()
    for good in (False, True):
        if good:
            torch.ops.kvgen.gather_cache(gk, gv, slots, ko, vo, "auto", one,
                                         one)
            torch.ops.kvgen.copy_blocks([gk], [gv], mapping)
        ko0, vo0 = ko.clone(), vo.clone()
        with pytest.raises(ValueError, match=_OVERLAP):
            torch.ops.kvgen.gather_cache(kc, vc, slots, ko, vo, "auto", one,
                                         one)
        assert torch.equal(ko, ko0) and torch.equal(vo, vo0)
        base[0] = 1.0  # block 0 differs from block 1: a copy would show
        before = base.clone()
        with pytest.raises(ValueError, match=_OVERLAP):
            torch.ops.kvgen.copy_blocks([kc], [vc], mapping)
        assert torch.equal(base, before)
        # A good layer before the bad one: not copied either.
        gk[0], gv[0] = 2.0, 3.0
        g_before = (gk.clone(), gv.clone())
        with pytest.raises(ValueError, match=_OVERLAP):
            torch.ops.kvgen.copy_blocks([gk, kc], [gv, vc], mapping)
        assert torch.equal(base, before)
        assert torch.equal(gk, g_before[0]) and torch.equal(gv, g_before[1])
    with pytest.raises(ValueError, match=_OVERLAP):
        kt.CacheGeometry(kc, vc, "f32", "none")


def test_overlapping_kv_caches_with_the_python_kernels():
    """KVGEN_TORCH_FAST=0 (the Python kernels and their identity table):
    the same refusals, and disjoint column views still write."""
    code = (
        "import torch, kvgen.torch as kt\n"
        "assert kt.fast_path_info()['kernel'] == 'python'\n"
        "one = torch.ones(1)\n"
        "key = torch.randn(3, 4, 192); val = torch.randn(3, 4, 192) + 9\n"
        "slots = torch.tensor([0, 5, 17])\n"
        "kv = torch.zeros(2, 16, 4, 400)\n"
        "kc = torch.zeros(2, 16, 4, 192)\n"
        "for w in (torch.ops.kvgen.reshape_and_cache_flash,\n"
        "          kt.reshape_and_cache_flash):\n"
        "    w(key, val, kv[..., :192], kv[..., 200:392], slots, 'auto',\n"
        "      one, one)\n"
        "    assert torch.equal(kv[0, 5, :, :192], key[1])\n"
        "    assert torch.equal(kv[0, 5, :, 200:392], val[1])\n"
        "    for k, v in ((kc, kc), (kv[..., :192], kv[..., 100:292])):\n"
        "        b0, b1 = kv.clone(), kc.clone()\n"
        "        try:\n"
        "            w(key, val, k, v, slots, 'auto', one, one)\n"
        "        except ValueError as e:\n"
        "            assert 'key_cache and value_cache overlap' in str(e)\n"
        "        else:\n"
        "            raise AssertionError('overlap accepted')\n"
        "        assert torch.equal(kv, b0) and torch.equal(kc, b1)\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, env=dict(os.environ, KVGEN_TORCH_FAST="0",
                                           PYTHONPATH=str(REPO / "python")))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# -- torch.compile ---------------------------------------------------------

@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend, entry):
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(3)
    T, H, dk, dv, bs, nb = 9, 2, 64, 32, 16, 3
    kc = torch.zeros(nb, bs, H, dk, dtype=torch.bfloat16)
    vc = torch.zeros(nb, bs, H, dv, dtype=torch.bfloat16)
    key, value = make_rows(T, H, dk, gen), make_rows(T, H, dv, gen)
    slots = make_slots(T, nb, bs, gen, torch.int64)
    one = torch.ones(1)

    write = torch.ops.kvgen.reshape_and_cache_flash if entry == "torch.ops" \
        else kt.reshape_and_cache_flash

    def step(key, value, kc, vc, slots):
        k2 = key * 2
        write(k2, value, kc, vc, slots, "auto", one, one)
        return k2.sum()

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    total = compiled(key, value, kc, vc, slots)
    want_k = torch.zeros_like(kc)
    want_v = torch.zeros_like(vc)
    torch_ref.write(key * 2, value, want_k, want_v, slots, "auto", one, one)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
    assert torch.equal(total, (key * 2).sum())


# -- MLA, copy, swap -------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_mla_write_and_gather(kv_dtype, device):
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(11)
    L, R, bs, nb, T = 512, 64, 16, 6, 40
    cdt = torch.uint8 if kv_dtype == "fp8" else torch.bfloat16
    cache = torch.zeros(nb, bs, L + R, dtype=cdt, device=dev)
    want = cache.clone()
    kv_c = make_rows(T, 1, L, gen)[:, 0].to(dev)
    k_pe = make_rows(T, 1, R, gen)[:, 0].to(dev)
    slots = make_slots(T, nb, bs, gen, torch.int64).to(dev)
    scale = torch.tensor([0.25], device=dev)
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots, kv_dtype,
                                         scale)
    torch_ref.concat_and_cache_mla(kv_c, k_pe, want, slots, kv_dtype, scale)
    assert torch.equal(cache, want)
    # vLLM's gather by block table, two sequences, one with a start offset
    block_table = torch.tensor([[4, 1, 0], [2, 5, 3]], dtype=torch.int32,
                               device=dev)
    cu = torch.tensor([0, 20, 33], dtype=torch.int32, device=dev)
    starts = torch.tensor([0, 7], dtype=torch.int32, device=dev)
    dst = torch.full((36, L + R), 7.0, dtype=torch.bfloat16, device=dev)
    want_dst = dst.clone()
    torch.ops.kvgen.gather_and_maybe_dequant_cache_batch(cache, dst, block_table,
                                                   cu, 2, kv_dtype, scale,
                                                   starts)
    torch_ref.gather_and_maybe_dequant_cache_batch(cache, want_dst, block_table,
                                             cu, 2, kv_dtype, scale, starts)
    assert torch.equal(dst, want_dst)


def test_block_mapping_checked_on_every_call():
    """swap_blocks and copy_blocks_mla remember their plan by the caches'
    metadata and checked block_mapping only when planning: a later call
    with an int32 [N, 2], a strided [N, 2] or a 1-D mapping launched, and
    the kernel read N (src, dst) int64 pairs from it (past its end). Now
    every call checks it: ValueError, nothing copied."""
    gen = torch.Generator().manual_seed(17)
    src = torch.randn(6, 16, 2, 64, generator=gen).to(torch.bfloat16)
    dst = torch.zeros(9, 16, 2, 64, dtype=torch.bfloat16)
    mla = torch.randn(6, 16, 576, generator=gen).to(torch.bfloat16)
    good = torch.tensor([[0, 1]])
    kt.swap_blocks_device_mapping(src, dst, good)
    torch.ops.kvgen.copy_blocks_mla([mla], good)
    assert torch.equal(dst[1], src[0]) and torch.equal(mla[1], mla[0])
    dst_before, mla_before = dst.clone(), mla.clone()
    for bad in (torch.tensor([[2, 3]], dtype=torch.int32),
                torch.tensor([[2, 7, 3, 7]])[:, ::2],
                torch.tensor([2, 3])):
        with pytest.raises(ValueError, match="block_mapping"):
            kt.swap_blocks_device_mapping(src, dst, bad)
        with pytest.raises(ValueError, match="block_mapping"):
            torch.ops.kvgen.swap_blocks_device_mapping(src, dst, bad)
        with pytest.raises(ValueError, match="block_mapping"):
            torch.ops.kvgen.copy_blocks_mla([mla], bad)
        assert torch.equal(dst, dst_before) and torch.equal(mla, mla_before)
    kt.check_errors("cpu")


@pytest.mark.parametrize("device", DEVICES)
def test_copy_blocks_and_swap_blocks(device):
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(13)
    layers = []
    for _ in range(2):
        c = Caches({"num_kv_heads": "2", "head_size_k": "64",
                    "head_size_v": "64", "block_size": "16", "order": "nhd",
                    "packing": "separate", "dtype": "bf16"}, "nb2", 8, gen)
        base = c.allocs[0].to(dev)
        layers.append((base[:, 0], base[:, 1]))
    mapping = torch.tensor([[0, 5], [3, 6], [1, 7]], device=dev)
    want = [(k.clone(), v.clone()) for k, v in layers]
    torch_ref.copy_blocks([w[0] for w in want], [w[1] for w in want],
                          mapping)
    torch.ops.kvgen.copy_blocks([k for k, _ in layers],
                                [v for _, v in layers], mapping)
    for (k, v), (wk, wv) in zip(layers, want):
        assert same_bits(k, wk) and same_bits(v, wv)
    # swap: a 6-block cache into a 9-block one
    src = torch.randn(6, 16, 2, 64, generator=gen).to(torch.bfloat16).to(dev)
    dst = torch.randn(9, 16, 2, 64, generator=gen).to(torch.bfloat16).to(dev)
    m = torch.tensor([[0, 8], [5, 2], [2, 0]], device=dev)
    want = dst.clone()
    torch_ref.swap_blocks(src, want, m)
    torch.ops.kvgen.swap_blocks_device_mapping(src, dst, m)
    assert torch.equal(dst, want)
    # A block id outside dst (9 blocks): skipped, reported, nothing moved.
    kt.check_errors(dev)
    before = dst.clone()
    torch.ops.kvgen.swap_blocks_device_mapping(src, dst, torch.tensor([[0, 9]], device=dev))
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors(dev)
    assert torch.equal(dst, before)
    mla = [torch.randn(4, 16, 576, generator=gen).to(torch.bfloat16).to(dev)]
    want = mla[0].clone()
    m = torch.tensor([[0, 3], [1, 2]], device=dev)
    want[m[:, 1]] = want[m[:, 0]].clone()
    torch.ops.kvgen.copy_blocks_mla(mla, m)
    assert torch.equal(mla[0], want)


def test_eager_entry_checks_every_call():
    """kvgen.torch.reshape_and_cache_flash remembers plans by the cache
    tensors; a later call with other rows is still checked."""
    key, value, kc, vc, slots, ks, vs = _setup_bad()
    slots[4] = 10
    kt.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", ks, vs)
    assert torch.equal(kc.view(-1, 2, 64)[10], key[4])
    before = vc.clone()
    wide = make_rows(5, 2, 64, torch.Generator().manual_seed(2))
    with pytest.raises(ValueError, match="value has head_size 64"):
        kt.reshape_and_cache_flash(key, wide, kc, vc, slots, "auto", ks, vs)
    # Slot 64 (4 blocks of 16): skipped and reported, the others written.
    kt.check_errors("cpu")
    kt.reshape_and_cache_flash(key, value, kc, vc,
                               torch.tensor([0, 1, 2, 3, 64]), "auto", ks, vs)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors("cpu")
    assert torch.equal(vc.view(-1, 2, 32)[:4], value[:4])
    before = vc.clone()
    # More slots than rows (vLLM's token count is slot_mapping's length).
    with pytest.raises(ValueError, match="key has 5 tokens, slot_mapping 6"):
        kt.reshape_and_cache_flash(key, value, kc, vc,
                                   torch.arange(6), "auto", ks, vs)
    with pytest.raises(ValueError, match="slot_mapping has shape"):
        kt.reshape_and_cache_flash(key, value, kc, vc, slots.view(5, 1),
                                   "auto", ks, vs)
    with pytest.raises(ValueError, match="slot_mapping must be contiguous"):
        kt.reshape_and_cache_flash(key, value, kc, vc, torch.arange(10)[::2],
                                   "auto", ks, vs)
    with pytest.raises(ValueError, match="slot_mapping is on meta"):
        kt.reshape_and_cache_flash(key, value, kc, vc, slots.to("meta"),
                                   "auto", ks, vs)
    assert torch.equal(vc, before)
    ko, vo = torch.zeros_like(key), torch.zeros_like(value)
    kt.gather_cache(kc, vc, slots, ko, vo, "auto", ks, vs)
    assert torch.equal(ko[4], key[4])


def _pdl_supported(dev):
    """The ops' kernels take pdl=True: CUDA sm_90+ (kv-plan's
    dependent_launch); not the CPU (host backend)."""
    return dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= \
        (9, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_write_ops_with_pdl(device):
    """pdl=True: a programmatic dependent launch of the write ops, the same
    bytes as a plain launch where the kernel supports it (CUDA sm_90);
    elsewhere KvgenError (KVGEN_ERROR_INVALID_ARGUMENT) and nothing
    written, through torch.ops, kvgen.torch and its remembered fast
    path."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(21)
    T, H, dk, dv, bs, nb = 6, 2, 64, 32, 16, 3
    key = make_rows(T, H, dk, gen).to(dev)
    value = make_rows(T, H, dv, gen).to(dev)
    slots = make_slots(T, nb, bs, gen, torch.int64).to(dev)
    one = torch.ones(1, device=dev)
    want_k = torch.zeros(nb, bs, H, dk, dtype=torch.bfloat16, device=dev)
    want_v = torch.zeros(nb, bs, H, dv, dtype=torch.bfloat16, device=dev)
    torch_ref.write(key, value, want_k, want_v, slots, "auto", one, one)
    ok = _pdl_supported(dev)
    for write in (torch.ops.kvgen.reshape_and_cache_flash,
                  kt.reshape_and_cache_flash):
        kc, vc = torch.zeros_like(want_k), torch.zeros_like(want_v)
        # A plain call first: kvgen.torch then takes its fast path.
        write(key, value, kc, vc, slots, "auto", one, one)
        assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
        kc.zero_()
        vc.zero_()
        if ok:
            write(key, value, kc, vc, slots, "auto", one, one, pdl=True)
            assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
        else:
            with pytest.raises(kvgen.KvgenError,
                               match="INVALID_ARGUMENT.*cannot take a "
                               "programmatic dependent launch"):
                write(key, value, kc, vc, slots, "auto", one, one, pdl=True)
            assert not kc.any() and not vc.any()
    L, R = 128, 32
    kv_c = make_rows(T, 1, L, gen)[:, 0].to(dev)
    k_pe = make_rows(T, 1, R, gen)[:, 0].to(dev)
    cache = torch.zeros(nb, bs, L + R, dtype=torch.bfloat16, device=dev)
    want = cache.clone()
    torch_ref.concat_and_cache_mla(kv_c, k_pe, want, slots, "auto", one)
    if ok:
        torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto",
                                             one, pdl=True)
        assert torch.equal(cache, want)
    else:
        with pytest.raises(kvgen.KvgenError, match="INVALID_ARGUMENT"):
            torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots,
                                                 "auto", one, pdl=True)
        assert not cache.any()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        kt.check_errors(dev)


def test_kernel_table_reuses_plans():
    key, value, kc, vc, slots, ks, vs = _setup_bad()
    slots[4] = 10
    torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                            "auto", ks, vs)
    n = kt.plan_count()
    for t in (1, 3, 5):  # other token counts: same plan
        torch.ops.kvgen.reshape_and_cache_flash(key[:t], value[:t], kc, vc,
                                                slots[:t], "auto", ks, vs)
    assert kt.plan_count() == n
    # With "auto" the scales are not read: fresh scale tensors each call
    # still find the same entry (of the C++ kernel's table where it is in
    # use, else of kvgen.torch's identity table), and launch from there.
    def entries():
        info = kt.fast_path_info()
        if info["kernel"] == "c++":
            return info["entries"], info["hits"]
        return len(kt._fast), None

    kt.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", ks, vs)
    n_entries, hits = entries()
    assert n_entries >= 1
    for _ in range(3):
        kt.reshape_and_cache_flash(key, value, kc, vc, slots, "auto",
                                   torch.ones(1), torch.ones(1))
    assert entries()[0] == n_entries and kt.plan_count() == n
    if hits is not None:
        assert entries()[1] == hits + 3


# -- MLA ops: kv.concat_and_cache_mla / kv.gather_mla ----------------------

def _random_bits(shape, dtype, gen):
    n = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
    return torch.randint(0, 256, (n,), dtype=torch.uint8,
                         generator=gen).view(dtype).reshape(shape)


def _ops_of_plans():
    return {p.kernel.op for p in kt._plans.values()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cache", ["dense", "padded"])
@pytest.mark.parametrize("kind", ["bf16", "fp8", "float8_e4m3fn"])
def test_mla_ops_strided_views_bit_exact(kind, cache, device):
    """kv_c / k_pe as column ranges of one [T, L + R + 8] tensor, the cache
    dense or rows padded to 640 elements ([nb, bs, 640][..., :576], a
    kv_c_strides layout), random bits everywhere: the write and the gather
    by block table match torch_ref over the whole allocations."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(sum(map(ord, kind + cache)))
    L, R, bs, nb, T = 512, 64, 16, 5, 37
    kvd = "auto" if kind == "bf16" else "fp8"
    cdt = {"bf16": torch.bfloat16, "fp8": torch.uint8,
           "float8_e4m3fn": torch.float8_e4m3fn}[kind]
    width = 640 if cache == "padded" else L + R
    # Finite random contents (NaN rows would still compare by bits, but the
    # gather's dequantization of them is not what this checks).
    base = _random_bits((nb, bs, width), torch.uint8 if kind != "bf16"
                        else torch.int16, gen)
    if kind == "bf16":
        base = (base.float() / 4096).to(torch.bfloat16)
    else:
        base = (base & 0x77).view(cdt)  # no NaN / inf encodings
    base = base.to(dev)
    view = (lambda c: c[..., :L + R]) if cache == "padded" else (lambda c: c)
    want = base.clone()
    rows = make_rows(T, 1, L + R + 8, gen)[:, 0].to(dev)
    kv_c, k_pe = rows[:, :L], rows[:, L:L + R]
    slots = make_slots(T, nb, bs, gen, torch.int32).to(dev)
    scale = torch.tensor([0.37], device=dev)
    kt.check_errors(dev)
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, view(base), slots, kvd,
                                         scale)
    torch_ref.concat_and_cache_mla(kv_c, k_pe, view(want), slots, kvd, scale)
    assert same_bits(base.cpu(), want.cpu())
    block_table = torch.tensor([[4, 1, 0], [2, 3, 1]], dtype=torch.int32,
                               device=dev)
    cu = torch.tensor([0, 21, 40], dtype=torch.int32, device=dev)
    starts = torch.tensor([3, 0], dtype=torch.int32, device=dev)
    dst = torch.full((44, L + R), 7.0, dtype=torch.bfloat16, device=dev)
    want_dst = dst.clone()
    torch.ops.kvgen.gather_and_maybe_dequant_cache_batch(view(base), dst,
                                                   block_table, cu, 2, kvd,
                                                   scale, starts)
    torch_ref.gather_and_maybe_dequant_cache_batch(view(want), want_dst,
                                             block_table, cu, 2, kvd, scale,
                                             starts)
    kt.check_errors(dev)  # every slot in range: nothing reported
    assert torch.equal(dst.cpu(), want_dst.cpu())
    ops = _ops_of_plans()
    assert {"concat_and_cache_mla", "gather_mla"} <= ops
    layouts = [p.kernel.layout.text for p in kt._plans.values()
               if p.kernel.op == "concat_and_cache_mla"]
    assert any("components = [kv_c: 512, k_pe: 64]" in t for t in layouts)


def _mla_gather_want(cache, dst, table, cu, batch, starts):
    """dst after vLLM's gather_and_maybe_dequant_cache ("auto") with the
    tokens kvgen cannot serve left as they were: a position p = i +
    seq_starts[b] < 0, a column p // block_size past the block_table row, a
    block id outside [0, num_blocks)."""
    nb, bs = cache.shape[:2]
    out = dst.clone()
    for b in range(batch):
        lo, hi = int(cu[b]), int(cu[b + 1])
        for i in range(hi - lo):
            p = i + (int(starts[b]) if starts is not None else 0)
            if p < 0 or p // bs >= table.shape[1]:
                continue
            blk = int(table[b, p // bs])
            if 0 <= blk < nb:
                out[lo + i] = cache[blk, p % bs]
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_mla_gather_by_block_table_refuses_what_it_cannot_serve(device):
    """Issue 26, row 5: a sequence longer than its block_table row was
    clamped to the row's last column (another token's row returned), a
    negative seq_starts wrapped to the row's end, a block id of -1 was
    skipped, a huge int64 block id wrapped into the cache, and cu_seq_lens
    that are not cumulative or claim more rows than dst has were served in
    part: all silently, check_errors() clean. Now every token the gather
    cannot serve is skipped (its dst row untouched) and reported through
    the device's error word (check_errors raises
    KVGEN_ERROR_INDEX_OUT_OF_RANGE), the other tokens gathered; cu_seq_lens
    that are not nondecreasing from >= 0 to <= dst rows make the whole call
    write nothing and report; shapes, dtypes and devices are checked
    before any launch (ValueError / TypeError). dst rows outside the
    sequences are untouched (canaries)."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(26)
    nb, bs, E = 6, 4, 32
    cache = (torch.randn(nb, bs, E, generator=gen) * 3).to(
        torch.bfloat16).to(dev)
    scale = torch.ones(1, device=dev)

    def i32(x, dtype=torch.int32):
        return torch.tensor(x, dtype=dtype, device=dev)

    table = i32([[1, 2], [3, 4]])  # 2 columns: 8 tokens per sequence
    canary = 7.0
    cases = [
        # (name, table, cu, starts, rows of dst, reported)
        ("valid", table, [0, 5, 9], [0, 4], 12, False),
        ("longer than its row", table, [0, 9, 13], None, 14, True),
        ("start + length past the row", table, [0, 5, 9], [0, 5], 12, True),
        ("negative seq_starts", table, [0, 5, 9], [-1, 0], 12, True),
        ("block id -1", i32([[1, 2], [-1, 4]]), [0, 5, 9], None, 12, True),
        ("block id num_blocks", i32([[1, nb], [3, 4]]), [0, 5, 9], None,
         12, True),
        ("block id 2^62", i32([[1 << 62, 2], [3, 4]], torch.int64),
         [0, 5, 9], None, 12, True),
        ("cu_seq_lens decreasing", table, [0, 6, 4], None, 12, True),
        ("cu_seq_lens past dst", table, [0, 5, 13], None, 12, True),
        ("cu_seq_lens negative start", table, [-2, 3, 7], None, 12, True),
        ("empty dst, tokens claimed", table, [0, 5, 9], None, 0, True),
        ("empty dst, one token claimed", table, [0, 1, 1], None, 0, True),
        ("empty dst, no tokens", table, [0, 0, 0], None, 0, False),
        ("block_table of 0 columns", i32([[], []]), [0, 1, 1], None, 12,
         True),
        ("rows before cu_seq_lens[0]", table, [3, 5, 9], None, 12, False),
    ]
    for name, tab, cu, starts, rows, reported in cases:
        kt.check_errors(dev)
        cu_t = i32(cu)
        st = None if starts is None else i32(starts)
        dst = torch.full((rows + 2, E), canary, dtype=torch.bfloat16,
                         device=dev)  # 2 canary rows past dst
        want = dst.clone()
        if cu == sorted(cu) and cu[0] >= 0 and cu[-1] <= rows:
            want = _mla_gather_want(cache, want, tab, cu, 2, starts)
        torch.ops.kvgen.gather_and_maybe_dequant_cache_batch(
            cache, dst[:rows], tab, cu_t, 2, "auto", scale, st)
        if reported:
            with pytest.raises(kvgen.KvgenError) as e:
                kt.check_errors(dev)
            assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE", \
                name
        else:
            kt.check_errors(dev)
        assert torch.equal(dst.cpu(), want.cpu()), name
        assert (dst[rows:] == canary).all(), name
    # What is wrong on the host: refused before any launch.
    dst = torch.full((12, E), canary, dtype=torch.bfloat16, device=dev)
    cu_t = i32([0, 5, 9])
    for args, err, msg in (
            ((table, i32([0, 5]), 2, None), ValueError,
             r"cu_seq_lens has shape \[2\], need \[>= 3\]"),
            ((table[:1], cu_t, 2, None), ValueError,
             r"block_table has shape \[1, 2\], need \[>= 2, "),
            ((table, cu_t, 2, i32([0])), ValueError,
             r"seq_starts has shape \[1\], need \[>= 2\]"),
            ((table, cu_t, -1, None), ValueError, r"batch_size -1"),
            ((table.float(), cu_t, 2, None), TypeError,
             r"block_table has dtype torch.float32"),
            ((table[0], cu_t, 2, None), ValueError,
             r"block_table has shape \[2\]")):
        with pytest.raises(err, match=msg):
            torch.ops.kvgen.gather_and_maybe_dequant_cache_batch(
                cache, dst, args[0], args[1], args[2], "auto", scale,
                args[3])
        assert (dst == canary).all()
    kt.check_errors(dev)
    # Unchecked kernels (the caller's promise): such tokens are skipped,
    # not read outside the cache, and not reported.
    kt.set_unchecked(True)
    try:
        bad = i32([[1, 2], [-1, 1 << 20]])
        want = _mla_gather_want(cache, dst, bad, [0, 5, 9], 2, None)
        torch.ops.kvgen.gather_and_maybe_dequant_cache_batch(
            cache, dst, bad, cu_t, 2, "auto", scale)
        kt.check_errors(dev)
        assert torch.equal(dst.cpu(), want.cpu())
    finally:
        kt.set_unchecked(False)


def test_mla_gather_scale_none_and_batch_size_checks():
    """Issue 26 review, F7: scale=None with kv_cache_dtype "auto" (vLLM
    passes a scale tensor it never reads then) raised AttributeError
    ('NoneType' object has no attribute 'dtype'); it is accepted and the
    result is the gather's. With an fp8 cache, where the scale is read,
    None raises TypeError naming scale, before any launch. batch_size must
    be an int: the Python function refuses a bool or float (torch.ops
    converts True to 1 in its argument parser before any implementation
    runs, as for vLLM's op)."""
    gen = torch.Generator().manual_seed(27)
    nb, bs, E = 6, 4, 32
    cache = (torch.randn(nb, bs, E, generator=gen) * 3).to(torch.bfloat16)
    table = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    cu = torch.tensor([0, 5, 9], dtype=torch.int32)
    canary = 7.0
    kt.check_errors()
    for call in (torch.ops.kvgen.gather_and_maybe_dequant_cache_batch,
                 kt.gather_and_maybe_dequant_cache_batch):
        dst = torch.full((14, E), canary, dtype=torch.bfloat16)
        want = _mla_gather_want(cache, dst.clone(), table, [0, 5, 9], 2,
                                None)
        call(cache, dst[:12], table, cu, 2, "auto", None, None)
        kt.check_errors()
        assert torch.equal(dst, want)
        assert (dst[12:] == canary).all()
    fp8 = torch.zeros(nb, bs, E, dtype=torch.uint8)
    dst = torch.full((12, E), canary, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="scale is None.*fp8"):
        torch.ops.kvgen.gather_and_maybe_dequant_cache_batch(
            fp8, dst, table, cu, 2, "fp8", None, None)
    assert (dst == canary).all()
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match="batch_size .* must be an int"):
            kt.gather_and_maybe_dequant_cache_batch(cache, dst, table, cu, bad,
                                              "auto", torch.ones(1))
    assert (dst == canary).all()
    kt.check_errors()

def test_mla_fake_checks():
    kv_c = torch.zeros(3, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="kv_cache has shape"):
        torch.ops.kvgen.concat_and_cache_mla(
            kv_c, torch.zeros(3, 64, dtype=torch.bfloat16),
            torch.zeros(2, 16, 570, dtype=torch.bfloat16),
            torch.arange(3), "auto", torch.ones(1))
    with pytest.raises(TypeError, match="k_pe has dtype"):
        torch.ops.kvgen.concat_and_cache_mla(
            kv_c, torch.zeros(3, 64, dtype=torch.float16),
            torch.zeros(2, 16, 576, dtype=torch.bfloat16),
            torch.arange(3), "auto", torch.ones(1))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_mla(backend):
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(5)
    L, R, bs, nb, T = 512, 64, 16, 3, 11
    cache = torch.zeros(nb, bs, L + R, dtype=torch.bfloat16)
    rows = make_rows(T, 1, L + R, gen)[:, 0]
    slots = make_slots(T, nb, bs, gen, torch.int64)
    one = torch.ones(1)

    def step(rows, cache, slots):
        r = rows * 2
        torch.ops.kvgen.concat_and_cache_mla(r[:, :L], r[:, L:], cache,
                                             slots, "auto", one)
        return r.sum()

    total = torch.compile(step, fullgraph=True, backend=backend)(
        rows, cache, slots)
    want = torch.zeros_like(cache)
    torch_ref.concat_and_cache_mla((rows * 2)[:, :L], (rows * 2)[:, L:],
                                   want, slots, "auto", one)
    assert torch.equal(cache, want)
    assert torch.equal(total, (rows * 2).sum())


# -- range checks (issue 12): skipped, reported by check_errors ------------

@pytest.mark.parametrize("device", DEVICES)
def test_out_of_range_slot_is_skipped_and_reported(device):
    """A slot >= num_blocks * block_size through
    torch.ops.kvgen.reshape_and_cache_flash (the caches: views of the first
    4 blocks of 6-block allocations) writes nothing outside the caches, the
    in-range rows are written, and check_errors raises once."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(31)
    H, dk, dv, bs, nb = 2, 64, 32, 16, 4
    kbase = _random_bits((nb + 2, bs, H, dk), torch.int16, gen).view(
        torch.bfloat16).to(dev)
    vbase = _random_bits((nb + 2, bs, H, dv), torch.int16, gen).view(
        torch.bfloat16).to(dev)
    kc, vc = kbase[:nb], vbase[:nb]
    key, value = make_rows(5, H, dk, gen).to(dev), make_rows(5, H, dv,
                                                             gen).to(dev)
    slots = torch.tensor([1, nb * bs, 7, 1 << 40, -1], device=dev)
    wk, wv = kbase.clone(), vbase.clone()
    ok = torch.tensor([0, 2])
    torch_ref.write(key[ok], value[ok], wk, wv, slots[ok.to(dev)], "auto",
                    None, None)
    kt.check_errors(dev)
    one = torch.ones(1, device=dev)
    torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                            "auto", one, one)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE") as e:
        kt.check_errors(dev)
    assert "reshape_and_cache" in str(e.value)
    kt.check_errors(dev)  # the report was cleared
    assert same_bits(kbase.cpu(), wk.cpu()) and \
        same_bits(vbase.cpu(), wv.cpu())
    # The MLA writer and the gather check the same way.
    cache = torch.zeros(nb + 1, bs, 576, dtype=torch.bfloat16, device=dev)
    rows = make_rows(2, 1, 576, gen)[:, 0].to(dev)
    torch.ops.kvgen.concat_and_cache_mla(
        rows[:, :512], rows[:, 512:], cache[:nb],
        torch.tensor([nb * bs, 3], device=dev), "auto", one)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors(dev)
    assert not cache[nb].any() and torch.equal(cache[0, 3], rows[1])
    ko, vo = torch.zeros_like(key), torch.zeros_like(value)
    torch.ops.kvgen.gather_cache(kc, vc, slots, ko, vo, "auto", one, one)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors()  # every device
    assert not ko[1].any() and not ko[3].any() and torch.equal(ko[0], key[0])
    # A block id outside [0, num_blocks) in copy_blocks.
    torch.ops.kvgen.copy_blocks([kc], [vc], torch.tensor([[0, nb]],
                                                         device=dev))
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors(dev)
    assert same_bits(kbase.cpu(), wk.cpu())


def test_unchecked_opt_out():
    """set_unchecked(True): the ops launch unchecked kernels (the caller
    proves every slot < num_blocks * block_size): a slot one past the view
    (inside its allocation, so nothing unsafe happens here) is written
    there and not reported; set_unchecked(False) restores the checks."""
    gen = torch.Generator().manual_seed(33)
    H, d, bs, nb = 2, 64, 16, 4
    kbase = torch.zeros(nb + 1, bs, H, d, dtype=torch.bfloat16)
    vbase = torch.zeros(nb + 1, bs, H, d, dtype=torch.bfloat16)
    key, value = make_rows(1, H, d, gen), make_rows(1, H, d, gen)
    slots = torch.tensor([nb * bs])
    one = torch.ones(1)
    assert not kt.unchecked()
    kt.check_errors("cpu")
    try:
        kt.set_unchecked(True)
        assert kt.plan_count() == 0  # the table was emptied
        torch.ops.kvgen.reshape_and_cache_flash(key, value, kbase[:nb],
                                                vbase[:nb], slots, "auto",
                                                one, one)
        assert all(p.kernel.unchecked for p in kt._plans.values())
        kt.check_errors("cpu")  # nothing reported
        assert torch.equal(kbase[nb, 0], key[0])  # written past the view
    finally:
        kt.set_unchecked(False)
    kbase.zero_()
    torch.ops.kvgen.reshape_and_cache_flash(key, value, kbase[:nb],
                                            vbase[:nb], slots, "auto", one,
                                            one)
    assert all(p.kernel.checked for p in kt._plans.values())
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors("cpu")
    assert not kbase.any()


def test_unchecked_from_the_environment():
    code = ("import kvgen.torch as kt, torch; assert kt.unchecked(); "
            "k = torch.zeros(2, 16, 1, 64, dtype=torch.bfloat16); "
            "r = torch.ones(1, 1, 64, dtype=torch.bfloat16); "
            "torch.ops.kvgen.reshape_and_cache_flash(r, r, k, k.clone(), "
            "torch.tensor([5]), 'auto', torch.ones(1), torch.ones(1)); "
            "assert all(p.kernel.unchecked for p in kt._plans.values()); "
            "print('ok')")
    env = dict(os.environ, KVGEN_TORCH_UNCHECKED="1",
               PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    # "false" / "no" are not an opt-out (they used to be: anything but ""
    # and "0" was): the import fails and says what to use.
    for bad in ("false", "no", "yes"):
        r = subprocess.run([sys.executable, "-c", "import kvgen.torch"],
                           capture_output=True, text=True,
                           env=dict(env, KVGEN_TORCH_UNCHECKED=bad))
        assert r.returncode != 0 and "use 1 (unchecked kernels) or 0" in \
            r.stderr, r.stderr


def test_set_unchecked_takes_a_bool():
    for bad in ("no", "0", 0, 1, None):
        with pytest.raises(TypeError, match="pass True or False"):
            kt.set_unchecked(bad)
    assert not kt.unchecked()


# -- the C++ kernel (kvgen/_torch_fast.cpp) ---------------------------------

def _cpp_expected():
    """Why the C++ kernel may be missing here, or None where it must be
    in use (a C++ compiler and torch's headers, KVGEN_TORCH_FAST not 0)."""
    import shlex
    import shutil
    if os.environ.get("KVGEN_TORCH_FAST", "1") in ("0", ""):
        return "KVGEN_TORCH_FAST=0"
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    if not cxx or shutil.which(cxx[0]) is None:
        return f"no C++ compiler ({cxx})"
    inc = Path(torch.__file__).resolve().parent / "include"
    if not (inc / "torch" / "library.h").is_file():
        return f"no torch headers at {inc}"
    return None


def _need_cpp():
    why = _cpp_expected()
    info = kt.fast_path_info()
    if why is None:
        assert info["kernel"] == "c++", info["reason"]
    elif info["kernel"] != "c++":
        pytest.skip(f"the C++ kernel is not built here: {why}")
    return info


@pytest.mark.parametrize("device", DEVICES)
def test_cpp_kernel_launches_remembered_plans(device):
    """The C++ kernel (built where a compiler and torch's headers are)
    sends the first call of a signature to the Python implementation and
    launches the later ones itself -- other token counts, other row and
    slot tensors, the Python function's calls -- bit-exact against the
    reference; other caches, an fp8 call and a new scale tensor are new
    signatures."""
    dev = torch.device(device)
    _need_cpp()
    gen = torch.Generator().manual_seed(41)
    H, dk, dv, bs, nb = 2, 64, 32, 16, 4
    kc = torch.zeros(nb, bs, H, dk, dtype=torch.bfloat16, device=dev)
    vc = torch.zeros(nb, bs, H, dv, dtype=torch.bfloat16, device=dev)
    want_k, want_v = kc.clone(), vc.clone()
    one = torch.ones(1, device=dev)

    def call(write, T, kc=kc, vc=vc, want_k=want_k, want_v=want_v):
        key = make_rows(T, H, dk, gen).to(dev)
        value = make_rows(T, H, dv, gen).to(dev)
        slots = make_slots(T, nb, bs, gen, torch.int64).to(dev)
        write(key, value, kc, vc, slots, "auto", one, one)
        torch_ref.write(key, value, want_k, want_v, slots, "auto", one, one)

    before = kt.fast_path_info()
    call(torch.ops.kvgen.reshape_and_cache_flash, 5)
    first = kt.fast_path_info()
    assert first["misses"] == before["misses"] + 1
    assert first["entries"] >= 1
    for T in (1, 7, 5, 64):
        call(torch.ops.kvgen.reshape_and_cache_flash, T)
    call(kt.reshape_and_cache_flash, 3)
    call(torch.ops.kvgen.reshape_and_cache_flash.default, 2)
    after = kt.fast_path_info()
    assert after["hits"] == first["hits"] + 6
    assert after["misses"] == first["misses"]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
    # Other caches (same shapes): a new signature, then launched from C++.
    kc2, vc2 = torch.zeros_like(kc), torch.zeros_like(vc)
    wk2, wv2 = kc2.clone(), vc2.clone()
    for T in (4, 4):
        call(torch.ops.kvgen.reshape_and_cache_flash, T, kc2, vc2, wk2, wv2)
    info = kt.fast_path_info()
    assert (info["misses"], info["hits"]) == (after["misses"] + 1,
                                              after["hits"] + 1)
    assert torch.equal(kc2, wk2) and torch.equal(vc2, wv2)
    # fp8: the scales are part of the signature (their pointers are in the
    # remembered struct); a fresh scale tensor is a miss, the same one a hit.
    k8 = torch.zeros(nb, bs, H, dk, dtype=torch.uint8, device=dev)
    v8 = torch.zeros(nb, bs, H, dv, dtype=torch.uint8, device=dev)
    wk8, wv8 = k8.clone(), v8.clone()
    key = make_rows(6, H, dk, gen).to(dev)
    value = make_rows(6, H, dv, gen).to(dev)
    slots = make_slots(6, nb, bs, gen, torch.int64).to(dev)
    for scale in (0.5, 0.5, 0.25):
        s = torch.tensor([scale], device=dev)
        n0 = kt.fast_path_info()
        torch.ops.kvgen.reshape_and_cache_flash(key, value, k8, v8, slots,
                                                "fp8", s, s)
        torch_ref.write(key, value, wk8, wv8, slots, "fp8", s, s)
        assert torch.equal(k8, wk8) and torch.equal(v8, wv8)
        n1 = kt.fast_path_info()
        assert n1["misses"] + n1["hits"] == n0["misses"] + n0["hits"] + 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
        kt.check_errors(dev)


def test_cpp_kernel_threads():
    """Threads writing their own caches at once through the C++ kernel:
    every write lands (each thread's first call goes to Python and is
    remembered for that thread's call, not another's)."""
    import threading
    _need_cpp()
    H, d, bs, nb = 2, 64, 16, 4
    errors = []

    def work(i):
        try:
            gen = torch.Generator().manual_seed(100 + i)
            kc = torch.zeros(nb, bs, H, d, dtype=torch.bfloat16)
            vc = torch.zeros(nb, bs, H, d, dtype=torch.bfloat16)
            want_k, want_v = kc.clone(), vc.clone()
            one = torch.ones(1)
            for j in range(20):
                T = 1 + (i + j) % 5
                key, value = make_rows(T, H, d, gen), make_rows(T, H, d, gen)
                slots = make_slots(T, nb, bs, gen, torch.int64)
                torch.ops.kvgen.reshape_and_cache_flash(
                    key, value, kc, vc, slots, "auto", one, one)
                torch_ref.write(key, value, want_k, want_v, slots, "auto",
                                one, one)
            assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _subprocess_write(env, check):
    code = ("import kvgen.torch as kt, torch\n"
            "k = torch.zeros(2, 16, 1, 64, dtype=torch.bfloat16)\n"
            "r = torch.ones(1, 1, 64, dtype=torch.bfloat16)\n"
            "for _ in range(3):\n"
            "    torch.ops.kvgen.reshape_and_cache_flash(r, r, k, "
            "k.clone(), torch.tensor([5]), 'auto', torch.ones(1), "
            "torch.ones(1))\n"
            "assert torch.equal(k[0, 5], r[0])\n"
            "info = kt.fast_path_info()\n" + check + "\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, env=dict(os.environ, **env,
                                           PYTHONPATH=str(REPO / "python")))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    return r.stderr


def test_python_kernels_without_the_cpp_kernel(tmp_path):
    """KVGEN_TORCH_FAST=0, or a compiler that fails (the failure is
    remembered in the cache directory): the Python kernels, same results."""
    err = _subprocess_write({"KVGEN_TORCH_FAST": "0"},
                            "assert info['kernel'] == 'python', info\n"
                            "assert info['reason'] == 'KVGEN_TORCH_FAST=0', "
                            "info")
    assert "C++ kernel is not available" not in err, err  # asked for
    # A compiler that refuses _torch_fast.cpp only (the host backend
    # compiles its kernels with it too).
    cxx = tmp_path / "cxx"
    cxx.write_text("#!/bin/sh\ncase \"$*\" in *_torch_fast.cpp*) "
                   "echo 'no, not this one' >&2; exit 3;; esac\n"
                   "exec c++ \"$@\"\n")
    cxx.chmod(0o755)
    env = {"CXX": str(cxx), "KVGEN_CACHE_DIR": str(tmp_path),
           "KVGEN_TORCH_FAST": "1"}
    check = ("assert info['kernel'] == 'python', info\n"
             "assert 'failed (exit 3)' in info['reason'], info\n"
             "assert 'no, not this one' in info['reason'], info")
    for attempt in range(2):  # compiled, then read from the marker
        err = _subprocess_write(env, check)
        # Not asked to be off: the fallback is announced, with the reason.
        assert "RuntimeWarning: kvgen.torch: the C++ kernel is not " \
            "available" in err and "no, not this one" in err, err
        assert len(list((tmp_path / "torch-fast").glob("*.failed"))) == 1


# -- CUDA (skipped without a GPU) -------------------------------------------

@cuda
@pytest.mark.parametrize("name,arrangement", CASES,
                         ids=[f"{n}-{a}" for n, a in CASES])
def test_cuda_presets_vs_torch_reference(name, arrangement):
    f = PRESETS[name]
    gen = torch.Generator().manual_seed(21)
    T, nb = 300, 40
    c = Caches(f, arrangement, nb, gen)
    dev = torch.device("cuda")
    key = make_rows(T, c.H, c.dk, gen).to(dev)
    value = make_rows(T, c.H, c.dv, gen).to(dev)
    slots = make_slots(T, nb, c.bs, gen, torch.int64).to(dev)
    ks = (torch.rand(1, generator=gen) + 0.1).to(dev)
    vs = (torch.rand(1, generator=gen) + 0.1).to(dev)
    kvd = kv_dtype_arg(c.dtype)
    gpu = [a.to(dev) for a in c.allocs]
    cpu_ref = [a.clone().to(dev) for a in c.allocs]

    def views(allocs):
        out = []
        for v in (c.k, c.v):
            i, off, _ = c.where(v)
            out.append(allocs[i].reshape(-1)[off:].as_strided(
                v.shape, v.stride()))
        return out

    gk, gv = views(gpu)
    rk, rv = views(cpu_ref)
    torch.ops.kvgen.reshape_and_cache_flash(key, value, gk, gv, slots, kvd,
                                            ks, vs)
    torch_ref.write(key, value, rk, rv, slots, kvd, ks, vs)
    torch.cuda.synchronize()
    for a, b in zip(gpu, cpu_ref):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    ko = torch.zeros(T, c.H, c.dk, dtype=torch.bfloat16, device=dev)
    vo = torch.zeros(T, c.H, c.dv, dtype=torch.bfloat16, device=dev)
    wk, wv = ko.clone(), vo.clone()
    torch.ops.kvgen.gather_cache(gk, gv, slots, ko, vo, kvd, ks, vs)
    torch_ref.gather(rk, rv, slots, wk, wv, kvd, ks, vs)
    torch.cuda.synchronize()
    assert torch.equal(ko, wk) and torch.equal(vo, wv)


@cuda
def test_cuda_swap_with_a_pinned_host_cache():
    """Offload: blocks between a pinned CPU cache and a CUDA cache, the
    kernel reading/writing host memory through unified addressing."""
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(23)
    host = torch.randn(12, 16, 4, 128, generator=gen).to(
        torch.bfloat16).pin_memory()
    gpu = torch.zeros(10, 16, 4, 128, dtype=torch.bfloat16, device=dev)
    m = torch.tensor([[0, 9], [11, 0], [4, 5]], device=dev)
    torch.ops.kvgen.swap_blocks_device_mapping(host, gpu, m)
    torch.cuda.synchronize()
    mc = m.cpu()
    assert torch.equal(gpu[mc[:, 1]].cpu(), host[mc[:, 0]])
    back = torch.zeros_like(host).pin_memory()
    torch.ops.kvgen.swap_blocks_device_mapping(gpu, back, torch.tensor([[9, 1]],
                                                        device=dev))
    torch.cuda.synchronize()
    assert torch.equal(back[1], host[0])
    with pytest.raises(ValueError, match="pinned"):
        torch.ops.kvgen.swap_blocks_device_mapping(host.clone(), gpu, m)


@cuda
def test_cuda_graph_capture_and_replay():
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(22)
    T, H, dk, dv, bs, nb = 64, 4, 192, 128, 16, 32
    kc = torch.zeros(nb, bs, H, dk, dtype=torch.bfloat16, device=dev)
    vc = torch.zeros(nb, bs, H, dv, dtype=torch.bfloat16, device=dev)
    key = make_rows(T, H, dk, gen).to(dev)
    value = make_rows(T, H, dv, gen).to(dev)
    slots = make_slots(T, nb, bs, gen, torch.int64).to(dev)
    one = torch.ones(1, device=dev)
    op = torch.ops.kvgen.reshape_and_cache_flash
    op(key, value, kc, vc, slots, "auto", one, one)  # JIT before capture
    kc.zero_()
    vc.zero_()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        op(key, value, kc, vc, slots, "auto", one, one)
    assert not kc.any()  # capture runs nothing
    for step in range(3):
        key.copy_(make_rows(T, H, dk, gen).to(dev))
        value.copy_(make_rows(T, H, dv, gen).to(dev))
        slots.copy_(make_slots(T, nb, bs, gen, torch.int64).to(dev))
        g.replay()
        wk, wv = torch.zeros_like(kc), torch.zeros_like(vc)
        wk.copy_(kc)
        wv.copy_(vc)
        torch_ref.write(key, value, wk, wv, slots, "auto", one, one)
        torch.cuda.synchronize()
        assert torch.equal(kc, wk) and torch.equal(vc, wv), step


@pytest.mark.parametrize("entry", ["torch.ops", "python"])
def test_write_accepts_none_scales_for_auto(entry):
    """Second hostile review (issue 26): reshape_and_cache_flash(...,
    "auto", None, None) raised AttributeError ('NoneType' object has no
    attribute 'dtype') while planning; "auto" reads no scale, so None is
    accepted and the rows are written exactly."""
    f = (torch.ops.kvgen.reshape_and_cache_flash if entry == "torch.ops"
         else kt.reshape_and_cache_flash)
    gen = torch.Generator().manual_seed(5)
    k = torch.randn(3, 4, 64, generator=gen).bfloat16()
    v = torch.randn(3, 4, 64, generator=gen).bfloat16()
    kc = torch.zeros(8, 16, 4, 64).bfloat16()
    vc = torch.zeros(8, 16, 4, 64).bfloat16()
    slots = torch.tensor([0, 5, 17])
    f(k, v, kc, vc, slots, "auto", None, None)
    assert torch.equal(kc.view(-1, 4, 64)[slots], k)
    assert torch.equal(vc.view(-1, 4, 64)[slots], v)
    others = torch.ones(128, dtype=torch.bool)
    others[slots] = False
    assert not kc.view(-1, 4, 64)[others].any()
    assert not vc.view(-1, 4, 64)[others].any()


@pytest.mark.parametrize("entry", ["torch.ops", "python"])
@pytest.mark.parametrize("missing", ["k_scale", "v_scale", "both"])
def test_write_fp8_without_scales_raises_type_error(entry, missing):
    """Review of issue 24: reshape_and_cache_flash(..., "fp8", None, ...)
    reached kvgen's C++ kernel as an undefined tensor (torch turns None for
    a Tensor argument into one), whose signature asked it for its device:
    RuntimeError "tensor does not have a device" instead of the Python
    implementation's TypeError naming the scale (KVGEN_TORCH_FAST=0 gave
    the TypeError). Now the C++ kernel sends the call to the Python
    implementation; nothing is written."""
    f = (torch.ops.kvgen.reshape_and_cache_flash if entry == "torch.ops"
         else kt.reshape_and_cache_flash)
    k = torch.randn(3, 2, 64).bfloat16()
    v = torch.randn(3, 2, 64).bfloat16()
    kc = torch.zeros(4, 16, 2, 64, dtype=torch.uint8)
    vc = torch.zeros(4, 16, 2, 64, dtype=torch.uint8)
    slots = torch.tensor([0, 5, 17])
    one = torch.ones(1)
    f(k, v, kc, vc, slots, "fp8", one, one)  # a plan for the signature
    kc.zero_()
    vc.zero_()
    scales = {"k_scale": (None, one), "v_scale": (one, None),
              "both": (None, None)}[missing]
    name = "v_scale" if missing == "v_scale" else "k_scale"
    with pytest.raises(TypeError, match=f"{name} is None.*fp8"):
        f(k, v, kc, vc, slots, "fp8", *scales)
    assert not kc.any() and not vc.any()


# -- vLLM's current cache-op schemas (issue 24) -----------------------------
#
# Each op: torch.library.opcheck (schema, fake, aot dispatch) and a torch
# reference (torch_ref.py, plain torch indexing), on the CPU (kvgen's host
# backend) and, where torch sees a GPU, on CUDA.

def _opcheck(op, args):
    """torch.library.opcheck of a kvgen op; what failed in its report."""
    res = torch.library.opcheck(op, args, raise_exception=False)
    bad = {k: v for k, v in res.items() if v != "SUCCESS"}
    assert not bad, bad


def _padded_rows(T, pad, H, d, gen, dev):
    """[T + pad, H, d] bf16 rows whose padding rows are NaN (a read of
    them would show in the cache)."""
    r = make_rows(T + pad, H, d, gen)
    r[T:] = float("nan")
    return r.to(dev)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
@pytest.mark.parametrize("kv_dtype", ["auto", "bfloat16", "fp8"])
def test_write_token_count_is_slot_mappings_length(kv_dtype, entry, device):
    """vLLM pads key / value for CUDA graphs and passes the real tokens'
    slot_mapping: T = slot_mapping.numel() <= key rows; the padding rows
    are not read. Twice per call site: the second call is launched from the
    remembered plan (C++ kernel or the identity table)."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(31)
    H, D, bs, nb, T, pad = 2, 64, 16, 4, 7, 5
    cdt = torch.uint8 if kv_dtype == "fp8" else torch.bfloat16
    write = torch.ops.kvgen.reshape_and_cache_flash if entry == "torch.ops" \
        else kt.reshape_and_cache_flash
    kc = torch.zeros(nb, bs, H, D, dtype=cdt, device=dev)
    vc = torch.zeros_like(kc)
    ks = torch.tensor([0.5], device=dev)
    vs = torch.tensor([0.25], device=dev)
    for step in range(2):
        key = _padded_rows(T, pad, H, D, gen, dev)
        value = _padded_rows(T, pad, H, D, gen, dev)
        slots = make_slots(T, nb, bs, gen, torch.int64).to(dev)
        wk, wv = kc.clone(), vc.clone()
        torch_ref.write(key, value, wk, wv, slots, kv_dtype, ks, vs)
        hits = kt.fast_path_info()["hits"]
        write(key, value, kc, vc, slots, kv_dtype, ks, vs)
        assert torch.equal(kc, wk) and torch.equal(vc, wv), step
    if kt.fast_path_info()["kernel"] == "c++":
        # the second call was the C++ kernel's (its token count check)
        assert kt.fast_path_info()["hits"] == hits + 1
    # and the MLA writer
    L, R = 32, 16
    cache = torch.zeros(nb, bs, L + R, dtype=cdt, device=dev)
    want = cache.clone()
    kv_c = _padded_rows(T, pad, 1, L, gen, dev)[:, 0]
    k_pe = _padded_rows(T, pad, 1, R, gen, dev)[:, 0]
    slots = make_slots(T, nb, bs, gen, torch.int64).to(dev)
    torch.ops.kvgen.concat_and_cache_mla(kv_c, k_pe, cache, slots, kv_dtype,
                                         ks)
    torch_ref.concat_and_cache_mla(kv_c, k_pe, want, slots, kv_dtype, ks)
    assert torch.equal(cache, want)
    kt.check_errors(dev)


@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
def test_write_fewer_rows_than_slots_is_refused(entry):
    """The other direction: rows must hold T tokens (ValueError naming
    both, nothing written), also after a remembered plan."""
    write = torch.ops.kvgen.reshape_and_cache_flash if entry == "torch.ops" \
        else kt.reshape_and_cache_flash
    key, value, kc, vc, slots, ks, vs = _setup_bad()
    slots[4] = 9
    write(key, value, kc, vc, slots, "auto", ks, vs)
    before = kc.clone(), vc.clone()
    for k, v, name in ((key[:3], value, "key"), (key, value[:4], "value")):
        with pytest.raises(ValueError,
                           match=f"{name} has \\d tokens, slot_mapping 5"):
            write(k, v, kc, vc, slots, "auto", ks, vs)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    with pytest.raises(ValueError, match="kv_c has 3 tokens, slot_mapping 5"):
        torch.ops.kvgen.concat_and_cache_mla(
            key[:3, 0], key[:5, 1, :16], torch.zeros(4, 16, 80,
                                                     dtype=torch.bfloat16),
            slots, "auto", ks)


@pytest.mark.parametrize("entry", ["torch.ops", "kvgen.torch"])
def test_unquantized_cache_dtype_names(entry):
    """kv_cache_dtype "bfloat16" / "float16" (vLLM's CacheDType): an
    unquantized cache of that dtype, the rows stored unconverted as with
    "auto"; a cache or rows of another dtype is refused (TypeError, nothing
    written); the scales are not read (None accepted)."""
    write = torch.ops.kvgen.reshape_and_cache_flash if entry == "torch.ops" \
        else kt.reshape_and_cache_flash
    gen = torch.Generator().manual_seed(37)
    for name, dt in (("bfloat16", torch.bfloat16),
                     ("float16", torch.float16)):
        key = make_rows(6, 2, 32, gen, dt)
        value = make_rows(6, 2, 32, gen, dt)
        slots = torch.tensor([3, -1, 17, 40, 2, 63])
        kc = torch.zeros(4, 16, 2, 32, dtype=dt)
        vc = torch.zeros_like(kc)
        wk, wv = kc.clone(), vc.clone()
        torch_ref.write(key, value, wk, wv, slots, "auto", None, None)
        write(key, value, kc, vc, slots, name, None, None)
        assert torch.equal(kc, wk) and torch.equal(vc, wv)
        other = torch.bfloat16 if dt == torch.float16 else torch.float16
        with pytest.raises(TypeError, match=f"kv_cache_dtype '{name}' is a "):
            write(key.to(other), value.to(other), kc.to(other),
                  vc.to(other), slots, name, None, None)
        before = kc.clone()
        with pytest.raises(TypeError, match=f"with kv_cache_dtype '{name}' "
                           "it must be"):
            write(key.to(other), value.to(other), kc, vc, slots, name,
                  None, None)
        assert torch.equal(kc, before)
        # the gather reads them the same way
        ko, vo = torch.zeros_like(key), torch.zeros_like(value)
        torch.ops.kvgen.gather_cache(kc, vc, slots, ko, vo, name, None,
                                     None)
        ok = slots >= 0
        assert torch.equal(ko[ok], key[ok]) and torch.equal(vo[ok], value[ok])


def _token_gather_case(dev, gen, cdt):
    """A cache of 8 blocks of 16 rows of 48, two sequences (the second
    starting at token 5 of its block table, not a block boundary), a
    token_to_seq whose rows past the sequences' end are left alone."""
    nb, bs, E = 8, 16, 48
    if cdt == torch.uint8:
        cache = torch.randint(0, 120, (nb, bs, E), dtype=torch.uint8,
                              generator=gen)
    else:
        cache = torch.randn(nb, bs, E, generator=gen).to(cdt)
    table = torch.tensor([[6, 1, 7], [2, 0, 5]], dtype=torch.int32)
    cu = torch.tensor([0, 20, 31], dtype=torch.int32)
    # rows 31, 32 say sequence 1 but lie past its end: untouched
    token_to_seq = torch.tensor([0] * 20 + [1] * 13, dtype=torch.int32)
    starts = torch.tensor([0, 5], dtype=torch.int32)
    return [t.to(dev) for t in (cache, table, cu, token_to_seq, starts)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_gather_and_maybe_dequant_cache_current_schema(kv_dtype, device):
    """vLLM's current gather (token_to_seq, num_tokens) against the torch
    reference: rows < num_tokens gathered (fp8 dequantized), rows whose
    token lies past its sequence's end and rows from num_tokens on
    untouched."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(41)
    cdt = torch.uint8 if kv_dtype == "fp8" else torch.bfloat16
    cache, table, cu, tts, starts = _token_gather_case(dev, gen, cdt)
    scale = torch.tensor([0.5], device=dev)
    for seq_starts, num_tokens in ((None, 33), (starts, 33), (starts, 25)):
        dst = torch.full((36, 48), 7.0, dtype=torch.float32, device=dev)
        want = dst.clone()
        torch.ops.kvgen.gather_and_maybe_dequant_cache(
            cache, dst, table, cu, tts, num_tokens, kv_dtype, scale,
            seq_starts)
        torch_ref.gather_and_maybe_dequant_cache(
            cache, want, table, cu, tts, num_tokens, kv_dtype, scale,
            seq_starts)
        assert torch.equal(dst, want)
        assert torch.equal(dst[num_tokens:], torch.full_like(
            dst[num_tokens:], 7.0))
    kt.check_errors(dev)


def test_gather_current_schema_refuses_what_it_cannot_serve():
    """Host-checked arguments raise before anything is written; values on
    the device that it cannot serve (a sequence id outside the tables, a
    row before its sequence's start, a block id outside the cache) leave
    their row untouched and are reported, the other rows gathered."""
    gen = torch.Generator().manual_seed(43)
    cache, table, cu, tts, starts = _token_gather_case("cpu", gen,
                                                       torch.bfloat16)
    one = torch.ones(1)
    dst = torch.zeros(33, 48, dtype=torch.bfloat16)
    call = torch.ops.kvgen.gather_and_maybe_dequant_cache
    for args, exc, msg in (
            ((tts, 34), ValueError, "num_tokens 34 exceeds dst's 33 rows"),
            ((tts[:10], 11), ValueError,
             "num_tokens 11 exceeds token_to_seq's 10 rows"),
            ((tts.float(), 3), TypeError, "token_to_seq has dtype"),
            ((tts.view(3, 11), 3), ValueError, "token_to_seq has shape")):
        with pytest.raises(exc, match=msg):
            call(cache, dst, table, cu, args[0], args[1], "auto", one, None)
    assert not dst.any()
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp4'"):
        call(cache, dst, table, cu, tts, 3, "fp4", one, None)
    kt.check_errors("cpu")
    bad_tts = tts.clone()
    bad_tts[2] = 2          # no sequence 2
    bad_tts[25] = 0         # row 25 lies past sequence 0's end: skipped
    bad_tts[21] = -1        # no sequence -1
    bad_table = table.clone()
    bad_table[0, 1] = 8     # block 8 of 8 (rows 16..19)
    want = dst.clone()
    torch_ref.gather_and_maybe_dequant_cache(
        cache, want, table, cu, tts, 33, "auto", one, None)
    for r in (2, 21, 25, 16, 17, 18, 19):
        want[r] = 0
    call(cache, dst, bad_table, cu, bad_tts, 33, "auto", one, None)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors("cpu")
    assert torch.equal(dst, want)


def test_gather_negative_cu_seq_lens_and_int64_wraparound_are_reported():
    """int64 tables: a negative cu_seq_lens[b] (p = t - cu_seq_lens[b] +
    seq_starts[b] wrapped: -2^63 with a start of 2^63 - 1 put rows 1.. at
    positions 0.. and gathered them silently; -5 put row t at t + 5) leaves
    the sequence's rows untouched and is reported (check_errors, no host
    synchronization); the other sequence is gathered. A start whose sum
    wraps negative is reported as p < 0 is."""
    gen = torch.Generator().manual_seed(44)
    cache, table, cu, tts, starts = _token_gather_case("cpu", gen,
                                                       torch.bfloat16)
    one = torch.ones(1)
    want = torch.full((33, 48), 7.0, dtype=torch.bfloat16)
    torch_ref.gather_and_maybe_dequant_cache(cache, want, table, cu, tts,
                                             33, "auto", one, starts)
    want[:20] = 7.0  # sequence 0's rows: not gathered
    kt.check_errors("cpu")
    for cu0, s0 in ((-2 ** 63, 2 ** 63 - 1), (-(2 ** 63 - 3), 2 ** 63 - 1),
                    (-5, 0), (0, -2 ** 63)):
        dst = torch.full((33, 48), 7.0, dtype=torch.bfloat16)
        torch.ops.kvgen.gather_and_maybe_dequant_cache(
            cache, dst, table, torch.tensor([cu0, 20, 31]), tts, 33, "auto",
            one, torch.tensor([s0, 5]))
        with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
            kt.check_errors("cpu")
        assert torch.equal(dst, want), (cu0, s0)
    # cu_seq_lens[1] = 20 with a start of 2^63 - 1: rows of sequence 1 sum
    # past 2^63 - 1 (p wraps negative): reported, untouched.
    dst = torch.full((33, 48), 7.0, dtype=torch.bfloat16)
    torch.ops.kvgen.gather_and_maybe_dequant_cache(
        cache, dst, table, cu.long(), tts, 33, "auto", one,
        torch.tensor([0, 2 ** 63 - 1]))
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors("cpu")
    assert (dst[20:] == 7.0).all()


RAW_DTYPES = [torch.bfloat16, torch.float32, torch.uint8,
              torch.float8_e4m3fn, torch.int16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", RAW_DTYPES, ids=str)
def test_cp_gather_cache_raw_copy(dtype, device):
    """cp_gather_cache copies raw bits of any 1/2/4-byte dtype (random
    bits: NaN patterns included) by block table, against the torch
    reference, bit for bit; dst rows of no sequence untouched."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(47)
    nb, bs, E = 8, 16, 40
    esz = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (nb * bs * E * esz,), dtype=torch.uint8,
                        generator=gen)
    cache = raw.view(dtype).view(nb, bs, E).to(dev)
    table = torch.tensor([[6, 1, 7], [2, 0, 5]], dtype=torch.int32,
                         device=dev)
    cu = torch.tensor([0, 20, 31], dtype=torch.int32, device=dev)
    for starts in (None, torch.tensor([3, 16], dtype=torch.int32,
                                      device=dev)):
        dst = torch.zeros(34, E, dtype=dtype, device=dev)
        want = dst.clone()
        torch.ops.kvgen.cp_gather_cache(cache, dst, table, cu, 2, starts)
        torch_ref.cp_gather_cache(cache, want, table, cu, 2, starts)
        assert same_bits(dst.cpu().view(torch.uint8),
                         want.cpu().view(torch.uint8))
    with pytest.raises(TypeError, match="must have the same dtype"):
        torch.ops.kvgen.cp_gather_cache(cache, dst.to(torch.float64), table,
                                        cu, 2, None)
    kt.check_errors(dev)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16,
                                   torch.float32], ids=str)
def test_convert_fp8(dtype, kv_dtype, device):
    """convert_fp8 both ways (into a uint8 and a float8 cache) against the
    torch reference, bit for bit; refused arguments write nothing."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(53)
    src = (torch.randn(3, 4, 16, 24, generator=gen) * 300).to(dtype).to(dev)
    fp8 = torch_ref.FP8[kv_dtype]
    for cdt in (torch.uint8, fp8):
        q = torch.zeros(src.shape, dtype=cdt, device=dev)
        want = q.clone()
        torch.ops.kvgen.convert_fp8(q, src, 0.75, kv_dtype)
        torch_ref.convert_fp8(want, src, 0.75, kv_dtype)
        assert same_bits(q.view(torch.uint8).cpu(),
                         want.view(torch.uint8).cpu())
        back = torch.zeros_like(src)
        want_back = back.clone()
        torch.ops.kvgen.convert_fp8(back, q, 0.75, kv_dtype)
        torch_ref.convert_fp8(want_back, q, 0.75, kv_dtype)
        assert torch.equal(back, want_back)
    q = torch.zeros(src.shape, dtype=torch.uint8, device=dev)
    for args, exc, msg in (
            ((q, src, 0.0, kv_dtype), ValueError, "scale 0.0 must be"),
            ((q, src, float("nan"), kv_dtype), ValueError, "scale nan"),
            ((q, src, 1.0, "auto"), ValueError, "kv_cache_dtype 'auto'"),
            ((q[:2], src, 1.0, kv_dtype), ValueError, "same"),
            ((q.transpose(0, 1), src.transpose(0, 1), 1.0, kv_dtype),
             ValueError, "must be contiguous"),
            ((src.clone(), src, 1.0, kv_dtype), TypeError,
             "an fp8 cache is uint8")):
        with pytest.raises(exc, match=msg):
            torch.ops.kvgen.convert_fp8(*args)
    assert not q.any()


@pytest.mark.parametrize("device", DEVICES)
def test_swap_blocks_current_schema(device):
    """vLLM's swap_blocks(src, dst, block_size_in_bytes, block_mapping on
    the CPU): each block's block_size_in_bytes bytes, padding between
    blocks included (as vLLM's byte copy), against the torch reference;
    a strided CPU mapping accepted; the K half of a [nb, 2, ...] cache
    moves the whole block stride (K and V), as vLLM's; a block id outside
    either cache skipped and reported; bad arguments refused with nothing
    written."""
    dev = torch.device(device)
    other = torch.device("cpu") if dev.type == "cuda" else dev
    gen = torch.Generator().manual_seed(59)

    def alloc(shape, d):
        t = torch.randn(shape, generator=gen).to(torch.bfloat16)
        return t.pin_memory() if d.type == "cpu" and dev.type == "cuda" \
            else t.to(d)

    # padded blocks: [nb, bs, H, D] views of [nb, bs + 1, H, D]
    src = alloc((6, 17, 2, 64), other)[:, :16]
    dst = alloc((9, 17, 2, 64), dev)[:, :16]
    bsb = src.element_size() * src.stride(0)
    m = torch.tensor([[0, 8, 5, 2, 2, 0]]).view(3, 2)
    want_base = dst.as_strided((9, 17, 2, 64), dst.stride()).clone()
    torch_ref.swap_blocks_bytes(src, want_base, bsb, m)
    torch.ops.kvgen.swap_blocks(src, dst, bsb, m)
    assert torch.equal(dst.as_strided((9, 17, 2, 64), dst.stride()),
                       want_base)
    # strided mapping (a column pair of a wider tensor)
    wide = torch.tensor([[1, 9, 3], [4, 9, 4]])[:, ::2]
    torch_ref.swap_blocks_bytes(src, want_base, bsb, wide)
    torch.ops.kvgen.swap_blocks(src, dst, bsb, wide)
    assert torch.equal(dst.as_strided((9, 17, 2, 64), dst.stride()),
                       want_base)
    # [nb, 2, bs, H, D] halves
    kv_src = alloc((4, 2, 16, 2, 32), other)
    kv_dst = alloc((4, 2, 16, 2, 32), dev)
    want_kv = kv_dst.clone()
    bsb2 = kv_src[:, 0].element_size() * kv_src[:, 0].stride(0)
    m2 = torch.tensor([[3, 0], [0, 3]])
    torch.ops.kvgen.swap_blocks(kv_src[:, 0], kv_dst[:, 0], bsb2, m2)
    torch_ref.swap_blocks_bytes(kv_src, want_kv, bsb2, m2)
    assert torch.equal(kv_dst, want_kv)
    kt.check_errors(dev)
    before = dst.as_strided((9, 17, 2, 64), dst.stride()).clone()
    torch.ops.kvgen.swap_blocks(src, dst, bsb, torch.tensor([[0, 9]]))
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors(dev)
    for args, msg in (
            ((bsb - 2, m), f"block_size_in_bytes {bsb - 2} is not src's "
             f"block stride in bytes \\({bsb} "),
            ((bsb, m.int()), "need \\[N, 2\\] int64"),
            ((bsb, m.view(-1)), "need \\[N, 2\\] int64"),
            ((bsb, m.to("meta")), "block_mapping is on meta")):
        with pytest.raises(ValueError, match=msg):
            torch.ops.kvgen.swap_blocks(src, dst, *args)
    with pytest.raises(TypeError, match="block_size_in_bytes"):
        kt.swap_blocks(src, dst, float(bsb), m)
    assert torch.equal(dst.as_strided((9, 17, 2, 64), dst.stride()), before)


def test_swap_blocks_storage_bound():
    """A view whose last block's block_size_in_bytes would run past its
    storage (vLLM's byte copy would read or write beyond the allocation:
    here the last block has no padding row) is refused, nothing
    written."""
    stride = 17 * 2 * 64
    base = torch.zeros(3 * stride + 16 * 2 * 64, dtype=torch.bfloat16)
    view = base.as_strided((4, 16, 2, 64), (stride, 128, 64, 1))
    src = torch.ones(4, 17, 2, 64, dtype=torch.bfloat16)[:, :16]
    for a, b, name in ((src, view, "dst"), (view, src, "src")):
        with pytest.raises(ValueError, match=f"{name}'s 4 blocks of 4352 "
                           "bytes from byte 0 run past its storage"):
            torch.ops.kvgen.swap_blocks(a, b, 2 * stride,
                                        torch.tensor([[0, 3]]))
    assert not base.any()


def test_swap_blocks_rows_whose_order_matters_are_refused():
    """kvgen copies block_mapping's rows in parallel, vLLM's swap_blocks
    one after another: a mapping whose result depends on the order (within
    one tensor a destination that another row reads, 0 -> 1, 1 -> 2,
    either order; a destination twice; a destination overlapping its own
    source partly) raises ValueError naming the rows, nothing written.
    Order-free mappings (disjoint rows, a block onto itself, one source
    read twice, a chain across two tensors, a conflict only through a row
    whose block id is out of range: that row is skipped and reported) are
    copied as vLLM's in-order copy."""
    base = torch.randn(8, 2, 16, generator=torch.Generator().manual_seed(67))
    other = torch.randn(8, 2, 16, generator=torch.Generator().manual_seed(68))
    bsb = base.element_size() * base.stride(0)
    # dst starting half a block into base: its block d overlaps base's d
    # and d + 1.
    half = base.view(-1)[16:].as_strided((7, 2, 16), base.stride())
    for src, dst, m, msg in (
            (base, base, [[0, 1], [1, 2]], r"row 0 \(0 -> 1\) writes bytes "
             r"that row 1 \(1 -> 2\) reads"),
            (base, base, [[1, 2], [0, 1]], r"row 1 \(0 -> 1\) writes bytes "
             r"that row 0 \(1 -> 2\) reads"),
            (base, base, [[0, 3], [1, 3]], "row 0 .* that row 1 .* writes"),
            (other, base, [[0, 3], [1, 3]], "row 0 .* that row 1 .* writes"),
            (base, half, [[0, 0]], "the same row reads .*overlap partly"),
            (base, half, [[2, 0], [0, 5]], r"row 0 \(2 -> 0\) writes bytes "
             r"that row 1 \(0 -> 5\) reads")):
        before = base.clone(), other.clone()
        with pytest.raises(ValueError, match=msg):
            torch.ops.kvgen.swap_blocks(src, dst, bsb, torch.tensor(m))
        assert torch.equal(base, before[0]) and torch.equal(other, before[1])
    kt.check_errors("cpu")
    for src, dst, m, reported in (
            ("base", "base", [[0, 1], [2, 3]], False),
            ("base", "base", [[2, 2], [4, 5]], False),
            ("base", "base", [[0, 5], [0, 4]], False),
            ("other", "base", [[0, 1], [1, 2]], False),
            ("base", "base", [[0, 1], [1, 99]], True)):
        tensors = {"base": base, "other": other}
        want = {n: t.clone() for n, t in tensors.items()}
        mapping = torch.tensor(m)
        torch_ref.swap_blocks_bytes(want[src], want[dst], bsb,
                                    mapping[:1] if reported else mapping)
        torch.ops.kvgen.swap_blocks(tensors[src], tensors[dst], bsb, mapping)
        if reported:
            with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
                kt.check_errors("cpu")
        kt.check_errors("cpu")
        assert torch.equal(base, want["base"]), m
        assert torch.equal(other, want["other"]), m


def _opcheck_cases():
    """(name, op, args builder) for every kvgen.torch op, on the CPU."""
    gen = torch.Generator().manual_seed(61)
    one = torch.tensor([0.5])
    H, D, bs, nb = 2, 64, 16, 4

    def write(kvd):
        cdt = torch.uint8 if kvd == "fp8" else torch.bfloat16
        return lambda: (make_rows(9, H, D, gen), make_rows(9, H, D, gen),
                        torch.zeros(nb, bs, H, D, dtype=cdt),
                        torch.zeros(nb, bs, H, D, dtype=cdt),
                        torch.tensor([5, -1, 40, 2, 63, 9]), kvd, one, one)

    def gather():
        kc = torch.randn(nb, bs, H, D, generator=gen).to(torch.bfloat16)
        return (kc, kc.clone(), torch.tensor([5, -1, 40, 2]),
                torch.zeros(4, H, D), torch.zeros(4, H, D), "auto", one, one)

    def mla():
        return (make_rows(8, 1, 48, gen)[:, 0], make_rows(8, 1, 16, gen)[:, 0],
                torch.zeros(nb, bs, 64, dtype=torch.uint8),
                torch.tensor([5, -1, 40, 2, 63]), "fp8", one)

    def token_gather():
        cache, table, cu, tts, starts = _token_gather_case(
            "cpu", gen, torch.uint8)
        return (cache, torch.zeros(33, 48), table, cu, tts, 33, "fp8", one,
                starts)

    def batch_gather():
        cache, table, cu, _, starts = _token_gather_case(
            "cpu", gen, torch.bfloat16)
        return (cache, torch.zeros(33, 48, dtype=torch.bfloat16), table, cu,
                2, "auto", one, starts)

    def cp_gather():
        cache, table, cu, _, starts = _token_gather_case(
            "cpu", gen, torch.uint8)
        return (cache, torch.zeros(33, 48, dtype=torch.uint8), table, cu, 2,
                starts)

    def convert():
        return (torch.zeros(2, 16, 32, dtype=torch.uint8),
                torch.randn(2, 16, 32, generator=gen), 0.5, "fp8")

    def swap():
        src = torch.randn(6, bs, H, D, generator=gen).to(torch.bfloat16)
        return (src, torch.zeros(5, bs, H, D, dtype=torch.bfloat16),
                src.element_size() * src.stride(0),
                torch.tensor([[0, 4], [5, 1]]))

    def swap_device_mapping():
        return swap()[:2] + (torch.tensor([[0, 4], [5, 1]]),)

    def copy():
        c = [torch.randn(nb, bs, H, D, generator=gen).to(torch.bfloat16)
             for _ in range(4)]
        return (c[:2], c[2:], torch.tensor([[0, 3], [1, 2]]))

    def copy_mla():
        return ([torch.randn(nb, bs, 64, generator=gen).to(torch.bfloat16)],
                torch.tensor([[0, 3]]))

    return [("reshape_and_cache_flash-auto", write("auto")),
            ("reshape_and_cache_flash-bfloat16", write("bfloat16")),
            ("reshape_and_cache_flash-fp8", write("fp8")),
            ("gather_cache", gather),
            ("concat_and_cache_mla", mla),
            ("gather_and_maybe_dequant_cache", token_gather),
            ("gather_and_maybe_dequant_cache_batch", batch_gather),
            ("cp_gather_cache", cp_gather),
            ("convert_fp8", convert),
            ("swap_blocks", swap),
            ("swap_blocks_device_mapping", swap_device_mapping),
            ("copy_blocks", copy),
            ("copy_blocks_mla", copy_mla)]


OPCHECK = _opcheck_cases()


@pytest.mark.parametrize("name,build", OPCHECK, ids=[n for n, _ in OPCHECK])
def test_opcheck(name, build):
    """torch.library.opcheck of every op on CPU tensors: the schema's
    mutations are the ones the op makes, the fake implementation agrees,
    AOT dispatch (dynamic shapes) traces it."""
    _opcheck(getattr(torch.ops.kvgen, name.split("-")[0]).default, build())
    kt.check_errors("cpu")


@cuda
def test_cuda_opcheck():
    """The same on CUDA tensors (needs a GPU)."""
    for name, build in OPCHECK:
        args = [a.cuda() if isinstance(a, torch.Tensor) else
                [x.cuda() for x in a] if isinstance(a, list) else a
                for a in build()]
        if name == "swap_blocks":
            args[3] = args[3].cpu()
        _opcheck(getattr(torch.ops.kvgen, name.split("-")[0]).default, args)
    kt.check_errors("cuda")


def test_write_and_gather_take_broadcast_scales():
    """k_scale / v_scale as broadcast views (stride 0), as
    unified_attention's descales take them: torch.tensor([0.1]).expand(1,
    H) raised "k_scale must be contiguous". All strides 0 is one scale,
    [..., H] with stride 1 last and 0 before is one per head: the bytes
    written (and gathered) equal those of the contiguous scales of the same
    values. A broadcast [1, H] after a contiguous [1, H] of the same shape
    (one plan signature before: the shape only) gets its own plan; a
    strided [H] is refused."""
    gen = torch.Generator().manual_seed(29)
    T, nb, bs, H, D = 21, 4, 16, 4, 64
    key, value = make_rows(T, H, D, gen), make_rows(T, H, D, gen)
    slots = make_slots(T, nb, bs, gen, torch.int64)
    per_head = torch.rand(H, generator=gen) * 0.5 + 0.05

    def write(ks, vs):
        kc = torch.zeros(nb, bs, H, D, dtype=torch.float8_e4m3fn)
        vc = torch.zeros_like(kc)
        torch.ops.kvgen.reshape_and_cache_flash(key, value, kc, vc, slots,
                                                "fp8", ks, vs)
        ko = torch.zeros(T, H, D, dtype=torch.bfloat16)
        vo = torch.zeros_like(ko)
        torch.ops.kvgen.gather_cache(kc, vc, slots, ko, vo, "fp8", ks, vs)
        return [kc.view(torch.uint8), vc.view(torch.uint8), ko, vo]

    k1, v1 = torch.tensor([0.1]), torch.tensor([0.3])
    kh, vh = per_head, per_head.flip(0)
    # a plan for contiguous [1, H] scales (per head) first
    write(torch.full((1, H), 0.1), torch.full((1, H), 0.3))
    for (ks, vs), (kw, vw) in (
            ((k1.expand(1, H), v1.expand(1, H)), (k1, v1)),
            # vLLM's layer._k_scale.expand(num_seqs, num_kv_heads)
            ((torch.tensor(0.1).expand(3, H), torch.tensor(0.3).expand(3, H)),
             (k1, v1)),
            ((kh.expand(2, H), vh.expand(2, H)), (kh, vh))):
        for g, w in zip(write(ks, vs), write(kw, vw)):
            assert torch.equal(g, w)
    for bad in (torch.rand(2 * H)[::2], torch.rand(H, 2)[:, 0]):
        with pytest.raises(ValueError, match="k_scale has shape .* and "
                           "strides"):
            write(bad, per_head)
