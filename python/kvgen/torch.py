"""kvgen's kernels as PyTorch custom ops (torch.library), with the
signatures engines already call.

    import torch, kvgen.torch   # registers torch.ops.kvgen.*
    torch.ops.kvgen.reshape_and_cache_flash(key, value, key_cache,
        value_cache, slot_mapping, "auto", k_scale, v_scale)

Ops (namespace `kvgen`; CPU tensors run through kvgen's host backend, CUDA
tensors through NVRTC-compiled kernels on torch.cuda.current_stream()):

The ops at vLLM's schemas (vLLM's _C_cache_ops; docs/torch.md's table
says what differs):

  reshape_and_cache_flash(key, value, key_cache!, value_cache!,
      slot_mapping, kv_cache_dtype, k_scale, v_scale, pdl=False)
      T = slot_mapping.numel() tokens (vLLM's count: key / value may hold
      more rows, e.g. padding for CUDA graphs, which are not read);
      key [>= T, H, Dk], value [>= T, H, Dv] (bf16 / f16 / f32, last dim
      contiguous); caches [num_blocks, block_size, H, D] views (any strides
      kvgen can express: NHD, HND via permute, K/V halves of one packed
      tensor, a [num_blocks, 2, ...] allocation, padded blocks);
      slot_mapping [T] int32/int64, < 0 = padding; kv_cache_dtype "auto"
      (cache dtype = key dtype, scales not read) | "bfloat16" | "float16"
      (a cache of that dtype, which must also be the key's; scales not
      read) | "fp8" | "fp8_e4m3" | "fp8_e5m2" (uint8 or float8 caches,
      stored value saturate(x / scale)); k_scale / v_scale float32 with 1
      (per tensor) or H (per head) elements, or broadcasts of them (all
      strides 0, e.g. scale.expand(1, H): per tensor; [..., H] with stride
      1 last and 0 before: per head). pdl (kvgen's, optional,
      default False): a programmatic dependent launch (CUDA, sm_90: the
      write starts while the kernel before it on the stream finishes and
      waits for its writes on the GPU; the kernel before should call
      griddepcontrol.launch_dependents); refused with KvgenError where the
      kernel has no dependent_launch (e.g. the CPU).
  reshape_and_cache(key, value, key_cache!, value_cache!, slot_mapping,
      kv_cache_dtype, k_scale, v_scale, pdl=False)
      the same over vLLM's legacy caches: key_cache [num_blocks, H, Dk / x,
      block_size, x] with x = 16 // key_cache.element_size() (8 for bf16 /
      f16, 16 for fp8), value_cache [num_blocks, H, Dv, block_size] or
      ROCm aiter's shuffled [num_blocks, H, block_size / x, Dv, x] (told
      apart by its dimensions), any strides kvgen can express
      (_views.LegacyCacheGeometry: a layout with k_elem_chunks /
      v_elem_stride, aiter's V v_token_chunks); other shapes raise
      ValueError naming the argument. K and V head sizes may differ.
  concat_and_cache_mla(kv_c, k_pe, kv_cache!, slot_mapping, kv_cache_dtype,
      scale, pdl=False) (T = slot_mapping.numel(), kv_c [>= T, L], k_pe
      [>= T, R], kv_cache [num_blocks, block_size, L + R]): the MLA writer,
      kvgen's kv.concat_and_cache_mla over the layout components = [kv_c:
      L, k_pe: R], packing = packed; pdl as for reshape_and_cache_flash.
      kv_cache_dtype "fp8_ds_mla": vLLM's 656-byte entries (L = 512, R =
      64, bf16 / f16 rows, a uint8 or float8_e4m3fn cache; scale not
      read), the per_tile layout of docs/torch.md "fp8_ds_mla".
  gather_and_maybe_dequant_cache(src_cache, dst!, block_table, cu_seq_lens,
      token_to_seq, num_tokens, kv_cache_dtype, scale, seq_starts=None):
      vLLM's MLA gather by block table, dst[t] for t < num_tokens from
      sequence token_to_seq[t] (see its doc string for what it
      allocates).
  cp_gather_cache(src_cache, dst!, block_table, cu_seq_lens, batch_size,
      seq_starts=None): the gather by batch as a raw copy (one dtype).
  cp_gather_and_upconvert_fp8_kv_cache(src_cache, dst!, block_table,
      workspace_starts, batch_size, seq_starts=None): the "fp8_ds_mla"
      reader: src_cache [num_blocks, block_size, 656] (uint8 /
      float8_e4m3fn) into dst [N, 576] bf16, request b's rows from
      workspace_starts[b] (see its doc string).
  convert_fp8(dst_cache!, src_cache, scale: float, kv_cache_dtype): float
      <-> fp8 conversion of a whole cache (vLLM: a test helper).
  swap_blocks(src, dst!, block_size_in_bytes, block_mapping): blocks of
      src into dst by bytes (e.g. a pinned CPU cache and a CUDA cache: the
      kernel reaches host memory through unified addressing),
      block_mapping [N, 2] int64 on the CPU.

kvgen's own ops (no vLLM counterpart, or kvgen's earlier form):

  gather_cache(key_cache, value_cache, slot_mapping, key_out!, value_out!,
      kv_cache_dtype, k_scale, v_scale)
      the inverse of the write: key_out[t] = cache[slot_mapping[t]] for t <
      slot_mapping.numel() (rows of negative slots untouched); fp8 caches
      are dequantized (q * scale) to key_out's dtype, other caches copied
      or converted to it. Caches as reshape_and_cache_flash's, or, when
      key_cache has 5 dims, as reshape_and_cache's.
  gather_and_maybe_dequant_cache_batch(src_cache, dst!, block_table,
      cu_seq_lens, batch_size, kv_cache_dtype, scale, seq_starts=None):
      the MLA gather by batch (vLLM's form before token_to_seq), fp8
      dequantized.
  copy_blocks(key_caches![], value_caches![], block_mapping),
  copy_blocks_mla(kv_caches![], block_mapping): block copies within each
      layer's caches, block_mapping [N, 2] int64 (src, dst) on the caches'
      device.
  swap_blocks_device_mapping(src, dst!, block_mapping): swap_blocks with
      block_mapping on the kernel's device (or pinned) and no
      block_size_in_bytes: nothing copied or allocated per call, so CUDA
      graphs can capture it; one cache tensor of either side at a time.

Attention (the arguments of vLLM's Triton unified_attention, not a
_C_cache_ops op; kvgen/_torch_attention.py's doc string and docs/torch.md
"Attention: unified_attention" say more):

  unified_attention(q, k, v, out!, cu_seqlens_q, max_seqlen_q, seqused_k,
      max_seqlen_k, softmax_scale, causal, window_size, block_table,
      softcap, q_descale, k_descale, v_descale, sinks=None,
      workspace!=None)
      paged attention (kvgen's kv.paged_attention) of q [num_tokens,
      num_q_heads, Dk] over the caches k / v [num_blocks, block_size,
      num_kv_heads, D], or a 5-D k: reshape_and_cache's legacy pair (v
      also aiter's shuffled [num_blocks, H, block_size / x, Dv, x]),
      (bf16 / f16 / f32 / float8) into out [num_tokens,
      num_q_heads, Dv]; num_seqs = seqused_k.shape[0]; causal must be True,
      q_descale None. workspace (required: None raises ValueError; pass it
      positionally) holds at least unified_attention_workspace_bytes(q, k,
      v, softcap=..., sinks=...) bytes, zeroed once, one per stream. No
      LSE output. Per call, max_seqlen_q picks the decode or the prefill
      plan's kernel (unified_attention_kernel says which; one workspace
      serves both).

Layouts are derived from the tensors (kvgen/_views.py) and validated; a
view kvgen cannot express raises ValueError naming its strides. Bad
arguments raise ValueError / TypeError before anything is launched, so
nothing is written. Kernels are looked up in a per-process table keyed by
(op, tensor dtypes/shapes/strides, kv_cache_dtype, device); the first call
of a key JIT-generates (libkvgen-generator.so) and compiles the kernel
(disk cache: $KVGEN_CACHE_DIR, else ~/.cache/kvgen), later calls only fill
the argument struct and launch: no allocation, no host synchronization, so
the ops can be captured in CUDA graphs (run each shape once before
capture). Exceptions: the gathers by block table allocate their slot
temporaries per call, convert_fp8 a scale tensor, and swap_blocks copies
its CPU block_mapping to the GPU (swap_blocks_device_mapping does not). Fake (meta) implementations check shapes, dtypes and devices, so
torch.compile(fullgraph=True) traces the ops.

reshape_and_cache_flash's (and reshape_and_cache's) CPU / CUDA kernel is a
C++ one
(kvgen/_torch_fast.cpp, compiled against this torch on the first import,
about 10 s, cached in the kvgen cache directory): it launches the calls
whose tensor metadata it has seen checked, about 2 us of host time per call
above the C API instead of 7-9 us with a Python kernel, and sends every
other call to the Python implementation (its errors unchanged). Without a
compiler or torch's headers, or with KVGEN_TORCH_FAST=0, the Python kernels
are used; fast_path_info() says which. unified_attention has such a C++
kernel too (its host time: docs/torch.md). See docs/torch.md.

The kernels are range-checked (issue 12): a slot >= num_blocks * block_size
or a block id outside [0, num_blocks) is skipped (nothing written or read
outside the cache) and reported through the device's error word, which
check_errors(device) reads (a synchronization) and raises as KvgenError;
the ops never raise for slot values, on the CPU as on CUDA.
set_unchecked(True) / KVGEN_TORCH_UNCHECKED=1 opts out: "the caller proves
every slot < num_blocks * block_size". See docs/torch.md.
"""

import ctypes
import math
import os
import threading
import warnings
import weakref

import torch

from . import Context, KvgenError, Layout, _capi, _torch_fast
from ._views import (FLOAT_DTYPES, FP8_TORCH, KV_CACHE_DTYPES, CacheGeometry,
                     LegacyCacheGeometry, dtype_name, legacy_chunk,
                     legacy_dims, span_bytes)

__all__ = ["context", "reshape_and_cache_flash", "reshape_and_cache",
           "gather_cache",
           "concat_and_cache_mla", "gather_and_maybe_dequant_cache",
           "gather_and_maybe_dequant_cache_batch", "cp_gather_cache",
           "cp_gather_and_upconvert_fp8_kv_cache", "convert_fp8",
           "copy_blocks", "copy_blocks_mla", "swap_blocks",
           "swap_blocks_device_mapping", "unified_attention",
           "unified_attention_workspace_bytes", "unified_attention_kernel",
           "plan_count",
           "check_errors", "set_unchecked", "unchecked", "fast_path_info"]

_lock = threading.Lock()
_contexts = {}
_plans = {}


def context(device):
    """The kvgen.Context of a torch device ('cpu' -> host backend, 'cuda:i'
    -> CUDA device i, HIP under a ROCm torch)."""
    device = torch.device(device)
    key = (device.type, device.index)
    ctx = _contexts.get(key)
    if ctx is not None:
        return ctx
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None:
            if device.type == "cpu":
                ctx = Context("host")
            elif device.type == "cuda":
                index = device.index if device.index is not None else \
                    torch.cuda.current_device()
                backend = "hip" if getattr(torch.version, "hip", None) \
                    else "cuda"
                ctx = Context(backend, device=index)
            else:
                raise ValueError(f"kvgen: no backend for device {device} "
                                 "(cpu and cuda tensors are supported)")
            _contexts[key] = ctx
    return ctx


#: The opt-out of issue 12's range checks (see set_unchecked).
def _env_unchecked():
    """KVGEN_TORCH_UNCHECKED: "1" opts out of the checked kernels, "" / "0"
    (or unset) keeps them; any other value raises ValueError at import
    rather than reading "false" or "no" as an opt-out."""
    v = os.environ.get("KVGEN_TORCH_UNCHECKED", "0").strip()
    if v not in ("", "0", "1"):
        raise ValueError(f"KVGEN_TORCH_UNCHECKED={v!r}: use 1 (unchecked "
                         "kernels) or 0 (checked, the default)")
    return v == "1"


_unchecked = _env_unchecked()


def set_unchecked(flag):
    """Opt out of (True) or back into (False) kvgen's range-checked kernels
    for every op of this module; the default is checked, or unchecked when
    the environment variable KVGEN_TORCH_UNCHECKED is 1 at import. `flag`
    must be a bool (TypeError otherwise: a string such as "no" would read
    as True).

    Checked kernels (the default) skip every slot >= num_blocks *
    block_size and every block id outside [0, num_blocks), write and read
    nothing outside the cache for it, and set the device's error word
    (check_errors reports it). Unchecked kernels omit the test: only for an
    engine whose caller proves every slot < num_blocks * block_size (and
    every block id < num_blocks); an index out of range then writes or reads
    outside the cache, unreported. Changing the setting empties the kernel
    table (later calls look their kernels up again); call it before
    capturing CUDA graphs."""
    global _unchecked
    if not isinstance(flag, bool):
        raise TypeError(f"set_unchecked({flag!r}): pass True or False")
    with _lock:
        if flag != _unchecked:
            _unchecked = flag
            _plans.clear()
            _fast.clear()
            if _cpp is not None:
                _cpp.clear()


def unchecked():
    """True when the ops launch unchecked kernels (set_unchecked)."""
    return _unchecked


def check_errors(device=None):
    """Raises KvgenError (status KVGEN_ERROR_INDEX_OUT_OF_RANGE, naming the
    kernels) when a checked kernel of this module skipped an out-of-range
    slot or block id on `device` since the last call, or unified_attention
    found a query longer than max_seqlen_q or a cu_seqlens_q outside [0,
    q.shape[0]] (the message names the cause), and clears the report.
    device: a torch device (or its string), or None for every device the
    ops have launched on. The ops themselves never synchronize: this call
    waits for all work on the device (kvgen_context_check), so call it when
    a synchronization suits the engine, e.g. once per step after reading
    the logits, or in a debug mode. On the CPU (host backend) the launches
    are synchronous and it costs no wait."""
    if device is None:
        ctxs = list(_contexts.values())
    else:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        ctx = _contexts.get((device.type, device.index))
        ctxs = [ctx] if ctx is not None else []
    for ctx in ctxs:
        ctx.check()


