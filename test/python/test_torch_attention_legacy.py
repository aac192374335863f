"""torch.ops.kvgen.unified_attention over vLLM's legacy paged caches: k
[num_blocks, H, Dk / x, block_size, x] (5-D, x = 16 bytes of elements) with
v vLLM's legacy [num_blocks, H, Dv, block_size] or ROCm aiter's shuffled
[num_blocks, H, block_size / x, Dv, x]; the layout comes from the views
through _views.LegacyCacheGeometry, the geometry of the legacy write.

The caches start as NaN and every context row is written by
torch.ops.kvgen.reshape_and_cache (aiter's V too, checked against the
legacy V permuted in torch); the same rows go into NHD caches through
reshape_and_cache_flash. The op over the legacy caches must match the op
over the NHD caches to about one bf16 rounding (their kernels read with
different vector widths, so fp32 sums may be ordered differently) and
test_torch_attention's float64 reference (tolerance 1e-2, as there):
decode, a mixed batch with a window and sinks (decode plan) and a chunk
beside decodes (prefill plan), MiMo K 192 / V 128 bf16 and an fp8 e4m3 per-tensor cache,
block sizes 16 and 32. Also opcheck, FakeTensors, the C++ kernel launching
a repeated call, and shapes that are not a legacy pair (ValueError naming
k / v / out / q, nothing written). CUDA variants skip without a GPU.
"""

import math
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
from kvgen import _torch_attention as _ta  # noqa: E402
# The float64 reference, the devices (CUDA skipped without a GPU, with the
# reason) and the op.
from test_torch_attention import DEVICES, OP, reference  # noqa: E402

NAN = float("nan")

#: name -> (num_kv_heads, num_q_heads, Dk, Dv, cache dtype, kv_cache_dtype)
GEOS = {
    "mimo_bf16": (4, 16, 192, 128, torch.bfloat16, "auto"),
    "fp8_e4m3_tensor": (2, 8, 128, 128, torch.float8_e4m3fn, "fp8"),
}


def _prefill_n(H, Hq, device):
    """The shortest query that takes the prefill plan's kernel on device
    (on CUDA devices the prefill plan also needs enough CTAs, so the
    threshold is longer than on the CPU)."""
    q = torch.empty(1, Hq, 1, device=device)
    return _ta._prefill_min_tokens(q, torch.empty(1, H, 1, 1, 1))


#: name -> (seq_lens, q_lens, window, sinks) from n = _prefill_n
BATCHES = {
    "decode": lambda n: ([37, 1, 16, 17, 90, 0], [1, 1, 1, 1, 1, 0], -1,
                         False),
    "mixed_window_sinks": lambda n: ([1, 60, 29, 64, 18], [1, 4, 29, 2, 7],
                                     40, True),
    "prefill_chunk_and_decodes": lambda n: ([n + 90, 37, 1, 16, 0],
                                            [n + 2, 1, 1, 1, 0], -1, False),
}


def _bits(t):
    return t.contiguous().view(torch.uint8)


