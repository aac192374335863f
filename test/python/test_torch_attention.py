"""torch.ops.kvgen.unified_attention (kvgen/_torch_attention.py): vLLM's
Triton unified_attention arguments on kvgen's kv.paged_attention kernel.

On the CPU (kvgen's host backend, the kernel JIT-generated through
libkvgen-generator.so) against a float64 torch reference written here from
the definition (gather each sequence's keys and values through its block
table, dequantize, causal / windowed softmax with soft-cap and sinks):
decode, speculative verification (query lengths 2-8), a short prefill and
mixed batches; GQA; K / V head sizes 192 / 128 and 128 / 192; separate,
packed ([nb, bs, H, Dk + Dv], K and V column ranges of one tensor), HND
(a permute) and [nb, 2, ...] caches; fp8 caches (e4m3fn, e5m2) with per
tensor (vLLM's expand()ed scale) and per kv head descales. Cache rows past
each context and the blocks of unused block-table entries hold NaN (read
once, the output would be NaN); output rows are checked in full.
Also: torch.library.opcheck, the fake on meta tensors, torch.compile, the
errors (raised before anything is written), that the op runs no torch op
at all on the host (so no synchronization: it reads no tensor values), one
workspace through a sequence of batch shapes, max_seqlen_q above the token
count.

On CUDA (skipped without a GPU, with the reason): the same reference cases,
no synchronization under torch.cuda.set_sync_debug_mode("error"), and CUDA
graphs captured at several batch sizes, replayed after other batches ran,
bit for bit against eager launches.

Tolerance: |out - ref| <= tol + tol |ref|, tol 1e-2 (bf16 output) and 4e-3
(f16), as test_attention.py: the kernel rounds P to the MMA type and the
output to its dtype, the reference uses the same cache values exactly.
"""

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed "
                            "(scripts/install-deps.sh installs it)")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvgen  # noqa: E402


from conftest import jit_skip_reason  # noqa: E402

_WHY = jit_skip_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")

import kvgen.torch as kt  # noqa: E402  (registers torch.ops.kvgen)
from kvgen import _torch_attention as _ta  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device visible to torch (the "
                          "CUDA tests need a GPU)")
DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]
OP = torch.ops.kvgen.unified_attention


#---------------------------------------------------------------------------
# Reference
#---------------------------------------------------------------------------