def _kernel(device, op, layout, **options):
    """The kernel of `op` for `layout` on `device` (see context()), checked
    unless set_unchecked(True)."""
    if _unchecked:
        options["unchecked"] = True
    return context(device).kernel(op, layout, **options)


class _Fast:
    """A plan found by the identity of the cache and scale tensors; meta:
    their pointers, shapes, strides and dtypes when it was made
    (_tensor_meta), which a call must still find (an in-place set_ /
    resize_ / as_strided_ / `.data =` keeps a tensor's identity but not
    what the plan was checked for)."""
    __slots__ = ("plan", "refs", "shapes", "device", "scales", "meta")


def _tensor_meta(key_cache, value_cache, k_scale, v_scale, scaled):
    """What the identity table's plan assumes of the cache (and, when
    read, scale) tensors: (key_cache ptr, value_cache ptr, k_scale ptr,
    v_scale ptr, their shapes, strides and dtypes: `t.data = ...` can
    change a dtype in place and keep the rest)."""
    if scaled:
        return (key_cache.data_ptr(), value_cache.data_ptr(),
                k_scale.data_ptr(), v_scale.data_ptr(), key_cache.shape,
                value_cache.shape, key_cache.stride(), value_cache.stride(),
                k_scale.shape, v_scale.shape, k_scale.stride(),
                v_scale.stride(), key_cache.dtype, value_cache.dtype,
                k_scale.dtype, v_scale.dtype)
    return (key_cache.data_ptr(), value_cache.data_ptr(), None, None,
            key_cache.shape, value_cache.shape, key_cache.stride(),
            value_cache.stride(), key_cache.dtype, value_cache.dtype)


_fast = {}


def _remember(key, plan, tensors, shapes, device, scales, meta=None):
    f = _Fast()
    f.plan, f.shapes, f.device, f.scales = plan, shapes, device, scales
    f.meta = meta
    # Dropped when one of the tensors dies (its id may then be reused).
    f.refs = tuple(weakref.ref(t, lambda _r, k=key: _fast.pop(k, None))
                   for t in tensors)
    with _lock:
        if len(_fast) > 4096:
            _fast.clear()
        _fast[key] = f


try:
    _compiling = torch.compiler.is_compiling
except AttributeError:  # older torch
    def _compiling():
        return False


def plan_count():
    """Entries of the per-process kernel table."""
    return len(_plans)


#---------------------------------------------------------------------------
# Launch plans: one per key, holding the kernel and a prefilled args struct
#---------------------------------------------------------------------------

try:
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # a torch without CUDA support
    _raw_stream = None


class _Plan:
    """A kernel and its argument struct with every field that the key fixes
    already set; launch() copies it, sets the per-call fields and calls
    kvgen_launch."""
    __slots__ = ("handle", "template", "args_type", "size", "host",
                 "device_index", "out_offset", "kernel", "geo")

    def __init__(self, kernel, device, **fields):
        self.kernel = kernel
        self.handle = kernel._handle
        self.args_type = kernel._op.args_struct
        t = self.args_type()
        for name, value in fields.items():
            f = getattr(t, name)
            if isinstance(f, ctypes.Array):
                f[:] = value
            else:
                setattr(t, name, value)
        self.template = bytes(t)
        self.size = ctypes.sizeof(t)
        self.host = device.type == "cpu"
        self.device_index = device.index
        self.out_offset = 0  # gather_mla: bytes from kv_c_out to k_pe_out
        # The CacheGeometry of a K/V cache pair (its check_disjoint runs
        # on every call: the key of the plan has no pointers), else None.
        self.geo = None

    def args(self):
        return self.args_type.from_buffer_copy(self.template)

    def launch(self, args, pdl=False):
        stream = 0 if self.host else _raw_stream(self.device_index)
        if pdl:
            st = _launch_ex(self.handle, ctypes.byref(args), self.size,
                            stream, _PDL)
        else:
            st = _launch(self.handle, ctypes.byref(args), self.size, stream)
        if st:
            raise KvgenError(f"kvgen_launch{'_ex' if pdl else ''} "
                             f"({self.kernel.op})", st, _capi.last_error())


def _launch(*a):
    global _launch
    _launch = _capi.lib().kvgen_launch
    return _launch(*a)


def _launch_ex(*a):
    """kvgen_launch_ex (a programmatic dependent launch with _PDL)."""
    global _launch_ex
    f = getattr(_capi.lib(), "kvgen_launch_ex", None)
    if f is None:
        raise KvgenError("kvgen_launch_ex", 1, f"{_capi.lib_path()} has no "
                         "kvgen_launch_ex: no programmatic dependent launch")
    _launch_ex = f
    return _launch_ex(*a)


_PDL_OPTIONS = _capi.LaunchOptions(_capi.LAUNCH_PROGRAMMATIC_DEPENDENT)
_PDL = ctypes.byref(_PDL_OPTIONS)


def _plan(key, build):
    p = _plans.get(key)
    if p is None:
        with _lock:
            p = _plans.get(key)
        if p is None:
            p = build()
            with _lock:
                _plans[key] = p
    return p


#---------------------------------------------------------------------------
# Checks shared by the real and the fake implementations
#---------------------------------------------------------------------------

def _same_device(anchor, **tensors):
    for name, t in tensors.items():
        if t is not None and t.device != anchor.device:
            raise ValueError(f"kvgen: {name} is on {t.device}, the other "
                             f"tensors on {anchor.device}")


def _float_rows(name, t, shape, tokens):
    """A float tensor of token rows of len(shape) dimensions (shape: their
    names, for the message), last dimension contiguous; tokens: it must
    hold at least that many rows (slot_mapping's length: rows past it are
    not read)."""
    if t.dim() != len(shape):
        raise ValueError(f"kvgen: {name} has shape {list(t.shape)}, need "
                         f"[{', '.join(shape)}]")
    if dtype_name(t) not in FLOAT_DTYPES:
        raise TypeError(f"kvgen: {name} has dtype {t.dtype}, need bfloat16, "
                        "float16 or float32")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"kvgen: {name}'s last dimension must be contiguous "
                         f"(stride {t.stride(-1)}, need 1)")
    if tokens is not None and t.shape[0] < tokens:
        raise ValueError(f"kvgen: {name} has {t.shape[0]} tokens, "
                         f"slot_mapping {tokens}: need at least {tokens} "
                         "(the token count is slot_mapping's length; rows "
                         "past it are not read)")


def _rows(name, t, heads=None, tokens=None):
    """[rows, H, D] token rows of a K/V op (see _float_rows)."""
    _float_rows(name, t, ("num_tokens", "num_kv_heads", "head_size"), tokens)
    if heads is not None and t.shape[1] != heads:
        raise ValueError(f"kvgen: {name} has {t.shape[1]} heads, the cache "
                         f"{heads}")


def _slots(slot_mapping):
    """slot_mapping's checks; returns the token count T (its length, as
    vLLM takes it: the rows may be padded past T for CUDA graphs)."""
    if slot_mapping.dim() != 1:
        raise ValueError(f"kvgen: slot_mapping has shape "
                         f"{list(slot_mapping.shape)}, need [num_tokens]")
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"kvgen: slot_mapping has dtype {slot_mapping.dtype},"
                        " need int32 or int64")
    tokens = slot_mapping.shape[0]
    if tokens > 1 and slot_mapping.stride(0) != 1:
        raise ValueError("kvgen: slot_mapping must be contiguous")
    return tokens


def _tokens(slot_mapping):
    """The token count of a call whose checks passed for the same
    metadata but the length (-1 when slot_mapping is not a contiguous 1-D
    tensor: the checks then run and raise)."""
    if slot_mapping.dim() != 1:
        return -1
    t = slot_mapping.shape[0]
    return t if t < 2 or slot_mapping.stride(0) == 1 else -1


#: kv_cache_dtype names of an unquantized cache (vLLM's CacheDType), with
#: the torch dtype the name asks of the cache (None: "auto", the rows'):
#: the rows are stored unconverted and the scales are not read.
_UNQUANTIZED = {"auto": None, "bfloat16": torch.bfloat16,
                "float16": torch.float16}
_KV_CACHE_DTYPE_NAMES = ("'auto', 'bfloat16', 'float16', 'fp8', 'fp8_e4m3' "
                         "or 'fp8_e5m2'")


def _quantized(kv_cache_dtype):
    """True for an fp8 kv_cache_dtype (its scales are read)."""
    return kv_cache_dtype not in _UNQUANTIZED


def _cache_dtype(what, cache, kv_cache_dtype, rows_dtype):
    """The kvgen dtype of a cache tensor under vLLM's kv_cache_dtype;
    rows_dtype (writers): the dtype an unquantized cache must have."""
    name = dtype_name(cache)
    if kv_cache_dtype in _UNQUANTIZED:
        named = _UNQUANTIZED[kv_cache_dtype]
        if named is not None and cache.dtype != named:
            raise TypeError(f"kvgen: {what} has dtype {cache.dtype}; "
                            f"kv_cache_dtype {kv_cache_dtype!r} is a {named} "
                            "cache")
        if rows_dtype is not None and cache.dtype != rows_dtype:
            raise TypeError(f"kvgen: {what} has dtype {cache.dtype}; with "
                            f"kv_cache_dtype {kv_cache_dtype!r} it must be "
                            f"{rows_dtype} (the key's: an unquantized cache "
                            "stores the rows unconverted)")
        if name not in FLOAT_DTYPES:
            raise TypeError(f"kvgen: {what} has dtype {cache.dtype}; with "
                            f"kv_cache_dtype {kv_cache_dtype!r} it must be "
                            "bfloat16, float16 or float32")
        return FLOAT_DTYPES[name]
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kvgen: kv_cache_dtype {kv_cache_dtype!r} must be "
                         + _KV_CACHE_DTYPE_NAMES)
    family, raw = KV_CACHE_DTYPES[kv_cache_dtype]
    if name in FP8_TORCH:
        if family not in name:
            raise TypeError(f"kvgen: {what} has dtype {cache.dtype}, but "
                            f"kv_cache_dtype is {kv_cache_dtype!r}")
        return FP8_TORCH[name]
    if cache.dtype in (torch.uint8, torch.int8):
        return raw
    raise TypeError(f"kvgen: {what} has dtype {cache.dtype}; an fp8 cache is "
                    "uint8 or a float8 dtype")


def _scale_sig(s):
    """A scale tensor's part of a plan signature: None for None (an
    unquantized cache reads no scale, and vLLM's callers may pass None
    then)."""
    return None if s is None else (s.dtype, s.device, tuple(s.shape),
                                   s.stride())


def _scale_layout(name, s, heads):
    """'per_tensor' or 'per_head' for a write / gather scale tensor, from
    its shape and strides only (no value read, no synchronization): one
    value (1 element, or every stride of a dimension above 1 is 0: a
    broadcast such as torch.tensor([0.1]).expand(1, H), or vLLM's
    layer._k_scale.expand(num_seqs, H), as unified_attention's descales
    take it), or one per kv head (num_kv_heads elements contiguous, or
    [..., H] with stride 1 there and 0 in every other dimension above 1).
    The kernel reads 1 or H consecutive float32 values from the tensor's
    first element, which these forms hold; ValueError for any other."""
    n = s.numel()
    shape, st = tuple(s.shape), tuple(s.stride())
    if n == 1 or all(x == 0 for d, x in zip(shape, st) if d > 1):
        return "per_tensor"
    if n == heads and s.is_contiguous():
        return "per_head"
    if shape and shape[-1] == heads and st[-1] == 1 and \
            all(x == 0 for d, x in zip(shape[:-1], st[:-1]) if d > 1):
        return "per_head"
    if n != heads and (not shape or shape[-1] != heads):
        raise ValueError(f"kvgen: {name} has {n} elements (shape "
                         f"{list(shape)}), need 1 (per tensor, or a "
                         f"broadcast of one: all strides 0) or {heads} (per "
                         "kv head)")
    raise ValueError(f"kvgen: {name} has shape {list(shape)} and strides "
                     f"{list(st)}: need one value (1 element, or all "
                     f"strides 0: a broadcast) or {heads} contiguous (per "
                     f"kv head; [..., {heads}] with stride 1 there and 0 "
                     "before)")


def _scale_kind(kv_cache_dtype, heads, **scales):
    if not _quantized(kv_cache_dtype):
        return "none"
    kinds = set()
    for name, s in scales.items():
        if s is None:
            raise TypeError(f"kvgen: {name} is None, but kv_cache_dtype "
                            f"{kv_cache_dtype!r} needs it: pass a float32 "
                            "tensor of 1 (per tensor) or num_kv_heads "
                            "elements")
        if s.dtype != torch.float32:
            raise TypeError(f"kvgen: {name} has dtype {s.dtype}, need "
                            "float32")
        kinds.add(_scale_layout(name, s, heads))
    if len(kinds) > 1:
        raise ValueError("kvgen: " + " and ".join(scales) + " must both be "
                         "per tensor or both per head")
    return kinds.pop()


#---------------------------------------------------------------------------
# The slot-mapped K/V ops (reshape_and_cache_flash, gather_cache): one
# check, one plan and one launch, for rows written into the caches ("w") or
# read out of them ("g")
#---------------------------------------------------------------------------

#: tag -> (kvgen op, the names of the rows (arguments and struct fields)):
#: "w" reshape_and_cache_flash's caches [nb, bs, H, D], "l"
#: reshape_and_cache's (vLLM's legacy K [nb, H, D/x, bs, x], V [nb, H, D,
#: bs]), "g" gather_cache of either (legacy when key_cache has 5 dims).
_KV_OPS = {"w": ("reshape_and_cache", ("key", "value")),
           "l": ("reshape_and_cache", ("key", "value")),
           "g": ("gather", ("key_out", "value_out"))}


def _legacy(tag, key_cache):
    """Whether a K/V op's caches are vLLM's legacy pair."""
    return tag == "l" or (tag == "g" and key_cache.dim() == 5)