class LegacyCase:
    """Legacy caches (v_form "legacy" or "aiter") and NHD caches holding
    the same values, written by kvgen's writers; q, out (canary 7.25), the
    index tensors and the fp8 scales (write scale = attention descale)."""

    def __init__(self, geo, bs, v_form, batch, seed, device="cpu"):
        H, Hq, dk, dv, cdt, kvd = GEOS[geo]
        lens, qs, self.window, sinks = BATCHES[batch](_prefill_n(H, Hq,
                                                                 device))
        dev = torch.device(device)
        gen = torch.Generator().manual_seed(seed)
        x = 16 // torch.empty((), dtype=cdt).element_size()
        need = [max(1, -(-L // bs)) for L in lens]
        nb = sum(need) + 3
        perm = torch.randperm(nb - 1, generator=gen) + 1  # block 0: NaN
        bt = torch.zeros(len(lens), max(need) + 1, dtype=torch.int32)
        at = 0
        for s, n in enumerate(need):
            bt[s, :n] = perm[at:at + n]
            at += n
        slots = torch.cat([bt[s, torch.arange(L) // bs].long() * bs +
                           torch.arange(L) % bs
                           for s, L in enumerate(lens)])
        key = (torch.randn(len(slots), H, dk, generator=gen) * 2).bfloat16()
        value = (torch.randn(len(slots), H, dv, generator=gen) * 2).bfloat16()
        self.k_descale = self.v_descale = None
        if kvd != "auto":
            self.k_descale = torch.tensor([0.25], device=dev)
            self.v_descale = torch.tensor([0.125], device=dev)
        kl = torch.full((nb, H, dk // x, bs, x), NAN, dtype=cdt, device=dev)
        vl = torch.full((nb, H, dv, bs), NAN, dtype=cdt, device=dev)
        kn = torch.full((nb, bs, H, dk), NAN, dtype=cdt, device=dev)
        vn = torch.full((nb, bs, H, dv), NAN, dtype=cdt, device=dev)
        rows = (key.to(dev), value.to(dev))
        ones = torch.ones(1, device=dev)
        ks, vs = (self.k_descale, self.v_descale) if kvd != "auto" else \
            (ones, ones)
        torch.ops.kvgen.reshape_and_cache(*rows, kl, vl, slots.to(dev), kvd,
                                          ks, vs)
        torch.ops.kvgen.reshape_and_cache_flash(*rows, kn, vn,
                                                slots.to(dev), kvd, ks, vs)
        # The two pairs hold the same values at the same (block, token,
        # head, element), NaN included.
        assert torch.equal(_bits(kl.permute(0, 3, 1, 2, 4).reshape(kn.shape)),
                           _bits(kn))
        assert torch.equal(_bits(vl.permute(0, 3, 1, 2)), _bits(vn))
        if v_form == "aiter":
            # aiter's shuffled V [nb, H, bs / x, Dv, x], written by
            # reshape_and_cache itself: the legacy V's values permuted.
            va = torch.full((nb, H, bs // x, dv, x), NAN, dtype=cdt,
                            device=dev)
            kl2 = torch.full_like(kl, NAN)
            torch.ops.kvgen.reshape_and_cache(*rows, kl2, va, slots.to(dev),
                                              kvd, ks, vs)
            assert torch.equal(_bits(kl2), _bits(kl))
            assert torch.equal(_bits(va), _bits(
                vl.view(nb, H, dv, bs // x, x).permute(0, 1, 3, 2, 4)))
            vl = va
            assert torch.equal(_bits(vl.permute(0, 2, 4, 1, 3)
                                     .reshape(vn.shape)), _bits(vn))
        self.k, self.v, self.kn, self.vn = kl, vl, kn, vn
        self.block_table = bt[:, :-1].to(dev)  # row stride > width
        self.seqused = torch.tensor(lens, dtype=torch.int32, device=dev)
        cu = [0]
        for n in qs:
            cu.append(cu[-1] + n)
        self.cu = torch.tensor(cu, dtype=torch.int32, device=dev)
        self.T, self.max_q, self.max_k = cu[-1], max(qs), max(lens)
        self.q = torch.randn(self.T, Hq, dk, generator=gen).bfloat16().to(dev)
        self.out = torch.full((self.T, Hq, dv), 7.25, dtype=torch.bfloat16,
                              device=dev)
        self.sinks = ((torch.randn(Hq, generator=gen) * 2).to(dev)
                      if sinks else None)
        self.scale = 1.0 / math.sqrt(dk)
        self.device = dev

    def args(self, k=None, v=None, **kw):
        a = dict(q=self.q, k=self.k if k is None else k,
                 v=self.v if v is None else v, out=self.out,
                 cu_seqlens_q=self.cu, max_seqlen_q=self.max_q,
                 seqused_k=self.seqused, max_seqlen_k=self.max_k,
                 softmax_scale=self.scale, causal=True,
                 window_size=[self.window, 0 if self.window >= 0 else -1],
                 block_table=self.block_table, softcap=0.0, q_descale=None,
                 k_descale=self.k_descale, v_descale=self.v_descale,
                 sinks=self.sinks)
        a.update(kw)
        return a

    def workspace(self, k=None, v=None):
        n = kt.unified_attention_workspace_bytes(
            self.q, self.k if k is None else k, self.v if v is None else v,
            sinks=self.sinks, k_descale=self.k_descale,
            v_descale=self.v_descale)
        return torch.zeros(n, dtype=torch.uint8, device=self.device)

    def run(self, k=None, v=None, ws=None):
        """The op's output (a copy) over (k, v), the legacy pair by
        default."""
        self.out.fill_(7.25)
        OP(**self.args(k, v), workspace=self.workspace(k, v) if ws is None
           else ws)
        return self.out.clone()

    def want(self):
        return reference(self.q, self.kn, self.vn, self.cu, self.seqused,
                         self.block_table, self.scale, self.window, 0.0,
                         self.sinks, self.k_descale, self.v_descale)


CASES = [(g, bs, vf, b) for g in GEOS for bs in (16, 32)
         for vf in ("legacy", "aiter") for b in BATCHES]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("geo,bs,v_form,batch", CASES,
                         ids=[f"{g}-b{bs}-{vf}-{b}"
                              for g, bs, vf, b in CASES])
def test_legacy_caches_match_nhd_and_reference(geo, bs, v_form, batch,
                                               device):
    """The op over the caches reshape_and_cache wrote gives the float64
    reference's rows (no NaN: no row past a context or unused block read)
    and the output over NHD caches of the same values to about one bf16
    rounding; the prefill batch takes the prefill plan's kernel, the others the
    decode plan's."""
    c = LegacyCase(geo, bs, v_form, batch, CASES.index((geo, bs, v_form,
                                                        batch)), device)
    kern = kt.unified_attention_kernel(c.q, c.k, c.v, c.max_q,
                                       sinks=c.sinks, k_descale=c.k_descale,
                                       v_descale=c.v_descale)
    assert kern.name.endswith("_prefill") == batch.startswith("prefill"), \
        kern.name
    assert "kc" in kern.name and "vc" in kern.name, kern.name  # chunked
    got = c.run()
    assert torch.isfinite(got.float()).all(), "NaN: an unwritten row read"
    torch.testing.assert_close(got.cpu().double(), c.want(), atol=1e-2,
                               rtol=1e-2)
    # The NHD caches' kernel reads K and V in wider vectors (legacy V: one
    # element at a time), which may change the order of the fp32 sums: the
    # outputs agree to about one bf16 rounding, not bit for bit.
    nhd = c.run(c.kn, c.vn)
    torch.testing.assert_close(got, nhd, atol=1e-3, rtol=2 ** -7)
    kt.check_errors(c.device)


def test_layout_is_reshape_and_caches():
    """The op's geometry is the write's: the same layout text for the
    legacy pair (LegacyCacheGeometry), and aiter's V as v_token_chunks =
    [x, Dv * x], v_elem_stride = x (docs/layout.md's table)."""
    from kvgen._views import LegacyCacheGeometry
    c = LegacyCase("mimo_bf16", 16, "legacy", "decode", 1)
    p, _ = _ta._impl(*c.args().values(), c.workspace())
    assert p.geo.text == LegacyCacheGeometry(c.k, c.v, "bf16", "none").text
    assert "k_elem_chunks = [8, 128]" in p.geo.text, p.geo.text
    assert "v_elem_stride = 16" in p.geo.text, p.geo.text
    a = LegacyCase("mimo_bf16", 32, "aiter", "decode", 2)
    p, _ = _ta._impl(*a.args().values(), a.workspace())
    assert "v_strides = [16384, 1, 4096], v_token_chunks = [8, 1024], " \
        "v_elem_stride = 8" in p.geo.text, p.geo.text


@pytest.mark.parametrize("v_form,batch", [
    ("legacy", "mixed_window_sinks"), ("aiter", "prefill_chunk_and_decodes")])
def test_opcheck(v_form, batch):
    """torch.library.opcheck with the new cache forms (decode plan and
    prefill plan), with and without lse."""
    c = LegacyCase("mimo_bf16", 16, v_form, batch, 5)
    ws = c.workspace()
    for lse in (None, torch.zeros(c.T, c.q.shape[1])):
        torch.library.opcheck(OP.default, tuple(c.args().values()),
                              {"workspace": ws, "lse": lse})


def test_fake_and_workspace_bytes_of_fake_tensors():
    """The fake checks the legacy shapes on meta tensors (and refuses a
    wrong out); unified_attention_workspace_bytes of FakeTensors (no
    pointers) equals that of the real caches, both V forms."""
    import warnings
    from torch._subclasses.fake_tensor import FakeTensorMode
    for v_form in ("legacy", "aiter"):
        c = LegacyCase("mimo_bf16", 16, v_form, "mixed_window_sinks", 3)
        meta = {n: (x.to("meta") if isinstance(x, torch.Tensor) else x)
                for n, x in c.args().items()}
        ws = torch.empty(1 << 20, dtype=torch.uint8, device="meta")
        OP(**meta, workspace=ws)
        with pytest.raises(ValueError, match=r"out has shape .*, 128\]"):
            OP(**{**meta, "out": meta["out"][:, :, :64]}, workspace=ws)
        want = c.workspace().numel()
        mode = FakeTensorMode()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # data_ptr of a FakeTensor warns
            with mode:
                fq, fk, fv = (mode.from_tensor(t) for t in (c.q, c.k, c.v))
                assert kt.unified_attention_workspace_bytes(
                    fq, fk, fv, sinks=mode.from_tensor(c.sinks)) == want


def test_cpp_kernel_launches_the_second_call():
    """Where kvgen's C++ kernel is in use, the second call of the same
    legacy caches is launched from C++ (fast_path_info's hits) and gives
    the same bits."""
    if kt.fast_path_info()["kernel"] != "c++":
        pytest.skip("the C++ kernel is not in use: "
                    + str(kt.fast_path_info()["reason"]))
    for v_form in ("legacy", "aiter"):
        c = LegacyCase("fp8_e4m3_tensor", 32, v_form, "mixed_window_sinks",
                       9)
        ws = c.workspace()
        first = c.run(ws=ws)
        before = kt.fast_path_info()["hits"]
        again = c.run(ws=ws)
        assert kt.fast_path_info()["hits"] == before + 1, v_form
        assert torch.equal(first, again), v_form


def _bad(c):
    """(arguments changed, exception, message) for caches that are not a
    legacy pair the op serves; c is MiMo bf16, blocks of 16."""
    nb, H = c.k.shape[:2]
    x, bs, dv = 8, 16, 128
    va = c.v.view(nb, H, dv, bs // x, x).permute(0, 1, 3, 2, 4).contiguous()
    return [
        (dict(k=c.k.view(nb, H, 12, bs, 16)), ValueError,
         r"k has shape \[\d+, 4, 12, 16, 16\]: its last dimension must be "
         r"x = 16 bytes / 2-byte elements = 8"),
        (dict(v=va.view(nb, H, 1, dv, 16)), ValueError,
         r"v has shape \[\d+, 4, 1, 128, 16\]: its last dimension must be "
         r"x = 16 bytes / 2-byte elements = 8 \(aiter's shuffled"),
        (dict(v=va[:, :, :1]), ValueError,
         r"k \[.*\] has block_size 16 \(dim 3\), v \[.*\] 1 x 8 = 8"),
        (dict(v=c.v[..., :8]), ValueError,
         r"k \[.*\] has block_size 16 \(dim 3\), v \[.*\] 8 \(dim 3\)"),
        (dict(v=c.v[:, :2]), ValueError,
         r"differ in \[num_blocks, num_kv_heads\]"),
        (dict(v=c.v[0]), ValueError, r"v has shape \[4, 128, 16\], need 4 "
         r"dims .* or 5 dims"),
        # A flash (NHD) v beside a legacy k; a legacy v beside an NHD k.
        (dict(v=c.vn), ValueError, r"differ in \[num_blocks, num_kv_heads\]"),
        (dict(k=c.kn, v=va), ValueError,
         r"v has shape \[\d+, 4, 2, 128, 8\], need \[num_blocks, "
         r"block_size, num_kv_heads, head_size\]"),
        (dict(k=c.k[:, :, :16]), ValueError, r"q has head_size 192, k 128"),
        (dict(out=c.out[:, :, :64]), ValueError, r"out has shape"),
        (dict(k=c.k.view(torch.int16), v=c.v.view(torch.int16)), TypeError,
         r"k has dtype torch.int16"),
        (dict(v=c.k.view(nb, H, 192, bs)[:, :, :128]), ValueError,
         r"key_cache and value_cache overlap"),
    ]


def test_bad_shapes_raise_and_write_nothing():
    """After a good call remembered its plan, caches that are not a legacy
    pair raise ValueError / TypeError naming the argument, out unchanged
    (C++ kernel: the signature differs, so the Python checks run)."""
    c = LegacyCase("mimo_bf16", 16, "legacy", "decode", 4)
    ws = c.workspace()
    c.run(ws=ws)
    for kw, exc, words in _bad(c):
        c.out.fill_(7.25)
        with pytest.raises(exc, match=words):
            OP(**{"workspace": ws, **c.args(**kw)})
        assert (c.out == 7.25).all(), kw


def test_uint8_fp8_legacy_cache_is_refused():
    """An fp8 legacy cache written as uint8 (vLLM's allocation) must be
    viewed as the float8 dtype it holds: TypeError saying so."""
    c = LegacyCase("fp8_e4m3_tensor", 16, "legacy", "decode", 6)
    with pytest.raises(TypeError, match=r"view an fp8 cache as the float8"):
        OP(**c.args(c.k.view(torch.uint8), c.v.view(torch.uint8)),
           workspace=c.workspace())
    c.run()  # as float8_e4m3fn: served


def test_prefill_split_reads_the_legacy_heads():
    """The kernel split (min(max_seqlen_q, T) against PREFILL_MIN_ROWS and,
    on CUDA, PREFILL_MIN_CTAS) takes num_kv_heads from dim 1 of a 5-D k,
    as from dim 2 of a 4-D one: MiMo (64 q / 4 kv heads) 8 tokens on the
    CPU, 125 on CUDA, whichever form. Shapes only: stand-ins."""
    from types import SimpleNamespace as NS
    for dev, want in (("cpu", 8), ("cuda", 125)):
        q = NS(shape=(1, 64, 192), device=NS(type=dev))
        for k in (NS(shape=(10, 16, 4, 192)), NS(shape=(10, 4, 24, 16, 8))):
            assert _ta._prefill_min_tokens(q, k) == want, (dev, k.shape)