def reference(q, k, v, cu, seqused, bt, scale, window_left, softcap, sinks,
              k_descale, v_descale, with_lse=False):
    """float64 attention from the definition (docs/attention.md "What it
    computes"): query token i of sequence s (n query tokens, context L)
    at position p = L - n + i attends keys j in [lo, p], lo = max(0, p -
    window_left) with a window, else 0; logits scale * q . k_j, soft-capped
    when softcap > 0; the sink's exp joins the denominator; no keys -> 0.
    with_lse: also the log-sum-exp [T, Hq] of those logits and the sink
    (-inf for a row with neither)."""
    q, cu, seqused, bt = (x.cpu() for x in (q, cu, seqused, bt))
    k, v = k.cpu(), v.cpu()
    T, Hq, _ = q.shape
    H, bs = k.shape[2], k.shape[1]
    G = Hq // H
    out = torch.zeros(T, Hq, v.shape[3], dtype=torch.float64)
    lse = torch.full((T, Hq), -math.inf, dtype=torch.float64)

    def scales(s):
        if s is None or k.dtype in (torch.bfloat16, torch.float16,
                                    torch.float32):
            return 1.0
        s = s.cpu().double()
        if s.numel() == 1 or all(x == 0 for x in s.stride()):
            return s.reshape(-1)[0].item()
        return s.reshape(-1, H)[0].reshape(1, H, 1)

    ks, vs = scales(k_descale), scales(v_descale)
    for s in range(seqused.shape[0]):
        L = int(seqused[s])
        q0, q1 = int(cu[s]), int(cu[s + 1])
        n = q1 - q0
        pos = torch.arange(L)
        blocks = bt[s, pos // bs].long()
        K = k[blocks, pos % bs].to(torch.float64) * ks  # [L, H, Dk]
        V = v[blocks, pos % bs].to(torch.float64) * vs
        K = K.repeat_interleave(G, dim=1)
        V = V.repeat_interleave(G, dim=1)
        for i in range(n):
            p = L - n + i
            lo = max(0, p - window_left) if window_left >= 0 else 0
            if p < 0:
                if sinks is not None:
                    lse[q0 + i] = sinks.cpu().double()
                continue
            x = torch.einsum("hd,khd->hk", q[q0 + i].double(),
                             K[lo:p + 1]) * scale
            if softcap > 0:
                x = softcap * torch.tanh(x / softcap)
            if sinks is not None:
                x = torch.cat([x, sinks.cpu().double()[:, None]], 1)
            w = torch.softmax(x, -1)
            lse[q0 + i] = torch.logsumexp(x, -1)
            if sinks is not None:
                w = w[:, :-1]
            out[q0 + i] = torch.einsum("hk,khd->hd", w, V[lo:p + 1])
    return (out, lse) if with_lse else out


#---------------------------------------------------------------------------
# Cases
#---------------------------------------------------------------------------

class Geo:
    def __init__(self, H, Hq, dk, dv, bs, cache=torch.bfloat16,
                 io=torch.bfloat16, arrangement="nhd", descale="none"):
        self.H, self.Hq, self.dk, self.dv, self.bs = H, Hq, dk, dv, bs
        self.cache, self.io = cache, io
        self.arrangement, self.descale = arrangement, descale


GEOS = {
    "gqa4_nhd": Geo(2, 8, 128, 128, 16),
    "mimo_192_128_packed": Geo(2, 8, 192, 128, 16, arrangement="packed"),
    "wide_v_128_192_hnd": Geo(2, 4, 128, 192, 16, arrangement="hnd"),
    "wide_v_128_192_packed_hnd": Geo(2, 4, 128, 192, 8,
                                     arrangement="packed_hnd"),
    "nb2_f16": Geo(2, 4, 64, 64, 16, cache=torch.float16, io=torch.float16,
                   arrangement="nb2"),
    "fp8_e4m3_tensor": Geo(2, 8, 128, 128, 16, cache=torch.float8_e4m3fn,
                           descale="expand"),
    "fp8_e4m3_head_packed": Geo(2, 4, 192, 128, 16,
                                cache=torch.float8_e4m3fn,
                                arrangement="packed", descale="head"),
    "fp8_e5m2_tensor_hnd": Geo(1, 2, 64, 64, 32, cache=torch.float8_e5m2,
                               arrangement="hnd", descale="one"),
}


class Case:
    """Caches filled with NaN, valid rows written through random block
    tables; q, out (canary 7.25) and the index tensors."""

    def __init__(self, g, seq_lens, q_lens, seed, device="cpu", window=-1,
                 softcap=0.0, sinks=False, spare=3):
        gen = torch.Generator().manual_seed(seed)
        self.g, self.window, self.softcap = g, window, softcap
        bs = g.bs
        need = [max(1, -(-L // bs)) for L in seq_lens]
        self.nb = nb = sum(need) + spare
        width = max(need) + 2
        perm = torch.randperm(nb - 1, generator=gen) + 1  # block 0: NaN
        bt = torch.zeros(len(seq_lens), width + 1, dtype=torch.int32)
        at = 0
        for s, n in enumerate(need):
            bt[s, :n] = perm[at:at + n]
            at += n
        self.block_table = bt[:, :width].to(device)  # row stride > width
        self.seqused = torch.tensor(seq_lens, dtype=torch.int32,
                                    device=device)
        cu = [0]
        for n in q_lens:
            cu.append(cu[-1] + n)
        self.cu = torch.tensor(cu, dtype=torch.int32, device=device)
        self.T = cu[-1]
        self.max_q = max(q_lens) if q_lens else 0
        self.max_k = max(seq_lens) if seq_lens else 0
        # Caches built on the CPU (float8 indexing there), then moved.
        self.k, self.v = self._caches(gen)
        fp8 = g.cache in (torch.float8_e4m3fn, torch.float8_e5m2)
        valid_k = (torch.randn(nb, bs, g.H, g.dk, generator=gen) *
                   (4 if fp8 else 1)).to(g.cache)
        valid_v = (torch.randn(nb, bs, g.H, g.dv, generator=gen) *
                   (4 if fp8 else 1)).to(g.cache)
        # Only the rows of each context get values; the rest stay NaN.
        for s, L in enumerate(seq_lens):
            pos = torch.arange(L)
            blk = bt[s, pos // bs].long()
            self.k[blk, pos % bs] = valid_k[blk, pos % bs]
            self.v[blk, pos % bs] = valid_v[blk, pos % bs]
        if device != "cpu":
            moved = [a.to(device) for a in self.allocs]

            def same(view):  # the view, on its moved allocation
                i = next(i for i, a in enumerate(self.allocs)
                         if a.untyped_storage().data_ptr() ==
                         view.untyped_storage().data_ptr())
                return moved[i].as_strided(view.shape, view.stride(),
                                           view.storage_offset())
            self.k, self.v = same(self.k), same(self.v)
            self.allocs = moved
        self.q = torch.randn(self.T, g.Hq, g.dk, generator=gen).to(
            g.io).to(device)
        self.out = torch.full((self.T, g.Hq, g.dv), 7.25, dtype=g.io,
                              device=device)
        self.scale = 1.0 / math.sqrt(g.dk)
        self.sinks = ((torch.randn(g.Hq, generator=gen) * 2).to(device)
                      if sinks else None)
        self.k_descale = self.v_descale = None
        if g.descale == "expand":  # vLLM: layer._k_scale.expand(B, H)
            self.k_descale = torch.tensor(0.05, device=device).expand(
                len(seq_lens), g.H)
            self.v_descale = torch.tensor(0.03, device=device).expand(
                len(seq_lens), g.H)
        elif g.descale == "one":
            self.k_descale = torch.tensor([0.07], device=device)
            self.v_descale = torch.tensor([0.02], device=device)
        elif g.descale == "head":
            self.k_descale = (torch.rand(g.H, generator=gen) * 0.1 +
                              0.02).to(device)
            self.v_descale = (torch.rand(g.H, generator=gen) * 0.1 +
                              0.02).to(device)
        self.device = device

    def _caches(self, gen):
        g = self.g
        nb, bs, H = self.nb, g.bs, g.H
        hnd = g.arrangement in ("hnd", "packed_hnd")

        def alloc(d, lead=()):
            shape = (nb, *lead, H, bs, d) if hnd else (nb, *lead, bs, H, d)
            return torch.full(shape, float("nan"), dtype=g.cache)

        def view(t):  # -> [nb, bs, H, d]
            return t.transpose(-3, -2) if hnd else t

        if g.arrangement.startswith("packed"):
            kv = view(alloc(g.dk + g.dv))
            self.allocs = [kv]
            return kv[..., :g.dk], kv[..., g.dk:]
        if g.arrangement == "nb2":
            kv = alloc(g.dk, (2,))
            self.allocs = [kv]
            return view(kv[:, 0]), view(kv[:, 1])
        kc, vc = alloc(g.dk), alloc(g.dv)
        self.allocs = [kc, vc]
        return view(kc), view(vc)

    def args(self, **kw):
        a = dict(q=self.q, k=self.k, v=self.v, out=self.out,
                 cu_seqlens_q=self.cu, max_seqlen_q=self.max_q,
                 seqused_k=self.seqused, max_seqlen_k=self.max_k,
                 softmax_scale=self.scale, causal=True,
                 window_size=[self.window, 0 if self.window >= 0 else -1],
                 block_table=self.block_table, softcap=self.softcap,
                 q_descale=None, k_descale=self.k_descale,
                 v_descale=self.v_descale, sinks=self.sinks)
        a.update(kw)
        return a

    def workspace(self):
        n = kt.unified_attention_workspace_bytes(
            self.q, self.k, self.v, softcap=self.softcap, sinks=self.sinks,
            k_descale=self.k_descale, v_descale=self.v_descale)
        assert n > 0
        return torch.zeros(n, dtype=torch.uint8, device=self.device)

    def run(self, ws=None, **kw):
        OP(**self.args(**kw),
           workspace=self.workspace() if ws is None else ws)

    def want(self):
        return reference(self.q, self.k, self.v, self.cu, self.seqused,
                         self.block_table, self.scale, self.window,
                         self.softcap, self.sinks, self.k_descale,
                         self.v_descale)

    def check(self):
        got = self.out.cpu().double()
        assert torch.isfinite(got).all(), \
            "NaN in the output: a row past a context or an unused block " \
            "was read"
        tol = 4e-3 if self.g.io == torch.float16 else 1e-2
        torch.testing.assert_close(got, self.want(), atol=tol, rtol=tol)

    def check_rows(self, t):
        """The first t rows are the reference's, the others keep their
        canary."""
        got = self.out.cpu().double()
        assert (got[t:] == 7.25).all()
        tol = 4e-3 if self.g.io == torch.float16 else 1e-2
        torch.testing.assert_close(got[:t], self.want()[:t], atol=tol,
                                   rtol=tol)


BATCHES = {
    # name: (seq_lens, q_lens)
    "decode": ([37, 1, 16, 17, 90, 0], [1, 1, 1, 1, 1, 0]),
    "verify": ([40, 8, 70, 33], [2, 8, 5, 3]),
    "prefill": ([45, 20, 9], [45, 12, 9]),
    "mixed": ([1, 60, 29, 64, 18], [1, 4, 29, 2, 7]),
    "split_decode": ([300], [1]),
}


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("device", DEVICES)
def test_gqa_batches_match_reference(device, batch):
    """Decode (a 0-length context included: zeros), speculative
    verification (q_len 2-8), a short prefill (q_len = context), a mixed
    batch and a split decode, GQA 4, NHD."""
    lens, qs = BATCHES[batch]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=len(batch), device=device)
    c.run()
    c.check()


FEATURES = {
    "window": dict(window=23),
    "sinks": dict(sinks=True),
    "softcap": dict(softcap=5.0),
    "window_sinks_softcap": dict(window=9, sinks=True, softcap=3.0),
}


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("device", DEVICES)
def test_window_sinks_softcap(device, feature):
    lens, qs = BATCHES["mixed"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=7, device=device,
             **FEATURES[feature])
    c.run()
    c.check()


@pytest.mark.parametrize("geo", [n for n in GEOS if n != "gqa4_nhd"])
@pytest.mark.parametrize("device", DEVICES)
def test_layouts_head_sizes_and_fp8(device, geo):
    """Dk != Dv both ways, packed / HND / [nb, 2, ...] caches, f16, fp8
    caches with per-tensor (expand()ed and 1-element) and per-head
    descales; a mixed batch with sinks and a window."""
    lens, qs = BATCHES["mixed"]
    c = Case(GEOS[geo], lens, qs, seed=11, device=device, window=40,
             sinks=True)
    c.run()
    c.check()


#---------------------------------------------------------------------------
# lse: each row's log-sum-exp (optional last argument)
#---------------------------------------------------------------------------

LSE_CANARY = -12345.5


def lse_view(c):
    """An lse as vLLM keeps it, [Hq, T] (passed transposed: token stride 1),
    inside a canary-filled buffer: (the view, the buffer)."""
    buf = torch.full((c.g.Hq + 1, c.T + 3), LSE_CANARY, device=c.device)
    return buf[:c.g.Hq, 1:1 + c.T].t(), buf


def check_lse(c, view, buf):
    got = view.cpu().double()
    want = reference(c.q, c.k, c.v, c.cu, c.seqused, c.block_table, c.scale,
                     c.window, c.softcap, c.sinks, c.k_descale, c.v_descale,
                     with_lse=True)[1]
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    fin = torch.isfinite(want)
    # Logits of the exact inputs summed in float32: ~1e-6 relative.
    torch.testing.assert_close(got[fin], want[fin], atol=2e-4, rtol=1e-5)
    mask = torch.ones_like(buf, dtype=torch.bool)
    mask[:-1, 1:-2] = False
    assert (buf[mask] == LSE_CANARY).all(), "a write outside lse's rows"


LSE_CASES = {
    # name: (geometry, batch, features)
    "decode_empty": ("gqa4_nhd", "decode", {}),
    "verify_window_sinks": ("gqa4_nhd", "verify", dict(window=9, sinks=True)),
    "prefill_softcap": ("gqa4_nhd", "prefill", dict(softcap=3.0)),
    "mixed_fp8_head": ("fp8_e4m3_head_packed", "mixed",
                       dict(window=40, sinks=True)),
    "split_decode_fp8": ("fp8_e4m3_tensor", "split_decode", dict(sinks=True)),
    "split_decode_wide_v": ("wide_v_128_192_hnd", "split_decode", {}),
}


@pytest.mark.parametrize("case", list(LSE_CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_lse_matches_reference(device, case):
    """lse (vLLM's [Hq, T] layout, transposed) against the float64
    reference: decode with an empty context (no rows) and one-token ones,
    verification with a window and sinks, prefill with soft-cap, fp8 with
    per-head and per-tensor descales (the logits carry k's), split decodes;
    the output is the one without lse, bit for bit."""
    geo, batch, feats = LSE_CASES[case]
    lens, qs = BATCHES[batch]
    c = Case(GEOS[geo], lens, qs, seed=5, device=device, **feats)
    ws = c.workspace()
    c.run(ws=ws)
    plain = c.out.clone()
    c.out.fill_(7.25)
    view, buf = lse_view(c)
    c.run(ws=ws, lse=view)
    c.check()
    assert torch.equal(c.out, plain)
    check_lse(c, view, buf)


def test_lse_is_the_last_positional_argument():
    """lse follows workspace: the 18 positional arguments of a call without
    it are unchanged, and a 19th is lse; rows of q past no sequence's
    query keep their canaries (no key: nothing written there)."""
    lens, qs = BATCHES["verify"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=3, sinks=True)
    ws = c.workspace()
    view, buf = lse_view(c)
    OP(*c.args().values(), ws, view)
    c.check()
    check_lse(c, view, buf)
    args = _ta.SCHEMA[1:].split(") ->")[0].split(", ")
    assert args[-2:] == ["Tensor(b!)? workspace=None",
                         "Tensor(c!)? lse=None"], args


def test_lse_bad_arguments_raise_and_write_nothing():
    lens, qs = BATCHES["verify"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=8, sinks=True)
    ws = c.workspace()
    view, buf = lse_view(c)
    c.run(ws=ws, lse=view)  # a plan for the good signature
    buf.fill_(LSE_CANARY)
    for lse, exc, words in (
            (view.double(), TypeError, "lse has dtype"),
            (view[:-1], ValueError, r"lse has shape \[17, 8\], need "
             r"\[18, 8\]"),
            (view[:, :4], ValueError, "lse has shape"),
            (view.reshape(-1), ValueError, "lse has shape"),
            (torch.empty(c.T, c.g.Hq, device="meta"), ValueError,
             "lse is on meta")):
        c.out.fill_(7.25)
        with pytest.raises(exc, match=words):
            OP(*c.args().values(), ws, lse)
        assert (c.out == 7.25).all() and (buf == LSE_CANARY).all()
    # lse inside out's rows: refused before the launch, nothing written.
    inside = c.out.view(-1)[:2 * c.T * c.g.Hq].view(torch.float32)
    inside = inside.view(c.T, c.g.Hq)
    with pytest.raises(ValueError, match="out .* overlaps lse "):
        OP(*c.args().values(), ws, inside)
    assert (c.out == 7.25).all()


def test_cpp_kernel_launches_lse_calls():
    """A call with lse is remembered by the C++ kernel like one without
    (role L: None or per-call rows): the next call with another lse tensor
    of the same strides (and another batch) is launched from C++ and
    writes that tensor; a call without lse after it still gets its own
    kernel (no lse written anywhere)."""
    if kt.fast_path_info()["kernel"] != "c++":
        pytest.skip("the C++ kernel is not in use: "
                    + str(kt.fast_path_info()["reason"]))
    g = GEOS["gqa4_nhd"]
    lens, qs = BATCHES["mixed"]
    c = Case(g, lens, qs, seed=33, sinks=True)
    ws = c.workspace()
    view, buf = lse_view(c)
    c.run(ws=ws, lse=view)
    check_lse(c, view, buf)
    d = Case(g, [60, 9, 30], [4, 1, 3], seed=34, sinks=True)
    d.k, d.v, d.allocs, d.sinks = c.k, c.v, c.allocs, c.sinks
    d.block_table = c.block_table[1:4]
    d.seqused = torch.tensor([60, 9, 30], dtype=torch.int32)  # <= c's
    # Same strides as c's lse: a [Hq, c.T + 3] buffer, transposed.
    dbuf = torch.full((g.Hq + 1, c.T + 3), LSE_CANARY)
    dview = dbuf[:g.Hq, 1:1 + d.T].t()
    assert dview.stride() == view.stride()
    before = kt.fast_path_info()["hits"]
    d.run(ws=ws, lse=dview)
    assert kt.fast_path_info()["hits"] == before + 1
    d.check()
    want = reference(d.q, d.k, d.v, d.cu, d.seqused, d.block_table, d.scale,
                     d.window, d.softcap, d.sinks, None, None,
                     with_lse=True)[1]
    torch.testing.assert_close(dview.double(), want, atol=2e-4, rtol=1e-5)
    assert (dbuf[:, 1 + d.T:] == LSE_CANARY).all()
    dbuf.fill_(LSE_CANARY)
    d.out.fill_(7.25)
    d.run(ws=ws)
    d.check()
    assert (dbuf == LSE_CANARY).all()


def test_layout_is_taken_from_the_views():
    """The kernel's layout is the views': packed for K / V column ranges of
    one tensor, hnd for a permute, explicit strides for [nb, 2, ...]."""
    want = {"mimo_192_128_packed": ("nhd", "packed"),
            "wide_v_128_192_hnd": ("hnd", "separate"),
            "wide_v_128_192_packed_hnd": ("hnd", "packed"),
            "gqa4_nhd": ("nhd", "separate")}
    for name, (order, packing) in want.items():
        c = Case(GEOS[name], [5], [1], seed=1)
        k, _ = _ta._kernel_plan(c.q, c.k, c.v, 0.0, None,
                                                None, None)
        assert (k.layout.order, k.layout.packing) == (order, packing), name
    c = Case(GEOS["nb2_f16"], [5], [1], seed=1)
    k, _ = _ta._kernel_plan(c.q, c.k, c.v, 0.0, None, None,
                                            None)
    assert k.layout.k_strides is not None, k.layout.text


def test_one_workspace_serves_every_batch_shape():
    """One zeroed workspace (an engine's, per stream) through a sequence
    of batch shapes, split and unsplit, each against the reference; the
    kernel leaves its counters zero, so the order does not matter."""
    g = GEOS["gqa4_nhd"]
    first = Case(g, [5], [1], seed=0)
    ws = first.workspace()
    for i, (lens, qs) in enumerate([([300], [3]), ([300] * 3, [1] * 3),
                                    ([300] * 3, [3] * 3), ([200], [1]),
                                    ([40, 7], [2, 7]), ([400], [1])]):
        c = Case(g, lens, qs, seed=100 + i)
        c.run(ws=ws)
        c.check()


#---------------------------------------------------------------------------
# The kernel per call: decode plan or prefill plan, from max_seqlen_q
#---------------------------------------------------------------------------

def prefill_tokens(g):
    """The shortest max_seqlen_q that takes the prefill kernel for g's heads
    (PREFILL_MIN_ROWS query rows, G = Hq / H rows per token): the cases
    below follow the constant when it is tuned."""
    return -(-_ta.PREFILL_MIN_ROWS // (g.Hq // g.H))


def is_prefill(kernel):
    return kernel.name.endswith("_prefill")


def test_kernel_choice_follows_max_seqlen_q():
    """kvgen.torch.unified_attention_kernel: the decode plan's kernel one
    token below PREFILL_MIN_ROWS / G, the prefill plan's from it on, for
    G = 4 and G = 2; max_seqlen_q above num_tokens counts as num_tokens
    (a padded value does not pick the prefill kernel); lse picks the lse
    kernel of the same plan. The op's plan (the Python implementation's
    return) holds that kernel on both sides."""
    for name in ("gqa4_nhd", "fp8_e4m3_head_packed"):
        g = GEOS[name]
        n = prefill_tokens(g)
        c = Case(g, [n + 10, 5], [n, 1], seed=21)
        kw = dict(k_descale=c.k_descale, v_descale=c.v_descale)
        below = kt.unified_attention_kernel(c.q, c.k, c.v, n - 1, **kw)
        at = kt.unified_attention_kernel(c.q, c.k, c.v, n, **kw)
        assert not is_prefill(below) and is_prefill(at), (below.name,
                                                          at.name)
        assert below.name + "_prefill" == at.name
        # Padded: q has n + 1 rows, so 10**6 is taken as n + 1; with n - 1
        # rows it is n - 1 (decode).
        assert is_prefill(kt.unified_attention_kernel(c.q, c.k, c.v,
                                                      10 ** 6, **kw))
        short = c.q[:n - 1]
        assert not is_prefill(kt.unified_attention_kernel(
            short, c.k, c.v, 10 ** 6, **kw))
        lse = kt.unified_attention_kernel(c.q, c.k, c.v, n, lse=True, **kw)
        assert is_prefill(lse) and lse.name != at.name, lse.name
        ws = c.workspace()
        for m, want in ((n - 1, below), (n, at)):
            d = Case(g, [n + 10, 5], [m, 1], seed=22)
            p, _ = _ta._impl(*d.args().values(), ws)
            assert p.kernel is want, (m, p.kernel.name)
            d.check()


PREFILL_BATCHES = {
    # name: (seq_lens, q_lens) as functions of n = prefill_tokens(g)
    "prefill": lambda n: ([n + 7, n, 30], [n + 7, n - 9, 30]),
    "chunk_and_decodes": lambda n: ([n + 90, 37, 1, 16, 300, 0],
                                    [n + 2, 1, 1, 1, 1, 0]),
    "chunk_verify_decode": lambda n: ([n + 41, 70, 33], [n, 5, 1]),
}


@pytest.mark.parametrize("batch", list(PREFILL_BATCHES))
@pytest.mark.parametrize("geo,feats", [
    ("gqa4_nhd", {}),
    ("gqa4_nhd", dict(window=23, sinks=True, softcap=4.0)),
    ("mimo_192_128_packed", {}),
    ("wide_v_128_192_hnd", dict(sinks=True)),
    ("fp8_e4m3_head_packed", dict(window=40)),
    ("nb2_f16", {}),
])
def test_prefill_kernel_batches_match_reference(geo, feats, batch):
    """Batches whose max_seqlen_q takes the prefill kernel (a whole-sequence
    prefill, one long chunk at a longer context beside decodes, a chunk
    beside a verification and a decode) through the op against the float64
    reference, with and without lse (the lse kernel of the prefill plan):
    every row, decodes included, comes from the prefill kernel."""
    g = GEOS[geo]
    lens, qs = PREFILL_BATCHES[batch](prefill_tokens(g))
    c = Case(g, lens, qs, seed=len(batch) + len(geo), **feats)
    k = kt.unified_attention_kernel(c.q, c.k, c.v, c.max_q,
                                    softcap=c.softcap, sinks=c.sinks,
                                    k_descale=c.k_descale,
                                    v_descale=c.v_descale)
    assert is_prefill(k), k.name
    ws = c.workspace()
    c.run(ws=ws)
    c.check()
    plain = c.out.clone()
    c.out.fill_(7.25)
    view, buf = lse_view(c)
    c.run(ws=ws, lse=view)
    assert torch.equal(c.out, plain)
    check_lse(c, view, buf)


def test_one_workspace_serves_decode_then_prefill_then_decode():
    """A workspace of unified_attention_workspace_bytes (the larger of the
    two kernels' sizes: the decode kernel's, the prefill kernel needs none)
    through a split decode, a prefill batch, a mixed batch (prefill
    kernel) and split decodes again: each against the reference, the
    kernel of each as intended, the workspace's counters zero after
    every call."""
    g = GEOS["gqa4_nhd"]
    n = prefill_tokens(g)
    first = Case(g, [n], [n], seed=0)  # n rows: max_seqlen_q up to n
    ws = first.workspace()
    dec = kt.unified_attention_kernel(first.q, first.k, first.v, 1)
    pre = kt.unified_attention_kernel(first.q, first.k, first.v, 10 ** 6)
    assert not is_prefill(dec) and pre.name == dec.name + "_prefill"
    assert ws.numel() == max(dec.max_workspace_bytes,
                             pre.max_workspace_bytes) > 0
    assert pre.max_workspace_bytes == 0
    for i, (lens, qs, prefill) in enumerate([
            ([300], [1], False), ([n + 30, n], [n + 30, n], True),
            ([300, 12, 40], [1, 1, 3], False),
            ([n + 200, 300, 7], [n + 1, 1, 1], True),
            ([400], [1], False), ([300] * 3, [3] * 3, False)]):
        c = Case(g, lens, qs, seed=200 + i)
        assert is_prefill(kt.unified_attention_kernel(
            c.q, c.k, c.v, c.max_q)) == prefill, (lens, qs)
        c.run(ws=ws)
        c.check()
        # The split counters (the first 4-byte words) are back to zero.
        assert (ws[:256] == 0).all(), i


def test_cpp_kernel_keeps_a_plan_per_kernel(monkeypatch):
    """The C++ kernel's signature does not hold max_seqlen_q, so its entry
    for a signature holds the decode plan and the prefill plan apart (the
    side of the split the call's min(max_seqlen_q, T) is on): a prefill
    call after a decode call of the same tensor metadata is sent to the
    Python op (a miss) and gets the prefill kernel, and repeats of either
    are launched from C++ with their own kernel: the bits of the Python
    implementation's launch of that kernel, which differ from the other
    kernel's."""
    if kt.fast_path_info()["kernel"] != "c++":
        pytest.skip("the C++ kernel is not in use: "
                    + str(kt.fast_path_info()["reason"]))
    kt._cpp.clear()  # no plan of an earlier test at reused addresses
    g = GEOS["gqa4_nhd"]
    n = prefill_tokens(g)
    # One layout for every call: the caches, the block table's row stride
    # and the workspace are the first case's.
    base = Case(g, [n + 300, 300, 9], [n + 8, 1, 1], seed=50)
    ws = base.workspace()

    def case(seed, q_lens):
        d = Case(g, [n + 300, 300, 9], q_lens, seed=seed)
        d.k, d.v, d.allocs = base.k, base.v, base.allocs
        d.block_table = base.block_table
        return d

    def python_bits(d, prefill):
        """d's output from the Python implementation with the kernel of
        the given plan (the threshold moved out of the way)."""
        with monkeypatch.context() as m:
            m.setattr(_ta, "PREFILL_MIN_ROWS", 1 if prefill else 1 << 40)
            d.out.fill_(7.25)
            p, _ = _ta._impl(*d.args().values(), ws)
            assert is_prefill(p.kernel) == prefill
            return d.out.clone()

    calls = [("decode", [1, 1, 1], False, "miss"),
             ("prefill", [n + 8, 1, 1], True, "miss"),
             ("decode", [3, 1, 1], False, "hit"),
             ("prefill", [n, 2, 1], True, "hit"),
             ("decode", [n - 1, 1, 1], False, "hit")]
    for i, (what, q_lens, prefill, how) in enumerate(calls):
        d = case(60 + i, q_lens)
        info = kt.fast_path_info()
        d.run(ws=ws)
        after = kt.fast_path_info()
        assert (after["hits"] - info["hits"],
                after["misses"] - info["misses"]) == \
            ((1, 0) if how == "hit" else (0, 1)), (what, q_lens)
        d.check()
        got = d.out.clone()
        assert torch.equal(got, python_bits(d, prefill)), (what, q_lens)
        if prefill:  # the check above tells the kernels apart
            assert not torch.equal(got, python_bits(d, False))


def test_max_seqlen_q_above_the_tokens_is_clamped():
    """vLLM may pass a padded max_seqlen_q: no query is longer than q's
    rows, so the op takes min(max_seqlen_q, num_tokens) (the runtime
    refuses max_query_len > num_tokens)."""
    lens, qs = BATCHES["verify"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=3)
    c.run(max_seqlen_q=10 ** 6, max_seqlen_k=10 ** 6)
    c.check()


def test_rows_past_the_queries_are_not_written():
    """q / out padded for a CUDA graph (more rows than cu_seqlens_q[-1]):
    the padding rows keep their contents."""
    lens, qs = BATCHES["decode"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=5)
    T = c.T
    q = torch.cat([c.q, torch.randn(3, *c.q.shape[1:]).to(c.q.dtype)])
    out = torch.full((T + 3, *c.out.shape[1:]), 7.25, dtype=c.out.dtype)
    OP(**c.args(q=q, out=out), workspace=c.workspace())
    assert (out[T:] == 7.25).all()
    c.out = out[:T]
    c.check()


def test_no_torch_op_runs_on_the_host():
    """The op reads no tensor values on the host (no .item(), .max(),
    .cpu(): each would be a synchronization on CUDA): under a dispatch
    mode that records every torch op, the Python implementation runs none
    (the C++ kernel reads tensor metadata only, and sends every call it
    does not launch to this implementation)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    lens, qs = BATCHES["mixed"]
    c = Case(GEOS["fp8_e4m3_tensor"], lens, qs, seed=9, sinks=True)
    ws = c.workspace()
    c.run(ws=ws)  # plan made (its first call may allocate nothing either)
    c.out.fill_(7.25)
    with Record() as r:
        _ta._impl(*c.args().values(), ws)
    assert r.ops == [], r.ops
    c.check()


def test_cpp_kernel_launches_repeat_calls_with_their_own_values():
    """Where kvgen's C++ kernel is in use, a call whose tensor metadata it
    has seen checked is launched from C++ (fast_path_info's hits) with this
    call's pointers and scalars: another batch of the same layout, another
    window, soft-cap, scale and max_seqlen_q each give the reference's
    result and the same bits as the Python implementation."""
    if kt.fast_path_info()["kernel"] != "c++":
        pytest.skip("the C++ kernel is not in use: "
                    + str(kt.fast_path_info()["reason"]))
    g = GEOS["fp8_e4m3_head_packed"]
    lens, qs = BATCHES["mixed"]
    c = Case(g, lens, qs, seed=31, sinks=True, softcap=4.0, window=50)
    ws = c.workspace()
    c.run(ws=ws)  # the Python implementation; the plan goes to C++
    c.check()
    for i, kw in enumerate([dict(window=10), dict(softcap=2.5),
                            dict(window=-1, softcap=1.5)]):
        d = Case(g, [70, 3, 41, 22], [3, 3, 1, 8], seed=40 + i, sinks=True,
                 softcap=4.0, window=50)
        # The same caches, scales and sinks (the fixed tensors of the plan).
        d.k, d.v, d.allocs = c.k, c.v, c.allocs
        d.k_descale, d.v_descale, d.sinks = c.k_descale, c.v_descale, \
            c.sinks
        d.window = kw.get("window", d.window)
        d.softcap = kw.get("softcap", d.softcap)
        d.scale = 0.05 * (i + 1)
        # c's sequences 1-4 (contexts 60, 29, 64, 18), some shorter; the
        # block table's rows keep its strides (part of the signature).
        d.block_table = c.block_table[1:]
        d.seqused = torch.tensor([60, 29, 3, 18], dtype=torch.int32)
        before = kt.fast_path_info()["hits"]
        d.run(ws=ws, max_seqlen_q=d.max_q + 5)
        assert kt.fast_path_info()["hits"] == before + 1, kw
        d.check()
        got = d.out.clone()
        d.out.fill_(7.25)
        _ta._impl(*d.args().values(), ws)  # the Python implementation
        assert torch.equal(got, d.out), kw


#---------------------------------------------------------------------------
# torch.library: opcheck, fake, compile
#---------------------------------------------------------------------------

@pytest.mark.parametrize("geo,batch", [("gqa4_nhd", "verify"),
                                       ("fp8_e4m3_head_packed", "verify"),
                                       ("gqa4_nhd", "prefill")])
def test_opcheck(geo, batch):
    """opcheck with the decode kernel (verify) and the prefill kernel
    (a prefill batch of max_seqlen_q x G >= PREFILL_MIN_ROWS)."""
    lens, qs = (BATCHES[batch] if batch != "prefill" else
                PREFILL_BATCHES[batch](prefill_tokens(GEOS[geo])))
    c = Case(GEOS[geo], lens, qs, seed=13, sinks=True, window=30)
    assert is_prefill(kt.unified_attention_kernel(
        c.q, c.k, c.v, c.max_q, sinks=c.sinks, k_descale=c.k_descale,
        v_descale=c.v_descale)) == (batch == "prefill")
    ws = c.workspace()
    args = c.args()
    tests = None
    if c.k.element_size() == 1:
        # torch's test_schema compares the inputs before and after with
        # arithmetic that CPU float8 tensors lack ("mul_cpu_reduced_float"
        # not implemented for 'Float8_e4m3fn'): the other three run.
        tests = ("test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")
    for lse in (None, torch.zeros(c.T, c.g.Hq)):
        torch.library.opcheck(OP.default, tuple(args.values()),
                              {"workspace": ws, "lse": lse},
                              **({} if tests is None else
                                 {"test_utils": tests}))


def test_fake_on_meta_tensors():
    """The fake checks shapes, dtypes and devices without a kernel."""
    lens, qs = BATCHES["verify"]
    c = Case(GEOS["mimo_192_128_packed"], lens, qs, seed=2)
    meta = {n: (x.to("meta") if isinstance(x, torch.Tensor) else x)
            for n, x in c.args().items()}
    # The packed views stay views of one tensor on meta.
    kv = c.allocs[0].to("meta")
    meta["k"], meta["v"] = kv[..., :192], kv[..., 192:]
    ws = torch.empty(1 << 20, dtype=torch.uint8, device="meta")
    OP(**meta, workspace=ws)
    with pytest.raises(ValueError, match="out has shape"):
        OP(**{**meta, "out": meta["out"][:, :, :64]}, workspace=ws)
    OP(**meta, workspace=ws,
       lse=torch.empty(c.T, c.g.Hq, device="meta"))
    with pytest.raises(ValueError, match="lse has shape"):
        OP(**meta, workspace=ws,
           lse=torch.empty(c.T, c.g.Hq + 1, device="meta"))


@pytest.mark.parametrize("geo", ["gqa4_nhd", "mimo_192_128_packed",
                                 "nb2_f16"])
def test_workspace_bytes_of_fake_and_meta_tensors(geo):
    """unified_attention_workspace_bytes needs shapes, strides, dtypes and
    the device only: FakeTensors (torch.compile's; no memory, so no
    pointers: K and V are placed by their storage offsets) give the size of
    the real tensors, packed and [nb, 2, ...] views included, without
    reading a data pointer; meta tensors have no device, hence no kernel:
    ValueError saying so (it said "key_cache and value_cache overlap")."""
    import warnings
    from torch._subclasses.fake_tensor import FakeTensorMode
    c = Case(GEOS[geo], [5], [1], seed=1)
    want = c.workspace().numel()
    mode = FakeTensorMode()
    # Whole allocations converted, views taken in the mode: the packed
    # views stay views of one storage.
    allocs = [mode.from_tensor(a) for a in c.allocs]

    def same_view(t):
        a = next(f for f, r in zip(allocs, c.allocs)
                 if r.untyped_storage().data_ptr() ==
                 t.untyped_storage().data_ptr())
        return a.as_strided(t.shape, t.stride(), t.storage_offset())

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # data_ptr of a FakeTensor warns
        with mode:
            fq, fk, fv = mode.from_tensor(c.q), same_view(c.k), \
                same_view(c.v)
            assert kt.unified_attention_workspace_bytes(fq, fk, fv) == want
    m = {n: getattr(c, n).to("meta") for n in ("q", "k", "v")}
    with pytest.raises(ValueError, match="q is on the meta device"):
        kt.unified_attention_workspace_bytes(m["q"], m["k"], m["v"])


def test_torch_compile_fullgraph():
    lens, qs = BATCHES["mixed"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=4, sinks=True)
    ws = c.workspace()

    def step(q, out, cu, seqused, bt):
        kt.unified_attention(q, c.k, c.v, out, cu, c.max_q, seqused,
                             c.max_k, c.scale, True, [-1, -1], bt, 0.0,
                             None, None, None, c.sinks, workspace=ws)
        return out * 2

    f = torch.compile(step, fullgraph=True, backend="aot_eager")
    got = f(c.q, c.out, c.cu, c.seqused, c.block_table)
    c.check()
    assert torch.equal(got, c.out * 2)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("geo", ["gqa4_nhd", "mimo_192_128_packed",
                                 "fp8_e4m3_tensor", "nb2_f16"])
def test_workspace_bytes_under_torch_compile(geo, backend):
    """unified_attention_workspace_bytes inside torch.compile(fullgraph=
    True, dynamic=True), the workspace allocated in the graph: dynamo
    traced into the function and failed on the caches' untyped_storage()
    .device ("GetAttrVariable(...) has no type"). It is a Python int there
    (folded at trace time, equal to the eager size, packed / [nb, 2, ...]
    views, fp8 descales and sinks included), and the output is the
    reference's at two batch sizes of one compiled graph (num_tokens stays
    dynamic: the size does not depend on it)."""
    torch._dynamo.reset()
    g = GEOS[geo]
    lens, qs = BATCHES["verify"]
    c = Case(g, lens, qs, seed=26, sinks=True)
    want = c.workspace().numel()
    seen = []

    def step(q, out, cu, seqused, bt, sinks, kd, vd, max_q):
        n = kt.unified_attention_workspace_bytes(
            q, c.k, c.v, sinks=sinks, k_descale=kd, v_descale=vd)
        assert isinstance(n, int)
        seen.append(n)  # at trace time
        ws = torch.zeros(n, dtype=torch.uint8, device=q.device)
        torch.ops.kvgen.unified_attention(
            q, c.k, c.v, out, cu, max_q, seqused, c.max_k, c.scale, True,
            [-1, -1], bt, 0.0, None, kd, vd, sinks, ws)
        return out

    f = torch.compile(step, fullgraph=True, backend=backend, dynamic=True)
    for cut in (len(lens), 2):  # all sequences, then the first two
        c.out.fill_(7.25)
        t = int(c.cu[cut])
        f(c.q[:t], c.out[:t], c.cu[:cut + 1], c.seqused[:cut],
          c.block_table[:cut], c.sinks, c.k_descale, c.v_descale, c.max_q)
        c.check_rows(t)
    assert seen and all(n == want for n in seen), (seen, want)


#---------------------------------------------------------------------------
# Errors: raised before the launch, nothing written
#---------------------------------------------------------------------------

def _bad(c):
    lens = c.seqused.tolist()
    return [
        (dict(causal=False), ValueError, "causal=False"),
        (dict(q_descale=torch.ones(1)), ValueError, "q_descale"),
        (dict(window_size=[4, 2]), ValueError, "window_size"),
        (dict(window_size=[4]), ValueError, "window_size"),
        (dict(window_size=[-2, 0]), ValueError, "window_size"),
        (dict(softcap=-1.0), ValueError, "softcap"),
        (dict(max_seqlen_q=0), ValueError, "max_seqlen_q"),
        (dict(max_seqlen_k=-1), ValueError, "max_seqlen_k"),
        (dict(cu_seqlens_q=c.cu[:-1]), ValueError, "cu_seqlens_q has"),
        (dict(cu_seqlens_q=c.cu.long()), TypeError, "int32"),
        (dict(seqused_k=c.seqused[::2] if len(lens) > 2 else
              c.seqused.long()), (ValueError, TypeError), "seqused_k"),
        (dict(block_table=c.block_table[:1]), ValueError, "block_table has"),
        (dict(block_table=c.block_table.t()), ValueError,
         "block_table('s last dimension| has shape)"),
        (dict(sinks=torch.zeros(c.g.Hq, dtype=torch.bfloat16)), TypeError,
         "sinks has dtype"),
        (dict(sinks=torch.zeros(c.g.Hq + 1)), ValueError, "sinks has shape"),
        (dict(out=c.out[:, :, :-1]), ValueError, "out has shape"),
        # out's rows must be q's (no slot_mapping: unlike the cache ops'
        # rows, more rows than the tokens are refused, in C++ too).
        (dict(out=torch.cat([c.out, c.out[:1]])), ValueError,
         "out has shape"),
        (dict(q=c.q[:-1]), ValueError, "out has shape"),
        (dict(out=c.out.float()), TypeError, "out has dtype"),
        (dict(q=c.q.float()), TypeError, "q has dtype"),
        (dict(q=c.q[:, :3]), ValueError, "multiple"),
        (dict(k=c.k.view(torch.uint8) if c.k.element_size() == 1 else
              c.k.view(torch.int16)), TypeError, "k has dtype"),
        (dict(v=c.k, k=c.k), (ValueError,), "overlap|head|differ"),
        (dict(workspace=None), ValueError, "workspace is required"),
        (dict(k=c.k[0, 0, 0, 0]), ValueError, "k has shape"),
        (dict(q=c.q[:, :0], out=c.out[:, :0]), ValueError, "q has 0 heads"),
        # Bounds: left + 1 must fit int64; the scalars must be finite
        # float32 values (inf gave NaN rows).
        (dict(window_size=[2 ** 63 - 1, 0]), ValueError,
         r"window_size.*at most 2\^63 - 2"),
        (dict(softmax_scale=float("inf")), ValueError, "softmax_scale"),
        (dict(softmax_scale=float("nan")), ValueError, "softmax_scale"),
        (dict(softmax_scale=1e39), ValueError, "softmax_scale"),
        (dict(softcap=float("inf")), ValueError, "softcap"),
        (dict(softcap=float("nan")), ValueError, "softcap"),
    ]


@pytest.mark.parametrize("geo", ["gqa4_nhd", "fp8_e4m3_tensor"])
def test_bad_arguments_raise_and_write_nothing(geo):
    lens, qs = BATCHES["verify"]
    c = Case(GEOS[geo], lens, qs, seed=21, sinks=True)
    ws = c.workspace()
    c.run(ws=ws)  # a plan for the good signature exists
    for kw, exc, words in _bad(c):
        c.out.fill_(7.25)
        with pytest.raises(exc, match=words):
            OP(**{"workspace": ws, **c.args(**kw)})
        assert (c.out == 7.25).all(), kw
    if geo.startswith("fp8"):
        for name in ("k_descale", "v_descale"):
            with pytest.raises(TypeError, match=f"{name} is None"):
                OP(**c.args(**{name: None}), workspace=ws)
        with pytest.raises(ValueError, match="k_descale has shape"):
            OP(**c.args(k_descale=torch.ones(3)), workspace=ws)
        with pytest.raises(ValueError, match="both be per tensor"):
            OP(**c.args(k_descale=torch.ones(c.g.H)), workspace=ws)
    assert (c.out == 7.25).all()


def test_index_values_out_of_range_are_reported_not_followed():
    """Index values are read on the device only: a block id past the cache,
    a query start past q's rows, a context longer than its block-table row
    are not followed (nothing read or written outside the tensors: out sits
    inside a canary buffer) and check_errors reports them; the other
    sequences' rows are still right."""
    lens, qs = BATCHES["verify"]
    kt.check_errors("cpu")
    for what in ("block", "cu", "seqused"):
        c = Case(GEOS["gqa4_nhd"], lens, qs, seed=24)
        ws = c.workspace()
        buf = torch.full((c.T + 2, c.g.Hq, c.g.dv + 8), 7.25,
                         dtype=c.g.io)
        c.out = buf[1:1 + c.T, :, 4:4 + c.g.dv]
        want = c.want()
        bad = 0  # the sequence given a bad index
        if what == "block":
            c.block_table[0, 1] = c.nb + 5
        elif what == "cu":
            c.cu[1] = 1 << 30
            bad = None  # every query start from there on is wrong
        else:
            c.seqused[0] = c.block_table.shape[1] * c.g.bs + 1
        c.run(ws=ws)
        with pytest.raises(kvgen.KvgenError) as e:
            kt.check_errors("cpu")
        assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
        mask = torch.ones(buf.shape, dtype=torch.bool)
        mask[1:1 + c.T, :, 4:4 + c.g.dv] = False
        assert (buf[mask] == 7.25).all(), what
        if bad is not None:  # the other sequences' rows
            lo = int(c.cu[1])
            torch.testing.assert_close(c.out[lo:].double(), want[lo:],
                                       atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("what", ["max_seqlen_q", "cu_past_tokens",
                                  "both_with_a_bad_block"])
def test_query_errors_are_reported_by_their_cause(what):
    """A query longer than max_seqlen_q, or a cu_seqlens_q ending past
    q's rows, is not attended (rows unwritten, nothing outside out
    written) and check_errors names that cause: it said "a kernel skipped
    a slot >= num_blocks * block_size or a block id outside [0,
    num_blocks)" (the attention kernel set the same flag value for every
    bad index). The kernel now ors kvgen_error_bit bits
    (KVGEN_ERROR_BIT_QUERY_LEN / _QUERY_RANGE) and kvgen_context_check
    describes each bit set: a bad block id in the same launch is still
    reported beside the query's cause (an or, not a store)."""
    lens, qs = BATCHES["verify"]  # query lengths 2, 8, 5, 3
    kt.check_errors("cpu")
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=27)
    ws = c.workspace()
    buf = torch.full((c.T + 2, c.g.Hq, c.g.dv + 8), 7.25, dtype=c.g.io)
    c.out = buf[1:1 + c.T, :, 4:4 + c.g.dv]
    kw = {}
    if what == "cu_past_tokens":
        c.cu[-1] = c.T + 3
        words = [r"query range .*not within \[0, num_tokens\)",
                 r"cu_seqlens_q .*<= q.shape\[0\]"]
    else:
        kw = dict(max_seqlen_q=4)  # the second query has 8 tokens
        words = [r"longer than max_query_len", r"max_seqlen_q"]
    if what == "both_with_a_bad_block":
        c.block_table[0, 1] = c.nb + 5
        words.append(r"block id outside \[0, num_blocks\)")
    c.run(ws=ws, **kw)
    with pytest.raises(kvgen.KvgenError) as e:
        kt.check_errors("cpu")
    msg = str(e.value)
    assert e.value.status_name == "KVGEN_ERROR_INDEX_OUT_OF_RANGE"
    for w in words:
        assert __import__("re").search(w, msg), (w, msg)
    if what != "both_with_a_bad_block":
        assert "skipped a slot" not in msg, msg
    mask = torch.ones(buf.shape, dtype=torch.bool)
    mask[1:1 + c.T, :, 4:4 + c.g.dv] = False
    assert (buf[mask] == 7.25).all()
    bad = 1 if what != "cu_past_tokens" else 3  # the sequence not attended
    lo, hi = int(c.cu[bad]), min(int(c.cu[bad + 1]), c.T)
    assert (c.out[lo:hi] == 7.25).all()
    kt.check_errors("cpu")  # cleared


def test_workspace_too_small_or_strided_is_refused():
    lens, qs = BATCHES["split_decode"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=22)
    ws = c.workspace()
    # The suggested call names every argument the size depends on (it
    # omitted the descales, which an fp8 cache needs).
    call = (r"unified_attention_workspace_bytes\(q, k, v, softcap=\.\.\., "
            r"sinks=\.\.\., k_descale=\.\.\., v_descale=\.\.\.\)")
    with pytest.raises(ValueError, match=r"workspace holds 64 bytes.*" +
                       call):
        c.run(ws=ws[:64])
    with pytest.raises(ValueError, match="workspace is required.*" + call):
        OP(*c.args().values())
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        c.run(ws=torch.zeros(2 * ws.numel(), dtype=torch.uint8)[::2])
    assert (c.out == 7.25).all()
    c.run(ws=ws)
    c.check()


def test_workspace_sharing_bytes_with_another_argument_is_refused():
    """The kernel writes counters and partials into the workspace while it
    reads q, the caches, the index tensors and sinks and writes out and lse: a
    workspace that shares a byte with any of them raises ValueError before
    the launch (out placed inside it left its counters non-zero, and later
    correct calls with that workspace gave wrong rows). The first call with
    this workspace is a good one, so that the C++ kernel (where in use)
    holds a plan for the signature of the bad calls with out or q inside
    the workspace and must refuse them itself. Nothing is written: the
    workspace stays zero, out keeps its canary, and the same workspace then
    gives the reference's rows."""
    c = Case(GEOS["gqa4_nhd"], [300] * 3, [1] * 3, seed=25, sinks=True)
    n = c.workspace().numel()
    ob = c.out.numel() * c.out.element_size()
    buf = torch.zeros(n + ob + 64, dtype=torch.uint8)
    ws = buf[:n]

    def inside(at, like):  # a tensor like `like` at byte `at` of buf
        nbytes = like.numel() * like.element_size()
        return buf[at:at + nbytes].view(like.dtype).view(like.shape)

    c.run(ws=ws)  # a good call: the plan (C++: for this workspace pointer)
    c.check()
    assert not buf.any()
    good_out = c.out
    q_in = inside(n - 2, c.q)
    q_in.copy_(c.q)
    buf_q = buf.clone()
    buf[n - 2:].zero_()
    sinks = inside(n - 4, c.sinks)
    sinks.copy_(c.sinks)
    buf_s = buf.clone()
    buf[n - 4:].zero_()
    for name, kw, state in (
            ("out", dict(out=inside(0, c.out)), None),
            ("out", dict(out=inside(n - 2, c.out)), None),  # one element
            ("q", dict(q=q_in), buf_q),
            ("sinks", dict(sinks=sinks), buf_s),
            ("block_table", dict(block_table=ws[16:16 + 2 * 3 * 4].view(
                torch.int32).view(3, 2)), None),
            ("seqused_k", dict(seqused_k=ws[:12].view(torch.int32)), None),
            ("cu_seqlens_q", dict(cu_seqlens_q=ws[:16].view(torch.int32)),
             None)):
        if state is not None:
            buf.copy_(state)
        before = buf.clone()
        good_out.fill_(7.25)
        with pytest.raises(ValueError, match=f"workspace .* overlaps "
                           f"{name} "):
            c.run(ws=ws, **kw)
        assert torch.equal(buf, before), name
        assert (good_out == 7.25).all(), name
        buf.zero_()
    # lse (written by the kernel like out): a good call with an lse outside
    # the workspace first (the C++ kernel's plan for the lse signature),
    # then the same layout inside it.
    lse = torch.full((c.q.shape[0], c.q.shape[1]), 7.25)
    c.run(ws=ws, lse=lse)
    assert not buf.any()
    for at in (0, n - 4):  # all of it, its first element only
        lse.fill_(7.25)
        good_out.fill_(7.25)
        with pytest.raises(ValueError, match="workspace .* overlaps lse "):
            c.run(ws=ws, lse=inside(at, lse))
        assert not buf.any()
        assert (good_out == 7.25).all() and (lse == 7.25).all()
    # The caches: a workspace over their allocation.
    for name in ("k", "v"):
        alloc = c.allocs[0 if name == "k" else 1]
        with pytest.raises(ValueError, match=f"overlaps {name} "):
            c.run(ws=alloc.view(-1).view(torch.uint8)[:n])
    assert not buf.any()
    c.out = good_out
    c.run(ws=ws)
    c.check()


def test_out_or_lse_sharing_bytes_with_another_argument_is_refused():
    """out = q[..., :Dv] (an in-place attention) was accepted and gave rows
    computed from queries the kernel had already overwritten; out over a
    cache, sinks or an index tensor, and lse over q, likewise. The kernel
    writes out and lse while it reads the others: ValueError before the
    launch, nothing written. Each bad call has the strides of a good call
    made first, so the C++ kernel (where in use) holds a plan for its
    signature and must refuse it itself (it sends it to the Python op)."""
    c = Case(GEOS["mimo_192_128_packed"], [40, 8, 70], [2, 8, 5], seed=28,
             sinks=True)
    ws = c.workspace()
    g = c.g
    qbuf = c.q.clone()  # [T, Hq, Dk]: out = qbuf[..., :Dv] has q's strides
    good = torch.full_like(qbuf, 7.25)[..., :g.dv]
    c.run(ws=ws, q=qbuf, out=good)  # the plan of the signature
    good_rows = good.clone()
    lse = torch.full((c.T, g.Hq), 7.25)
    c.run(ws=ws, q=qbuf, out=good, lse=lse)
    alloc = c.allocs[0]  # the packed [nb, bs, H, Dk + Dv] cache

    def like(t, buf, at=0):  # a tensor of t's shape / strides inside buf
        return buf.as_strided(t.shape, t.stride(), buf.storage_offset() +
                              at)

    # sinks and a block table placed at the start of a buffer that out
    # covers too
    big = torch.zeros(qbuf.numel(), dtype=g.io)
    sinks_in = big.view(torch.float32)[:g.Hq]
    sinks_in.copy_(c.sinks)
    bt_in = like(c.block_table, big.view(torch.int32))
    bt_in.copy_(c.block_table)
    buf2 = torch.zeros(2 * qbuf.numel(), dtype=g.io)
    like(qbuf, buf2).copy_(qbuf)
    for name, kw in (
            ("q", dict(q=qbuf, out=qbuf[..., :g.dv])),
            # out's first element on q's last one
            ("q", dict(q=like(qbuf, buf2), out=like(good, buf2,
                                                    qbuf.numel() - 1))),
            ("k", dict(q=qbuf, out=like(good, alloc.view(-1)))),
            ("sinks", dict(q=qbuf, out=like(good, big), sinks=sinks_in)),
            ("block_table", dict(q=qbuf, out=like(good, big),
                                 block_table=bt_in)),
            ("lse", dict(q=qbuf, out=good, lse=like(
                lse, good.view(torch.float32)))),
            ("q", dict(q=qbuf, out=good, lse=like(
                lse, qbuf.view(torch.float32))))):
        q_before, k_before, big_before = (qbuf.clone(), alloc.clone(),
                                          big.clone())
        good.copy_(good_rows)
        lse.fill_(7.25)
        written = "lse" if name == "q" and "lse" in kw else "out"
        with pytest.raises(ValueError, match=f"{written} .* overlaps "
                           f"{name} "):
            c.run(ws=ws, **kw)
        assert torch.equal(qbuf, q_before), name
        assert torch.equal(alloc.view(torch.int16),
                           k_before.view(torch.int16)), name
        assert torch.equal(big, big_before), name
        assert torch.equal(good, good_rows) and (lse == 7.25).all(), name
        assert not ws.any()
    c.run(ws=ws, q=qbuf, out=good)
    assert torch.equal(good, good_rows)


def test_out_or_lse_with_elements_at_one_address_is_refused():
    """out or lse whose own rows or heads share memory (a broadcast,
    torch.empty(1, Hq, Dv).expand(T, Hq, Dv), or rows closer than a row)
    was accepted: the kernel's CTAs wrote several rows to one address and
    the last write was left. The runtime refuses a written view with
    elements at one address (KvgenError, INVALID_ARGUMENT), nothing
    written; vLLM's lse.t() (strides (1, T)) is served. Each bad call
    follows a good call of its signature's strides' kind (the C++ kernel
    launches through the same check)."""
    c = Case(GEOS["gqa4_nhd"], *BATCHES["verify"], seed=29)
    ws = c.workspace()
    g, T = c.g, c.T
    c.run(ws=ws)
    want = c.out.clone()
    row = torch.full((1, g.Hq, g.dv), 7.25, dtype=g.io)
    flat = torch.full((T * g.Hq * g.dv,), 7.25, dtype=g.io)
    lse_one = torch.full((1, g.Hq), 7.25)
    lse_flat = torch.full((T + g.Hq,), 7.25)
    for name, kw in (
            ("output", dict(out=row.expand(T, g.Hq, g.dv))),
            ("output", dict(out=torch.full((T, 1, g.dv), 7.25,
                                           dtype=g.io).expand(T, g.Hq,
                                                              g.dv))),
            # rows one head apart: row t + 1 is row t's second head
            ("output", dict(out=flat.as_strided((T, g.Hq, g.dv),
                                                (g.dv, g.dv, 1)))),
            ("lse", dict(lse=lse_one.expand(T, g.Hq))),
            ("lse", dict(lse=lse_flat.as_strided((T, g.Hq), (1, 1))))):
        with pytest.raises(kvgen.KvgenError,
                           match=f"'{name}' .* has elements at one address"):
            OP(**c.args(**{k: v for k, v in kw.items() if k != "lse"}),
               workspace=ws, lse=kw.get("lse"))
        assert (row == 7.25).all() and (flat == 7.25).all()
        assert (lse_one == 7.25).all() and (lse_flat == 7.25).all()
        assert not ws.any()
    # lse as vLLM's [Hq, T] transposed: strides (1, T), every element apart
    lse_t = torch.full((g.Hq, T), 7.25)
    c.out.fill_(7.25)
    OP(**c.args(), workspace=ws, lse=lse_t.t())
    assert torch.equal(c.out, want) and torch.isfinite(lse_t).all()


def test_block_table_of_no_columns_and_caches_of_no_blocks():
    """The fake and the real op agree (docs/attention.md: block-table
    entries past ceil(seq_len / block_size) are never read; a row without
    keys is 0). A block_table of 0 columns (torch gives it no memory) with
    every context 0 is served: q's rows are 0, no report (the real op
    raised KvgenError "'block_tables' is NULL" where the fake accepted);
    a context above 0 with it is reported, its rows 0. Caches of 0 blocks
    raise ValueError naming k in both (the real op raised KvgenError
    "num_blocks = 0")."""
    c = Case(GEOS["gqa4_nhd"], [0, 0], [1, 2], seed=26)
    ws = c.workspace()
    bt0 = torch.zeros(2, 0, dtype=torch.int32)
    kt.check_errors("cpu")
    for repeat in range(2):  # the second: C++ kernel's per-call path too
        c.out.fill_(7.25)
        OP(**c.args(block_table=bt0), workspace=ws)
        assert (c.out == 0).all()
    kt.check_errors("cpu")
    c.out.fill_(7.25)
    OP(**c.args(block_table=bt0,
                seqused_k=torch.tensor([0, 3], dtype=torch.int32)),
       workspace=ws)
    with pytest.raises(kvgen.KvgenError, match="INDEX_OUT_OF_RANGE"):
        kt.check_errors("cpu")
    assert (c.out == 0).all()
    meta = {n: (x.to("meta") if isinstance(x, torch.Tensor) else x)
            for n, x in c.args(block_table=bt0).items()}
    OP(**meta, workspace=ws.to("meta"))  # the fake accepts it too
    empty = dict(k=c.k[:0], v=c.v[:0])
    for args, w in ((c.args(**empty), ws), ({**meta, "k": meta["k"][:0],
                                            "v": meta["v"][:0]},
                                           ws.to("meta"))):
        c.out.fill_(7.25)
        with pytest.raises(ValueError, match=r"k has shape \[0, .*at least "
                           "one block"):
            OP(**args, workspace=w)
    assert (c.out == 7.25).all()


def test_descales_are_ignored_for_a_bf16_cache():
    """vLLM's Triton backend passes expand()ed descales whatever the cache;
    a bf16 cache reads none (as vLLM's kernel)."""
    lens, qs = BATCHES["decode"]
    c = Case(GEOS["gqa4_nhd"], lens, qs, seed=23)
    c.run(k_descale=torch.tensor(9.0).expand(6, 2),
          v_descale=torch.tensor(9.0).expand(6, 2))
    c.check()


#---------------------------------------------------------------------------
# CUDA only
#---------------------------------------------------------------------------

def _decode_case(B, q_len, seed, device="cuda", lens=None):
    lens = lens or [int(x) for x in torch.randint(
        q_len, 700, (B,), generator=torch.Generator().manual_seed(seed))]
    return Case(GEOS["mimo_192_128_packed"], lens, [q_len] * B, seed=seed,
                device=device, sinks=True)


@cuda
def test_cuda_no_synchronization():
    c = _decode_case(4, 1, 30)
    ws = c.workspace()
    c.run(ws=ws)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        c.run(ws=ws)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    c.check()


@cuda
@pytest.mark.parametrize("q_len", [1, 3])
def test_cuda_graphs_at_several_batch_sizes(q_len):
    """Graphs captured at batch sizes 1, 4 and 16 (decode or a 3-token
    verification) with one workspace, replayed in a different order after
    eager launches of other batch shapes, each replay bit for bit equal to
    an eager launch of the same inputs (and to the reference)."""
    sizes = [1, 4, 16]
    cases = {B: _decode_case(B, q_len, 40 + B) for B in sizes}
    ws = cases[1].workspace()
    eager = {}
    for B, c in cases.items():
        c.run(ws=ws)  # compiles; the eager result
        eager[B] = c.out.clone()
    torch.cuda.synchronize()
    graphs = {}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for B, c in cases.items():
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                c.run(ws=ws)
            graphs[B] = g
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for B in [16, 1, 4, 1, 16]:
            # Other shapes run eagerly in between (a long split decode, a
            # prefill), on the workspace's stream.
            other = _decode_case(2, 5, 90 + B, lens=[650, 400])
            other.run(ws=ws)
            c = cases[B]
            c.out.fill_(7.25)
            graphs[B].replay()
            stream.synchronize()
            assert torch.equal(c.out, eager[B]), f"batch {B}"
            other.check()
    for c in cases.values():
        c.check()


def test_prefill_threshold_on_cuda_needs_enough_ctas():
    """On CUDA the prefill kernel also needs PREFILL_MIN_CTAS CTAs from one
    sequence: MiMo (64 q / 4 kv heads, G 16) takes it from 125 tokens (4 x
    32 tiles of 64 rows), not from 8 (a batch-1 verification: 8 CTAs);
    Llama (32 / 8, G 4) from 241 tokens (8 x 16 tiles); on the CPU the rows
    alone decide (8 and 32 tokens). Shapes only: stand-ins, no tensors."""
    from types import SimpleNamespace as NS
    from kvgen import _torch_attention as ua

    def q_k(hq, h, dev):
        return (NS(shape=(1, hq, 128), device=NS(type=dev)),
                NS(shape=(10, 16, h, 128)))
    assert ua._prefill_min_tokens(*q_k(64, 4, "cpu")) == 8
    assert ua._prefill_min_tokens(*q_k(64, 4, "cuda")) == 125
    assert ua._prefill_min_tokens(*q_k(32, 8, "cpu")) == 32
    assert ua._prefill_min_tokens(*q_k(32, 8, "cuda")) == 241
    for hq, h in ((64, 4), (32, 8), (8, 8), (64, 8), (16, 1)):
        q, k = q_k(hq, h, "cuda")
        m = ua._prefill_min_tokens(q, k)
        g = hq // h
        ctas = lambda n: h * -(-n * g // 64)  # noqa: E731
        assert ctas(m) >= ua.PREFILL_MIN_CTAS and m * g >= ua.PREFILL_MIN_ROWS
        assert m == 1 or ctas(m - 1) < ua.PREFILL_MIN_CTAS or \
            (m - 1) * g < ua.PREFILL_MIN_ROWS


def test_one_workspace_serves_a_random_sequence_of_batches():
    """As an engine's steps: one workspace of unified_attention_workspace_bytes
    through 14 random batches (1-5 sequences; each a decode, a 2-8 token
    verification or a chunk / prefill of up to 3 prefill thresholds,
    contexts up to 400 tokens), so calls alternate between the decode and
    the prefill kernel and between split and unsplit launches in no fixed
    order: every call against the reference, its kernel as the rule says,
    the split counters zero after it."""
    import random
    g = GEOS["gqa4_nhd"]
    n = prefill_tokens(g)
    first = Case(g, [n], [n], seed=0)
    ws = first.workspace()
    rng = random.Random(1234)
    kinds = set()
    for i in range(14):
        lens, qs = [], []
        for _ in range(rng.randint(1, 5)):
            kind = rng.choice(("decode", "verify", "prefill"))
            q = {"decode": 1, "verify": rng.randint(2, 8),
                 "prefill": rng.randint(1, 3 * n)}[kind]
            lens.append(q + rng.randint(0, 400 - min(q, 400)))
            qs.append(q)
        c = Case(g, lens, qs, seed=500 + i)
        k = kt.unified_attention_kernel(c.q, c.k, c.v, c.max_q)
        kinds.add(is_prefill(k))
        assert is_prefill(k) == (min(c.max_q, sum(qs)) >= n), (lens, qs)
        c.run(ws=ws)
        c.check()
        assert (ws[:256] == 0).all(), i
    assert kinds == {True, False}  # both kernels served the workspace