def _check_kv(tag, k_rows, v_rows, key_cache, value_cache, slot_mapping,
              kv_cache_dtype, k_scale, v_scale):
    """Everything but what needs data pointers; returns (dtype, scale)."""
    kn, vn = _KV_OPS[tag][1]
    legacy = _legacy(tag, key_cache)
    if legacy:
        # value_cache: vLLM's legacy [nb, H, Dv, bs] or aiter's shuffled
        # [nb, H, bs / x, Dv, x] (told apart by its dimensions).
        heads, dk, dv = legacy_dims(key_cache, value_cache, shuffled_v=True)
    else:
        for name, t in (("key_cache", key_cache),
                        ("value_cache", value_cache)):
            if t.dim() != 4:
                raise ValueError(f"kvgen: {name} has shape {list(t.shape)}, "
                                 "need [num_blocks, block_size, "
                                 "num_kv_heads, head_size]")
        heads, dk, dv = key_cache.shape[2], key_cache.shape[3], \
            value_cache.shape[3]
    tokens = _slots(slot_mapping)
    _rows(kn, k_rows, heads, tokens)
    _rows(vn, v_rows, heads, tokens)
    if v_rows.dtype != k_rows.dtype:
        raise TypeError(f"kvgen: {vn} has dtype {v_rows.dtype}, {kn} "
                        f"{k_rows.dtype}")
    for rn, r, cn, d in ((kn, k_rows, "key_cache", dk),
                         (vn, v_rows, "value_cache", dv)):
        if r.shape[2] != d:
            held = f"{d}"
            if legacy and cn == "key_cache":
                held = (f"{key_cache.shape[2]} chunks x "
                        f"{key_cache.shape[4]} = {d}: its head_size is a "
                        "multiple of x")
            raise ValueError(f"kvgen: {rn} has head_size {r.shape[2]}, {cn} "
                             f"{held} (K and V head sizes are "
                             "independent: each cache must match its own "
                             "rows)")
    _same_device(k_rows, **{vn: v_rows}, key_cache=key_cache,
                 value_cache=value_cache, slot_mapping=slot_mapping)
    # A write stores unquantized rows unconverted; a gather converts.
    tie = k_rows.dtype if tag != "g" else None
    dtype = _cache_dtype("key_cache", key_cache, kv_cache_dtype, tie)
    if _cache_dtype("value_cache", value_cache, kv_cache_dtype,
                    tie) != dtype:
        raise TypeError(f"kvgen: key_cache ({key_cache.dtype}) and "
                        f"value_cache ({value_cache.dtype}) differ")
    if legacy:
        # x = 16 bytes of the cache's elements (aiter's V: its last dim too)
        legacy_chunk(key_cache, value_cache)
    scale = _scale_kind(kv_cache_dtype, heads, k_scale=k_scale,
                        v_scale=v_scale)
    if scale != "none":
        _same_device(k_rows, k_scale=k_scale, v_scale=v_scale)
    return dtype, scale


def _kv_plan(tag, k_rows, v_rows, key_cache, value_cache, slot_mapping,
             kv_cache_dtype, k_scale, v_scale):
    op, (kn, vn) = _KV_OPS[tag]
    dtype, scale = _check_kv(tag, k_rows, v_rows, key_cache, value_cache,
                             slot_mapping, kv_cache_dtype, k_scale, v_scale)
    if _legacy(tag, key_cache):
        geo = LegacyCacheGeometry(key_cache, value_cache, dtype, scale,
                                  shuffled_v=True)
    else:
        geo = CacheGeometry(key_cache, value_cache, dtype, scale)
    io = FLOAT_DTYPES[dtype_name(k_rows)]
    options = {"io": io,
               "slots": "i32" if slot_mapping.dtype == torch.int32 else "i64"}
    if tag == "g":
        options["dequantize"] = io != dtype
    k = _kernel(k_rows.device, op, geo.layout, **options)
    p = _Plan(k, k_rows.device, num_blocks=geo.num_blocks,
              key_cache_bytes=geo.key_bytes,
              value_cache_bytes=geo.value_bytes,
              **{f"{kn}_stride_token": k_rows.stride(0),
                 f"{kn}_stride_head": k_rows.stride(1),
                 f"{vn}_stride_token": v_rows.stride(0),
                 f"{vn}_stride_head": v_rows.stride(1)})
    p.geo = geo
    return p


def _kv_launch(tag, k_rows, v_rows, key_cache, value_cache, slot_mapping,
               kv_cache_dtype, k_scale, v_scale, pdl=False):
    """The op's implementation (see the module doc): the plan of the call's
    metadata (made and checked on first use), this call's checks, the
    launch of slot_mapping.numel() tokens. Returns (plan, args struct)."""
    kn, vn = _KV_OPS[tag][1]
    delta = value_cache.data_ptr() - key_cache.data_ptr()
    sig = (tag, k_rows.dtype, k_rows.device, k_rows.shape[1:],
           k_rows.stride(), v_rows.dtype, v_rows.device, v_rows.shape[1:],
           v_rows.stride(), key_cache.dtype, key_cache.device,
           key_cache.shape, key_cache.stride(), value_cache.dtype,
           value_cache.device, value_cache.shape, value_cache.stride(),
           delta == key_cache.shape[-1] * key_cache.element_size(),
           slot_mapping.dtype, slot_mapping.device, kv_cache_dtype,
           _scale_sig(k_scale), _scale_sig(v_scale))
    p = _plans.get(sig)
    if p is None:
        p = _plan(sig, lambda: _kv_plan(tag, k_rows, v_rows, key_cache,
                                        value_cache, slot_mapping,
                                        kv_cache_dtype, k_scale, v_scale))
    # K and V sharing memory (the plan was built for other pointers): this
    # call's, before anything is written; the C++ kernel and the identity
    # table launch only plans that got here for the same cache pointers.
    p.geo.check_disjoint(key_cache.data_ptr(), value_cache.data_ptr())
    t = _tokens(slot_mapping)
    if t < 0 or k_rows.shape[0] < t or v_rows.shape[0] < t:
        _check_kv(tag, k_rows, v_rows, key_cache, value_cache, slot_mapping,
                  kv_cache_dtype, k_scale, v_scale)
    a = p.args()
    setattr(a, kn, k_rows.data_ptr())
    setattr(a, vn, v_rows.data_ptr())
    a.key_cache = key_cache.data_ptr()
    a.value_cache = value_cache.data_ptr()
    a.slot_mapping = slot_mapping.data_ptr()
    if _quantized(kv_cache_dtype):
        a.k_scale = k_scale.data_ptr()
        a.v_scale = v_scale.data_ptr()
    a.num_tokens = t
    p.launch(a, pdl)
    return p, a

#---------------------------------------------------------------------------
# reshape_and_cache_flash
#---------------------------------------------------------------------------

def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                            kv_cache_dtype, k_scale, v_scale, pdl=False):
    """torch.ops.kvgen.reshape_and_cache_flash as a Python function, the
    same checks and kernel. Where kvgen's C++ kernel is in use
    (fast_path_info()["kernel"] == "c++") and under torch.compile it calls
    the op (torch.ops.kvgen.reshape_and_cache_flash.default: about 0.1 us
    of host time per call more than the op itself); else it runs the Python
    implementation without torch's dispatcher (about 3 us less than the op
    with the Python kernels). bench/torch_overhead.py times both."""
    if _cpp is not None or _compiling():
        return _write_op(key, value, key_cache, value_cache, slot_mapping,
                         kv_cache_dtype, k_scale, v_scale, pdl)
    _write_fast(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl)


def _write_fast(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl=False, _tag="w"):
    """The op's CPU/CUDA implementation where the C++ kernel is not in
    use (and the Python function's); _tag "l": reshape_and_cache's."""
    # Engines pass the same cache and scale tensors each step: by identity
    # (checked through weak references) and unchanged pointers, shapes and
    # strides (_tensor_meta: a tensor changed in place by set_ / resize_
    # goes through the checks again), what is left to check per call is
    # the rows' and slots' metadata.
    # Unquantized ("auto", ...) the scales are not read: any tensors will do.
    scaled = _quantized(kv_cache_dtype)
    key_ = (_tag, id(key_cache), id(value_cache),
            id(k_scale) if scaled else 0, id(v_scale) if scaled else 0,
            kv_cache_dtype, key.stride(), value.stride(), key.dtype,
            value.dtype, slot_mapping.dtype)
    f = _fast.get(key_)
    if f is not None and f.refs[0]() is key_cache and \
            f.refs[1]() is value_cache and \
            (not scaled or (f.refs[2]() is k_scale and
                            f.refs[3]() is v_scale)) and \
            f.meta == _tensor_meta(key_cache, value_cache, k_scale, v_scale,
                                   scaled):
        # 3-D rows (their strides are in the key); heads, head sizes,
        # tokens (T = slot_mapping's length, rows >= T), slots, devices
        # (f.device: the CUDA index, -1 for the CPU, where get_device()
        # cannot tell the CPU from meta).
        ks, vs, want = key.shape, value.shape, f.shapes
        t = _tokens(slot_mapping)
        if ks[1] == want[0] and ks[2] == want[1] and t >= 0 and \
                ks[0] >= t and vs[0] >= t and \
                vs[1] == want[0] and vs[2] == want[2] and \
                ((key.is_cpu and value.is_cpu and slot_mapping.is_cpu)
                 if f.device < 0 else
                 (key.get_device() == f.device and
                  value.get_device() == f.device and
                  slot_mapping.get_device() == f.device)):
            p = f.plan
            a = p.args()
            a.key = key.data_ptr()
            a.value = value.data_ptr()
            a.key_cache = f.meta[0]
            a.value_cache = f.meta[1]
            a.slot_mapping = slot_mapping.data_ptr()
            a.k_scale = f.meta[2]
            a.v_scale = f.meta[3]
            a.num_tokens = t
            if pdl:
                p.launch(a, True)
                return
            st = _launch(p.handle, ctypes.byref(a), p.size,
                         0 if p.host else _raw_stream(p.device_index))
            if st:
                raise KvgenError("kvgen_launch (reshape_and_cache)", st,
                                 _capi.last_error())
            return
    p, _ = _write_impl(key, value, key_cache, value_cache, slot_mapping,
                       kv_cache_dtype, k_scale, v_scale, pdl, _tag)
    _remember(key_, p, (key_cache, value_cache) +
              ((k_scale, v_scale) if scaled else ()),
              (key.shape[1], key.shape[2], value.shape[2]),
              key.get_device(),
              (k_scale.data_ptr(), v_scale.data_ptr())
              if scaled else (None, None),
              _tensor_meta(key_cache, value_cache, k_scale, v_scale, scaled))


def _write_impl(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl=False, tag="w"):
    """torch.ops.kvgen.reshape_and_cache_flash's implementation (tag "l":
    reshape_and_cache's; see the module doc). Returns the plan it launched
    and its args struct."""
    return _kv_launch(tag, key, value, key_cache, value_cache, slot_mapping,
                      kv_cache_dtype, k_scale, v_scale, pdl)


def _write_slow(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl=False, _tag="w"):
    """kvgen::_reshape_and_cache_flash_py (_tag "l":
    kvgen::_reshape_and_cache_py), where the C++ kernel of the op sends
    every call it has no plan for: the checks, the plan and the launch of
    _write_impl; then the plan goes to the C++ kernel for later calls of
    the same signature."""
    p, a = _write_impl(key, value, key_cache, value_cache, slot_mapping,
                       kv_cache_dtype, k_scale, v_scale, pdl, _tag)
    if _cpp is None:
        return
    if not _cpp_has_launch:
        _cpp_set_launch()
    t = type(a)
    _cpp.remember_raw(p.handle, ctypes.addressof(a), p.size, int(p.host),
                      -1 if p.host else p.device_index,
                      _WRITE_OFFSETS(t.key.offset, t.value.offset, -1, -1,
                                     t.slot_mapping.offset, -1, -1, -1, -1),
                      9, t.num_tokens.offset)


_WRITE_OFFSETS = ctypes.c_int32 * 9
_cpp_has_launch = False


def _cpp_set_launch():
    """Gives the C++ kernel kvgen_launch / kvgen_launch_ex (once, from
    the first call that the Python implementation launched: the runtime is
    loaded on first use, not at import)."""
    global _cpp_has_launch
    lib = _capi.lib()
    ex = getattr(lib, "kvgen_launch_ex", None)
    _cpp.set_launch(ctypes.cast(lib.kvgen_launch, ctypes.c_void_p).value,
                    ctypes.cast(ex, ctypes.c_void_p).value if ex else None,
                    ctypes.addressof(_PDL_OPTIONS))
    _cpp_has_launch = True


def _write_fake(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl=False):
    _check_kv("w", key, value, key_cache, value_cache, slot_mapping,
              kv_cache_dtype, k_scale, v_scale)


#---------------------------------------------------------------------------
# reshape_and_cache: vLLM's legacy caches, K [num_blocks, H, D/x,
# block_size, x], V [num_blocks, H, D, block_size] (_views.py,
# LegacyCacheGeometry); the same kernel as reshape_and_cache_flash over
# that layout
#---------------------------------------------------------------------------

def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping,
                      kv_cache_dtype, k_scale, v_scale, pdl=False):
    """torch.ops.kvgen.reshape_and_cache as a Python function (the same
    checks and kernel; entered as reshape_and_cache_flash is)."""
    if _cpp is not None or _compiling():
        return _legacy_write_op(key, value, key_cache, value_cache,
                                slot_mapping, kv_cache_dtype, k_scale,
                                v_scale, pdl)
    _write_fast(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl, "l")


def _legacy_write_fast(key, value, key_cache, value_cache, slot_mapping,
                       kv_cache_dtype, k_scale, v_scale, pdl=False):
    _write_fast(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl, "l")


def _legacy_write_slow(key, value, key_cache, value_cache, slot_mapping,
                       kv_cache_dtype, k_scale, v_scale, pdl=False):
    _write_slow(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale, pdl, "l")


