"""torch.ops.kvgen.unified_attention: vLLM's Triton `unified_attention`
arguments on kvgen's paged attention kernel (kv.paged_attention,
docs/attention.md). Registered by kvgen.torch (its _register); the public
functions are kvgen.torch.unified_attention,
kvgen.torch.unified_attention_workspace_bytes and
kvgen.torch.unified_attention_kernel (which kernel a call launches).

    ws = torch.zeros(kvgen.torch.unified_attention_workspace_bytes(
        q, k, v, softcap=0.0, sinks=None), dtype=torch.uint8,
        device=q.device)                      # once per stream, zeroed
    torch.ops.kvgen.unified_attention(
        q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, True, [-1, -1], block_table, 0.0, None, k_descale,
        v_descale, sinks, ws)                 # lse=... (optional, last)

Arguments (the names and order of vLLM's
vllm/attention/ops/triton_unified_attention.py, then kvgen's workspace):
  q [num_tokens, num_q_heads, Dk] bf16 / f16, last dim contiguous (any
      token / head strides)
  k [num_blocks, block_size, num_kv_heads, Dk], v [..., Dv]: the caches.
      Their layout comes from the views (kvgen/_views.py): NHD, HND (a
      permute of [nb, H, bs, D]), the K and V column ranges of one packed
      [nb, bs, H, Dk + Dv] allocation (vLLM's DiffKV backends; same
      strides, V starting Dk elements after K), the halves of an
      [nb, 2, ...] allocation, padded blocks; num_blocks >= 1
      (ValueError otherwise). Or, told by k having 5 dims, vLLM's legacy
      pair as kvgen.torch's reshape_and_cache writes it: k [num_blocks,
      num_kv_heads, Dk / x, block_size, x] (x = 16 bytes of the element),
      v [num_blocks, num_kv_heads, Dv, block_size], or that k with ROCm
      aiter's shuffled v [num_blocks, num_kv_heads, block_size / x, Dv,
      x]; any strides LegacyCacheGeometry expresses. Other shapes raise
      ValueError naming k or v (_cache_dims). dtype bf16 / f16 / f32, or a
      torch float8 dtype (e4m3fn, e5m2, and their fnuz variants) for an fp8
      cache; a uint8 cache is refused (view it as the float8 dtype it
      holds, as vLLM's Triton backend does).
  out! [num_tokens, num_q_heads, Dv], q's dtype; rows of tokens that no
      sequence's query covers are not written. It must share no byte with
      another argument (q, the caches, sinks, the descales, the index
      tensors, lse, the workspace): ValueError before the launch; nor may
      two of its elements share an address (a broadcast such as
      expand(), rows closer than a row): KvgenError, nothing launched.
  cu_seqlens_q [>= num_seqs + 1] int32, contiguous: query start of each
      sequence (vLLM's query_start_loc).
  max_seqlen_q: the longest query (>= every cu_seqlens_q[s+1] -
      cu_seqlens_q[s]; it sizes the grid: a smaller value leaves rows
      unwritten). Values above num_tokens are taken as num_tokens (no
      query is longer). Must be >= 1 when there are tokens. It also picks
      the kernel per call: the prefill plan's when min(max_seqlen_q,
      num_tokens) x G >= PREFILL_MIN_ROWS (G = num_q_heads /
      num_kv_heads), else the decode plan's (unified_attention_kernel);
      both compute the same rows, and one workspace serves both.
  seqused_k [num_seqs] int32, contiguous: context length of each sequence,
      its new tokens included; num_seqs = seqused_k.shape[0].
  max_seqlen_k: the longest context (a hint that sizes split-KV: longer
      contexts are still attended in full).
  softmax_scale: multiplies q . k.
  causal: must be True (vLLM's Triton kernel asserts it too): query token i
      of a sequence with n query tokens and context L sits at position
      L - n + i and attends keys j <= that position.
  window_size [left, right]: left >= 0 attends keys j > p - left - 1 (left
      + 1 keys, the query's own included: kvgen's sliding_window = left +
      1), -1 = no window; right must be -1 or 0 (causal).
  block_table [>= num_seqs, max_blocks] int32, last dim contiguous (any
      row stride). max_blocks may be 0 (then every seqused_k must be 0:
      a longer context is reported through check_errors, its rows 0).
  softcap: > 0 turns logits x into softcap * tanh(x / softcap); 0 = off.
  q_descale: must be None (fp8 queries are not supported; vLLM's kernel
      asserts the same).
  k_descale, v_descale: float32 dequantization scales of an fp8 cache:
      per tensor (one element, or any shape whose strides are all 0, e.g.
      vLLM's layer._k_scale.expand(num_seqs, num_kv_heads)) or per kv head
      ([num_kv_heads], or [..., num_kv_heads] with stride 1 there and 0
      elsewhere). Ignored (may be None) for bf16 / f16 / f32 caches.
  sinks [num_q_heads] float32, contiguous, or None: per-head sink logits
      that join the softmax denominator (gpt-oss, MiMo-V2).
  workspace!: kvgen's split-KV workspace (required: None raises
      ValueError; it is declared optional only so that it can follow
      sinks=None as a positional argument, which costs torch's dispatcher
      about 1.5 us less per call than a keyword one), a contiguous tensor of
      at least unified_attention_workspace_bytes(...) bytes on q's device,
      zeroed once (torch.zeros) and then left alone; the kernel leaves its
      counters zero after every launch. One per stream (launches that can
      run at the same time must not share one; on the CPU, one per
      thread); the same one serves every batch shape and every CUDA graph
      captured on that stream (docs/attention.md, "The workspace
      contract"). It must share no byte with another argument (out, q,
      the caches, sinks, the descales, the index tensors, lse):
      ValueError.

  lse! (optional, last: positional calls without it are unchanged):
      None, or a float32 [num_tokens, num_q_heads] tensor on q's device
      with any strides (vLLM's [num_q_heads, num_tokens] LSE passed as
      lse.t() too), sharing no byte with another argument (ValueError),
      no two of its elements at one address (KvgenError). Each row's
      log-sum-exp is written to it: ln(sum_j
      exp(x_j) + exp(sinks[h])) over the keys j the row attends, x_j the
      logit the softmax takes (softmax_scale * q . k_j with k's descale,
      soft-capped), the sink term only with sinks: the natural log of the
      denominator that normalized the row's output, so (out, lse) merge
      with other launches' (vLLM's merge_attn_states); -inf for a row
      without keys and sink (docs/attention.md, "The log-sum-exp"). A
      call with lse uses the kernel with kv.paged_attention's lse option
      (another kernel than without; the same workspace size).

The op's CPU / CUDA kernel is kvgen.torch's C++ one (_torch_fast.cpp, with
this schema's roles, ROLES below) where it is in use: it launches a call
whose tensor metadata it has seen checked, with the call's pointers, token
and sequence counts and scalars, and sends every other call to
kvgen::_unified_attention_py (_slow: _impl, then the plan goes to the C++
kernel). Otherwise _impl is the kernel. Pass the arguments positionally:
by keyword, torch's dispatcher spends several microseconds more per call
(bench/unified_attention_overhead.py).

Nothing reads a tensor's values on the host: no synchronization, so the op
can be captured in CUDA graphs (call it once per shape before capturing:
that call JIT-compiles the kernel). Bad arguments raise ValueError /
TypeError before the launch (nothing written). Index values (cu_seqlens_q,
seqused_k, block_table entries) are checked on the device by kvgen's
checked kernels and reported through kvgen.torch.check_errors (see
docs/torch.md).
"""