def _legacy_write_fake(key, value, key_cache, value_cache, slot_mapping,
                       kv_cache_dtype, k_scale, v_scale, pdl=False):
    _check_kv("l", key, value, key_cache, value_cache, slot_mapping,
              kv_cache_dtype, k_scale, v_scale)


#---------------------------------------------------------------------------
# gather_cache (slot_mapping based; kvgen's gather op)
#---------------------------------------------------------------------------

def gather_cache(key_cache, value_cache, slot_mapping, key_out, value_out,
                 kv_cache_dtype, k_scale, v_scale):
    """torch.ops.kvgen.gather_cache without torch's dispatcher in eager
    mode; under torch.compile it calls the op."""
    if _compiling():
        return torch.ops.kvgen.gather_cache(key_cache, value_cache,
                                            slot_mapping, key_out, value_out,
                                            kv_cache_dtype, k_scale, v_scale)
    _gather_impl(key_cache, value_cache, slot_mapping, key_out, value_out,
                 kv_cache_dtype, k_scale, v_scale)


def _gather_impl(key_cache, value_cache, slot_mapping, key_out, value_out,
                 kv_cache_dtype, k_scale, v_scale):
    """torch.ops.kvgen.gather_cache's implementation (see the module
    doc)."""
    _kv_launch("g", key_out, value_out, key_cache, value_cache,
               slot_mapping, kv_cache_dtype, k_scale, v_scale)


def _gather_fake(key_cache, value_cache, slot_mapping, key_out, value_out,
                 kv_cache_dtype, k_scale, v_scale):
    _check_kv("g", key_out, value_out, key_cache, value_cache, slot_mapping,
              kv_cache_dtype, k_scale, v_scale)


#---------------------------------------------------------------------------
# MLA: one [num_blocks, block_size, L + R] latent cache, kvgen's layout of
# components [kv_c: L, k_pe: R] packed in one row (kv.concat_and_cache_mla,
# kv.gather_mla).
#---------------------------------------------------------------------------

def _mla_split(entry):
    """How a raw [.., entry] row is cut into the two components of a packed
    layout for ops that see no kv_c (the gather by block table, whole-row
    copies; any cut gives the same bytes): DeepSeek's 512 + 64 shape, else
    two halves."""
    if entry < 2:
        raise ValueError(f"kvgen: a cache row of {entry} element(s) cannot "
                         "be described (need >= 2)")
    if entry > 64:
        return entry - 64, 64
    half = entry // 2
    return half, entry - half


class _MlaGeometry:
    """The MLA layout of a [num_blocks, block_size, E] cache view cut into
    kv_c (L) and k_pe (E - L): its (block, token) element strides are the
    layout's kv_c_strides (dense -> none given), the row contiguous.
    Attributes: layout, num_blocks, block_size, cache_bytes (the view's
    span, for the runtime's extent check)."""

    def __init__(self, kv_cache, L, dtype, scale):
        nb, bs, E = kv_cache.shape
        if E > 1 and kv_cache.stride(2) != 1:
            raise ValueError(f"kvgen: kv_cache's last dimension must be "
                             f"contiguous (stride {kv_cache.stride(2)}, "
                             "need 1)")
        # Dimensions of size 1 take their dense stride (torch leaves them
        # arbitrary); the one head's stride is the row's.
        st = kv_cache.stride(1) if bs > 1 else E
        sb = kv_cache.stride(0) if nb > 1 else bs * st
        strides = None if (sb, st) == (bs * E, E) else {"kv_c": (sb, st, st)}
        try:
            self.layout = Layout(1, block_size=bs, dtype=dtype,
                                 packing="packed", scale=scale,
                                 components=[("kv_c", L), ("k_pe", E - L)],
                                 strides=strides)
        except ValueError as e:
            raise ValueError(
                f"kvgen: the kv_cache view (shape {list(kv_cache.shape)}, "
                f"strides {list(kv_cache.stride())}) cannot be expressed as "
                f"a kvgen MLA layout: {e}") from None
        self.num_blocks, self.block_size = nb, bs
        self.cache_bytes = span_bytes(kv_cache.shape, kv_cache.stride(),
                                      kv_cache.element_size())


def _latent_rows(name, t, tokens=None):
    """[rows, width] latent rows of an MLA op (see _float_rows)."""
    _float_rows(name, t, ("num_tokens", "width"), tokens)


def _mla_shapes(kv_c, k_pe, kv_cache):
    if kv_c.dim() != 2 or k_pe.dim() != 2:
        raise ValueError(f"kvgen: kv_c {list(kv_c.shape)} and k_pe "
                         f"{list(k_pe.shape)} must be [num_tokens, L] and "
                         "[num_tokens, R]")
    if kv_cache.dim() != 3 or \
            kv_cache.shape[2] != kv_c.shape[1] + k_pe.shape[1]:
        raise ValueError(f"kvgen: kv_cache has shape {list(kv_cache.shape)},"
                         f" need [num_blocks, block_size, "
                         f"{kv_c.shape[1] + k_pe.shape[1]}]")


def _check_mla_write(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                     scale):
    """Everything but what needs data pointers; returns (dtype, scale)."""
    _mla_shapes(kv_c, k_pe, kv_cache)
    tokens = _slots(slot_mapping)
    _latent_rows("kv_c", kv_c, tokens)
    _latent_rows("k_pe", k_pe, tokens)
    if k_pe.dtype != kv_c.dtype:
        raise TypeError(f"kvgen: k_pe has dtype {k_pe.dtype}, kv_c "
                        f"{kv_c.dtype}")
    _same_device(kv_c, k_pe=k_pe, kv_cache=kv_cache,
                 slot_mapping=slot_mapping)
    dtype = _cache_dtype("kv_cache", kv_cache, kv_cache_dtype, kv_c.dtype)
    kind = _scale_kind(kv_cache_dtype, 1, scale=scale)
    if kind != "none":
        _same_device(kv_c, scale=scale)
    return dtype, kind


# vLLM's "fp8_ds_mla" cache (DeepSeek V3.2 / FlashMLA): 656-byte entries,
# the 512 kv_c values in e4m3fn, quantized per 128-value tile with the
# tile's own float32 scale (amax / 448, at least FLT_MIN; bytes 512 to
# 528), then the 64 k_pe values unquantized (bytes 528 to 656). kvgen's
# layout of it: scale = per_tile, kv_c_tile_scales = [128, 512],
# k_pe_dtype = the rows' type (docs/layout.md "Per-tile scales").
DS_MLA = "fp8_ds_mla"
DS_MLA_L, DS_MLA_R, DS_MLA_TILE = 512, 64, 128
DS_MLA_ENTRY = DS_MLA_L + 4 * (DS_MLA_L // DS_MLA_TILE) + 2 * DS_MLA_R


def _ds_mla_layout(kv_cache, rows_dtype):
    """The per_tile layout of an fp8_ds_mla cache view [num_blocks,
    block_size, 656] (its block / token strides, the row contiguous) whose
    k_pe is stored as rows_dtype (bf16 / f16); (layout, num_blocks,
    cache_bytes)."""
    nb, bs, E = kv_cache.shape
    if kv_cache.stride(2) != 1:
        raise ValueError(f"kvgen: kv_cache's last dimension must be "
                         f"contiguous (stride {kv_cache.stride(2)}, need 1)")
    st = kv_cache.stride(1) if bs > 1 else E
    sb = kv_cache.stride(0) if nb > 1 else bs * st
    text = (f"num_kv_heads = 1, components = [kv_c: {DS_MLA_L}, "
            f"k_pe: {DS_MLA_R}], block_size = {bs}, packing = packed, "
            f"dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = "
            f"[{DS_MLA_TILE}, {DS_MLA_L}], k_pe_dtype = {rows_dtype}")
    if (sb, st) != (bs * E, E):
        text += f", kv_c_strides = [{sb}, {st}, {st}]"
    try:
        layout = Layout.parse(text)
    except ValueError as e:
        raise ValueError(
            f"kvgen: the kv_cache view (shape {list(kv_cache.shape)}, "
            f"strides {list(kv_cache.stride())}) cannot be expressed as "
            f"a kvgen fp8_ds_mla layout: {e}") from None
    return layout, nb, span_bytes(kv_cache.shape, kv_cache.stride(),
                                  kv_cache.element_size())


def _ds_mla_cache(name, cache):
    """An fp8_ds_mla cache tensor's dtype and shape (TypeError /
    ValueError naming it)."""
    if cache.dtype not in (torch.uint8, torch.float8_e4m3fn):
        raise TypeError(f"kvgen: {name} has dtype {cache.dtype}; with "
                        "kv_cache_dtype 'fp8_ds_mla' it must be uint8 or "
                        "float8_e4m3fn (656 one-byte elements an entry)")
    if cache.dim() != 3 or cache.shape[2] != DS_MLA_ENTRY:
        raise ValueError(f"kvgen: {name} has shape {list(cache.shape)};"
                         f" with kv_cache_dtype 'fp8_ds_mla' it must be "
                         f"[num_blocks, block_size, {DS_MLA_ENTRY}] (bytes)")


def _check_ds_mla_write(kv_c, k_pe, kv_cache, slot_mapping):
    """vLLM's fp8_ds_mla rules (kv_lora_rank 512, pe_dim 64, 656-byte
    uint8 / float8_e4m3fn entries, 16-bit rows); returns the rows' kvgen
    dtype. The scale argument is not read (vLLM's kernel takes it and
    reads none: the scales are the tiles' own)."""
    if kv_c.dim() != 2 or k_pe.dim() != 2 or kv_c.shape[1] != DS_MLA_L or \
            k_pe.shape[1] != DS_MLA_R:
        raise ValueError(f"kvgen: with kv_cache_dtype 'fp8_ds_mla' kv_c "
                         f"{list(kv_c.shape)} and k_pe {list(k_pe.shape)} "
                         f"must be [num_tokens, {DS_MLA_L}] and "
                         f"[num_tokens, {DS_MLA_R}]")
    _ds_mla_cache("kv_cache", kv_cache)
    tokens = _slots(slot_mapping)
    _latent_rows("kv_c", kv_c, tokens)
    _latent_rows("k_pe", k_pe, tokens)
    if kv_c.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"kvgen: kv_c has dtype {kv_c.dtype}; with "
                        "kv_cache_dtype 'fp8_ds_mla' it must be bfloat16 or "
                        "float16")
    if k_pe.dtype != kv_c.dtype:
        raise TypeError(f"kvgen: k_pe has dtype {k_pe.dtype}, kv_c "
                        f"{kv_c.dtype}")
    _same_device(kv_c, k_pe=k_pe, kv_cache=kv_cache,
                 slot_mapping=slot_mapping)
    return FLOAT_DTYPES[dtype_name(kv_c)]


def _ds_mla_plan(kv_c, k_pe, kv_cache, slot_mapping):
    io = _check_ds_mla_write(kv_c, k_pe, kv_cache, slot_mapping)
    layout, nb, cache_bytes = _ds_mla_layout(kv_cache, io)
    slots = "i32" if slot_mapping.dtype == torch.int32 else "i64"
    k = _kernel(kv_c.device, "concat_and_cache_mla", layout, io=io,
                slots=slots)
    return _Plan(k, kv_c.device, num_blocks=nb,
                 kv_c_stride_token=kv_c.stride(0),
                 kv_c_stride_head=kv_c.shape[1],
                 k_pe_stride_token=k_pe.stride(0),
                 k_pe_stride_head=k_pe.shape[1], kv_cache_bytes=cache_bytes)


def _mla_plan(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale):
    if kv_cache_dtype == DS_MLA:
        return _ds_mla_plan(kv_c, k_pe, kv_cache, slot_mapping)
    dtype, kind = _check_mla_write(kv_c, k_pe, kv_cache, slot_mapping,
                                   kv_cache_dtype, scale)
    geo = _MlaGeometry(kv_cache, kv_c.shape[1], dtype, kind)
    slots = "i32" if slot_mapping.dtype == torch.int32 else "i64"
    k = _kernel(kv_c.device, "concat_and_cache_mla", geo.layout,
                io=FLOAT_DTYPES[dtype_name(kv_c)], slots=slots)
    p = _Plan(k, kv_c.device, num_blocks=geo.num_blocks,
              kv_c_stride_token=kv_c.stride(0),
              kv_c_stride_head=kv_c.shape[1],
              k_pe_stride_token=k_pe.stride(0),
              k_pe_stride_head=k_pe.shape[1],
              kv_cache_bytes=geo.cache_bytes)
    return p


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                         scale, pdl=False):
    """torch.ops.kvgen.concat_and_cache_mla's implementation (kvgen's
    kv.concat_and_cache_mla): kv_cache[slot, :L] = kv_c[t], kv_cache[slot,
    L:] = k_pe[t] for slot = slot_mapping[t] >= 0 (fp8: saturate(x /
    scale), one scale for both). T = slot_mapping.numel() (vLLM's token
    count: rows of kv_c / k_pe past T, e.g. CUDA-graph padding, are not
    read). kv_c [>= T, L], k_pe [>= T, R] (any token stride, last dim
    contiguous: e.g. column ranges of one tensor); kv_cache [num_blocks,
    block_size, L + R] (any block / token strides)."""
    sig = ("m", kv_c.dtype, kv_c.device, kv_c.shape[1:], kv_c.stride(),
           k_pe.dtype, k_pe.device, k_pe.shape[1:], k_pe.stride(),
           kv_cache.dtype, kv_cache.device, kv_cache.shape,
           kv_cache.stride(), slot_mapping.dtype, slot_mapping.device,
           kv_cache_dtype, _scale_sig(scale))
    p = _plans.get(sig)
    if p is None:
        p = _plan(sig, lambda: _mla_plan(kv_c, k_pe, kv_cache, slot_mapping,
                                         kv_cache_dtype, scale))
    t = _tokens(slot_mapping)
    if t < 0 or kv_c.shape[0] < t or k_pe.shape[0] < t:
        _mla_fake(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)
    a = p.args()
    a.kv_c = kv_c.data_ptr()
    a.k_pe = k_pe.data_ptr()
    a.kv_cache = kv_cache.data_ptr()
    a.slot_mapping = slot_mapping.data_ptr()
    if _quantized(kv_cache_dtype) and kv_cache_dtype != DS_MLA:
        a.scale = scale.data_ptr()
    a.num_tokens = t
    p.launch(a, pdl)


def _mla_fake(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale,
              pdl=False):
    if kv_cache_dtype == DS_MLA:
        _check_ds_mla_write(kv_c, k_pe, kv_cache, slot_mapping)
    else:
        _check_mla_write(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                         scale)


def _check_mla_gather(src_cache, dst, kv_cache_dtype, scale):
    if kv_cache_dtype == DS_MLA:
        # vLLM's gathers would read the 656-byte entries as plain fp8 rows
        # of one scale; its fp8_ds_mla reader is
        # cp_gather_and_upconvert_fp8_kv_cache.
        raise ValueError("kvgen: kv_cache_dtype 'fp8_ds_mla' is not served "
                         "by the gathers (its entries hold per-tile scales "
                         "and bf16 rope values, not fp8 rows of one scale); "
                         "its reader is cp_gather_and_upconvert_fp8_kv_cache")
    if src_cache.dim() != 3 or dst.dim() != 2 or \
            dst.shape[1] != src_cache.shape[2]:
        raise ValueError(f"kvgen: src_cache {list(src_cache.shape)} and dst "
                         f"{list(dst.shape)} must be [num_blocks, "
                         "block_size, entry] and [num_tokens, entry]")
    _latent_rows("dst", dst)
    _same_device(dst, src_cache=src_cache)
    dtype = _cache_dtype("src_cache", src_cache, kv_cache_dtype, None)
    kind = _scale_kind(kv_cache_dtype, 1, scale=scale)
    if kind != "none":
        _same_device(dst, scale=scale)
    return dtype, kind


def _mla_gather_plan(src_cache, dst, slots, kv_cache_dtype, scale):
    if kv_cache_dtype == DS_MLA:
        # cp_gather_and_upconvert_fp8_kv_cache (checked by the caller): the
        # per_tile layout, k_pe stored as dst's type (its bits are copied).
        io = FLOAT_DTYPES[dtype_name(dst)]
        layout, nb, cache_bytes = _ds_mla_layout(src_cache, io)
        L, dequantize = DS_MLA_L, True
    else:
        dtype, kind = _check_mla_gather(src_cache, dst, kv_cache_dtype,
                                        scale)
        L, _ = _mla_split(src_cache.shape[2])
        geo = _MlaGeometry(src_cache, L, dtype, kind)
        io = FLOAT_DTYPES[dtype_name(dst)]
        layout, nb, cache_bytes = geo.layout, geo.num_blocks, geo.cache_bytes
        dequantize = io != dtype
    k = _kernel(dst.device, "gather_mla", layout, io=io,
                slots="i32" if slots.dtype == torch.int32 else "i64",
                dequantize=dequantize)
    p = _Plan(k, dst.device, num_blocks=nb,
              kv_c_out_stride_token=dst.stride(0), kv_c_out_stride_head=L,
              k_pe_out_stride_token=dst.stride(0),
              k_pe_out_stride_head=dst.shape[1] - L,
              kv_cache_bytes=cache_bytes)
    p.out_offset = L * dst.element_size()
    return p


def _mla_gather_launch(src_cache, out, slots, kv_cache_dtype, scale):
    """kv.gather_mla of out.shape[0] rows: out[t] = dequant(src_cache at
    slot slots[t]) for slots[t] >= 0 (int64, on out's device); the plan
    of the call's metadata, made and checked on first use."""
    # scale is read for an fp8 cache only (unquantized: vLLM passes one,
    # unused; None is accepted then; "fp8_ds_mla": the tiles' own, None).
    sig = ("gm", src_cache.dtype, src_cache.device, src_cache.shape,
           src_cache.stride(), out.dtype, out.device, out.shape[1:],
           out.stride(), kv_cache_dtype) + (
               () if not _quantized(kv_cache_dtype) or scale is None else
               _scale_sig(scale))
    plan = _plans.get(sig)
    if plan is None:
        plan = _plan(sig, lambda: _mla_gather_plan(src_cache, out, slots,
                                                   kv_cache_dtype, scale))
    a = plan.args()
    a.kv_cache = src_cache.data_ptr()
    a.slot_mapping = slots.data_ptr()
    a.kv_c_out = out.data_ptr()
    a.k_pe_out = out.data_ptr() + plan.out_offset
    if _quantized(kv_cache_dtype) and kv_cache_dtype != DS_MLA:
        a.scale = scale.data_ptr()
    a.num_tokens = out.shape[0]
    plan.launch(a)


def _index_tensor(name, t, dims):
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"kvgen: {name} has dtype {t.dtype}, need int32 "
                        "(or int64)")
    if t.dim() != dims:
        raise ValueError(f"kvgen: {name} has shape {list(t.shape)}, need "
                         f"{dims} dimension(s)")


def _int_arg(name, v):
    if isinstance(v, (bool, float)) or not hasattr(v, "__index__"):
        raise TypeError(f"kvgen: {name} {v!r} must be an int")
    if v < 0:
        raise ValueError(f"kvgen: {name} {v} must be >= 0")


def _check_mla_tables(dst, block_table, cu_seq_lens, batch_size,
                      seq_starts):
    """The batch form's index tensors as far as the host sees them without
    reading their values: integer dtypes, shapes that hold batch_size
    sequences, dst's device (ValueError / TypeError naming the argument)."""
    _batch_tables(dst, batch_size, block_table=block_table,
                  cu_seq_lens=cu_seq_lens, seq_starts=seq_starts)


def _batch_tables(dst, batch_size, **tables):
    """batch_size (an int >= 0) and the index tensors of a batch form
    (name -> tensor or None): block_table [>= batch_size, M], cu_seq_lens
    [>= batch_size + 1], any other [>= batch_size]; integer dtypes, dst's
    device (ValueError / TypeError naming the argument)."""
    _int_arg("batch_size", batch_size)
    for name, t in tables.items():
        if t is None:
            continue
        rows = batch_size + (1 if name == "cu_seq_lens" else 0)
        dims = 2 if name == "block_table" else 1
        _index_tensor(name, t, dims)
        if t.shape[0] < rows:
            need = (f"[>= {rows}, max_blocks_per_seq]" if dims == 2 else
                    f"[>= {rows}]")
            raise ValueError(f"kvgen: {name} has shape {list(t.shape)}, need "
                             f"{need} (batch_size = {batch_size})")
    _same_device(dst, **tables)


def _batch_slots(nb, bs, rows, dst_rows, block_table, cu_seq_lens,
                 batch_size, seq_starts, bad_slot):
    """int64 [rows] slots of the batch form, computed on the
    device without a host synchronization: the cache slot of dst row t =
    cu_seq_lens[b] + i (token i of sequence b) at position p = i +
    seq_starts[b], i.e. block_table[b, p // bs] * bs + p % bs; -1 (row
    untouched) for rows outside [cu_seq_lens[0], cu_seq_lens[batch_size]);
    bad_slot for every token it cannot serve: p < 0, p // bs past the row
    (block_table.shape[1] columns), a block id outside [0, nb); and for
    every row when cu_seq_lens is not nondecreasing from >= 0 to <=
    dst_rows (`rows` may be 1 where dst_rows is 0, to carry that
    report)."""
    dev = block_table.device
    B = batch_size
    cu = cu_seq_lens[:B + 1].to(torch.int64)
    t = torch.arange(rows, device=dev, dtype=torch.int64)
    # Not served as a whole: nothing is written, every row reports.
    bad_all = (cu[0] < 0) | (cu[B] > dst_rows) | (cu[1:] < cu[:-1]).any()
    b = torch.searchsorted(cu[1:], t, right=True).clamp_(max=B - 1)
    inside = (t >= cu[0]) & (t < cu[B])
    return _row_slots(nb, bs, block_table, b, t - cu[b], seq_starts, inside,
                      bad_all, bad_slot)


def _row_slots(nb, bs, block_table, b, i, seq_starts, inside, bad_all,
               bad_slot):
    """The slots of rows that are token i of sequence b (int64 tensors; b
    a valid row of the tables), at position p = i + seq_starts[b]: -1
    where not inside (untouched), bad_slot where bad_all or inside and
    _table_slots cannot serve p, else the slot."""
    p = i if seq_starts is None else i + seq_starts.to(torch.int64)[b]
    ok, slot = _table_slots(nb, bs, block_table, b, p)
    bad = bad_all | (inside & ~ok)
    return torch.where(bad, torch.full_like(p, bad_slot),
                       torch.where(inside, slot, torch.full_like(p, -1)))


def _table_slots(nb, bs, block_table, b, p):
    """(ok, slot) of position p of sequence b (int64 tensors; b a valid
    row of block_table): slot = block_table[b, p // bs] * bs + p % bs, ok
    where p >= 0, p // bs < block_table.shape[1] and the block id is in
    [0, nb) (slot is in range but meaningless elsewhere)."""
    W = block_table.shape[1]
    col = torch.div(p, bs, rounding_mode="floor")
    ok = (p >= 0) & (col < W)
    if W == 0:
        return torch.zeros_like(ok), torch.zeros_like(p)
    blk = block_table.to(torch.int64)[b, col.clamp(0, W - 1)]
    ok &= (blk >= 0) & (blk < nb)
    return ok, blk.clamp(0, max(nb - 1, 0)) * bs + p.remainder(bs)


def _batch_gather(src_cache, dst, block_table, cu_seq_lens, batch_size,
                  kv_cache_dtype, scale, seq_starts):
    """The batch form's gather (see gather_and_maybe_dequant_cache_batch);
    src_cache and dst checked but for their dtypes and scale."""
    _check_mla_tables(dst, block_table, cu_seq_lens, batch_size, seq_starts)
    if batch_size == 0:
        return  # no sequence: nothing to gather
    _gather_dst_rows(src_cache, dst, kv_cache_dtype, scale,
                     lambda nb, bs, rows, bad: _batch_slots(
                         nb, bs, rows, dst.shape[0], block_table,
                         cu_seq_lens, batch_size, seq_starts, bad))


def _gather_dst_rows(src_cache, dst, kv_cache_dtype, scale, slots_of):
    """kv.gather_mla into dst's rows, their slots slots_of(num_blocks,
    block_size, rows, bad_slot) (int64 [rows]: -1 = row untouched,
    bad_slot = not served, reported). A dst of 0 rows still reports what
    the tables claim: through one row of scratch that is never written
    (its slot is -1 or bad)."""
    nb, bs = src_cache.shape[0], src_cache.shape[1]
    out = dst if dst.shape[0] > 0 else torch.empty(
        (1,) + tuple(dst.shape[1:]), dtype=dst.dtype, device=dst.device)
    slots = slots_of(nb, bs, out.shape[0], -1 if _unchecked else nb * bs)
    _mla_gather_launch(src_cache, out, slots, kv_cache_dtype, scale)


def gather_and_maybe_dequant_cache_batch(src_cache, dst, block_table,
                                         cu_seq_lens, batch_size,
                                         kv_cache_dtype, scale,
                                         seq_starts=None):
    """kvgen's own form of the MLA gather (vLLM's before it took
    token_to_seq; see gather_and_maybe_dequant_cache for vLLM's current
    one): for each sequence b < batch_size and each of its tokens i <
    cu_seq_lens[b+1] - cu_seq_lens[b], dst[cu_seq_lens[b] + i] =
    dequant(src_cache[block_table[b, p // block_size], p % block_size]),
    p = i + seq_starts[b] (0 without seq_starts); rows of dst outside
    [cu_seq_lens[0], cu_seq_lens[batch_size]) are untouched.

    block_table int32 [>= batch_size, M], cu_seq_lens int32 [>= batch_size
    + 1], seq_starts int32 [>= batch_size] (int64 accepted), all on dst's
    device; batch_size an int (a bool or float: TypeError; torch.ops
    converts a bool to an int before this runs): ValueError / TypeError
    otherwise, before any launch. scale: float32 [1] for an fp8
    kv_cache_dtype (None: TypeError); unread for an unquantized one
    ("auto", "bfloat16", "float16"), where None is accepted. A seq_starts
    entry starts sequence b at that token (vLLM's kernels do the same).

    Values the gather cannot serve are reported as the other ops report an
    out-of-range slot (no host synchronization: check_errors() raises
    KvgenError KVGEN_ERROR_INDEX_OUT_OF_RANGE), and nothing is read or
    written for them: a token with p < 0, with p // block_size >= M (a
    sequence longer than its block_table row), or whose block id is outside
    [0, num_blocks) has its dst row left untouched, the other tokens are
    gathered; cu_seq_lens that is not nondecreasing, starts below 0 or ends
    past dst's rows makes the call write nothing (every row reported). With
    set_unchecked(True) such tokens are skipped unreported.

    kvgen has no block-table gather kernel yet, so this computes each
    token's slot with torch ops on the device (searchsorted over
    cu_seq_lens, a block_table lookup: O(dst rows) temporaries, allocated
    per call, no host synchronization) and then runs kvgen's slot-based
    kv.gather_mla (dequantizing fp8 to dst's dtype), whose range check
    reports the tokens above (their slot is num_blocks * block_size). What
    is missing for an allocation-free launch: a kernel op whose work items
    are (sequence, token) pairs reading BLOCK_TABLES / SEQ_LENS roles for a
    gather."""
    if src_cache.dim() != 3 or dst.dim() != 2:
        _check_mla_gather(src_cache, dst, kv_cache_dtype, scale)
    _batch_gather(src_cache, dst, block_table, cu_seq_lens, batch_size,
                  kv_cache_dtype, scale, seq_starts)


def _mla_gather_batch_fake(src_cache, dst, block_table, cu_seq_lens,
                           batch_size, kv_cache_dtype, scale,
                           seq_starts=None):
    _check_mla_gather(src_cache, dst, kv_cache_dtype, scale)
    _check_mla_tables(dst, block_table, cu_seq_lens, batch_size, seq_starts)