import ctypes
import operator

import torch

from . import torch as _kt
from ._views import (FLOAT_DTYPES, FP8_TORCH, CacheGeometry,
                     LegacyCacheGeometry, dtype_name, legacy_chunk,
                     legacy_dims, span_bytes)

SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor cu_seqlens_q, "
    "int max_seqlen_q, Tensor seqused_k, int max_seqlen_k, "
    "float softmax_scale, bool causal, int[] window_size, "
    "Tensor block_table, float softcap, Tensor? q_descale, "
    "Tensor? k_descale, Tensor? v_descale, Tensor? sinks=None, "
    "Tensor(b!)? workspace=None, Tensor(c!)? lse=None) -> ()")

_FP8 = tuple(getattr(torch, n) for n in FP8_TORCH if hasattr(torch, n))

#: Query rows of the longest query, min(max_seqlen_q, num_tokens) x G (G =
#: num_q_heads / num_kv_heads: the rows of one query token), from which a
#: call launches the prefill plan's kernel (kv.paged_attention option
#: prefill: 64 rows per CTA, 16 per warp, each K/V tile staged once in
#: shared memory for all of them, no split-KV) instead of the decode plan's
#: (16 rows per CTA, split-KV). 128 rows = two prefill CTA tiles: below
#: that a prefill CTA holds one partly filled tile and gains little over
#: the decode kernel's re-reads, while the decode kernel's split-KV still
#: spreads a few long contexts over the GPU. A starting point, not a
#: measurement: tune it on the H200 (bench/bench_attention.py's prefill
#: and decode rows) and change it here only; _torch_fast.cpp takes the
#: split from the plans this module hands it (_prefill_min_tokens).
PREFILL_MIN_ROWS = 128

#: On CUDA devices also: one sequence of the longest query's length gives
#: the prefill kernel at least this many CTAs (num_kv_heads x its 64-row
#: tiles), about one per SM of an H100 / H200 (132). The prefill plan never
#: splits a context, so a short query over a long context on few CTAs
#: (batch-1 speculative verification of 8 tokens at G = 16 is 128 rows: 8
#: CTAs for MiMo) would walk all its keys on a few SMs, where the decode
#: plan splits them over the GPU. The rule reads no batch size: a batch of
#: many such queries takes the decode kernel too. Not measured; tune with
#: PREFILL_MIN_ROWS.
PREFILL_MIN_CTAS = 128

#: Query rows of one prefill-plan CTA (128 threads: 4 warps x 16 rows).
_PREFILL_CTA_ROWS = 64


def _prefill_min_tokens(q, k):
    """The smallest min(max_seqlen_q, num_tokens) that takes the prefill
    kernel for q's and k's heads: ceil(PREFILL_MIN_ROWS / G) and, on CUDA
    devices, the smallest m with num_kv_heads x ceil(m G / 64) >=
    PREFILL_MIN_CTAS."""
    h = max(1, _kv_heads(k))
    g = max(1, q.shape[1] // h)
    m = -(-PREFILL_MIN_ROWS // g)
    if q.device.type == "cuda":
        tiles = -(-PREFILL_MIN_CTAS // h)  # 64-row tiles per kv head
        m = max(m, (tiles - 1) * _PREFILL_CTA_ROWS // g + 1)
    return m


def _uses_prefill(q, k, max_seqlen_q):
    """True when a call of these q, k and max_seqlen_q launches the prefill
    plan's kernel: min(max_seqlen_q, num_tokens) x G >= PREFILL_MIN_ROWS.
    Host-known values only (shapes and the int argument): no tensor is
    read. False for shapes the checks refuse (they raise later)."""
    if q.dim() != 3 or k.dim() not in (4, 5) or _kv_heads(k) < 1 or \
            not isinstance(max_seqlen_q, int):
        return False
    return min(max_seqlen_q, q.shape[0]) >= _prefill_min_tokens(q, k)


_WHO = "kvgen.unified_attention"


def _err(msg):
    return f"{_WHO}: {msg}"


def _kv_heads(k):
    """num_kv_heads of a k cache view of either form (_cache_dims), from
    its shape only (unchecked; any object with .shape)."""
    return k.shape[1] if len(k.shape) == 5 else k.shape[2]


def _cache_dims(k, v):
    """(num_kv_heads, head_size_k, head_size_v) of the caches, from their
    shapes only; ValueError naming k or v. Two forms, told apart by k's
    dimensions: 4-D k and v [num_blocks, block_size, num_kv_heads,
    head_size] (the layout from their strides: CacheGeometry), or 5-D k,
    vLLM's legacy [num_blocks, H, Dk / x, block_size, x] (x = 16 bytes of
    the element), with v vLLM's legacy [num_blocks, H, Dv, block_size] or
    aiter's shuffled [num_blocks, H, block_size / x, Dv, x]
    (LegacyCacheGeometry, the geometry of kvgen.torch's
    reshape_and_cache)."""
    if k.dim() == 5:
        dims = legacy_dims(k, v, ("k", "v"), shuffled_v=True, prefix=_WHO)
        legacy_chunk(k, v, ("k", "v"), prefix=_WHO)
        return dims
    for name, t in (("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(_err(
                f"{name} has shape {list(t.shape)}, need [num_blocks, "
                "block_size, num_kv_heads, head_size] (or a 5-D k: vLLM's "
                "legacy [num_blocks, num_kv_heads, head_size / x, "
                "block_size, x])"))
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(_err(
            f"k {list(k.shape)} and v {list(v.shape)} differ in [num_blocks,"
            " block_size, num_kv_heads]"))
    return k.shape[2], k.shape[3], v.shape[3]


def _geometry(k, v, dtype, scale):
    """The CacheGeometry of the caches' form (_cache_dims); k and v may be
    _StandIns (len(shape), not dim())."""
    if len(k.shape) == 5:
        return LegacyCacheGeometry(k, v, dtype, scale, shuffled_v=True,
                                   names=("k", "v"), prefix=_WHO)
    return CacheGeometry(k, v, dtype, scale)


class _AttnPlan(_kt._Plan):
    """kvgen.torch's _Plan of a kv.paged_attention kernel (kept in its
    kernel table like the other ops' plans) and what the op checks against
    per call: need (the kernel's max_workspace_bytes), scaled (an fp8
    cache: the descales are read), spans (_spans_of_plan)."""
    __slots__ = ("need", "scaled", "spans")


def _descale_kind(name, s, heads):
    """'per_tensor' or 'per_head' for a descale tensor (see the module
    doc), from its shape and strides only."""
    if s.dtype != torch.float32:
        raise TypeError(_err(f"{name} has dtype {s.dtype}, need float32"))
    if s.numel() == 1 or all(st == 0 for st in s.stride()):
        return "per_tensor"
    if s.dim() >= 1 and s.shape[-1] == heads and s.stride(-1) == 1 and \
            all(st == 0 for st in s.stride()[:-1]):
        return "per_head"
    raise ValueError(_err(
        f"{name} has shape {list(s.shape)} and strides {list(s.stride())}: "
        f"need one scale (1 element, or all strides 0, e.g. "
        f"scale.expand(num_seqs, num_kv_heads)) or one per kv head "
        f"([{heads}], or [..., {heads}] with strides 0 before the last)"))


def _check_cache_dtypes(k, v):
    """The kvgen dtype of the caches (ValueError / TypeError otherwise)."""
    if k.dtype != v.dtype:
        raise TypeError(_err(f"k has dtype {k.dtype}, v {v.dtype}"))
    name = dtype_name(k)
    if name in FLOAT_DTYPES:
        return FLOAT_DTYPES[name]
    if name in FP8_TORCH:
        return FP8_TORCH[name]
    if k.dtype in (torch.uint8, torch.int8):
        raise TypeError(_err(
            f"k has dtype {k.dtype}: view an fp8 cache as the float8 dtype "
            "it holds (k.view(torch.float8_e4m3fn) or float8_e5m2)"))
    raise TypeError(_err(f"k has dtype {k.dtype}, need bfloat16, float16, "
                         "float32 or a float8 dtype"))


def _check_kernel_args(q, k, v, softcap, sinks, k_descale, v_descale):
    """What the kernel depends on: returns (cache dtype, scale kind)."""
    heads, dk, _ = _cache_dims(k, v)
    if q.dim() != 3:
        raise ValueError(_err(f"q has shape {list(q.shape)}, need "
                              "[num_tokens, num_q_heads, head_size_k]"))
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(_err(f"q has dtype {q.dtype}, need bfloat16 or "
                             "float16"))
    if q.shape[2] > 1 and q.stride(2) != 1:
        raise ValueError(_err(f"q's last dimension must be contiguous "
                              f"(stride {q.stride(2)}, need 1)"))
    if k.shape[0] < 1:
        raise ValueError(_err(
            f"k has shape {list(k.shape)}: the caches need at least one "
            "block (kvgen's kernel takes num_blocks >= 1)"))
    if q.shape[2] != dk:
        raise ValueError(_err(f"q has head_size {q.shape[2]}, k {dk}"))
    if heads < 1 or q.shape[1] < 1 or q.shape[1] % heads:
        raise ValueError(_err(
            f"q has {q.shape[1]} heads, need a positive multiple of the "
            f"caches' {heads} kv heads"))
    if not isinstance(softcap, (int, float)) or \
            not 0 <= softcap <= _F32_MAX:
        raise ValueError(_err(f"softcap = {softcap!r}: need >= 0 (0 = "
                              "off) and a finite float32"))
    dtype = _check_cache_dtypes(k, v)
    _kt._same_device(q, k=k, v=v, sinks=sinks)
    if sinks is not None:
        if sinks.dtype != torch.float32:
            raise TypeError(_err(f"sinks has dtype {sinks.dtype}, need "
                                 "float32 (sinks.float(), once)"))
        if sinks.shape != (q.shape[1],) or \
                (q.shape[1] > 1 and sinks.stride(0) != 1):
            raise ValueError(_err(
                f"sinks has shape {list(sinks.shape)}, need a contiguous "
                f"[{q.shape[1]}] (one per query head)"))
    if k.dtype not in _FP8:
        return dtype, "none"
    kinds = set()
    for name, s in (("k_descale", k_descale), ("v_descale", v_descale)):
        if s is None:
            raise TypeError(_err(
                f"{name} is None, but the cache is {k.dtype}: pass its "
                "float32 dequantization scale"))
        kinds.add(_descale_kind(name, s, heads))
    if len(kinds) > 1:
        raise ValueError(_err("k_descale and v_descale must both be per "
                              "tensor or both per kv head"))
    _kt._same_device(q, k_descale=k_descale, v_descale=v_descale)
    return dtype, kinds.pop()


#: The largest window_size[0]: kvgen's sliding_window (left + 1) is an int64.
_MAX_LEFT = (1 << 63) - 2
#: The largest finite float32 (softmax_scale and softcap are float32
#: fields): larger values, inf and NaN are refused.
_F32_MAX = 3.4028234663852886e38


def _window(window_size):
    """kvgen's sliding_window (keys per query, 0 = all) of vLLM's
    window_size [left, right]."""
    if len(window_size) != 2:
        raise ValueError(_err(f"window_size = {list(window_size)}: need "
                              "[left, right]"))
    left, right = (int(x) for x in window_size)
    if not -1 <= left <= _MAX_LEFT or right not in (-1, 0):
        raise ValueError(_err(
            f"window_size = [{left}, {right}]: left must be >= -1 (-1 = no "
            "window) and at most 2^63 - 2 (left + 1 keys is an int64), "
            "right -1 or 0 (the attention is causal)"))
    return left + 1 if left >= 0 else 0


def _index(name, t, dims, anchor):
    if t.dtype != torch.int32:
        raise TypeError(_err(f"{name} has dtype {t.dtype}, need int32"))
    if t.dim() != dims:
        raise ValueError(_err(f"{name} has shape {list(t.shape)}, need "
                              f"{dims} dimension{'s' if dims > 1 else ''}"))
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(_err(f"{name}'s last dimension must be contiguous "
                              f"(stride {t.stride(-1)})"))
    if t.device != anchor.device:
        raise ValueError(_err(f"{name} is on {t.device}, q on "
                              f"{anchor.device}"))


def _check(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
           softmax_scale, causal, window_size, block_table, softcap,
           q_descale, k_descale, v_descale, sinks, workspace, lse=None):
    """Every check that needs no kernel (the fake implementation; the real
    one runs it when its per-call test fails, for the message). Returns
    (cache dtype, scale kind, sliding_window)."""
    if not causal:
        raise ValueError(_err("causal=False is not supported (kvgen's "
                              "kernel is causal, as vLLM's Triton kernel)"))
    if q_descale is not None:
        raise ValueError(_err("q_descale must be None (fp8 queries are not "
                              "supported, as in vLLM's Triton kernel)"))
    dtype, scale = _check_kernel_args(q, k, v, softcap, sinks, k_descale,
                                      v_descale)
    dv = _cache_dims(k, v)[2]
    if out.dim() != 3 or out.shape[0] != q.shape[0] or \
            out.shape[1] != q.shape[1] or out.shape[2] != dv:
        raise ValueError(_err(
            f"out has shape {list(out.shape)}, need [{q.shape[0]}, "
            f"{q.shape[1]}, {dv}] (q's tokens and heads, v's head "
            "size)"))
    if out.dtype != q.dtype:
        raise TypeError(_err(f"out has dtype {out.dtype}, q {q.dtype}"))
    if out.shape[2] > 1 and out.stride(2) != 1:
        raise ValueError(_err(f"out's last dimension must be contiguous "
                              f"(stride {out.stride(2)}, need 1)"))
    _kt._same_device(q, out=out)
    if lse is not None:
        if lse.dtype != torch.float32:
            raise TypeError(_err(f"lse has dtype {lse.dtype}, need float32"))
        if lse.dim() != 2 or lse.shape[0] != q.shape[0] or \
                lse.shape[1] != q.shape[1]:
            raise ValueError(_err(
                f"lse has shape {list(lse.shape)}, need [{q.shape[0]}, "
                f"{q.shape[1]}] (q's tokens and heads)"))
        _kt._same_device(q, lse=lse)
    _index("seqused_k", seqused_k, 1, q)
    _index("cu_seqlens_q", cu_seqlens_q, 1, q)
    _index("block_table", block_table, 2, q)
    ns = seqused_k.shape[0]
    if cu_seqlens_q.shape[0] < ns + 1:
        raise ValueError(_err(
            f"cu_seqlens_q has {cu_seqlens_q.shape[0]} entries, need >= "
            f"num_seqs + 1 = {ns + 1} (num_seqs = seqused_k.shape[0])"))
    if block_table.shape[0] < ns:
        raise ValueError(_err(
            f"block_table has {block_table.shape[0]} rows, need >= num_seqs "
            f"= {ns}"))
    if not -_F32_MAX <= softmax_scale <= _F32_MAX:
        raise ValueError(_err(f"softmax_scale = {softmax_scale!r}: need a "
                              "finite float32"))
    if max_seqlen_k < 0:
        raise ValueError(_err(f"max_seqlen_k = {max_seqlen_k}: need >= 0"))
    if max_seqlen_q < 1 and q.shape[0] > 0 and ns > 0:
        raise ValueError(_err(
            f"max_seqlen_q = {max_seqlen_q}: need >= 1 (the longest query; "
            "a smaller value leaves output rows unwritten)"))
    window = _window(window_size)
    if workspace is None:
        raise ValueError(_err(_NO_WORKSPACE))
    if workspace.device != q.device:
        raise ValueError(_err(f"workspace is on {workspace.device}, q on "
                              f"{q.device}"))
    if not workspace.is_contiguous():
        raise ValueError(_err("workspace must be contiguous"))
    return dtype, scale, window


def _row_span(t):
    """(stride(0), elements from a row's first element to the end of its
    last) of a view whose dimension 0 varies per call; span 0 when a row
    has no element."""
    shape, st = t.shape[1:], t.stride()[1:]
    if any(n == 0 for n in shape):
        return t.stride(0), 0
    return t.stride(0), sum((n - 1) * x for n, x in zip(shape, st)) + 1


def _spans_of_plan(q, k, v, out, block_table, sinks, k_descale, v_descale,
                   scaled, lse):
    """What _spans_of_call needs of a signature: the rows of q,
    out, block_table and lse (None without it; their dimension 0 varies
    per call), the bytes of the fixed tensors (k, v, sinks, the descales
    read)."""
    fixed = tuple((n, i, span_bytes(x.shape, x.stride(), x.element_size()))
                  for i, (n, x) in enumerate((
                      ("k", k), ("v", v), ("sinks", sinks),
                      ("k_descale", k_descale if scaled else None),
                      ("v_descale", v_descale if scaled else None)))
                  if x is not None)
    return (_row_span(q), _row_span(out), q.element_size(),
            _row_span(block_table), fixed,
            None if lse is None else _row_span(lse))


def _spans_of_call(p, t, ns, q, out, cu_seqlens_q, seqused_k, block_table,
                   k, v, sinks, k_descale, v_descale, lse):
    """(name, first byte, bytes) of every tensor argument but the
    workspace: each spans from its first element to the end of its last,
    strides included (the plan's spans, p.spans, with this call's rows;
    pointers and sizes only, no synchronization)."""
    (qs, qrow), (os_, orow), isz, (bs0, brow), fixed, lspan = p.spans
    rows = block_table.shape[0]
    # lse: float32 rows, t of them (checked)
    lse_n = 0
    if lse is not None and t:
        lse_n = ((t - 1) * lspan[0] + lspan[1]) * 4
    objs = (k, v, sinks, k_descale, v_descale)
    for name, x, n in (
            ("out", out, ((t - 1) * os_ + orow) * isz if t else 0),
            ("q", q, ((t - 1) * qs + qrow) * isz if t else 0),
            # contiguous (checked) int32 vectors
            ("cu_seqlens_q", cu_seqlens_q, cu_seqlens_q.shape[0] * 4),
            ("seqused_k", seqused_k, ns * 4),
            ("block_table", block_table,
             ((rows - 1) * bs0 + brow) * 4 if rows and brow else 0),
            *((f, objs[i], n) for f, i, n in fixed),
            *((("lse", lse, lse_n),) if lse is not None else ())):
        if n > 0:
            yield name, x.data_ptr(), n


def _check_workspace_apart(ws, ws_bytes, spans):
    """ValueError when the workspace's bytes [ws.data_ptr(), + ws_bytes)
    meet the bytes another argument spans (spans: _spans_of_call). The
    kernel writes counters and partials there while it reads the other
    arguments and writes out: a shared byte gives wrong rows, and counters
    left non-zero break later launches. A few microseconds."""
    lo = ws.data_ptr()
    hi = lo + ws_bytes
    for name, a, n in spans:
        if a < hi and lo < a + n:
            raise ValueError(_err(
                f"workspace (bytes [{lo:#x}, {hi:#x})) overlaps {name} "
                f"(bytes [{a:#x}, {a + n:#x})): the kernel writes its "
                "counters and partials there; give it an allocation of its "
                "own (torch.zeros(n, dtype=torch.uint8), once per "
                "stream)"))


#: The arguments the kernel writes (besides the workspace).
_WRITTEN = ("out", "lse")


def _check_outputs_apart(spans):
    """ValueError when out or lse shares a byte with another argument
    (their spans, _spans_of_call): the kernel writes them while it reads
    q, the caches, sinks, the descales and the index tensors (out =
    q[..., :Dv], an in-place attention, was accepted and gave rows
    computed from queries already overwritten), and out and lse must not
    share a byte either."""
    for i, (w, lo, n) in enumerate(spans):
        if w not in _WRITTEN:
            continue
        for j, (name, a, m) in enumerate(spans):
            if j != i and a < lo + n and lo < a + m and \
                    (name not in _WRITTEN or j > i):
                raise ValueError(_err(
                    f"{w} (bytes [{lo:#x}, {lo + n:#x})) overlaps {name} "
                    f"(bytes [{a:#x}, {a + m:#x})): the kernel writes {w} "
                    f"while it reads the other arguments (and writes out "
                    "and lse); give it memory of its own"))


#: How to size a workspace: the size function with every argument it
#: reads (the descales too: an fp8 cache's kernel depends on their kind).
_SIZE_CALL = ("kvgen.torch.unified_attention_workspace_bytes(q, k, v, "
              "softcap=..., sinks=..., k_descale=..., v_descale=...)")
_NO_WORKSPACE = (
    f"workspace is required: allocate {_SIZE_CALL} bytes zeroed "
    "(torch.zeros(n, dtype=torch.uint8, device=q.device)) once per stream "
    "and pass it to every call")


class _StandIn:
    """A cache view's metadata for CacheGeometry with a stand-in address
    (data_ptr): for views without memory (FakeTensors, whose storage is on
    the meta device)."""
    __slots__ = ("shape", "_t", "_p")

    def __init__(self, t, p):
        self.shape, self._t, self._p = t.shape, t, p

    def stride(self):
        return self._t.stride()

    def element_size(self):
        return self._t.element_size()

    def data_ptr(self):
        return self._p


def _addressed(k, v):
    """k, v, or stand-ins whose addresses keep what CacheGeometry reads of
    them (packed or not, overlap) where the views have no memory: views of
    one storage at their storage offsets, of two storages 2^62 bytes
    apart."""
    ks, vs = k.untyped_storage(), v.untyped_storage()
    if ks.device.type != "meta":
        return k, v
    same = ks._cdata == vs._cdata
    return (_StandIn(k, k.storage_offset() * k.element_size()),
            _StandIn(v, v.storage_offset() * v.element_size() +
                     (0 if same else 1 << 62)))


def _kernel_plan(q, k, v, softcap, sinks, k_descale, v_descale, lse=False,
                 prefill=False):
    """The kernel of these arguments (lse: with the lse option; prefill:
    the prefill plan's, option prefill) and its CacheGeometry (FakeTensors,
    e.g. under torch.compile, are taken by their shapes, strides, storage
    offsets and device)."""
    dtype, scale = _check_kernel_args(q, k, v, softcap, sinks, k_descale,
                                      v_descale)
    if q.device.type == "meta":
        raise ValueError(_err(
            "q is on the meta device: the kernel and its workspace size "
            "depend on the device (split-KV CTAs follow its multiprocessor "
            "count); pass tensors of the device, or FakeTensors of it "
            "(torch.compile's)"))
    geo = _geometry(*_addressed(k, v), dtype, scale)
    opts = dict(io=FLOAT_DTYPES[dtype_name(q)], num_q_heads=q.shape[1])
    if sinks is not None:
        opts["sinks"] = True
    if softcap > 0:
        opts["logits_soft_cap"] = True
    if lse:
        opts["lse"] = True
    if prefill:
        opts["prefill"] = True
    return _kt._kernel(q.device, "paged_attention", geo.layout, **opts), geo


def _build(q, k, v, out, block_table, softcap, sinks, k_descale, v_descale,
           lse, prefill):
    kern, geo = _kernel_plan(q, k, v, softcap, sinks, k_descale, v_descale,
                             lse is not None, prefill)
    strides = {} if lse is None else dict(lse_stride_token=lse.stride(0),
                                          lse_stride_head=lse.stride(1))
    p = _AttnPlan(kern, q.device, num_blocks=geo.num_blocks,
                  key_cache_bytes=geo.key_bytes,
                  value_cache_bytes=geo.value_bytes,
                  query_stride_token=q.stride(0),
                  query_stride_head=q.stride(1),
                  output_stride_token=out.stride(0),
                  output_stride_head=out.stride(1),
                  max_blocks_per_seq=block_table.shape[1],
                  block_tables_stride=block_table.stride(0), **strides)
    p.geo = geo
    p.need = kern.max_workspace_bytes
    p.scaled = k.dtype in _FP8
    p.spans = _spans_of_plan(q, k, v, out, block_table, sinks, k_descale,
                             v_descale, p.scaled, lse)
    return p


def _tsig(t):
    return None if t is None else (t.dtype, t.device, t.shape, t.stride())


def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
                      max_seqlen_k, softmax_scale, causal, window_size,
                      block_table, softcap, q_descale, k_descale, v_descale,
                      sinks=None, workspace=None, lse=None):
    """torch.ops.kvgen.unified_attention as a Python function (see the
    module doc for the arguments): where kvgen's C++ kernel is in use
    (kvgen.torch.fast_path_info()) and under torch.compile it calls the op
    (torch.ops.kvgen.unified_attention.default), else it runs the Python
    implementation without torch's dispatcher."""
    if _cpp is not None or _kt._compiling():
        return _op(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
                   max_seqlen_k, softmax_scale, causal, window_size,
                   block_table, softcap, q_descale, k_descale, v_descale,
                   sinks, workspace, lse)
    _impl(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
          softmax_scale, causal, window_size, block_table, softcap,
          q_descale, k_descale, v_descale, sinks, workspace, lse)


def _impl(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
          softmax_scale, causal, window_size, block_table, softcap,
          q_descale, k_descale, v_descale, sinks, workspace, lse=None):
    """The checks, the plan (JIT on first use) and the launch; returns the
    plan and the argument struct it launched (None when there is no query
    row or no sequence: nothing is launched)."""
    if workspace is None:
        raise ValueError(_err(_NO_WORKSPACE))
    fp8 = k.dtype in _FP8
    # The kernel (decode or prefill plan) is part of the plan's key.
    prefill = _uses_prefill(q, k, max_seqlen_q)
    sig = ("ua", prefill, q.dtype, q.device, q.shape[1:], q.stride(),
           out.dtype, out.device, out.shape[1:], out.stride(), k.dtype,
           k.device, k.shape, k.stride(), v.dtype, v.device, v.shape,
           v.stride(),
           k.dim() == 4 and
           v.data_ptr() - k.data_ptr() == k.shape[3] * k.element_size(),
           block_table.dtype, block_table.device, block_table.shape[1:],
           block_table.stride(), cu_seqlens_q.dtype, cu_seqlens_q.device,
           cu_seqlens_q.dim(), seqused_k.dtype, seqused_k.device,
           seqused_k.dim(), _tsig(sinks), softcap > 0, causal,
           q_descale is None, workspace.device,
           None if lse is None else (lse.dtype, lse.device, lse.shape[1:],
                                     lse.stride())) + (
               (_tsig(k_descale), _tsig(v_descale)) if fp8 else ())
    p = _kt._plans.get(sig)
    if p is None:
        _check(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
               max_seqlen_k, softmax_scale, causal, window_size, block_table,
               softcap, q_descale, k_descale, v_descale, sinks, workspace,
               lse)
        p = _kt._plan(sig, lambda: _build(q, k, v, out, block_table,
                                           softcap, sinks, k_descale,
                                           v_descale, lse, prefill))
    t = q.shape[0]
    ns = seqused_k.shape[0]
    # What the signature leaves open, tested at once; the full checks
    # (for their messages) when a test fails.
    ok = (out.shape[0] == t and cu_seqlens_q.shape[0] > ns and
          block_table.shape[0] >= ns and len(window_size) == 2 and
          -1 <= window_size[0] <= _MAX_LEFT and
          window_size[1] in (-1, 0) and max_seqlen_k >= 0 and
          0 <= softcap <= _F32_MAX and
          -_F32_MAX <= softmax_scale <= _F32_MAX and
          (max_seqlen_q >= 1 or t == 0 or ns == 0) and
          (ns < 2 or seqused_k.stride(0) == 1) and
          cu_seqlens_q.stride(0) == 1 and workspace.is_contiguous() and
          (lse is None or lse.shape[0] == t))
    if not ok:
        _check(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
               max_seqlen_k, softmax_scale, causal, window_size, block_table,
               softcap, q_descale, k_descale, v_descale, sinks, workspace,
               lse)
    ws_bytes = workspace.numel() * workspace.element_size()
    if ws_bytes < p.need:
        raise ValueError(_err(
            f"workspace holds {ws_bytes} bytes, this kernel needs "
            f"{p.need}: allocate {_SIZE_CALL} bytes zeroed "
            "(torch.zeros(n, dtype=torch.uint8, device=q.device)) once per "
            "stream"))
    kp, vp = k.data_ptr(), v.data_ptr()
    p.geo.check_disjoint(kp, vp)
    spans = tuple(_spans_of_call(p, t, ns, q, out, cu_seqlens_q, seqused_k,
                                 block_table, k, v, sinks, k_descale,
                                 v_descale, lse))
    _check_workspace_apart(workspace, ws_bytes, spans)
    _check_outputs_apart(spans)
    if t == 0 or ns == 0:
        return None  # no query row: nothing to write
    a = p.args()
    a.query = q.data_ptr()
    a.output = out.data_ptr()
    a.key_cache = kp
    a.value_cache = vp
    # A table of 0 columns (no context needs a block: seqused_k all 0) may
    # have no memory; the checked kernel reads no entry of it (a context
    # above 0 is reported), but the runtime wants a pointer: seqused_k's.
    a.block_tables = block_table.data_ptr() or seqused_k.data_ptr()
    a.seq_lens = seqused_k.data_ptr()
    a.query_start_loc = cu_seqlens_q.data_ptr()
    if p.scaled:
        a.k_scale = k_descale.data_ptr()
        a.v_scale = v_descale.data_ptr()
    if sinks is not None:
        a.sinks = sinks.data_ptr()
    a.workspace = workspace.data_ptr()
    a.workspace_bytes = ws_bytes
    if lse is not None:
        a.lse = lse.data_ptr()
    a.num_seqs = ns
    a.num_tokens = t
    a.max_query_len = min(max_seqlen_q, t)
    a.max_seq_len = max_seqlen_k
    a.sliding_window = window_size[0] + 1 if window_size[0] >= 0 else 0
    a.softmax_scale = softmax_scale
    a.logits_soft_cap = softcap
    p.launch(a)
    return p, a


def _impl_op(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
             max_seqlen_k, softmax_scale, causal, window_size, block_table,
             softcap, q_descale, k_descale, v_descale, sinks=None,
             workspace=None, lse=None):
    """The op's CPU / CUDA kernel where the C++ one is not in use."""
    _impl(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
          softmax_scale, causal, window_size, block_table, softcap,
          q_descale, k_descale, v_descale, sinks, workspace, lse)


#: The role of each schema argument for the C++ kernel (_torch_fast.cpp's
#: role letters): q R, k F, v F, out U (written rows), cu_seqlens_q Q, max_seqlen_q M,
#: seqused_k N, max_seqlen_k X, softmax_scale D, causal T, window_size W,
#: block_table B, softcap Y, q_descale Z, k_descale / v_descale / sinks O,
#: workspace G (a fixed tensor that no per-call tensor may overlap), lse L
#: (None, or per-call rows as R).
ROLES = "RFFUQMNXDTWBYZOOOGL"
#: The struct field each argument's per-call value goes to (None: fixed in
#: the remembered struct).
_FIELDS = ("query", None, None, "output", "query_start_loc",
           "max_query_len", "seq_lens", "max_seq_len", "softmax_scale",
           None, "sliding_window", "block_tables", "logits_soft_cap", None,
           None, None, None, None, "lse")
_OFFSETS = ctypes.c_int32 * len(ROLES)
_offsets = None  # (offsets, num_tokens offset, num_seqs offset)


def _slow(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
          softmax_scale, causal, window_size, block_table, softcap,
          q_descale, k_descale, v_descale, sinks=None, workspace=None,
          lse=None):
    """kvgen::_unified_attention_py, where the C++ kernel of
    torch.ops.kvgen.unified_attention sends every call it has no plan for:
    _impl, then the plan goes to the C++ kernel for later calls of the same
    signature."""
    global _offsets
    r = _impl(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
              max_seqlen_k, softmax_scale, causal, window_size, block_table,
              softcap, q_descale, k_descale, v_descale, sinks, workspace, lse)
    if r is None or _cpp is None:
        return
    p, a = r
    if not _kt._cpp_has_launch:
        _kt._cpp_set_launch()
    if _offsets is None:
        t = type(a)
        _offsets = (_OFFSETS(*(-1 if f is None else getattr(t, f).offset
                               for f in _FIELDS)),
                    t.num_tokens.offset, t.num_seqs.offset)
    offs, tok, seqs = _offsets
    # The C++ kernel files the plan under the call's signature on the side
    # of the split that this call's min(max_seqlen_q, T) is on, the side
    # _impl chose its kernel by.
    _cpp.remember_split(p.handle, ctypes.addressof(a), p.size, int(p.host),
                        -1 if p.host else p.device_index, offs, len(ROLES),
                        tok, seqs, _prefill_min_tokens(q, k))


def _fake(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
          softmax_scale, causal, window_size, block_table, softcap, q_descale,
          k_descale, v_descale, sinks=None, workspace=None, lse=None):
    _check(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
           softmax_scale, causal, window_size, block_table, softcap,
           q_descale, k_descale, v_descale, sinks, workspace, lse)


def unified_attention_workspace_bytes(q, k, v, softcap=0.0, sinks=None,
                                      k_descale=None, v_descale=None):
    """Bytes of the `workspace` that unified_attention needs for these
    arguments (q's dtype, heads, head size and device; the caches' layout
    and dtype; sinks / softcap > 0 / the descales' kind as the op will get
    them; with or without lse, one size): the larger max_workspace_bytes
    of its two kernels, the decode plan's and the prefill plan's (0: it
    never splits), so the one workspace holds every launch whatever the
    batch and whichever kernel max_seqlen_q picks (docs/attention.md, "The
    workspace contract"; unified_attention_kernel). Compiles the kernels
    when they are not cached yet (the op's first calls would). Allocate
    it zeroed, once per stream; the counter area at its start has one size for every attention kernel of one device (the
    target's split_ctas), so layers of different geometries on one stream
    may share one workspace of the largest of their sizes. Raises as the
    op does for arguments it refuses. Needs no tensor memory: FakeTensors
    (torch.compile's) are served; meta tensors raise ValueError (no
    device, so no kernel). Inside torch.compile (fullgraph too) it is a
    Python int that dynamo folds into the graph: the tensors' shapes
    (but q's num_tokens), strides, dtypes and devices are read in the
    traced code (so dynamo guards on them; num_tokens stays dynamic) and
    the size of that signature is computed once at trace time
    (_workspace_bytes_of)."""
    if _kt._compiling():
        return _workspace_bytes_of(_signature_of(q, k, v, softcap, sinks,
                                                 k_descale, v_descale))
    return _workspace_bytes(q, k, v, softcap, sinks, k_descale, v_descale)


def _workspace_bytes(q, k, v, softcap, sinks, k_descale, v_descale):
    return max(_kernel_plan(q, k, v, softcap, sinks, k_descale, v_descale,
                            prefill=p)[0].max_workspace_bytes
               for p in (False, True))


def _meta_of(t, skip_rows=False):
    """(shape, strides, dtype, device) of a tensor as Python values (None
    for None); skip_rows: dimension 0 left out (q's num_tokens, which the
    size does not depend on). Under dynamo, operator.index of a symbolic
    size specializes it (a guard; int() would leave it symbolic), so the
    key is a constant of the compiled graph."""
    if t is None:
        return None
    shape, st = tuple(t.shape), tuple(t.stride())
    if skip_rows:
        shape, st = shape[1:], st[1:]
    return (tuple(operator.index(n) for n in shape),
            tuple(operator.index(x) for x in st), t.dtype, t.device)


def _signature_of(q, k, v, softcap, sinks, k_descale, v_descale):
    """What unified_attention_workspace_bytes reads of its arguments, as
    Python constants (traceable by dynamo: shapes, strides, dtype, device;
    no storage, pointer or storage offset, which dynamo cannot read)."""
    return (_meta_of(q, skip_rows=True), _meta_of(k), _meta_of(v),
            float(softcap), _meta_of(sinks), _meta_of(k_descale),
            _meta_of(v_descale))


def _fake_of(mode, m, rows=None):
    """A FakeTensor of mode with _meta_of's m (rows: dimension 0 of that
    many rows put back, its stride the span of one row)."""
    if m is None:
        return None
    shape, st, dtype, device = m
    if rows is not None:
        one = span_bytes(shape, st, 1)
        shape, st = (rows,) + shape, (max(one, 1),) + st
    with mode:
        return torch.empty_strided(shape, st, dtype=dtype, device=device)


def _assume_constant(fn):
    f = getattr(torch.compiler, "assume_constant_result", None) or getattr(
        torch._dynamo, "assume_constant_result", None)
    return f(fn) if f is not None else fn


@_assume_constant
def _workspace_bytes_of(sig):
    """unified_attention_workspace_bytes of a _signature_of key, on
    FakeTensors of it (each its own storage: dynamo does not show whether
    k and v share one, and the size does not depend on it: it follows
    from the device's target, the query heads per kv head and the head
    sizes, not the caches' strides or packing, which
    test_workspace_bytes_under_torch_compile checks). Marked
    assume_constant_result: dynamo calls it at trace time with the
    constant key and folds the int into the graph (its guards on the
    tensors the key was read from keep that int valid)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    qm, km, vm, softcap, sm, kdm, vdm = sig
    mode = FakeTensorMode()
    return _workspace_bytes(_fake_of(mode, qm, rows=1), _fake_of(mode, km),
                            _fake_of(mode, vm), softcap, _fake_of(mode, sm),
                            _fake_of(mode, kdm), _fake_of(mode, vdm))


def unified_attention_kernel(q, k, v, max_seqlen_q, softcap=0.0, sinks=None,
                             k_descale=None, v_descale=None, lse=False):
    """The kvgen.Kernel that torch.ops.kvgen.unified_attention launches for
    these arguments (as in unified_attention_workspace_bytes; lse: True
    when the call passes an lse tensor): the prefill plan's kernel
    (kv.paged_attention option prefill, its name ending in "_prefill")
    when min(max_seqlen_q, num_tokens) x G >= PREFILL_MIN_ROWS (G =
    num_q_heads / num_kv_heads, num_tokens = q.shape[0]), else the decode
    plan's. The choice reads max_seqlen_q and shapes only (no tensor
    value, no synchronization), per call. Compiles the kernel when it is
    not cached yet. Raises as the op does for arguments it refuses."""
    return _kernel_plan(q, k, v, softcap, sinks, k_descale, v_descale,
                        bool(lse), _uses_prefill(q, k, max_seqlen_q))[0]


_op = None
_cpp = None


def register(lib, cpp):
    """Defines kvgen::unified_attention on `lib` with its fake and its CPU
    and CUDA kernels: the C++ one of `cpp` (kvgen/_torch_fast.py's
    FastPath, or None) falling back to kvgen::_unified_attention_py, else
    the Python one. Returns the public functions for kvgen.torch's
    namespace."""
    global _op, _cpp
    lib.define("unified_attention" + SCHEMA)
    torch.library.register_fake("kvgen::unified_attention", _fake, lib=lib)
    if cpp is not None:
        lib.define("_unified_attention_py" + SCHEMA)
        for key in ("CPU", "CUDA"):
            lib.impl("_unified_attention_py", _slow, key)
        try:
            cpp.register("kvgen", "unified_attention", "_unified_attention_py",
                         ROLES)
            _cpp = cpp
        except RuntimeError:
            _cpp = None  # kvgen.torch's write registered; this op: Python
    if _cpp is None:
        for key in ("CPU", "CUDA"):
            lib.impl("unified_attention", _impl_op, key)
    _op = torch.ops.kvgen.unified_attention.default
    return {"unified_attention": unified_attention,
            "unified_attention_workspace_bytes":
                unified_attention_workspace_bytes,
            "unified_attention_kernel": unified_attention_kernel}