def _check_token_tables(dst, block_table, cu_seq_lens, token_to_seq,
                        num_tokens, seq_starts):
    """vLLM's current gather's index tensors and num_tokens as far as the
    host sees them without reading their values."""
    _int_arg("num_tokens", num_tokens)
    _index_tensor("block_table", block_table, 2)
    _index_tensor("cu_seq_lens", cu_seq_lens, 1)
    _index_tensor("token_to_seq", token_to_seq, 1)
    if seq_starts is not None:
        _index_tensor("seq_starts", seq_starts, 1)
    if cu_seq_lens.shape[0] < 1:
        raise ValueError("kvgen: cu_seq_lens has no element, need [num_seqs "
                         "+ 1]")
    for name, n in (("dst", dst.shape[0]),
                    ("token_to_seq", token_to_seq.shape[0])):
        if num_tokens > n:
            raise ValueError(f"kvgen: num_tokens {num_tokens} exceeds "
                             f"{name}'s {n} rows")
    _same_device(dst, block_table=block_table, cu_seq_lens=cu_seq_lens,
                 token_to_seq=token_to_seq, seq_starts=seq_starts)


def _token_slots(nb, bs, num_tokens, block_table, cu_seq_lens, token_to_seq,
                 seq_starts, bad_slot):
    """int64 [num_tokens] slots of vLLM's current gather, computed on the
    device without a host synchronization: row t of sequence b =
    token_to_seq[t] is token t - cu_seq_lens[b] of b, at position p = that
    + seq_starts[b]; its slot is block_table[b, p // bs] * bs + p % bs.
    -1 (row untouched, as vLLM's kernel skips it) for t >=
    cu_seq_lens[b + 1]; bad_slot for a row it cannot serve: b outside the
    sequences (cu_seq_lens, block_table and seq_starts rows), t <
    cu_seq_lens[b], cu_seq_lens[b] < 0, p < 0 (p in int64: a sum past
    2^63 - 1 wraps to p < 0), p // bs past b's block_table row, a block id
    outside [0, nb)."""
    dev = block_table.device
    t = torch.arange(num_tokens, device=dev, dtype=torch.int64)
    B = min(cu_seq_lens.shape[0] - 1, block_table.shape[0])
    if seq_starts is not None:
        B = min(B, seq_starts.shape[0])
    if B <= 0:
        return torch.full_like(t, bad_slot)
    cu = cu_seq_lens.to(torch.int64)
    b = token_to_seq[:num_tokens].to(torch.int64)
    valid = (b >= 0) & (b < B)
    b = b.clamp(0, B - 1)
    lo, hi = cu[b], cu[b + 1]
    # With lo >= 0 (else reported), t - lo is in [0, t], and adding a
    # start cannot wrap back into range: a sum past 2^63 - 1 wraps to a
    # negative p, which _table_slots refuses. (A negative lo, e.g. -2^63,
    # with a start of 2^63 - 1 wrapped to positions 0.. and was gathered.)
    p = t - lo
    if seq_starts is not None:
        p = p + seq_starts.to(torch.int64)[b]
    ok, slot = _table_slots(nb, bs, block_table, b, p)
    ok &= valid & (t >= lo) & (lo >= 0)
    skip = valid & (t >= hi)
    return torch.where(skip, torch.full_like(t, -1),
                       torch.where(ok, slot, torch.full_like(t, bad_slot)))


def gather_and_maybe_dequant_cache(src_cache, dst, block_table, cu_seq_lens,
                                   token_to_seq, num_tokens, kv_cache_dtype,
                                   scale, seq_starts=None):
    """vLLM's MLA gather (its current schema): for each row t <
    num_tokens, with b = token_to_seq[t] and p = t - cu_seq_lens[b] +
    seq_starts[b] (0 without seq_starts), dst[t] =
    dequant(src_cache[block_table[b, p // block_size], p % block_size])
    (fp8: q * scale, to dst's dtype; unquantized: converted to dst's
    dtype). A row with t >= cu_seq_lens[b + 1] is left untouched, as vLLM's
    kernel leaves it; rows of dst from num_tokens on are untouched.

    src_cache [num_blocks, block_size, entry], dst [>= num_tokens, entry]
    (any entry >= 2: vLLM's kernel takes 576 and 320 only); block_table
    [num_seqs, M], cu_seq_lens [num_seqs + 1], token_to_seq [>=
    num_tokens], seq_starts [num_seqs] (int32, int64 accepted), all on
    dst's device; num_tokens an int <= dst's and token_to_seq's rows
    (ValueError / TypeError otherwise, before any launch). scale: float32
    [1] for an fp8 kv_cache_dtype; unread (None accepted) for "auto",
    "bfloat16", "float16".

    Rows the gather cannot serve are skipped (dst row untouched) and
    reported through the device's error word (check_errors(); no host
    synchronization; set_unchecked(True): unreported): token_to_seq[t]
    outside the sequences, t < cu_seq_lens[b], a negative
    cu_seq_lens[b], p < 0 or past 2^63 - 1, p // block_size past b's
    block_table row, a block id outside [0, num_blocks). (vLLM's kernel
    reads outside the cache or the tables for them.)

    Like the batch form, this computes each row's slot with torch ops on
    the device (O(num_tokens) temporaries, allocated per call) and runs
    kvgen's slot-based kv.gather_mla."""
    _check_mla_gather(src_cache, dst, kv_cache_dtype, scale)
    _check_token_tables(dst, block_table, cu_seq_lens, token_to_seq,
                        num_tokens, seq_starts)
    if num_tokens == 0:
        return
    nb, bs = src_cache.shape[0], src_cache.shape[1]
    slots = _token_slots(nb, bs, num_tokens, block_table, cu_seq_lens,
                         token_to_seq, seq_starts,
                         -1 if _unchecked else nb * bs)
    _mla_gather_launch(src_cache, dst[:num_tokens], slots, kv_cache_dtype,
                       scale)


def _mla_gather_fake(src_cache, dst, block_table, cu_seq_lens, token_to_seq,
                     num_tokens, kv_cache_dtype, scale, seq_starts=None):
    _check_mla_gather(src_cache, dst, kv_cache_dtype, scale)
    _check_token_tables(dst, block_table, cu_seq_lens, token_to_seq,
                        num_tokens, seq_starts)


#: torch dtype of the same element size whose kvgen gather is a bit copy
#: (cp_gather_cache's raw copy of any dtype).
_RAW_FLOAT = {2: torch.bfloat16, 4: torch.float32}


def _raw_float_view(name, t):
    """t (any dtype of 1, 2 or 4 bytes) as a float tensor of the same
    bytes: itself for bf16 / f16 / f32, a view otherwise (1-byte elements
    in pairs: the last dimension even and contiguous, the other strides
    even)."""
    if dtype_name(t) in FLOAT_DTYPES:
        return t
    esz = t.element_size()
    if esz not in (1, 2, 4):
        raise TypeError(f"kvgen: {name} has dtype {t.dtype}: elements of 1, "
                        "2 or 4 bytes are supported")
    if esz == 1:
        if t.shape[-1] % 2 or any(s % 2 for s in t.stride()[:-1]):
            raise ValueError(f"kvgen: {name} ({t.dtype}, shape "
                             f"{list(t.shape)}, strides {list(t.stride())}) "
                             "is copied in 2-byte units: its last dimension "
                             "and its other strides must be even")
        return t.view(torch.bfloat16)
    return t.view(_RAW_FLOAT[esz])


def _check_cp_gather(src_cache, dst):
    if src_cache.dtype != dst.dtype:
        raise TypeError(f"kvgen: src_cache ({src_cache.dtype}) and dst "
                        f"({dst.dtype}) must have the same dtype (a raw "
                        "copy)")
    if src_cache.dim() != 3 or dst.dim() != 2 or \
            dst.shape[1] != src_cache.shape[2]:
        raise ValueError(f"kvgen: src_cache {list(src_cache.shape)} and dst "
                         f"{list(dst.shape)} must be [num_blocks, "
                         "block_size, entry] and [num_tokens, entry]")
    for name, t in (("src_cache", src_cache), ("dst", dst)):
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"kvgen: {name}'s last dimension must be "
                             f"contiguous (stride {t.stride(-1)}, need 1)")
    _same_device(dst, src_cache=src_cache)


def cp_gather_cache(src_cache, dst, block_table, cu_seq_lens, batch_size,
                    seq_starts=None):
    """vLLM's cp_gather_cache: the batch form's gather as a raw copy
    (src_cache and dst of one dtype, any of 1, 2 or 4 bytes: dst row
    cu_seq_lens[b] + i = src_cache[block_table[b, p // block_size], p %
    block_size], p = i + seq_starts[b]); the same checks and reports as
    gather_and_maybe_dequant_cache_batch."""
    _check_cp_gather(src_cache, dst)
    _batch_gather(_raw_float_view("src_cache", src_cache),
                  _raw_float_view("dst", dst), block_table, cu_seq_lens,
                  batch_size, "auto", None, seq_starts)


def _cp_gather_fake(src_cache, dst, block_table, cu_seq_lens, batch_size,
                    seq_starts=None):
    _check_cp_gather(src_cache, dst)
    _check_mla_tables(dst, block_table, cu_seq_lens, batch_size, seq_starts)


def _check_upconvert(src_cache, dst, block_table, workspace_starts,
                     batch_size, seq_starts):
    """cp_gather_and_upconvert_fp8_kv_cache's checks (all but the index
    values): vLLM's src_cache / dst shapes and dtypes, the tables of
    batch_size requests."""
    _ds_mla_cache("src_cache", src_cache)
    if dst.dtype != torch.bfloat16:
        raise TypeError(f"kvgen: dst has dtype {dst.dtype}, need bfloat16")
    if dst.dim() != 2 or dst.shape[1] != DS_MLA_L + DS_MLA_R:
        raise ValueError(f"kvgen: dst has shape {list(dst.shape)}, need "
                         f"[num_tokens, {DS_MLA_L + DS_MLA_R}]")
    if dst.stride(1) != 1:
        raise ValueError(f"kvgen: dst's last dimension must be contiguous "
                         f"(stride {dst.stride(1)}, need 1)")
    _same_device(dst, src_cache=src_cache)
    _batch_tables(dst, batch_size, block_table=block_table,
                  workspace_starts=workspace_starts, seq_starts=seq_starts)


def _workspace_slots(nb, bs, rows, dst_rows, block_table, workspace_starts,
                     batch_size, seq_starts, bad_slot):
    """int64 [rows] slots of cp_gather_and_upconvert_fp8_kv_cache, on the
    device without a host synchronization: dst row t belongs to the last
    request b with workspace_starts[b] <= t (request b owns [ws[b],
    ws[b + 1]), the last one up to dst's end), at position p = t - ws[b] +
    seq_starts[b]; -1 (untouched) for rows before ws[0]; bad_slot for a
    row whose p < 0, p // bs past b's block_table row or block id outside
    [0, nb), and for every row when workspace_starts is not nondecreasing
    from >= 0 to <= dst_rows."""
    dev = block_table.device
    B = batch_size
    ws = workspace_starts[:B].to(torch.int64)
    t = torch.arange(rows, device=dev, dtype=torch.int64)
    bad_all = (ws[0] < 0) | (ws[B - 1] > dst_rows) | (ws[1:] < ws[:-1]).any()
    b = torch.searchsorted(ws, t, right=True) - 1
    inside = (b >= 0) & (t < dst_rows)
    b = b.clamp_(min=0)
    # ws[b] <= t here, so t - ws[b] >= 0; a start that takes the position
    # past 2^63 - 1 wraps to p < 0, which _table_slots refuses.
    return _row_slots(nb, bs, block_table, b, t - ws[b], seq_starts, inside,
                      bad_all, bad_slot)


def cp_gather_and_upconvert_fp8_kv_cache(src_cache, dst, block_table,
                                         workspace_starts, batch_size,
                                         seq_starts=None):
    """vLLM's reader of "fp8_ds_mla" caches (its current schema): request
    b < batch_size owns dst rows [workspace_starts[b], workspace_starts[b
    + 1]), the last one up to dst's end; row workspace_starts[b] + i gets
    the entry at position p = i + seq_starts[b] (0 without seq_starts),
    block_table[b, p // block_size], token p % block_size, upconverted:
    dst[row, e] = bf16(float(e4m3 byte e) * scale[e // 128]) for e < 512
    (round to nearest even), dst[row, 512:] = the 64 stored bf16 rope
    values, bit for bit. Rows before workspace_starts[0] are untouched.

    src_cache [num_blocks, block_size, 656] uint8 or float8_e4m3fn (any
    block / token strides, the entry contiguous: what concat_and_cache_mla
    writes with kv_cache_dtype "fp8_ds_mla"); dst [N, 576] bfloat16 (any
    row stride, last dim contiguous); block_table [>= batch_size, M],
    workspace_starts [>= batch_size], seq_starts [>= batch_size] int32
    (int64 accepted), all on dst's device; batch_size an int >= 0:
    ValueError / TypeError naming the argument otherwise, before any
    launch. batch_size 0 writes nothing.

    Rows the gather cannot serve are skipped (dst row untouched) and
    reported through the device's error word (check_errors() raises
    KvgenError KVGEN_ERROR_INDEX_OUT_OF_RANGE; no host synchronization;
    set_unchecked(True): unreported): p < 0, p // block_size past b's
    block_table row (a request longer than its row), a block id outside
    [0, num_blocks). workspace_starts that is not nondecreasing, starts
    below 0 or has a start past dst's rows makes the call write nothing
    (every row reported). (vLLM's kernel reads outside the tables or the
    cache for the first, clamps starts to dst's rows and writes rows
    twice or before dst for the second.)

    Like the other gathers by block table, this computes each row's slot
    with torch ops on the device (searchsorted over workspace_starts, a
    block_table lookup: O(N) temporaries, allocated per call) and runs
    kvgen's kv.gather_mla with dequantize over the per_tile layout of the
    writer (docs/layout.md "Per-tile scales")."""
    _check_upconvert(src_cache, dst, block_table, workspace_starts,
                     batch_size, seq_starts)
    if batch_size == 0:
        return  # no request: nothing to gather
    _gather_dst_rows(src_cache, dst, DS_MLA, None,
                     lambda nb, bs, rows, bad: _workspace_slots(
                         nb, bs, rows, dst.shape[0], block_table,
                         workspace_starts, batch_size, seq_starts, bad))


def _upconvert_fake(src_cache, dst, block_table, workspace_starts,
                    batch_size, seq_starts=None):
    _check_upconvert(src_cache, dst, block_table, workspace_starts,
                     batch_size, seq_starts)


#: [n] int64 0, 1, ... per device (convert_fp8's slots), grown on demand.
_iota = {}


def _arange(n, device):
    a = _iota.get(device)
    if a is None or a.shape[0] < n:
        a = torch.arange(max(n, 1024), dtype=torch.int64, device=device)
        _iota[device] = a
    return a[:n]


_FP8_NAMES = ("fp8", "fp8_e4m3", "fp8_e5m2")


def _check_convert(dst_cache, src_cache, scale, kv_cache_dtype):
    """(quantize?, row width): convert_fp8's checks."""
    if kv_cache_dtype not in _FP8_NAMES:
        raise ValueError(f"kvgen: convert_fp8's kv_cache_dtype "
                         f"{kv_cache_dtype!r} must be 'fp8', 'fp8_e4m3' or "
                         "'fp8_e5m2' (vLLM's kernel has no 'auto' "
                         "conversion)")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or \
            not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"kvgen: convert_fp8's scale {scale!r} must be a "
                         "finite float > 0")
    _same_device(dst_cache, src_cache=src_cache)
    if dst_cache.shape != src_cache.shape:
        raise ValueError(f"kvgen: dst_cache has shape "
                         f"{list(dst_cache.shape)}, src_cache "
                         f"{list(src_cache.shape)}: need the same")
    for name, t in (("dst_cache", dst_cache), ("src_cache", src_cache)):
        if not t.is_contiguous():
            raise ValueError(f"kvgen: {name} must be contiguous (strides "
                             f"{list(t.stride())})")
    quantize = dtype_name(src_cache) in FLOAT_DTYPES
    fp8, flt = (dst_cache, src_cache) if quantize else (src_cache, dst_cache)
    if dtype_name(flt) not in FLOAT_DTYPES:
        raise TypeError(f"kvgen: convert_fp8 converts between a float cache "
                        f"(bfloat16, float16, float32) and an fp8 one; "
                        f"src_cache is {src_cache.dtype}, dst_cache "
                        f"{dst_cache.dtype}")
    _cache_dtype("dst_cache" if quantize else "src_cache", fp8,
                 kv_cache_dtype, None)
    W = src_cache.shape[-1] if src_cache.dim() else 1
    if src_cache.numel() and W < 2:
        raise ValueError(f"kvgen: convert_fp8 needs a last dimension of >= 2 "
                         f"elements (shape {list(src_cache.shape)})")
    return quantize, W


def convert_fp8(dst_cache, src_cache, scale, kv_cache_dtype="fp8"):
    """vLLM's convert_fp8 (a test helper there): every element of
    src_cache converted into dst_cache (same shape, contiguous, one
    device): a float src_cache (bf16 / f16 / f32) quantized into an fp8
    dst_cache (uint8 or the float8 dtype of kv_cache_dtype) as
    saturate(x / scale), an fp8 src_cache dequantized into a float
    dst_cache as q * scale. kv_cache_dtype "fp8" / "fp8_e4m3" (e4m3fn) or
    "fp8_e5m2" (vLLM's kernel: e4m3 only); scale a float > 0. Runs kvgen's
    MLA write / gather kernels over rows of the last dimension (>= 2
    elements), so the bits are the ones kvgen's writes store."""
    quantize, W = _check_convert(dst_cache, src_cache, scale, kv_cache_dtype)
    if src_cache.numel() == 0:
        return
    src = src_cache.reshape(-1, W)
    dst = dst_cache.view(-1, W)
    n = src.shape[0]
    slots = _arange(n, src.device)
    s = torch.full((1,), float(scale), dtype=torch.float32,
                   device=src.device)
    L = _mla_split(W)[0]
    if quantize:
        concat_and_cache_mla(src[:, :L], src[:, L:], dst.view(n, 1, W),
                             slots, kv_cache_dtype, s)
    else:
        _mla_gather_launch(src.view(n, 1, W), dst, slots, kv_cache_dtype, s)


def _convert_fake(dst_cache, src_cache, scale, kv_cache_dtype="fp8"):
    _check_convert(dst_cache, src_cache, scale, kv_cache_dtype)


#---------------------------------------------------------------------------
# copy_blocks / swap_blocks (raw bits: any dtype of the element's size)
#---------------------------------------------------------------------------

_RAW = {1: ("f8E4M3FN", "per_tensor"), 2: ("bf16", "none"),
        4: ("f32", "none")}


def _raw_geometry(key_cache, value_cache):
    esz = key_cache.element_size()
    if esz not in _RAW:
        raise TypeError(f"kvgen: caches of {esz}-byte elements are not "
                        "supported (1, 2 or 4 bytes)")
    dtype, scale = _RAW[esz]
    return CacheGeometry(key_cache, value_cache, dtype, scale)


def _block_mapping(block_mapping, anchor):
    if block_mapping.dtype != torch.int64 or block_mapping.dim() != 2 or \
            block_mapping.shape[1] != 2:
        raise ValueError(f"kvgen: block_mapping has shape "
                         f"{list(block_mapping.shape)} and dtype "
                         f"{block_mapping.dtype}, need [N, 2] int64")
    if not block_mapping.is_contiguous():
        raise ValueError("kvgen: block_mapping must be contiguous")


def _copy_plan(key_cache, value_cache, block_mapping):
    _block_mapping(block_mapping, key_cache)
    _same_device(key_cache, value_cache=value_cache,
                 block_mapping=block_mapping)
    if key_cache.dtype != value_cache.dtype:
        raise TypeError("kvgen: key_cache and value_cache differ in dtype")
    geo = _raw_geometry(key_cache, value_cache)
    k = _kernel(key_cache.device, "copy_blocks", geo.layout)
    p = _Plan(k, key_cache.device, num_blocks=geo.num_blocks,
              key_cache_bytes=geo.key_bytes,
              value_cache_bytes=geo.value_bytes)
    p.geo = geo
    return p


def _copy_checked(key_cache, value_cache, block_mapping):
    """The plan of one layer's copy, its caches checked (ValueError when
    they share memory)."""
    delta = value_cache.data_ptr() - key_cache.data_ptr()
    sig = ("c", key_cache.dtype, key_cache.device, key_cache.shape,
           key_cache.stride(), value_cache.dtype, value_cache.device,
           value_cache.shape, value_cache.stride(),
           delta == key_cache.shape[-1] * key_cache.element_size(),
           block_mapping.device)
    p = _plans.get(sig)
    if p is None:
        p = _plan(sig, lambda: _copy_plan(key_cache, value_cache,
                                          block_mapping))
    p.geo.check_disjoint(key_cache.data_ptr(), value_cache.data_ptr())
    return p


def _copy_one(key_cache, value_cache, block_mapping, p=None):
    """One layer's copy; p: its plan from _copy_checked (else found
    here)."""
    if p is None:
        p = _copy_checked(key_cache, value_cache, block_mapping)
    a = p.args()
    a.key_cache = key_cache.data_ptr()
    a.value_cache = value_cache.data_ptr()
    a.block_mapping = block_mapping.data_ptr()
    a.num_pairs = block_mapping.shape[0]
    p.launch(a)


def copy_blocks(key_caches, value_caches, block_mapping):
    """torch.ops.kvgen.copy_blocks's implementation: for every layer l and
    row (src, dst) of block_mapping, block src of key_caches[l] /
    value_caches[l] to block dst (raw bits)."""
    if len(key_caches) != len(value_caches):
        raise ValueError(f"kvgen: {len(key_caches)} key caches, "
                         f"{len(value_caches)} value caches")
    _copy_blocks_fake(key_caches, value_caches, block_mapping)
    # Every layer checked before the first is copied.
    plans = [_copy_checked(kc, vc, block_mapping)
             for kc, vc in zip(key_caches, value_caches)]
    for kc, vc, p in zip(key_caches, value_caches, plans):
        _copy_one(kc, vc, block_mapping, p)


def _copy_blocks_fake(key_caches, value_caches, block_mapping):
    if len(key_caches) != len(value_caches):
        raise ValueError(f"kvgen: {len(key_caches)} key caches, "
                         f"{len(value_caches)} value caches")
    for kc, vc in zip(key_caches, value_caches):
        if kc.dim() != 4 or vc.dim() != 4:
            raise ValueError("kvgen: caches must be [num_blocks, block_size, "
                             "num_kv_heads, head_size]")
        _block_mapping(block_mapping, kc)
        _same_device(kc, value_cache=vc, block_mapping=block_mapping)


def _split_rows(cache):
    """A [nb, bs, H, D] or [nb, bs, E] cache as the two halves of a packed
    K|V row (for whole-row copies)."""
    if cache.dim() == 3:
        cache = cache.unsqueeze(2)
    if cache.dim() != 4:
        raise ValueError(f"kvgen: a cache of shape {list(cache.shape)}: need "
                         "[num_blocks, block_size, num_kv_heads, head_size] "
                         "or [num_blocks, block_size, entry]")
    L, _ = _mla_split(cache.shape[3])
    return cache[..., :L], cache[..., L:]


def copy_blocks_mla(kv_caches, block_mapping):
    """torch.ops.kvgen.copy_blocks_mla's implementation: copy_blocks over
    single [num_blocks, block_size, entry] caches."""
    # Every call (the plans are keyed by the caches only).
    _block_mapping(block_mapping, None)
    for c in kv_caches:
        k, v = _split_rows(c)
        _copy_one(k, v, block_mapping)


def _swap_plan(src_k, src_v, dst_k, dst_v, block_mapping):
    _block_mapping(block_mapping, dst_k)
    if src_k.dtype != dst_k.dtype:
        raise TypeError(f"kvgen: src has dtype {src_k.dtype}, dst "
                        f"{dst_k.dtype}")
    if src_k.shape[1:] != dst_k.shape[1:] or \
            src_k.stride() != dst_k.stride():
        raise ValueError(f"kvgen: src {list(src_k.shape)} / strides "
                         f"{list(src_k.stride())} and dst "
                         f"{list(dst_k.shape)} / {list(dst_k.stride())} "
                         "must share one layout (only num_blocks may "
                         "differ)")
    gs = _raw_geometry(src_k, src_v)
    gd = _raw_geometry(dst_k, dst_v)
    dev = dst_k.device if dst_k.device.type != "cpu" else src_k.device
    if block_mapping.device.type == "cpu" and dev.type != "cpu" and \
            not block_mapping.is_pinned():
        raise ValueError("kvgen: block_mapping is in pageable CPU memory; "
                         "the kernel reads it on the GPU: pass it on the "
                         "device or pinned (block_mapping.pin_memory())")
    for name, t in (("src", src_k), ("dst", dst_k)):
        if t.device.type == "cpu" and dev.type != "cpu" and \
                not t.is_pinned():
            raise ValueError(f"kvgen: {name} is in pageable CPU memory; a "
                             "CPU cache swapped with a GPU cache must be "
                             "pinned")
    k = _kernel(dev, "swap_blocks", gs.layout)
    p = _Plan(k, dev, src_num_blocks=gs.num_blocks,
              dst_num_blocks=gd.num_blocks, src_key_cache_bytes=gs.key_bytes,
              src_value_cache_bytes=gs.value_bytes,
              dst_key_cache_bytes=gd.key_bytes,
              dst_value_cache_bytes=gd.value_bytes)
    return p


def swap_blocks_device_mapping(src, dst, block_mapping):
    """torch.ops.kvgen.swap_blocks_device_mapping's implementation (kvgen's
    own form; vLLM's is swap_blocks): for each row (s, d) of block_mapping,
    block s of src to block d of dst (raw bits; src and dst of one layout,
    each [num_blocks, block_size, H, D] or [num_blocks, block_size, entry],
    on one device or a pinned CPU tensor and a CUDA one). block_mapping
    [N, 2] int64 on the kernel's device or pinned: no copy of it, no
    allocation, so CUDA graphs can capture the call."""
    # Between the CPU and a GPU, pageable CPU memory is refused (the GPU
    # reads it through unified addressing): pinned-ness is part of the key.
    # block_mapping's shape, dtype and strides are not: checked every call.
    _block_mapping(block_mapping, dst)
    mixed = src.is_cpu != dst.is_cpu
    sig = ("s", src.dtype, src.device, src.shape, src.stride(), dst.dtype,
           dst.device, dst.shape, dst.stride(), block_mapping.device,
           mixed and (src.is_cpu and src.is_pinned(),
                      dst.is_cpu and dst.is_pinned(),
                      block_mapping.is_cpu and block_mapping.is_pinned()))
    p = _plans.get(sig)
    if p is None:
        sk, sv = _split_rows(src)
        dk, dv = _split_rows(dst)
        p = _plan(sig, lambda: _swap_plan(sk, sv, dk, dv, block_mapping))
    a = p.args()
    L = _mla_split(src.shape[-1])[0] * src.element_size()
    a.src_key_cache = src.data_ptr()
    a.src_value_cache = src.data_ptr() + L
    a.dst_key_cache = dst.data_ptr()
    a.dst_value_cache = dst.data_ptr() + L
    a.block_mapping = block_mapping.data_ptr()
    a.num_pairs = block_mapping.shape[0]
    p.launch(a)


def _swap_fake(src, dst, block_mapping):
    _block_mapping(block_mapping, dst)


#: element size -> the float dtype of swap_blocks' raw block views
_RAW_VIEW = {4: torch.float32, 2: torch.bfloat16, 1: torch.uint8}


def _check_swap(src, dst, block_size_in_bytes, block_mapping):
    """vLLM's swap_blocks' arguments as far as they need no data pointer:
    block_size_in_bytes is each tensor's block stride in bytes,
    block_mapping a CPU [N, 2] int64."""
    _int_arg("block_size_in_bytes", block_size_in_bytes)
    for name, t in (("src", src), ("dst", dst)):
        if t.dim() < 1:
            raise ValueError(f"kvgen: {name} has no block dimension")
        want = t.element_size() * t.stride(0)
        if block_size_in_bytes != want:
            raise ValueError(f"kvgen: block_size_in_bytes "
                             f"{block_size_in_bytes} is not {name}'s block "
                             f"stride in bytes ({want} = element size "
                             f"{t.element_size()} x stride(0) {t.stride(0)})"
                             ": kvgen swaps whole blocks of the tensors")
    if block_size_in_bytes == 0:
        raise ValueError("kvgen: block_size_in_bytes is 0 (blocks of no "
                         "bytes)")
    if block_mapping.device.type != "cpu":
        raise ValueError(f"kvgen: block_mapping is on "
                         f"{block_mapping.device}; vLLM's swap_blocks takes "
                         "it on the CPU (swap_blocks_device_mapping takes "
                         "it on the device)")
    if block_mapping.dtype != torch.int64 or block_mapping.dim() != 2 or \
            block_mapping.shape[1] != 2:
        raise ValueError(f"kvgen: block_mapping has shape "
                         f"{list(block_mapping.shape)} and dtype "
                         f"{block_mapping.dtype}, need [N, 2] int64")
    if src.device.type != "cpu" and dst.device.type != "cpu" and \
            src.device != dst.device:
        raise ValueError(f"kvgen: src is on {src.device}, dst on "
                         f"{dst.device}: one GPU, or a CPU and a GPU")


def _raw_blocks(name, t, block_bytes, esz):
    """t's memory as [num_blocks, rows, width] raw elements of esz bytes
    with a block stride of block_bytes (a block's bytes, padding between
    blocks included, as vLLM's byte copy moves them), within t's
    storage."""
    nb = t.shape[0]
    start = t.storage_offset() * t.element_size()
    if nb and start + nb * block_bytes > t.untyped_storage().nbytes():
        raise ValueError(f"kvgen: {name}'s {nb} blocks of {block_bytes} "
                         f"bytes from byte {start} run past its storage "
                         f"({t.untyped_storage().nbytes()} bytes)")
    n = block_bytes // esz
    width = next((w for w in (512, 256, 128, 64, 32, 16, 8, 4, 2)
                  if n % w == 0), n)
    if width < 2:
        raise ValueError(f"kvgen: blocks of {block_bytes} byte(s) are too "
                         "small to swap")
    raw = torch.empty(0, dtype=_RAW_VIEW[esz], device=t.device)
    return raw.set_(t.untyped_storage(), start // esz,
                    (nb, n // width, width), (n, width, 1))


def _check_swap_order(src, dst, block_bytes, block_mapping):
    """ValueError when the result would depend on the order of
    block_mapping's rows: kvgen's kernel copies them in parallel (vLLM's
    swap_blocks one after another). No row's destination block may share
    a byte with another row's destination nor, where src and dst are on
    one device (e.g. one tensor), with another row's source, nor with its
    own source but for being that block. Rows with a block id outside
    either tensor are skipped by the kernel (and reported) and are left
    out here. block_mapping is on the CPU: no synchronization."""
    m = block_mapping.to(torch.int64)
    s, d = m[:, 0], m[:, 1]
    rows = ((s >= 0) & (s < src.shape[0]) & (d >= 0) &
            (d < dst.shape[0])).nonzero().flatten()
    if rows.numel() == 0:
        return
    dst_at = dst.data_ptr() + d[rows] * block_bytes
    src_at = src.data_ptr() + s[rows] * block_bytes
    one = src.device == dst.device
    # Blocks are [at, at + block_bytes): two meet iff |a - b| < block_bytes.
    pts = torch.cat([dst_at, src_at]) if one else dst_at
    pts = pts.sort().values
    meets = (torch.searchsorted(pts, dst_at + block_bytes) -
             torch.searchsorted(pts, dst_at - block_bytes, right=True))
    own = 1 + (one & (src_at == dst_at)).long()
    bad = (meets > own).nonzero().flatten()
    if bad.numel() == 0:
        return
    i = int(bad[0])
    near_dst = (dst_at - dst_at[i]).abs() < block_bytes
    near_dst[i] = False
    near_src = ((src_at - dst_at[i]).abs() < block_bytes) & one
    near_src[i] &= bool(src_at[i] != dst_at[i])
    writes = bool(near_dst.any())
    j = int((near_dst if writes else near_src).nonzero()[0])
    ri, rj = int(rows[i]), int(rows[j])
    other = ("the same row reads (its source and destination blocks "
             "overlap partly)" if ri == rj else
             f"row {rj} ({int(s[rj])} -> {int(d[rj])}) "
             f"{'writes' if writes else 'reads'}")
    raise ValueError(
        f"kvgen: block_mapping row {ri} ({int(s[ri])} -> {int(d[ri])}) "
        f"writes bytes that {other}: kvgen copies the rows of one call in "
        "parallel (vLLM's swap_blocks one after another), so the result "
        "would depend on their order. A destination block may appear once "
        "and, where src and dst share memory, not as another row's source "
        "(split the mapping into calls)")


def swap_blocks(src, dst, block_size_in_bytes, block_mapping):
    """torch.ops.kvgen.swap_blocks's implementation, vLLM's current op: for
    each row (s, d) of block_mapping, the block_size_in_bytes bytes of
    block s of src to block d of dst. src, dst: caches of any shape and
    dtype whose dimension 0 is the block (each a CPU or a CUDA tensor; the
    CPU side pinned when the other is on a GPU: kvgen's kernel reaches it
    through unified addressing); block_size_in_bytes: their block stride
    in bytes (element_size() * stride(0), what vLLM's callers pass;
    another value: ValueError); block_mapping [N, 2] int64 on the CPU (any
    strides; copied to the GPU per call for a CUDA kernel). Block ids
    outside either tensor's blocks are skipped and reported
    (check_errors). The rows are copied in parallel: a mapping whose
    result depends on their order (a destination block twice, or, where
    src and dst share memory, a destination that is another row's source,
    e.g. 0 -> 1, 1 -> 2 within one tensor) raises ValueError
    (_check_swap_order), nothing copied."""
    _check_swap(src, dst, block_size_in_bytes, block_mapping)
    _check_swap_order(src, dst, block_size_in_bytes, block_mapping)
    # The widest element that divides the block and both start addresses:
    # one raw layout for both sides.
    esz = next(e for e in (4, 2, 1) if block_size_in_bytes % e == 0 and
               all(t.data_ptr() % e == 0 for t in (src, dst)))
    raw_src = _raw_blocks("src", src, block_size_in_bytes, esz)
    raw_dst = _raw_blocks("dst", dst, block_size_in_bytes, esz)
    dev = dst.device if dst.device.type != "cpu" else src.device
    m = block_mapping.contiguous()
    if dev.type != "cpu":
        m = m.to(dev)
    swap_blocks_device_mapping(raw_src, raw_dst, m)


def _swap_vllm_fake(src, dst, block_size_in_bytes, block_mapping):
    _check_swap(src, dst, block_size_in_bytes, block_mapping)


#---------------------------------------------------------------------------
# Registration
#---------------------------------------------------------------------------

_SCHEMAS = {
    "reshape_and_cache_flash": (
        "(Tensor key, Tensor value, Tensor(a!) key_cache, "
        "Tensor(b!) value_cache, Tensor slot_mapping, str kv_cache_dtype, "
        "Tensor k_scale, Tensor v_scale, bool pdl=False) -> ()",
        _write_fast, _write_fake),
    "reshape_and_cache": (
        "(Tensor key, Tensor value, Tensor(a!) key_cache, "
        "Tensor(b!) value_cache, Tensor slot_mapping, str kv_cache_dtype, "
        "Tensor k_scale, Tensor v_scale, bool pdl=False) -> ()",
        _legacy_write_fast, _legacy_write_fake),
    "gather_cache": (
        "(Tensor key_cache, Tensor value_cache, Tensor slot_mapping, "
        "Tensor(a!) key_out, Tensor(b!) value_out, str kv_cache_dtype, "
        "Tensor k_scale, Tensor v_scale) -> ()",
        _gather_impl, _gather_fake),
    "concat_and_cache_mla": (
        "(Tensor kv_c, Tensor k_pe, Tensor(a!) kv_cache, "
        "Tensor slot_mapping, str kv_cache_dtype, Tensor scale, "
        "bool pdl=False) -> ()",
        concat_and_cache_mla, _mla_fake),
    "gather_and_maybe_dequant_cache": (
        "(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
        "Tensor cu_seq_lens, Tensor token_to_seq, int num_tokens, "
        "str kv_cache_dtype, Tensor scale, Tensor? seq_starts=None) -> ()",
        gather_and_maybe_dequant_cache, _mla_gather_fake),
    "gather_and_maybe_dequant_cache_batch": (
        "(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
        "Tensor cu_seq_lens, int batch_size, str kv_cache_dtype, "
        "Tensor scale, Tensor? seq_starts=None) -> ()",
        gather_and_maybe_dequant_cache_batch, _mla_gather_batch_fake),
    "cp_gather_cache": (
        "(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
        "Tensor cu_seq_lens, int batch_size, Tensor? seq_starts=None) -> ()",
        cp_gather_cache, _cp_gather_fake),
    "cp_gather_and_upconvert_fp8_kv_cache": (
        "(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
        "Tensor workspace_starts, int batch_size, "
        "Tensor? seq_starts=None) -> ()",
        cp_gather_and_upconvert_fp8_kv_cache, _upconvert_fake),
    "convert_fp8": (
        "(Tensor(a!) dst_cache, Tensor src_cache, float scale, "
        "str kv_cache_dtype) -> ()",
        convert_fp8, _convert_fake),
    "copy_blocks": (
        "(Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, "
        "Tensor block_mapping) -> ()",
        copy_blocks, _copy_blocks_fake),
    "copy_blocks_mla": (
        "(Tensor(a!)[] kv_caches, Tensor block_mapping) -> ()",
        copy_blocks_mla,
        lambda kv_caches, block_mapping: _block_mapping(block_mapping, None)),
    "swap_blocks": (
        "(Tensor src, Tensor(a!) dst, int block_size_in_bytes, "
        "Tensor block_mapping) -> ()",
        swap_blocks, _swap_vllm_fake),
    "swap_blocks_device_mapping": (
        "(Tensor src, Tensor(a!) dst, Tensor block_mapping) -> ()",
        swap_blocks_device_mapping, _swap_fake),
}

#: Ops whose CPU / CUDA kernel is the C++ one (_torch_fast.cpp): name ->
#: (the Python op it falls back to, its implementation, the role of each
#: schema argument for the C++ signature).
_CPP_OPS = {
    "reshape_and_cache_flash": ("_reshape_and_cache_flash_py", _write_slow,
                                "RRFFSKCCP"),
    "reshape_and_cache": ("_reshape_and_cache_py", _legacy_write_slow,
                          "RRFFSKCCP"),
}

def _register():
    """Defines the ops (and the Python ops that _CPP_OPS fall back to),
    registers the fake implementations, builds / loads the C++ kernel
    (kvgen/_torch_fast.py) and registers it for the ops of _CPP_OPS, the
    Python implementations for the others (and for all where the C++ kernel
    is not available). Returns (library, C++ kernel or None, why None)."""
    lib = torch.library.Library("kvgen", "DEF")
    for name, (schema, _, fake) in _SCHEMAS.items():
        lib.define(name + schema)
        torch.library.register_fake("kvgen::" + name, fake, lib=lib)
    for name, (slow, impl, _) in _CPP_OPS.items():
        lib.define(slow + _SCHEMAS[name][0])
        lib.impl(slow, impl, "CPU")
        lib.impl(slow, impl, "CUDA")
    cpp, why = _torch_fast.load(torch)
    if cpp is not None:
        try:
            for name, (slow, _, roles) in _CPP_OPS.items():
                cpp.register("kvgen", name, slow, roles)
        except RuntimeError as e:
            cpp, why = None, f"registering the C++ kernel: {e}"
    for name, (_, impl, _) in _SCHEMAS.items():
        if cpp is None or name not in _CPP_OPS:
            lib.impl(name, impl, "CPU")
            lib.impl(name, impl, "CUDA")
    from ._torch_attention import register as register_attention
    globals().update(register_attention(lib, cpp))  # _torch_attention.py
    return lib, cpp, why


_library, _cpp, _cpp_why = _register()
if _cpp is None and _cpp_why != "KVGEN_TORCH_FAST=0":
    # Asked for (the default) but not available: say so once, since the
    # Python kernels cost several microseconds more per call.
    warnings.warn("kvgen.torch: the C++ kernel is not available, using the "
                  "Python kernels (same results, more host time per call; "
                  "KVGEN_TORCH_FAST=0 silences this): " + _cpp_why,
                  RuntimeWarning, stacklevel=2)
_write_op = torch.ops.kvgen.reshape_and_cache_flash.default
_legacy_write_op = torch.ops.kvgen.reshape_and_cache.default


def fast_path_info():
    """How torch.ops.kvgen.reshape_and_cache_flash (and the Python
    function of the same name) are launched, as a dict:
      kernel   "c++": a C++ kernel (kvgen/_torch_fast.cpp, built against
               this torch on first use) launches every call whose tensor
               metadata it has seen checked, and sends the others to the
               Python implementation; "python": the Python kernels (no
               compiler, no torch headers, KVGEN_TORCH_FAST=0, ...)
      library  the C++ kernel's shared library (None with "python")
      reason   why "python" (None with "c++")
      hits, misses, entries   C++ kernel: calls it launched, calls it sent
               to the Python implementation, plans it holds (0 with
               "python")
    Host time per call: bench/torch_overhead.py, docs/torch.md."""
    hits, misses, entries = _cpp.stats() if _cpp is not None else (0, 0, 0)
    return {"kernel": "c++" if _cpp is not None else "python",
            "library": _cpp.path if _cpp is not None else None,
            "reason": _cpp_why, "hits": hits, "misses": misses,
            "entries": entries}
