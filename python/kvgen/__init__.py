"""Python binding (ctypes) of the kvgen JIT runtime C API (kvgen.h).

For engine developers: load kernels emitted with `kvgen emit --bundle DIR`,
then launch them on torch tensors (CUDA/HIP backends) or numpy arrays (the
HOST backend, for CI)::

    import kvgen, torch
    ctx = kvgen.Context("cuda", device=0)
    ctx.load_bundle(".dev/bundle")
    layout = kvgen.Layout(num_kv_heads=4, head_size_k=192, head_size_v=128,
                          block_size=16, dtype="bf16")
    write = ctx.kernel("reshape_and_cache", layout, io_dtype="bf16")
    write.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)

Shapes (T = num_tokens, H = num_kv_heads, Dk/Dv = head_size_k/v):
  key / key_out     [T, H, Dk], last dim contiguous, any token/head strides
  value / value_out [T, H, Dv], as key
  slot_mapping      [T] int32 or int64 (the kernel's slot dtype); < 0 = pad
  key_cache, value_cache: a raw buffer (C-contiguous, any shape and dtype,
      e.g. uint8 for fp8; a strided 1-D view such as parent[::2] raises
      ValueError: the kernel would write the parent's elements between the
      view's) whose memory holds the layout's extent, or a view of
      the layout's shape ([num_blocks, block_size, H, D] for nhd,
      [num_blocks, H, block_size, D] for hnd; D = Dk + Dv when packed) in
      the cache dtype, whose strides must then be the layout's: a mismatch
      (e.g. the K and V halves of a [num_blocks, 2, block_size, H, D]
      allocation passed to a dense layout) raises ValueError naming the
      stride and the k_strides / v_strides that would describe the views.
      '?' layout strides are taken from such views when cache_strides is
      not given. K and V views of one allocation must not overlap. The size
      in bytes is the span of the view (numel * element_size for a
      contiguous one). A packed layout uses key_cache only (value_cache may
      be None). A contiguous 4-D cache whose middle dims are block_size
      and H (either order) is taken as such a view for a layout with
      default strides: its shape must then be the layout's (ValueError for
      another head size, K and V swapped, or the other order).
  block_mapping     [N, 2] int64 (src, dst) rows, C-contiguous (copy_blocks,
                    swap_blocks); another shape ValueError, dtype TypeError
  k_scale / v_scale float32 [1] (scale = per_tensor) or [H] (per_head),
                    C-contiguous
  error_flag        int32 [>= 1] (0 elements: ValueError), optional:
                    kernels (all but `unchecked`
                    ones) skip a slot >= num_blocks * block_size and or
                    ERROR_BIT_INDEX (1) into it; paged_attention ors
                    ERROR_BIT_QUERY_LEN (2) for a query longer than
                    max_query_len, ERROR_BIT_QUERY_RANGE (4) for one
                    outside [0, num_tokens) (kvgen.h's kvgen_error_bit;
                    or-ed in: zero the flag before the launch);
                    without one they set the context's error word,
                    which Context.check() / Context.synchronize() report as
                    KvgenError (KVGEN_ERROR_INDEX_OUT_OF_RANGE), and which a
                    launch on the host backend checks at once

Programmatic dependent launch (CUDA, sm_90 kernels): launch(..., pdl=True)
/ launch_raw(args, stream, pdl=True) launch through kvgen_launch_ex with
KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT, so the kernel may start while the
previous kernel on the stream finishes (it waits for that kernel's writes on
the GPU, in griddepcontrol.wait). Kernel.dependent_launch says whether a
kernel accepts it; others (the host backend, sm_80/sm_89, paged_attention)
raise KvgenError (KVGEN_ERROR_INVALID_ARGUMENT) and launch nothing. Such
launches run a second entry of the kernel, which the runtime compiles on
the kernel's first pdl=True launch (docs/runtime.md): launch once with
pdl=True before capturing a CUDA graph to keep that compile out of it.

Every launch is validated by the runtime; failures raise KvgenError with the
runtime's message (kvgen_last_error()). Argument mistakes the binding can see
itself (shapes, dtypes, cache views whose strides are not the layout's) raise
ValueError / TypeError before any C call. So does a string argument (layout
text, paths, kernel names, option values) holding a NUL character, which
the C API would cut there (ValueError naming the argument; _capi.cstr).
Every array becomes a pointer in
one place (Kernel._fill_pointers), which checks by the field's role that the
array holds what the kernel addresses from that pointer: error_flag 1 int32,
scales 1 or H float32, sinks num_q_heads float32, slot_mapping T slots,
seq_lens T and query_start_loc T + 1 int32, block_mapping 2N int64, each
C-contiguous when more than one; raw buffers (caches, workspace)
C-contiguous, and cache_bytes no larger than the array; else ValueError
naming the argument, its size and what the kernel needs. So does a
read-only numpy array
(flags.writeable False) passed where the kernel writes (caches of writes,
copies and swaps, gather outputs, error_flag, workspace: the op table's
non-const pointer fields), and a flag option (unchecked, dequantize, ...)
given anything but a bool (TypeError).
"""

import collections
import ctypes
import logging
import re
import threading
import time
from pathlib import Path

from . import _capi

#: kvgen's logger: each kernel the runtime JIT-compiles for a
#: Context.kernel() / kernel_by_name() call (INFO: kernel name, target,
#: milliseconds), each one read from the disk cache (DEBUG), and the first
#: import's build of kvgen.torch's C++ kernel (INFO). Silent unless the
#: application configures logging (e.g. logging.basicConfig(level="INFO")).
log = logging.getLogger("kvgen")

__all__ = ["Chunks", "Context", "Kernel", "KvgenError", "Layout",
           "DTYPE_SIZES",
           "generator_path", "library_path", "set_generator_path", "version"]

#: Size in bytes of one element of each kvgen dtype.
DTYPE_SIZES = {"bf16": 2, "f16": 2, "f32": 4, "f8E4M3FN": 1,
               "f8E4M3FNUZ": 1, "f8E5M2": 1, "f8E5M2FNUZ": 1}
FP8_DTYPES = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ")
SLOT_DTYPES = {"i32": 4, "i64": 8}
#: The bits checked kernels or into an error_flag (kvgen.h's
#: kvgen_error_bit): a slot / block id outside the cache (paged attention:
#: also a context past the block table); a query longer than
#: max_query_len; a query outside [0, num_tokens).
ERROR_BIT_INDEX, ERROR_BIT_QUERY_LEN, ERROR_BIT_QUERY_RANGE = 1, 2, 4


class KvgenError(RuntimeError):
    """A C API call failed. Attributes: status (int), status_name
    ("KVGEN_ERROR_OUT_OF_BOUNDS", ...), function (the C function) and
    message (kvgen_last_error() text)."""

    def __init__(self, function, status, message):
        self.function = function
        self.status = status
        self.status_name = _capi.status_name(status)
        self.message = message
        super().__init__(f"{function} failed: {self.status_name}: {message}")


def _check(function, status):
    if status != _capi.SUCCESS:
        raise KvgenError(function, status, _capi.last_error())


def library_path():
    """Path of the loaded libkvgen-runtime.so (see kvgen._capi)."""
    return _capi.lib_path()


def set_generator_path(path):
    """Where the runtime finds the code generator library
    (libkvgen-generator.so) for kernels no bundle has: the file, or a
    directory holding it; None = the default ($KVGEN_GENERATOR, else next to
    the runtime library); "" = none (bundles only). Process-wide
    (kvgen_set_generator_path)."""
    fn = _capi.lib().kvgen_set_generator_path if _capi.has(
        "kvgen_set_generator_path") else None
    if fn is None:
        raise NotImplementedError(f"{_capi.lib_path()} has no "
                                  "kvgen_set_generator_path")
    _check("kvgen_set_generator_path",
           fn(None if path is None else
              _capi.cstr("set_generator_path: path", str(path))))


def generator_path():
    """The generator library the runtime uses, loaded and checked now;
    None when there is none (the reason: KvgenError from
    kvgen_generator_library, raised only for a library that fails to
    load)."""
    if not _capi.has("kvgen_generator_library"):
        return None
    p = ctypes.c_char_p()
    st = _capi.lib().kvgen_generator_library(ctypes.byref(p))
    if st == 4:  # KVGEN_ERROR_NOT_FOUND
        return None
    _check("kvgen_generator_library", st)
    return p.value.decode()


def version():
    """The runtime's version string, e.g. "0.1.0"."""
    return _capi.lib().kvgen_version().decode()


def __getattr__(name):
    """kvgen.__version__: the runtime's version() (read from the library
    when first asked, so importing kvgen loads nothing)."""
    if name == "__version__":
        return version()
    raise AttributeError(f"module 'kvgen' has no attribute {name!r}")


#---------------------------------------------------------------------------
# Layout (kvgen::LayoutDesc read through the C API: one grammar, one model)
#---------------------------------------------------------------------------

_DYNAMIC = -(1 << 63)  # a '?' stride in kvgen_component_info


class Chunks(collections.namedtuple(
        "Chunks", "elem_stride token_chunk token_chunk_stride elem_chunk "
        "elem_chunk_stride")):
    """A component's chunked dimensions (Layout.chunks; kvgen_component_info
    fields of the same names), in elements; a chunk of 0 is none."""
    __slots__ = ()

    @property
    def is_default(self):
        """True for adjacent elements and no chunks (NHD / HND rows)."""
        return tuple(self) == (1, 0, 0, 0, 0)


def _strides_text(st):
    if len(st) != 3:
        raise ValueError(f"strides {tuple(st)!r} need 3 entries "
                         "(block, token, head)")
    return "[" + ", ".join("?" if x is None else str(int(x))
                           for x in st) + "]"


class Layout:
    """A paged cache layout (kvgen::LayoutDesc, runtime/include/kvgen/
    Layout.h), parsed and validated by the runtime (kvgen_layout_parse).

    Sizes and strides in elements. A K/V layout is built from
    `head_size_k` / `head_size_v`; other layouts (e.g. DeepSeek MLA) from
    `components=[("kv_c", 512), ("k_pe", 64)]`. `k_strides` / `v_strides`
    (K/V) or `strides={name: (block, token, head)}`: optional explicit
    strides; an entry None is a dynamic ('?') stride, given at launch time
    through `cache_strides`. Raises ValueError with the runtime's message
    when the layout is invalid.
    """

    def __init__(self, num_kv_heads, head_size_k=None, head_size_v=None,
                 block_size=None, dtype="bf16", order="nhd",
                 packing="separate", scale=None, k_strides=None,
                 v_strides=None, components=None, strides=None):
        if block_size is None:
            raise ValueError("Layout: block_size is required")
        if scale is None:
            scale = "per_tensor" if dtype in FP8_DTYPES else "none"
        # Each keyword goes into the layout text as one word: a value such
        # as packing='separate, k_strides = [...]' added fields of its own.
        words = dict(dtype=dtype, order=order, packing=packing, scale=scale)
        for name, size in components or ():
            words[f"component name {name!r}"] = name
        for what, value in words.items():
            if not (isinstance(value, str) and
                    re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value)):
                raise ValueError(f"Layout: {what} = {value!r} is not one "
                                 "word (letters, digits, '_')")
        parts = [f"num_kv_heads = {int(num_kv_heads)}"]
        strides = dict(strides or {})
        if components is None:
            if head_size_k is None or head_size_v is None:
                raise ValueError("Layout: give head_size_k and head_size_v "
                                 "or components")
            parts += [f"head_size_k = {int(head_size_k)}",
                      f"head_size_v = {int(head_size_v)}"]
            if k_strides is not None:
                strides["k"] = k_strides
            if v_strides is not None:
                strides["v"] = v_strides
        else:
            if head_size_k is not None or head_size_v is not None:
                raise ValueError("Layout: components excludes head_size_k "
                                 "/ head_size_v")
            parts.append("components = [" + ", ".join(
                f"{name}: {int(size)}" for name, size in components) + "]")
        parts += [f"block_size = {int(block_size)}", f"order = {order}",
                  f"packing = {packing}", f"dtype = {dtype}",
                  f"scale = {scale}"]
        parts += [f"{name}_strides = {_strides_text(st)}"
                  for name, st in strides.items()]
        self._load(", ".join(parts))

    @classmethod
    def parse(cls, text):
        """Parses kvgen::toString(LayoutDesc) text (also accepts a
        `#kv.layout<...>` wrapper); the runtime's grammar and checks."""
        self = cls.__new__(cls)
        self._load(text)
        return self

    def _load(self, text):
        L = _capi.lib()
        h = ctypes.c_void_p()
        if L.kvgen_layout_parse(_capi.cstr("layout text", text),
                                ctypes.byref(h)) != _capi.SUCCESS:
            raise ValueError(_capi.last_error())
        try:
            info = _capi.LayoutInfo()
            _check("kvgen_layout_get_info",
                   L.kvgen_layout_get_info(h, ctypes.byref(info)))
            comps = []
            for c in range(info.num_components):
                ci = _capi.ComponentInfo()
                _check("kvgen_layout_component",
                       L.kvgen_layout_component(h, c, ctypes.byref(ci)))
                comps.append((ci.name.decode(), ci.head_size,
                              tuple(None if x == _DYNAMIC else x
                                    for x in ci.strides),
                              bool(ci.explicit_strides), ci.base,
                              Chunks(ci.elem_stride, ci.token_chunk,
                                     ci.token_chunk_stride, ci.elem_chunk,
                                     ci.elem_chunk_stride), ci.span))
        except BaseException:
            L.kvgen_layout_destroy(h)
            raise
        self._lib, self._h = L, h
        self.text = info.text.decode()
        self.num_kv_heads = info.num_kv_heads
        self.block_size = info.block_size
        self.order = info.order.decode()
        self.packing = info.packing.decode()
        self.dtype = info.dtype.decode()
        self.scale = info.scale.decode()
        self.element_size = info.element_bytes
        self.is_kv = bool(info.is_kv)
        #: Component names in row order ("k", "v" for a K/V layout).
        self.components = tuple(c[0] for c in comps)
        self._sizes = {c[0]: c[1] for c in comps}
        self._strides = {c[0]: c[2] for c in comps}
        self._explicit = {c[0]: c[2] if c[3] else None for c in comps}
        self._base = {c[0]: c[4] for c in comps}
        self._chunks = {c[0]: c[5] for c in comps}
        self._spans = {c[0]: c[6] for c in comps}

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            self._lib.kvgen_layout_destroy(h)
            self._h = None

    # K/V conveniences (None for other layouts).
    @property
    def head_size_k(self):
        return self._sizes.get("k") if self.is_kv else None

    @property
    def head_size_v(self):
        return self._sizes.get("v") if self.is_kv else None

    @property
    def k_strides(self):
        return self._explicit.get("k") if self.is_kv else None

    @property
    def v_strides(self):
        return self._explicit.get("v") if self.is_kv else None

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"kvgen.Layout({self.text})"

    def __eq__(self, other):
        return isinstance(other, Layout) and self.text == other.text

    def __hash__(self):
        return hash(self.text)

    @property
    def packed(self):
        return self.packing == "packed"

    def _name(self, side):
        if isinstance(side, int):
            return self.components[side]
        if side not in self._sizes:
            raise ValueError(f"layout has no component {side!r} "
                             f"(has {', '.join(self.components)})")
        return side

    def head_size(self, side):
        """Head size of component `side` ('k', 'v', 'kv_c', ... or an
        index)."""
        return self._sizes[self._name(side)]

    def span(self, side):
        """Cache elements component `side` takes in its row
        (kvgen_component_info.span): its head size, but for a per_tile
        component up to the end of its tile scales, or its head size x
        elem_stride when stored in a wider type (docs/layout.md "Per-tile
        scales"). A packed row is the sum of the spans."""
        return self._spans[self._name(side)]

    def has_dynamic_strides(self):
        return any(x is None for st in self._strides.values() for x in st)

    def strides(self, side, dynamic=None):
        """(block, token, head) element strides of component `side`;
        dynamic ('?') entries taken from `dynamic` (a 3-sequence)."""
        out = []
        for i, x in enumerate(self._strides[self._name(side)]):
            if x is None:
                if dynamic is None:
                    raise ValueError(
                        f"layout has a dynamic ('?') {side} stride: pass "
                        "cache_strides=((kb, kt, kh), (vb, vt, vh))")
                x = int(dynamic[i])
            out.append(x)
        return tuple(out)

    def base(self, side):
        """First column of the component in its row (packed), else 0."""
        return self._base[self._name(side)]

    def chunks(self, side):
        """The component's chunked dimensions (a Chunks; docs/layout.md,
        "Chunked dimensions"): element e of a row at (e // elem_chunk) *
        elem_chunk_stride + (e % elem_chunk) * elem_stride, token t of a
        block at (t // token_chunk) * token_chunk_stride + (t %
        token_chunk) * the token stride (a chunk of 0: none). Every NHD /
        HND / packed layout has Chunks(1, 0, 0, 0, 0), but for a per_tile
        component stored in a wider type than the cache's (`<name>_dtype
        = bf16` over an fp8 cache: elem_stride 2)."""
        return self._chunks[self._name(side)]

    def extent_bytes(self, side, num_blocks, dynamic=None):
        """Bytes a buffer needs to hold `side` for num_blocks blocks
        (kvgen_layout_extent_bytes)."""
        name = self._name(side)
        dyn = None
        if dynamic is not None:
            dyn = (ctypes.c_int64 * 3)(*(0 if x is None else int(x)
                                         for x in dynamic))
        out = ctypes.c_int64()
        _check("kvgen_layout_extent_bytes",
               self._lib.kvgen_layout_extent_bytes(
                   self._h, self.components.index(name), int(num_blocks),
                   dyn, ctypes.byref(out)))
        return out.value

    def max_blocks(self, side, nbytes, dynamic=None):
        """The most blocks of `side` whose extent fits in nbytes (0 when
        not even one does)."""
        one = self.extent_bytes(side, 1, dynamic)
        if nbytes < one:
            return 0
        b = self.strides(side, dynamic)[0] * self.element_size
        return (nbytes - one) // b + 1 if b > 0 else 0


#---------------------------------------------------------------------------
# Tensors and arrays
#---------------------------------------------------------------------------

# torch / numpy dtype names -> kvgen names (integers are raw bits / slots).
_DTYPE_NAMES = {
    "bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32",
    "float": "f32", "float8_e4m3fn": "f8E4M3FN",
    "float8_e4m3fnuz": "f8E4M3FNUZ", "float8_e5m2": "f8E5M2",
    "float8_e5m2fnuz": "f8E5M2FNUZ", "int32": "i32", "int64": "i64",
    "uint8": "u8", "int8": "i8", "int16": "i16", "uint16": "u16",
    "uint32": "u32", "uint64": "u64",
}
_RAW_INTS = ("u8", "i8", "i16", "u16", "i32", "u32", "i64", "u64")


class _Buf:
    """What the binding needs of one tensor/array argument. writes: the
    kernel writes through it (a non-const pointer field, see _WRITTEN_TYPES);
    a read-only numpy array (flags.writeable False: np.frombuffer of bytes,
    a read-only mmap, a broadcast view) then raises ValueError."""
    __slots__ = ("what", "ptr", "shape", "strides", "itemsize", "dtype",
                 "kind", "device", "pinned")

    def __init__(self, x, what, writes=False):
        self.what = what
        mod = type(x).__module__
        if mod.startswith("torch") and hasattr(x, "data_ptr"):
            self.kind = "torch"
            self.ptr = x.data_ptr()
            self.shape = tuple(x.shape)
            self.strides = tuple(x.stride())
            self.itemsize = x.element_size()
            name = str(x.dtype).replace("torch.", "")
            self.device = x.device
            # Page-locked host memory: with unified addressing its host
            # pointer is also its device address.
            self.pinned = x.device.type == "cpu" and x.is_pinned()
        elif hasattr(x, "__array_interface__") and hasattr(x, "ctypes"):
            self.kind = "numpy"
            # The kernels read and write machine values: an array of
            # Python objects (pointers the kernel would overwrite) or of a
            # foreign byte order (read byte-swapped) is neither.
            if x.dtype.hasobject:
                raise TypeError(f"{what}: dtype {x.dtype} holds Python "
                                "objects: pass an array of numbers")
            if not x.dtype.isnative:
                raise TypeError(f"{what}: dtype {x.dtype.str} is not in the "
                                "machine's byte order: pass x.astype(x.dtype."
                                "newbyteorder('='))")
            if writes and not x.flags.writeable:
                raise ValueError(f"{what}: a read-only array (flags."
                                 "writeable is False), but the kernel writes "
                                 "it: pass a writeable array (e.g. a copy)")
            self.ptr = x.ctypes.data
            self.shape = tuple(x.shape)
            self.itemsize = x.dtype.itemsize
            for s in x.strides:
                if s % self.itemsize:
                    raise ValueError(f"{what}: byte stride {s} is not a "
                                     f"multiple of the element size "
                                     f"{self.itemsize}")
            self.strides = tuple(s // self.itemsize for s in x.strides)
            name = x.dtype.name
            self.device = None
            self.pinned = False
        else:
            raise TypeError(f"{what}: expected a torch tensor or a numpy "
                            f"array, got {type(x).__name__}")
        self.dtype = _DTYPE_NAMES.get(name, name)
        if 0 in self.shape:
            # No element, nothing addressed through the strides (numpy
            # reports 0 strides for np.zeros((0, H, D))): take the
            # C-contiguous ones, so no stride check refuses an empty
            # array. Size checks still see 0 elements / 0 bytes.
            self.strides = _c_strides(self.shape)

    @property
    def is_device(self):
        return self.kind == "torch" and self.device.type != "cpu"

    def numel(self):
        n = 1
        for x in self.shape:
            n *= x
        return n

    def is_contiguous(self):
        """C-order contiguous (size-1 dimensions' strides ignored)."""
        return _is_contiguous(self.shape, self.strides)

    def check_holds(self, count, elem_bytes, ctype, why, writes):
        """ValueError unless the kernel can address `count` elements of
        `elem_bytes` bytes (C type `ctype`) consecutively from this array's
        pointer inside the array: it holds that many bytes and, for more
        than one element, is C-contiguous (else the kernel would read the
        gaps of a strided view, or past its end). `why` says where the
        count comes from, for the message."""
        n = self.numel()
        verb = "writes" if writes else "reads"
        if n * self.itemsize < count * elem_bytes:
            raise ValueError(
                f"{self.what}: shape {list(self.shape)} holds {n} elements "
                f"({n * self.itemsize} bytes), but the kernel {verb} "
                f"{count} {ctype} ({why}): pass an array of at least "
                f"{count} elements")
        if count > 1 and not self.is_contiguous():
            raise ValueError(
                f"{self.what}: the kernel {verb} {count} consecutive {ctype} "
                f"from its first element ({why}), but it is not contiguous "
                f"(shape {list(self.shape)}, strides {list(self.strides)} "
                "elements): pass a C-contiguous array")

    def span_bytes(self):
        """Bytes from the first element to the end of the last one."""
        if any(s == 0 for s in self.shape):
            return 0
        if any(st < 0 for st in self.strides):
            raise ValueError(f"{self.what}: negative strides are not "
                             "supported")
        last = sum((n - 1) * st for n, st in zip(self.shape, self.strides))
        return (last + 1) * self.itemsize

    def check_dtype(self, want):
        """A float tensor must be `want`; an integer one is taken as raw
        bits and must have its size."""
        if self.dtype == want:
            return
        if self.dtype in _RAW_INTS and self.itemsize == DTYPE_SIZES[want]:
            return
        raise TypeError(f"{self.what}: dtype {self.dtype} does not match the "
                        f"kernel's {want} (pass {want}, or an integer dtype "
                        f"of {DTYPE_SIZES[want]} bytes as raw bits)")

    def check_pairs(self):
        """An INDEX_I64 argument (block_mapping): [N, 2] int64 (src, dst)
        rows, C-contiguous, as the kernels read it (N = its leading dim,
        the work count). Anything else (a 1-D view, [N, 3], a transposed
        or strided view) raises ValueError, an int32 mapping TypeError,
        before any launch."""
        if len(self.shape) != 2 or self.shape[1] != 2:
            raise ValueError(f"{self.what} has shape {list(self.shape)} and "
                             f"dtype {self.dtype}, need [N, 2] int64")
        if self.dtype not in ("i64", "u64"):
            raise TypeError(f"{self.what} has shape {list(self.shape)} and "
                            f"dtype {self.dtype}, need [N, 2] int64")
        if not _is_contiguous(self.shape, self.strides):
            raise ValueError(f"{self.what} must be contiguous (C order; "
                             f"strides {list(self.strides)} elements, need "
                             "[2, 1])")

    def check_rows(self, t, h, d):
        """[T, H, D] (or [T, D] when H = 1) with a contiguous last dim;
        returns (token, head) strides in elements."""
        if h == 1 and len(self.shape) == 2 and self.shape[1] == d and \
                (t is None or self.shape[0] == t):
            if d > 1 and self.strides[1] != 1:
                raise ValueError(f"{self.what}: the last dimension must be "
                                 f"contiguous (stride {self.strides[1]}, "
                                 "need 1)")
            return self.strides[0], d
        if len(self.shape) != 3 or self.shape[1:] != (h, d) or \
                (t is not None and self.shape[0] != t):
            want = f"[{'T' if t is None else t}, {h}, {d}]"
            raise ValueError(f"{self.what}: shape {list(self.shape)}, the "
                             f"kernel's layout needs {want}")
        if d > 1 and self.strides[2] != 1:
            raise ValueError(f"{self.what}: the last dimension must be "
                             f"contiguous (stride {self.strides[2]}, need 1)")
        return self.strides[0], self.strides[1]


def _c_strides(shape):
    """C-order strides in elements of an array of `shape`."""
    out, n = [], 1
    for x in reversed(shape):
        out.append(n)
        n *= x
    return tuple(reversed(out))


def _is_contiguous(shape, strides):
    """C-order contiguous (strides in elements; size-1 dims ignored)."""
    want = 1
    for n, st in reversed(list(zip(shape, strides))):
        if n > 1 and st != want:
            return False
        want *= n
    return True


def _cache_view(lay, buf, tensor):
    """How cache argument `buf` describes tensor `tensor` of layout `lay`.

    A cache is either a raw buffer (C-contiguous, of any shape and element
    size): the layout alone says where its elements are;
    or a view of the tensor's logical shape, [num_blocks, block_size, H, W]
    (nhd) or [num_blocks, H, block_size, W] (hnd) in elements of the cache
    dtype (W: the component's span, Layout.span; their sum when packed):
    its strides are then the tensor's real strides. Returns None for a raw
    buffer, else the view's (block, token, head) strides; raises ValueError
    for a view that is neither (non-contiguous of another shape, e.g. a
    strided 1-D parent[::2], whose parent's elements between the view's the
    kernel would address as a raw buffer; or a last dimension that is not
    contiguous).

    A contiguous 4-D array of the cache element size whose middle dims are
    block_size and H (in either order) has the logical form, so for a
    component with the layout's default (dense) strides its shape must be
    the logical one: another last dim (e.g. the V cache given K's head
    size, or K and V swapped) or the other order (an hnd-shaped array for
    an nhd layout) raises ValueError naming the shape the layout needs.
    Components with explicit or '?' strides are exempt (a padded
    allocation passed whole is a raw buffer the strides describe)."""
    comps = list(range(len(lay.components))) if lay.packed else [tensor]
    w = sum(lay.span(c) for c in comps)
    h, bs = lay.num_kv_heads, lay.block_size
    nhd = lay.order == "nhd"
    shape = buf.shape
    want = (bs, h, w) if nhd else (h, bs, w)
    same_size = len(shape) == 4 and buf.itemsize == lay.element_size
    logical = same_size and shape[1:] == want
    dense = all(lay._explicit[lay.components[c]] is None for c in comps)
    if same_size and not logical and dense and \
            sorted(shape[1:3]) == sorted((bs, h)) and \
            _is_contiguous(shape, buf.strides):
        raise ValueError(
            f"{buf.what}: shape {list(shape)} has the form of a cache view "
            f"([num_blocks, {'block_size, H' if nhd else 'H, block_size'}, "
            f"{'row width' if lay.packed else 'head size'}]) but not the "
            f"layout's: need [N, {', '.join(map(str, want))}] for "
            + ("the packed row of "
               + " + ".join(lay.components) if lay.packed else
               f"component {lay.components[tensor]}")
            + f" (layout {lay.text}); pass the cache of that component, "
            "or a 1-D raw buffer")
    if not logical:
        if _is_contiguous(shape, buf.strides):
            return None
        if len(shape) <= 1:
            # Taken as a raw buffer, the kernel would address its bytes
            # densely: the elements of the parent between the view's.
            raise ValueError(
                f"{buf.what}: a non-contiguous 1-D array ({shape[0]} "
                f"elements, stride {buf.strides[0]} elements) cannot be a "
                "raw buffer: a raw cache buffer must be contiguous (the "
                "kernel addresses the layout's extent densely from its "
                "first element); pass a contiguous array, or a view of the "
                f"layout's [num_blocks, "
                f"{'block_size, H' if nhd else 'H, block_size'}, "
                f"{'row width' if lay.packed else 'head size'}] shape")
        if buf.itemsize != lay.element_size:
            raise ValueError(
                f"{buf.what}: a non-contiguous view of {buf.dtype} "
                f"elements ({buf.itemsize} bytes), but the layout's "
                f"elements are {lay.element_size} bytes: pass a view "
                "of the cache dtype, or a contiguous buffer")
        raise ValueError(
            f"{buf.what}: a non-contiguous view of shape {list(shape)} "
            f"(strides {list(buf.strides)} elements) is neither a raw "
            f"buffer (contiguous) nor the layout's [num_blocks, "
            f"{'block_size, H' if nhd else 'H, block_size'}, "
            f"{'row width' if lay.packed else 'head size'}] = "
            f"[N, {', '.join(map(str, want))}] view")
    st = buf.strides
    if w > 1 and st[3] != 1:
        raise ValueError(f"{buf.what}: the last dimension must be "
                         f"contiguous (stride {st[3]}, need 1)")
    return (st[0], st[1], st[2]) if nhd else (st[0], st[2], st[1])


def _strides_arg(lay, c, s):
    name = lay.components[c]
    return f"{name}_strides = [{s[0]}, {s[1]}, {s[2]}]"


def _check_cache_views(op, lay, bufs, dyn):
    """Compares every cache view (see _cache_view) with the layout's strides
    and refuses a mismatch, naming the stride and the layout that would fit.
    For '?' layout strides without cache_strides (dyn None) the views'
    strides are the values; returns the (block, token, head) triples to pass
    as cache_strides per component, or None."""
    views = {}  # component -> (buf, its strides)
    for a in op.args:
        if a.role != "cache" or bufs.get(a.name) is None:
            continue
        tensor = a.which & 1
        if lay.packed and tensor == 1:
            continue
        got = _cache_view(lay, bufs[a.name], tensor)
        if got is None:
            continue
        for c in (range(len(lay.components)) if lay.packed else [tensor]):
            views.setdefault(c, []).append((bufs[a.name], got))
    if not views:
        return None
    names = ("block", "token", "head")
    inferred = {}
    problems = []
    for c, seen in sorted(views.items()):
        declared = lay._strides[lay.components[c]]
        for buf, got in seen:
            if any(x is None for x in declared) and dyn is None:
                prev = inferred.setdefault(c, got)
                if prev != got:
                    problems.append(f"{buf.what} has strides {list(got)}, "
                                    f"another view of component "
                                    f"{lay.components[c]} {list(prev)}")
                continue
            want = [got[i] if x is None and dyn is None else
                    (int(dyn[min(c, len(dyn) - 1)][i]) if x is None else x)
                    for i, x in enumerate(declared)]
            sizes = (None, lay.block_size, lay.num_kv_heads)
            for i in range(3):
                # Strides of a dimension of size 1 address nothing.
                if (sizes[i] is None or sizes[i] > 1) and got[i] != want[i]:
                    ratio = ""
                    if want[i] and got[i] % want[i] == 0 and got[i] > want[i]:
                        ratio = f" ({got[i] // want[i]} x the layout's)"
                    problems.append(
                        f"{names[i]} stride of {buf.what} is {got[i]} "
                        f"elements{ratio}, the layout's is {want[i]}")
                    break
    if problems:
        fit = []
        for c, seen in sorted(views.items()):
            if lay.packed and c > 0:
                break
            fit.append(_strides_arg(lay, c, seen[0][1]))
        raise ValueError(
            "; ".join(problems) + f" (layout {lay.text}): describe the "
            "views with " + ", ".join(fit) + " (kvgen.Layout(..., "
            "k_strides=..., v_strides=...) or strides={name: ...}), or pass "
            "caches laid out as the layout says")
    if not inferred:
        return None
    out = []
    for c in range(len(lay.components)):
        out.append(inferred.get(c, inferred.get(0) if lay.packed else
                                (0, 0, 0)))
    return out


def _cache_aliasing_checks(op, lay, bufs, fields, dyn, index):
    """What _check_cache_aliasing tests per launch, computed from the
    argument shapes once (a launch plan keeps it): for each cache set whose
    K and V caches are both given (same kind of memory, num_blocks > 0),
    a tuple (index of K in the launch's values, index of V, K's name, V's
    name, K's extent in bytes, V's, the block stride in bytes when K and V
    have equal block strides else None, block 0's K / V extents, nb,
    layout text). index: argument name -> its position among the values."""
    if lay.packed:
        return ()
    sets = {}
    for a in op.args:
        if a.role == "cache" and bufs.get(a.name) is not None:
            sets.setdefault(a.which >> 1, {})[a.which & 1] = a
    out = []
    for cset, by_tensor in sets.items():
        if 0 not in by_tensor or 1 not in by_tensor:
            continue
        ka, va = by_tensor[0], by_tensor[1]
        kb, vb = bufs[ka.name], bufs[va.name]
        if kb.is_device != vb.is_device:
            continue
        nb = None
        for a in op.args:
            if a.role == "num_blocks" and a.which == cset:
                nb = fields.get(a.name)
        if not nb or nb <= 0:
            continue
        kd, vd = dyn[0], dyn[min(1, len(dyn) - 1)]
        k_st, v_st = lay.strides(0, kd), lay.strides(1, vd)
        m = k_st[0] * lay.element_size if k_st[0] == v_st[0] else None
        out.append((index[ka.name], index[va.name], ka.name, va.name,
                    lay.extent_bytes(0, nb, kd), lay.extent_bytes(1, nb, vd),
                    m, lay.extent_bytes(0, 1, kd), lay.extent_bytes(1, 1, vd),
                    nb, lay.text))
    return tuple(out)


def _check_cache_aliasing(checks, ptrs):
    """Refuses K and V caches of one cache set whose elements may share
    memory: their spans (the layout's extents from each pointer) intersect,
    and either they start at the same byte or, with equal block strides,
    block 0's spans meet modulo the block stride (then some blocks do).
    Intersecting spans with different block strides are not decided here.
    E.g. K and V passed as the same tensor, or V's pointer inside K's rows;
    the halves of a [num_blocks, 2, ...] allocation pass. checks: from
    _cache_aliasing_checks; ptrs: the launch's pointers, by value index.
    Runs every launch (pointers change between launches of one plan)."""
    for ki, vi, kname, vname, k_ext, v_ext, m, k1, v1, nb, text in checks:
        d = ptrs[vi] - ptrs[ki]  # bytes from K's first element to V's
        if d >= k_ext or -d >= v_ext:
            continue  # disjoint spans
        clash = d == 0
        if not clash and m is not None:
            r = d % m
            # Block 0's spans as arcs modulo the block stride.
            clash = k1 > m or v1 > m or r < k1 or r + v1 > m
        if clash:
            raise ValueError(
                f"{kname} and {vname} overlap: {vname} starts {d} "
                f"bytes after {kname}, "
                f"inside its {k_ext}-byte span of {nb} blocks; K and V of "
                f"layout {text} need disjoint memory")


# Field roles (kvgen/Ops.def) the binding fills from tensors, and from
# scalars given by name.
_TENSOR_ROLES = ("rows", "qrows", "cache", "slots", "index_i64", "scale",
                 "error_flag", "block_tables", "seq_lens", "query_start_loc",
                 "head_f32", "workspace", "qrows_f32")
_SCALAR_ROLES = ("param", "work_rows", "work_span", "work_window")


# Pointer field types (Ops.def TYPE) the kernel writes through: MUT_PTR
# (void *) and I32_PTR (int32_t *, the error flag); PTR and F32_PTR are
# const.
_WRITTEN_TYPES = ("mut_ptr", "i32_ptr")
_POINTER_TYPES = ("ptr", "mut_ptr", "f32_ptr", "i32_ptr")
# Roles whose array is a strided view that the role's own check made the
# kernel's shape (its strides are passed in stride fields): the kernel
# addresses its elements only.
_VIEW_ROLES = ("rows", "qrows", "block_tables", "qrows_f32")
# Roles whose array is a raw buffer: C-contiguous (a cache may instead be a
# view of the layout's shape, see _cache_view), its size in bytes given to
# the runtime's extent check (a *_bytes field).
_RAW_ROLES = ("cache", "workspace")


def _dense_extent(a, t, lay, q_heads, slot_bytes):
    """What a kernel addresses through pointer field `a` (role per
    kvgen/Ops.def) as a plain array from its first element: (count,
    element bytes, C type, where the count comes from). t: the work count
    (tokens, pairs or sequences); None for view and raw roles. A pointer
    role missing here raises, so a new role cannot go unchecked."""
    r = a.role
    if r == "error_flag":
        return 1, 4, "int32", "it sets error_flag[0] when it skips an index"
    if r == "scale":
        if lay.scale == "per_head":
            return (lay.num_kv_heads, 4, "float32",
                    f"scale = per_head: one per kv head, num_kv_heads = "
                    f"{lay.num_kv_heads}")
        return 1, 4, "float32", f"scale = {lay.scale}: one per tensor"
    if r == "head_f32":
        return q_heads, 4, "float32", f"one per query head, num_q_heads = " \
            f"{q_heads}"
    if r == "slots":
        return t, slot_bytes, f"{slot_bytes}-byte slots", \
            f"one per token, {t} tokens"
    if r == "seq_lens":
        return t, 4, "int32", f"one per sequence, {t} sequences"
    if r == "query_start_loc":
        return t + 1, 4, "int32", f"num_seqs + 1, {t} sequences"
    if r == "index_i64":
        return 2 * t, 8, "int64", f"a (src, dst) pair per row, {t} rows"
    if r in _VIEW_ROLES or r in _RAW_ROLES:
        return None
    raise NotImplementedError(f"kvgen binding: pointer field {a.name} has "
                              f"role {r!r}, which it does not know how to "
                              "check")


def _opt(x, what, writes=False):
    return None if x is None else _Buf(x, what, writes)


#---------------------------------------------------------------------------
# Launch plans: what launch() checked for one argument key, and the work
# left for each launch with that key.
#---------------------------------------------------------------------------

#: Plans a Kernel keeps (the oldest is dropped first).
_PLAN_LIMIT = 64


class _NoKey(Exception):
    """An argument launch() does not key plans by (checked every call)."""


def _int_key(v, depth=0):
    """v (None, an int, or tuples / lists of them, nested at most 3 deep)
    as a hashable key; _NoKey for anything else (a float, a numpy int, a
    bool), which launch() then checks on every call."""
    if v is None or type(v) is int:
        return v
    if depth < 3 and type(v) in (tuple, list):
        return tuple(_int_key(x, depth + 1) for x in v)
    raise _NoKey


_char_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _numpy_key(x):
    """A numpy.ndarray's plan key (shape, byte strides, dtype, writeable)
    and address. A writable C-contiguous array exports its buffer (the
    quick way to its address); others are asked through x.ctypes."""
    try:
        return (x.shape, x.strides, x.dtype, True), \
            _addressof(_char_from_buffer(x))
    except (TypeError, ValueError, BufferError):
        return (x.shape, x.strides, x.dtype, bool(x.flags.writeable)), \
            x.ctypes.data


def _torch_key(x):
    """A torch.Tensor's plan key (shape, strides, dtype, device, pinned)
    and address."""
    dev = x.device
    return (x.shape, x.stride(), x.dtype, dev,
            dev.type == "cpu" and x.is_pinned()), x.data_ptr()


def _type_key(x):
    """A scalar's plan key: its type (its value is converted each launch)."""
    return type(x), 0


def _no_key(x):
    raise _NoKey


_KEYERS = {type(None): _type_key, int: _type_key, float: _type_key,
           bool: _type_key}


def _array_key(x):
    """(plan key, address) of a launch argument (the keyer of its type, found
    once per type: exact numpy.ndarray and torch.Tensor objects, None,
    Python and numpy scalars); _NoKey for another type, which launch() then
    checks on every call."""
    tp = type(x)
    f = _KEYERS.get(tp)
    if f is None:
        import sys
        np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
        if np is not None and tp is np.ndarray:
            f = _numpy_key
        elif np is not None and issubclass(tp, np.generic):
            f = _type_key
        elif torch is not None and tp is torch.Tensor:
            f = _torch_key
        else:
            f = _no_key
        _KEYERS[tp] = f
    return f(x)


_set_field = object.__setattr__  # a ctypes field, without the range check


class _Plan:
    """One checked launch of a Kernel (Kernel._make_plan): the argument
    struct's bytes with every field that depends on shapes only, and what
    each launch fills or checks itself. pointers: (field, value index);
    scalars: (field, value index, (min, max) of an integer field, None for
    a float one); derived: (field, value index
    of query_start_loc / seq_lens, num_seqs, is max_query_len); aliasing:
    _cache_aliasing_checks; device: torch device of the default stream
    (None: stream 0); workspace: (field, *_bytes fields, given by the
    caller, torch device to allocate on) or None; host: check after the
    launch by default."""
    __slots__ = ("struct", "template", "pointers", "scalars", "derived",
                 "aliasing", "device", "workspace", "host")

    def __init__(self, struct, template, pointers, scalars, derived,
                 aliasing, device, workspace, host):
        self.struct = struct
        self.template = template
        self.pointers = pointers
        self.scalars = scalars
        self.derived = derived
        self.aliasing = aliasing
        self.device = device
        self.workspace = workspace
        self.host = host

    def run(self, kernel, values, ptrs, stream, check, pdl, prepare_only):
        """Fills the struct for `values` (their addresses `ptrs`) and
        launches it on `stream` (launch()'s rules); prepare_only: returns
        (args, stream) instead."""
        args = self.struct.from_buffer_copy(self.template)
        for name, i in self.pointers:
            _set_field(args, name, ptrs[i])
        for name, i, rng in self.scalars:
            v = values[i]
            if rng is None:  # a float field
                _set_field(args, name, float(v))
                continue
            v = int(v)
            if rng[0] <= v <= rng[1]:
                _set_field(args, name, v)
            else:
                setattr(args, name, v)  # ValueError naming the field
        for name, i, t, rows in self.derived:
            x = values[i]
            if rows:
                setattr(args, name, max(1, int((x[1:t + 1] - x[:t]).max())))
            else:
                setattr(args, name, max(0, int(x[:t].max())))
        if self.aliasing:
            _check_cache_aliasing(self.aliasing, ptrs)
        if stream is None:
            if self.device is None:
                stream = 0
            else:
                import torch
                stream = torch.cuda.current_stream(self.device).cuda_stream
        elif hasattr(stream, "cuda_stream"):
            stream = stream.cuda_stream
        stream = int(stream)
        if self.workspace is not None:
            kernel._fill_workspace(self.workspace, args, stream)
        if prepare_only:
            return args, stream
        kernel.launch_raw(args, stream=stream, pdl=pdl)
        if check or (check is None and self.host):
            kernel._ctx.check()
        return None


#---------------------------------------------------------------------------
# Context and Kernel
#---------------------------------------------------------------------------

def read_manifest(path):
    """The `[kernel]` entries of a bundle manifest (format: runtime
    Bundle.h), in file order, each a dict of its `key = value` lines.
    Raises OSError when unreadable and ValueError when the first line is not
    the version-1 header; the entries themselves are validated by the
    runtime (kvgen_context_load_bundle). Like the runtime's reader
    (kvgen/ReadFile.h), only a regular file of at most 16 MiB is read
    (ValueError otherwise): a FIFO does not block, /dev/zero is not read."""
    import os
    import stat
    limit = 16 << 20  # kvgen/ReadFile.h kMaxManifestBytes
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{path}: {st.st_size} bytes, more than the "
                             f"{limit} a bundle manifest may have")
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(limit + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path}: grew past {limit} bytes while read")
    lines = data.decode().splitlines()
    if not lines or lines[0].split() != ["kvgen-bundle", "2"]:
        raise ValueError(f"{path}: not a version-2 kvgen bundle manifest")
    entries, cur = [], None
    for line in lines[1:]:
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s == "[kernel]":
            cur = {}
            entries.append(cur)
        elif cur is not None and "=" in s:
            k, v = s.split("=", 1)
            cur[k.strip()] = v.strip()
    return entries


def _flag(name, value):
    """A flag option's value as a bool: True / False, a numpy bool, or the
    ints 0 / 1; anything else (a string such as "no", None, 2) raises
    TypeError naming the option, so no truthy value turns a flag on."""
    if isinstance(value, bool):
        return value
    t = type(value)
    if t.__module__ == "numpy" and t.__name__ in ("bool_", "bool"):
        return bool(value)
    if not isinstance(value, (str, bytes)) and hasattr(value, "__index__"):
        try:
            i = value.__index__()  # int, numpy integers; not floats
        except TypeError:
            i = None
        if i in (0, 1):
            return bool(i)
    raise TypeError(f"option {name}: {value!r} ({type(value).__name__}) is "
                    "not a flag: pass True or False")


def _options_text(op, options):
    """kvgen_kernel_spec.options text for keyword options of Op `op`:
    flags as 0/1 (see _flag: TypeError for a non-bool value), names checked
    against the op's options."""
    parts = []
    for name, value in options.items():
        o = op.option(name)
        if o is None:
            raise ValueError(f"op {op.name} has no option {name!r} (its "
                             f"options: "
                             f"{', '.join(x.name for x in op.options)})")
        if o.kind == "flag":
            value = "1" if _flag(name, value) else "0"
        value = str(value)
        _capi.cstr(f"option {name}", value)  # ValueError for a NUL
        # The options text is "k = v, k = v": a value holding ',' or '='
        # would add options of its own (io="bf16, unchecked = 1" returned
        # an unchecked kernel past _flag's bool-only rule).
        if "," in value or "=" in value:
            raise ValueError(f"option {name}: {value!r} is not one value "
                             "(it holds ',' or '=')")
        parts.append(f"{name} = {value}")
    return ", ".join(parts)


class Context:
    """A kvgen_context: a device (or the host) plus its kernel cache.

    backend: 'auto' (CUDA if a device, else HIP, else host), 'cuda', 'hip',
    'host'. device: the device ordinal. cache_dir: the JIT disk cache
    directory (default: $KVGEN_CACHE_DIR, else ~/.cache/kvgen); "" turns the
    disk cache off.
    """

    def __init__(self, backend="auto", device=0, cache_dir=None,
                 _handle=None):
        self._lib = _capi.lib()
        self._handle = None
        self._warning_cb = None
        self._kernels = {}
        self._backend = None
        if _handle is None:
            if backend not in _capi.BACKENDS:
                raise ValueError(f"backend {backend!r} must be one of "
                                 f"{', '.join(_capi.BACKENDS)}")
            h = ctypes.c_void_p()
            _check("kvgen_context_create", self._lib.kvgen_context_create(
                _capi.BACKENDS[backend], int(device), ctypes.byref(h)))
            _handle = h
        self._handle = _handle
        self.device = int(device)
        if cache_dir is not None:
            self.set_cache_dir(cache_dir)

    @classmethod
    def compile_only(cls, backend, target, cache_dir=None):
        """A context that compiles for `target` ('sm_90', 'gfx942', 'host')
        without a device; launches raise KVGEN_ERROR_COMPILE_ONLY."""
        lib = _capi.lib()
        if backend not in ("cuda", "hip", "host"):
            raise ValueError("compile-only contexts need backend cuda, hip "
                             "or host")
        h = ctypes.c_void_p()
        _check("kvgen_context_create_compile_only",
               lib.kvgen_context_create_compile_only(
                   _capi.BACKENDS[backend],
                   _capi.cstr("compile_only: target", target),
                   ctypes.byref(h)))
        return cls(_handle=h, cache_dir=cache_dir)

    # -- lifetime ---------------------------------------------------------
    def close(self):
        """Destroys the context; its kernels become invalid."""
        if self._handle is not None:
            self._lib.kvgen_context_destroy(self._handle)
            self._handle = None
            self._kernels.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _h(self):
        if self._handle is None:
            raise ValueError("kvgen.Context is closed")
        return self._handle

    # -- properties -------------------------------------------------------
    @property
    def backend(self):
        """'cuda', 'hip' or 'host' (auto resolved)."""
        if self._backend is None:
            self._backend = _capi.BACKEND_NAMES[
                self._lib.kvgen_context_backend(self._h())]
        return self._backend

    @property
    def target(self):
        """The compile target, e.g. 'sm_90', 'gfx942:sramecc+:xnack-',
        'host'."""
        return self._lib.kvgen_context_target(self._h()).decode()

    @property
    def cache_dir(self):
        """The disk cache directory in use; '' when memory-only."""
        return self._lib.kvgen_context_cache_dir(self._h()).decode()

    def set_cache_dir(self, path):
        """Sets the disk cache directory (None or '' turns it off); affects
        later compiles only."""
        _check("kvgen_context_set_cache_dir",
               self._lib.kvgen_context_set_cache_dir(
                   self._h(), _capi.cstr("cache_dir", str(path or ""))))

    def set_warning_callback(self, fn):
        """fn(message: str) receives warnings instead of stderr; None
        restores stderr."""
        if fn is None:
            self._warning_cb = None
            self._lib.kvgen_context_set_warning_callback(
                self._h(), _capi.WARNING_FN(), None)
            return
        cb = _capi.WARNING_FN(lambda msg, _user: fn(msg.decode("utf-8",
                                                               "replace")))
        self._warning_cb = cb  # keep alive
        self._lib.kvgen_context_set_warning_callback(self._h(), cb, None)

    def stats(self):
        """Kernel cache counters: dict with memory_hits, disk_hits,
        compiles, disk_writes, evictions (counts) and last_compile_ms,
        last_load_ms (milliseconds)."""
        s = _capi.CacheStats()
        _check("kvgen_context_get_stats",
               self._lib.kvgen_context_get_stats(self._h(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in s._fields_}

    # -- device memory (newer runtimes only) -------------------------------
    def _optional(self, name):
        if not _capi.has(name):
            raise NotImplementedError(f"{_capi.lib_path()} has no {name}")
        return getattr(self._lib, name)

    def synchronize(self):
        """Waits for all work on the context's device; asynchronous kernel
        faults raise KvgenError (KVGEN_ERROR_LAUNCH), and indices that
        checked kernels skipped since the last check raise KvgenError
        (KVGEN_ERROR_INDEX_OUT_OF_RANGE; see check())."""
        _check("kvgen_context_synchronize",
               self._optional("kvgen_context_synchronize")(self._h()))
        self.check()

    def check(self):
        """kvgen_context_check: waits for the device, then raises KvgenError
        (KVGEN_ERROR_INDEX_OUT_OF_RANGE, naming the kernels) when a kernel
        launched without an error_flag skipped a slot >= num_blocks *
        block_size or a block id outside [0, num_blocks), or (paged
        attention) a sequence whose query is longer than max_query_len or
        outside [0, num_tokens), since the last check; the message names
        each cause found (kvgen.h's kvgen_error_bit). Nothing was written
        or read outside the cache then; the skipped tokens, blocks or
        sequences were not moved or attended."""
        _check("kvgen_context_check", self._lib.kvgen_context_check(self._h()))

    def alloc(self, nbytes):
        """Allocates nbytes of device memory (host memory for the host
        backend), >= 256-byte aligned; returns the address (int)."""
        p = ctypes.c_void_p()
        _check("kvgen_context_alloc", self._optional("kvgen_context_alloc")(
            self._h(), int(nbytes), ctypes.byref(p)))
        return p.value

    def free(self, ptr):
        """Frees memory from alloc()."""
        _check("kvgen_context_free",
               self._optional("kvgen_context_free")(self._h(), ptr))

    def copy(self, dst, src, nbytes, kind):
        """Copies nbytes between addresses (ints); kind 'h2d' | 'd2h' |
        'd2d'. Synchronous with respect to the host."""
        _check("kvgen_context_copy", self._optional("kvgen_context_copy")(
            self._h(), dst, src, int(nbytes), _capi.COPY_KINDS[kind]))

    # -- kernels ----------------------------------------------------------
    def load_bundle(self, path):
        """Makes the kernels of the bundle directory `path` (written by
        `kvgen emit --bundle`) available to kernel()/kernel_by_name()."""
        path = str(path)
        _check("kvgen_context_load_bundle",
               self._lib.kvgen_context_load_bundle(
                   self._h(), _capi.cstr("load_bundle: path", path)))

    def kernel(self, op, layout, io_dtype=None, slot_dtype=None,
               checked=None, dequantize=None, **options):
        """The kernel for a spec, from a loaded bundle (or the registered
        generator).

        op: an op name (kvgen.ops() lists them: 'reshape_and_cache',
        'gather', ...); layout: a Layout or its text; options: the op's
        options by name (kvgen.ops()[op].options), e.g. io='bf16',
        slots='i32', dequantize=True, unchecked=True (kernels test every
        slot and block id unless unchecked: "the caller proves every slot <
        num_blocks * block_size"); omitted ones take the op's defaults.
        io_dtype / slot_dtype are the older names of io / slots; checked
        (deprecated: kernels are checked by default) is the inverse of
        unchecked. Flag options (unchecked, dequantize, checked, sinks,
        ...) take True / False (or a numpy bool, or 0 / 1): any other value,
        e.g. the string "no", raises TypeError naming the option."""
        o = _capi.op(op)
        if checked is not None:
            if "unchecked" in options:
                raise TypeError("give unchecked or checked, not both")
            options["unchecked"] = not _flag("checked", checked)
        if dequantize is not None:
            dequantize = _flag("dequantize", dequantize)
        # The older positional names; a false flag the op lacks is no
        # option at all.
        for name, value in (("io", io_dtype), ("slots", slot_dtype),
                            ("dequantize", dequantize)):
            if value is None or (value is False and o.option(name) is None):
                continue
            options.setdefault(name, value)
        lay = layout if isinstance(layout, Layout) else Layout.parse(layout)
        text = _options_text(o, options)
        key = (op, lay.text, text)
        k = self._kernels.get(key)
        if k is not None:
            return k
        spec = _capi.KernelSpecC(o.id, _capi.cstr("layout", lay.text),
                                 _capi.cstr("options", text))
        h = ctypes.c_void_p()
        before = self._stats_logged()
        _check("kvgen_context_get_kernel_by_spec",
               self._lib.kvgen_context_get_kernel_by_spec(
                   self._h(), ctypes.byref(spec), ctypes.byref(h)))
        k = Kernel(self, h)
        self._log_compile(k.name, before)
        self._kernels[key] = k
        return k

    def kernel_by_name(self, name):
        """The bundle kernel `name` (its extern "C" symbol)."""
        h = ctypes.c_void_p()
        before = self._stats_logged()
        _check("kvgen_context_get_kernel",
               self._lib.kvgen_context_get_kernel(
                   self._h(), _capi.cstr("kernel_by_name: name", name),
                   ctypes.byref(h)))
        k = Kernel(self, h)
        self._log_compile(k.name, before)
        return k

    def _stats_logged(self):
        """(cache stats, start time) before a kernel lookup, for
        _log_compile; None when the kvgen logger would drop both records
        (then the lookup costs no extra C call)."""
        if not log.isEnabledFor(logging.INFO):
            return None
        return self.stats(), time.perf_counter()

    def _log_compile(self, name, before):
        """Logs the lookup of kernel `name` that began at `before`: INFO
        when it compiled a binary (kvgen_cache_stats.compiles grew; the
        record gives the whole lookup's milliseconds, generation
        included, and the compiler's), DEBUG when it read one from the disk
        cache. A lookup that another thread's compile overlapped may be
        counted as that one."""
        if before is None:
            return
        stats, start = before
        ms = (time.perf_counter() - start) * 1e3
        now = self.stats()
        if now["compiles"] > stats["compiles"]:
            log.info("kvgen: JIT-compiled kernel %s for %s in %.0f ms "
                     "(compiler %.0f ms)", name, self.target, ms,
                     now["last_compile_ms"])
        elif now["disk_hits"] > stats["disk_hits"]:
            log.debug("kvgen: kernel %s for %s read from the disk cache %s "
                      "in %.1f ms", name, self.target, self.cache_dir, ms)


def ops():
    """{name: kvgen._capi.Op}: every kernel op of the runtime, with its
    argument fields (name, type, role, doc) and options."""
    return _capi.ops()


#: kvgen_launch_options of a programmatic dependent launch.
_PDL_OPTIONS = _capi.LaunchOptions(_capi.LAUNCH_PROGRAMMATIC_DEPENDENT)


class Kernel:
    """A loaded kernel (valid while its Context lives). Attributes: name,
    op (its name), layout (Layout), vector_bytes, options (dict of the op's
    options, canonical strings), dependent_launch (accepts pdl=True),
    launch_flags, and for the ops that have them io_dtype, slot_dtype,
    checked, dequantize.

    Launch with the op's name as a method (kernel.reshape_and_cache(...),
    kernel.gather(...), kernel.copy_blocks(...)) or kernel.launch(...):
    tensors by argument name (kvgen.ops()[op].args)."""

    def __init__(self, ctx, handle):
        self._ctx = ctx  # keeps the context alive
        self._lib = ctx._lib
        self._handle = handle
        # The binding's split workspaces (see _workspace_for): key ->
        # (array, bytes), guarded by the lock.
        self._workspaces = {}
        self._workspaces_lock = threading.Lock()
        # Launch plans by argument key (see launch()).
        self._plans = {}
        lib = self._lib
        self.name = lib.kvgen_kernel_name(handle).decode()
        self._op = _capi.op_by_id(lib.kvgen_kernel_op(handle))
        self.op = self._op.name
        self.layout = Layout.parse(lib.kvgen_kernel_layout(handle).decode())
        self.vector_bytes = lib.kvgen_kernel_vector_bytes(handle)
        text = lib.kvgen_kernel_options(handle).decode()
        self.options = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            k, v = (x.strip() for x in part.split("=", 1))
            self.options[k] = v
        self.io_dtype = self.options.get("io")
        self.slot_dtype = self.options.get("slots")
        #: False only for kernels built with the option unchecked.
        self.unchecked = self.options.get("unchecked") == "1"
        self.checked = not self.unchecked
        self.dequantize = self.options.get("dequantize") == "1"
        #: kvgen_launch_flag bits the runtime accepts for this kernel
        #: (kvgen_kernel_launch_flags; 0 with an older library).
        self.launch_flags = (int(lib.kvgen_kernel_launch_flags(handle))
                             if getattr(lib, "kvgen_kernel_launch_flags",
                                        None) is not None else 0)
        #: True when launch(..., pdl=True) is accepted: the kernel's plan
        #: has dependent_launch (sm_90+) and the context can launch it so.
        self.dependent_launch = bool(
            self.launch_flags & _capi.LAUNCH_PROGRAMMATIC_DEPENDENT)

    def __repr__(self):
        return f"<kvgen.Kernel {self.name} op={self.op} {self.options}>"

    @property
    def max_workspace_bytes(self):
        """Bytes of workspace that serve every launch of this kernel,
        whatever its shapes (kvgen_kernel_max_workspace_bytes; 0 for a
        kernel that never splits): allocate it zeroed once per stream (on
        the host backend: per stream and calling thread), pass it as
        `workspace` to every launch and CUDA graph capture on that stream.
        One workspace must not serve launches that can run at the same time
        (two streams, two host threads): their counters and partials mix
        (wrong rows). Without `workspace=`, launch() keeps one per such
        key itself."""
        f = getattr(self._lib, "kvgen_kernel_max_workspace_bytes", None)
        if f is None:
            raise KvgenError("kvgen_kernel_max_workspace_bytes", 1,
                             f"{_capi.lib_path()} lacks it: an older "
                             "runtime library")
        n = ctypes.c_uint64()
        _check("kvgen_kernel_max_workspace_bytes",
               f(self._handle, ctypes.byref(n)))
        return int(n.value)

    def args_struct(self):
        """A zeroed ctypes struct of this kernel's op (for launch_raw)."""
        return self._op.args_struct()

    # -- launches ---------------------------------------------------------
    def __getattr__(self, name):
        # kernel.<op name>(...) launches a kernel of that op.
        if name.startswith("_") or "_op" not in self.__dict__:
            raise AttributeError(name)
        if name in _capi.ops():
            def call(*args, **kw):
                self._need_op(name)
                return self.launch(*args, **kw)
            return call
        raise AttributeError(name)

    def prepare(self, *positional, **kw):
        """The checks and argument filling of launch() without the launch:
        returns (args, stream) for launch_raw(args, stream), so a caller
        that launches the same tensors many times (a benchmark, a captured
        decode step) pays the binding's Python checks once. Arguments as
        launch(); the tensors must stay alive and unchanged in shape.
        pdl=True checks here that the kernel accepts a programmatic
        dependent launch (KvgenError otherwise); pass pdl=True to
        launch_raw as well."""
        return self.launch(*positional, _prepare_only=True, **kw)

    def launch(self, *positional, num_blocks=None, stream=None,
               cache_strides=None, cache_bytes=None, check=None,
               pdl=False, _prepare_only=False, **tensors):
        """Validates what the binding can see, fills the op's argument
        struct from `tensors` (by field name; positional ones in the order
        of the op's tensor fields) and launches through kvgen_launch.

        Per field role (kvgen/Ops.def): rows [T, H, D] views with a
        contiguous last dim (their token/head strides are taken from the
        tensor); caches as contiguous buffers or layout views whose span
        holds the layout's extent (cache_bytes=(key, value) overrides the
        sizes, at most the arrays' own; a packed layout needs no value
        cache); block_mapping [N, 2] int64, C-contiguous; scales float32
        [1] or [H], contiguous; error_flag int32, >= 1 element (see the
        module doc: ValueError otherwise); lse (paged_attention kernels
        with lse=True; ValueError for others) a float32 [T, num_q_heads]
        view with any strides >= 0 (e.g. vLLM's [num_q_heads, T] LSE
        transposed), written with each row's natural-log log-sum-exp
        (docs/attention.md), its span disjoint from query's and output's
        (KvgenError otherwise). Arrays the kernel writes
        (non-const pointer fields) must be writeable (ValueError for a
        read-only numpy array). num_blocks: default the most whole blocks that fit
        in the caches. cache_strides: ((kb, kt, kh), (vb, vt, vh)) element
        strides for '?' layout strides. stream: a CUstream handle (int) or
        an object with .cuda_stream; default torch's current stream for
        device tensors. Asynchronous on CUDA/HIP; KvgenError on a runtime
        failure. check: after the launch, Context.check() (KvgenError when
        a kernel skipped an out-of-range index into the context's error
        word); default: on the host backend only, whose launches are
        synchronous so the check costs no wait; on a device that would be a
        host synchronization, so call ctx.check() or ctx.synchronize() when
        it suits. pdl: programmatic dependent launch (kvgen_launch_ex with
        KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT; see the module doc): KvgenError
        (KVGEN_ERROR_INVALID_ARGUMENT), before anything else, for a kernel
        without dependent_launch.

        Plans: what depends only on the arguments' shapes, strides, dtypes
        and kinds (and on num_blocks, cache_strides, cache_bytes and which
        arguments are given) is checked once and remembered by this kernel
        (a plan per such key, at most _PLAN_LIMIT): a later call with the
        same key only takes the arrays' addresses, converts the scalars
        (range-checked), derives max_query_len / max_seq_len when not given,
        checks that K and V caches do not overlap, finds the workspace and
        launches. Anything that changes the key (another shape, a read-only
        array, another dtype) goes through every check again. Arrays of
        other types than numpy.ndarray and torch.Tensor (their subclasses
        too) are checked on every call."""
        if pdl:
            self._need_pdl()
        if self._ctx._handle is None:
            raise ValueError(f"kernel {self.name}: its kvgen.Context is "
                             "closed")
        values = positional + tuple(tensors.values()) if tensors else \
            positional
        # The plan key: each argument's (_array_key), the names given and
        # the options that shape the checks.
        try:
            extra = None if num_blocks is None and cache_strides is None \
                and cache_bytes is None else \
                _int_key((num_blocks, cache_strides, cache_bytes))
            keys, ptrs = zip(*[_KEYERS.get(type(x), _array_key)(x)
                               for x in values]) if values else ((), ())
            key = (len(positional), tuple(tensors), extra, keys)
            plan = self._plans.get(key)
        except _NoKey:
            key = plan = None
        if plan is None:
            plan, ptrs = self._make_plan(positional, tensors, num_blocks,
                                         cache_strides, cache_bytes)
            if key is not None:
                plans = self._plans
                if len(plans) >= _PLAN_LIMIT:
                    try:  # the oldest
                        del plans[next(iter(plans))]
                    except (KeyError, StopIteration, RuntimeError):
                        pass
                plans[key] = plan
        return plan.run(self, values, ptrs, stream, check, pdl,
                        _prepare_only)

    def _make_plan(self, positional, tensors, num_blocks, cache_strides,
                   cache_bytes):
        """Every check of launch() that depends on the arguments' shapes
        (raising as documented there); returns (a _Plan of the launch, the
        arguments' pointers by value index)."""
        tensors = dict(tensors)
        op = self._op
        lay = self.layout
        tensor_args = [a for a in op.args if a.role in _TENSOR_ROLES]
        if len(positional) > len(tensor_args):
            raise TypeError(f"{op.name} takes at most {len(tensor_args)} "
                            f"positional tensors ({', '.join(a.name for a in tensor_args)})")
        # Value index of each argument: positional ones first, then the
        # keywords in call order (launch()'s `values`).
        index = {a.name: i for i, a in enumerate(tensor_args[:len(positional)])}
        for name in tensors:
            index[name] = len(index)
        for a, x in zip(tensor_args, positional):
            if a.name in tensors:
                raise TypeError(f"{a.name} given twice")
            tensors[a.name] = x
        # Scalars by field name (PARAM and the launch rule's inputs).
        scalar_args = {a.name: a for a in op.args
                       if a.role in _SCALAR_ROLES}
        scalars = {name: tensors.pop(name) for name in list(tensors)
                   if name in scalar_args}
        known = {a.name for a in tensor_args}
        for name in tensors:
            if name not in known:
                raise TypeError(
                    f"{op.name} has no argument {name!r} (its tensors: "
                    f"{', '.join(sorted(known))}; scalars: "
                    f"{', '.join(sorted(scalar_args)) or 'none'})")
        written = {a.name for a in op.args if a.type in _WRITTEN_TYPES}
        bufs = {name: _opt(x, name, name in written)
                for name, x in tensors.items()}
        fields = {}
        # The work count: the leading dim of the op's WORK_FROM argument.
        wf = bufs.get(op.work_from)
        if wf is None:
            raise ValueError(f"{op.work_from} is required")
        t = wf.shape[0] if wf.shape else 0
        backend = self._ctx.backend
        roles = {a.name: a.role for a in op.args}
        for name, b in bufs.items():
            if b is None:
                continue
            if backend == "host" and b.is_device:
                raise TypeError(f"{b.what}: a {b.device} tensor, but the "
                                "context's backend is host (pass numpy "
                                "arrays or CPU tensors)")
            # A cache may be pinned host memory (e.g. swap_blocks'
            # offload side): kernels reach it through unified addressing.
            if backend != "host" and b.pinned and roles[name] == "cache":
                continue
            if backend != "host" and not b.is_device:
                raise TypeError(f"{b.what}: host memory ({b.kind}), but the "
                                f"context's backend is {backend} (pass "
                                "device tensors, or pinned host tensors "
                                "for caches)")
        # dynamic strides
        dyn = [(0, 0, 0), (0, 0, 0)]
        if cache_strides is not None:
            cs = tuple(cache_strides)
            if len(cs) == 3 and not hasattr(cs[0], "__len__"):
                cs = (cs, cs)
            dyn = [tuple(int(x) for x in s) for s in cs]
            if len(dyn) != 2 or any(len(d) != 3 for d in dyn):
                raise ValueError("cache_strides: two (block, token, head) "
                                 "triples")
        # Cache views: their strides must be the layout's (or give the '?'
        # ones).
        from_views = _check_cache_views(
            op, lay, bufs, None if cache_strides is None else dyn)
        if cache_strides is None and from_views is not None:
            dyn = [tuple(x) for x in from_views]
            while len(dyn) < 2:
                dyn.append(dyn[0])
        elif cache_strides is None and lay.has_dynamic_strides() and t > 0:
            raise ValueError(
                f"kernel {self.name}: its layout has dynamic ('?') "
                "strides; pass cache_strides=((kb, kt, kh), (vb, vt, "
                "vh)) in elements, or the caches as views of the layout's "
                "shape")
        packed = lay.packed
        cache_sizes = {}
        if cache_bytes is not None:
            cb = [int(x) for x in cache_bytes]
        q_heads = int(self.options.get("num_q_heads", lay.num_kv_heads))
        # Rows of the QROWS views: their leading dim (all the same).
        nrows = None
        for a in op.args:
            b = bufs.get(a.name)
            if a.role == "qrows" and b is not None and b.shape:
                if nrows is not None and b.shape[0] != nrows:
                    raise ValueError(f"{a.name}: {b.shape[0]} rows, another "
                                     f"view has {nrows}")
                nrows = b.shape[0]
        plan_scalars = []
        for a in op.args:
            b = bufs.get(a.name)
            if a.role == "qrows":
                if b is None:
                    raise ValueError(f"{a.name} is required")
                st, sh = b.check_rows(nrows, q_heads, lay.head_size(a.which))
                if self.io_dtype is not None:
                    b.check_dtype(self.io_dtype)
                fields[a.name + "_stride_token"] = st
                fields[a.name + "_stride_head"] = sh
            elif a.role == "row_count":
                fields[a.name] = nrows or 0
            elif a.role in ("block_tables", "seq_lens", "query_start_loc"):
                if b is None:
                    raise ValueError(f"{a.name} is required")
                if b.dtype not in ("i32", "u32"):
                    raise TypeError(f"{a.name}: dtype {b.dtype}, need int32")
                dims = 2 if a.role == "block_tables" else 1
                need = t + (1 if a.role == "query_start_loc" else 0)
                if len(b.shape) != dims or b.shape[0] < need:
                    raise ValueError(
                        f"{a.name}: shape {list(b.shape)}, need a {dims}-D "
                        "array of shape "
                        + (f"[>= {need}, max_blocks_per_seq]" if dims == 2
                           else f"[>= {need}]"))
                if b.shape[-1] > 1 and b.strides[-1] != 1:
                    raise ValueError(f"{a.name}: the last dimension must be "
                                     "contiguous")
                if a.role == "block_tables":
                    for r in op.args:
                        if r.role == "table_stride":
                            fields[r.name] = b.strides[0]
                        elif r.role == "table_width":
                            fields[r.name] = b.shape[1]
            elif a.role == "head_f32":
                if b is None:
                    if a.need == "option" and \
                            self.options.get(a.name) == "1" and t > 0:
                        raise ValueError(f"kernel {self.name} has option "
                                         f"{a.name}: pass {a.name} (float32 "
                                         f"[{q_heads}])")
                    continue
                if b.dtype != "f32":
                    raise TypeError(f"{a.name}: dtype {b.dtype}, need float32")
            elif a.role == "qrows_f32":
                # One float32 per query row and head, written (lse).
                on = a.need != "option" or self.options.get(a.name) == "1"
                if b is None:
                    if a.need == "option" and on and t > 0:
                        raise ValueError(
                            f"kernel {self.name} has option {a.name}: pass "
                            f"{a.name} (float32 [num_tokens, {q_heads}])")
                    continue
                if not on:
                    raise ValueError(
                        f"{a.name}: kernel {self.name} has no option "
                        f"{a.name}, so it would not write {a.name}; get the "
                        f"kernel with {a.name}=True")
                if b.dtype != "f32":
                    raise TypeError(f"{a.name}: dtype {b.dtype}, need float32")
                if len(b.shape) != 2 or b.shape[1] != q_heads or \
                        (nrows is not None and b.shape[0] != nrows):
                    raise ValueError(
                        f"{a.name}: shape {list(b.shape)}, the kernel needs "
                        f"[{'T' if nrows is None else nrows}, {q_heads}] "
                        "(query's tokens, num_q_heads)")
                if any(st < 0 for st in b.strides):
                    raise ValueError(f"{a.name}: negative strides are not "
                                     "supported")
                fields[a.name + "_stride_token"] = b.strides[0]
                fields[a.name + "_stride_head"] = b.strides[1]
            elif a.role in _SCALAR_ROLES:
                if a.name in scalars:
                    # Converted (and range-checked) by each launch.
                    spec = op.args_struct._ranges().get(a.name)
                    if a.type != "f32" and (spec is None or
                                            spec[0] is None):
                        raise NotImplementedError(
                            f"kvgen binding: scalar field {a.name} has type "
                            f"{a.type}, which it does not know how to fill")
                    plan_scalars.append((a.name, index[a.name],
                                         None if a.type == "f32" else
                                         spec[0]))
                elif a.role == "param" and a.need != "never" and t > 0 and (
                        a.need == "always" or
                        self.options.get(a.name) == "1"):
                    raise ValueError(f"pass {a.name}= ({a.doc})")
            elif a.role == "rows":
                if b is None:
                    raise ValueError(f"{a.name} is required")
                d = lay.head_size(a.which)
                st, sh = b.check_rows(t, lay.num_kv_heads, d)
                if self.io_dtype is not None:
                    b.check_dtype(self.io_dtype)
                fields[a.name + "_stride_token"] = st
                fields[a.name + "_stride_head"] = sh
            elif a.role == "cache":
                tensor, cset = a.which & 1, a.which >> 1
                if b is None:
                    if tensor == 1 and packed:
                        continue
                    raise ValueError(
                        f"{a.name} is required"
                        + (" for a separate layout" if tensor == 1 else ""))
                if cache_bytes is not None:
                    n = cb[a.which] if a.which < len(cb) else 0
                else:
                    n = 0 if (packed and tensor == 1) else b.span_bytes()
                fields[a.name + "_bytes"] = n
                cache_sizes[a.name] = (cset, tensor, n)
            elif a.role == "slots":
                if b is None:
                    raise ValueError(f"{a.name} is required")
                if len(b.shape) != 1 or b.shape[0] != t:
                    raise ValueError(f"{a.name}: shape {list(b.shape)}, "
                                     f"need [{t}]")
                if t > 1 and b.strides[0] != 1:
                    raise ValueError(f"{a.name} must be contiguous")
                if self.slot_dtype is not None and b.dtype != self.slot_dtype:
                    raise TypeError(f"{a.name}: dtype {b.dtype}, the kernel "
                                    f"takes {self.slot_dtype}")
            elif a.role == "index_i64":
                if b is None:
                    raise ValueError(f"{a.name} is required")
                b.check_pairs()
            elif a.role == "scale":
                if b is None:
                    # per_tile layouts keep their scales in the rows.
                    need = lay.scale in ("per_tensor", "per_head") and (
                        a.need == "scaled" or
                        (a.need == "dequant" and self.dequantize))
                    if need and t > 0:
                        raise ValueError(f"{a.name} is required: the layout "
                                         f"has scale = {lay.scale}")
                    continue
                if b.dtype != "f32":
                    raise TypeError(f"{a.name}: dtype {b.dtype}, need float32")
            elif a.role == "error_flag":
                if b is None:
                    continue  # the context's error word (Context.check)
                if b.dtype != "i32":
                    raise TypeError(f"{a.name}: dtype {b.dtype}, need int32")
            elif a.role == "work":
                fields[a.name] = t
            elif a.role == "cache_strides":
                # WHICH < 0: one triple serves every component.
                fields[a.name] = dyn[a.which] if 0 <= a.which < 2 else dyn[0]
        # The launch rule's maxima, when not given: from the index arrays
        # (a device tensor's .max() synchronizes with its stream).
        derived = []
        for a in op.args:
            if a.role not in ("work_rows", "work_span") or a.name in scalars:
                continue
            src = next((bufs.get(r.name) for r in op.args if r.role == (
                "query_start_loc" if a.role == "work_rows" else "seq_lens")),
                None)
            x = tensors.get(next(r.name for r in op.args if r.role == (
                "query_start_loc" if a.role == "work_rows" else "seq_lens")))
            if src is None or x is None or t == 0:
                fields[a.name] = 1 if a.role == "work_rows" else 0
                continue
            # From the array's values: each launch (_Plan.run).
            derived.append((a.name, index[src.what], t,
                            a.role == "work_rows"))
        # stream: the default is torch's current stream of the first
        # device tensor (_Plan.run).
        dev = next((b for b in bufs.values()
                    if b is not None and b.kind == "torch" and
                    b.is_device), None)
        # workspace: the caller's, else one kept by this kernel per stream
        # (and, on the host backend, per calling thread), zeroed when
        # allocated, max_workspace_bytes, so it serves every later shape
        # and is never replaced; kernels leave its counters zero. Its need
        # depends on max_query_len / max_seq_len: asked each launch.
        ws = next((a for a in op.args if a.role == "workspace"), None)
        ws_plan = None
        if ws is not None:
            b = bufs.get(ws.name)
            sizes = [r.name for r in op.args if r.role == "workspace_bytes"]
            if b is not None:
                for r in sizes:
                    fields[r] = b.span_bytes()
            owner = next((x for x in bufs.values()
                          if x is not None and x.kind == "torch"), None)
            ws_plan = (ws.name, sizes, b is not None,
                       None if owner is None else owner.device)
        # num_blocks per cache set
        for a in op.args:
            if a.role != "num_blocks":
                continue
            if num_blocks is not None:
                nb = num_blocks[a.which] if isinstance(
                    num_blocks, (tuple, list)) else num_blocks
            else:
                nb = None
                for name, (cset, tensor, n) in cache_sizes.items():
                    if cset != a.which:
                        continue
                    # The components this tensor holds.
                    for c in range(len(lay.components)):
                        if (0 if packed else c) != tensor:
                            continue
                        m = lay.max_blocks(c, n, dyn[min(c, len(dyn) - 1)])
                        nb = m if nb is None else min(nb, m)
                if nb is None:
                    nb = 0
                if nb <= 0 and t > 0:
                    raise ValueError(
                        f"kernel {self.name}: the caches ("
                        + ", ".join(f"{k} {v[2]} bytes"
                                    for k, v in cache_sizes.items())
                        + ") hold no whole block of the layout; pass "
                        "num_blocks explicitly to get the runtime's check")
            fields[a.name] = int(nb)
        self._fill_pointers(bufs, fields, t, q_heads)
        pointers = tuple((a.name, index[a.name]) for a in op.args
                         if a.type in _POINTER_TYPES and
                         bufs.get(a.name) is not None)
        ptrs = [0] * len(index)
        for name, i in pointers:
            ptrs[i] = fields.pop(name)
        aliasing = _cache_aliasing_checks(op, lay, bufs, fields, dyn, index)
        template = op.args_struct(**fields)  # range-checks every field
        plan = _Plan(op.args_struct, bytes(template), pointers,
                     tuple(plan_scalars), tuple(derived), aliasing,
                     None if dev is None else dev.device, ws_plan,
                     backend == "host")
        return plan, ptrs

    def _fill_pointers(self, bufs, fields, t, q_heads):
        """Where arrays become pointers, the one place: every pointer field
        of the op given an array gets its address here, after checking
        that the array holds what the kernel addresses through the field
        (by role: _dense_extent; views: their shapes were checked as the
        role's; raw buffers: contiguous, see _cache_view, and the bytes the
        runtime is told of are within the array). ValueError naming the
        argument otherwise."""
        op = self._op
        slot_bytes = SLOT_DTYPES.get(self.slot_dtype, 0)
        for a in op.args:
            if a.type not in _POINTER_TYPES:
                continue
            b = bufs.get(a.name)
            if b is None:
                continue
            if a.role == "slots" and not slot_bytes:
                slot_bytes = b.itemsize
            ext = _dense_extent(a, t, self.layout, q_heads, slot_bytes)
            if ext is not None:
                b.check_holds(*ext, writes=a.type in _WRITTEN_TYPES)
            elif a.role in _RAW_ROLES:
                size_field = next((r.name for r in op.args
                                   if r.name == a.name + "_bytes" or
                                   (a.role == "workspace" and
                                    r.role == "workspace_bytes")), None)
                size = fields.get(size_field, 0) if size_field else 0
                if a.role == "cache":
                    # Contiguous, or a view of the layout's shape (whose
                    # strides _check_cache_views compared with the
                    # layout's); ValueError otherwise. V of a packed layout
                    # is not read.
                    if not (self.layout.packed and a.which & 1):
                        _cache_view(self.layout, b, a.which & 1)
                elif not b.is_contiguous():
                    raise ValueError(
                        f"{a.name}: a raw buffer must be contiguous (shape "
                        f"{list(b.shape)}, strides {list(b.strides)} "
                        "elements): the kernel addresses its bytes densely")
                if size > b.span_bytes():
                    raise ValueError(
                        f"{a.name}: {size_field} = {size} bytes (cache_bytes)"
                        f", but the array holds {b.span_bytes()}: the kernel "
                        "could address bytes past its end")
            fields[a.name] = b.ptr

    def _fill_workspace(self, plan_ws, args, stream):
        """The workspace fields of `args` for this launch: asks the runtime
        how many bytes its shapes need (kvgen_kernel_workspace_bytes, which
        also refuses launch shapes that do not fit); unless the caller gave
        a workspace, points them at this kernel's one for `stream` (see
        _workspace_for) when any is needed."""
        name, sizes, given, device = plan_ws
        need = ctypes.c_uint64()
        _check("kvgen_kernel_workspace_bytes",
               self._lib.kvgen_kernel_workspace_bytes(
                   self._handle, ctypes.byref(args), ctypes.sizeof(args),
                   ctypes.byref(need)))
        if given or need.value == 0:
            return
        _, n, ptr = self._workspace_for(need.value, device, stream)
        _set_field(args, name, ptr)
        for r in sizes:
            setattr(args, r, n)

    def _workspace_for(self, nbytes, device, stream):
        """A zeroed workspace of >= nbytes on `device` (the torch device of
        the launch's first torch tensor; None: a numpy array), kept
        and reused by this kernel for launches on `stream` (a CUstream
        handle; 0 = the default stream): max_workspace_bytes (every
        shape's need), allocated on the first split launch of that key, so
        a CUDA graph that captured it stays valid.

        A split workspace holds counters and partials of the launch using
        it, so one must serve only launches that cannot run at the same
        time: those on one stream (CUDA / HIP: the stream orders them) and,
        on the host backend, those of one thread (its launches run on the
        calling thread, which another thread's launch does not wait for).
        So the key is the stream, and on the host backend the stream and
        the calling thread (threading.get_ident()); keys of host threads
        that have ended are dropped when a new key is added. A caller that
        passes `workspace=` keeps that rule itself. Returns (the array, its
        bytes, its address)."""
        key = (stream, threading.get_ident()
               if self._ctx.backend == "host" else None)
        with self._workspaces_lock:
            have = self._workspaces.get(key)
            if have is not None and have[1] >= nbytes:
                return have
            if getattr(self._lib, "kvgen_kernel_max_workspace_bytes",
                       None) is not None:
                nbytes = max(nbytes, self.max_workspace_bytes)
            n = (nbytes + 255) // 256 * 256
            if device is not None:
                import torch
                w = torch.zeros(n, dtype=torch.uint8, device=device)
            else:
                import numpy
                w = numpy.zeros(n, dtype=numpy.uint8)
            if have is None and key[1] is not None:
                live = {t.ident for t in threading.enumerate()}
                for old in [k for k in self._workspaces
                            if k[1] is not None and k[1] not in live]:
                    del self._workspaces[old]
            have = self._workspaces[key] = (w, n, _Buf(w, "workspace").ptr)
            return have

    def launch_raw(self, args, stream=0, pdl=False):
        """Launches with a prebuilt argument struct (args_struct(); no
        Python-side checks; for benchmarks). pdl=True: a programmatic
        dependent launch (kvgen_launch_ex, see launch())."""
        if pdl:
            if getattr(self._lib, "kvgen_launch_ex", None) is None:
                self._need_pdl()  # raises: an older library
            _check(f"kvgen_launch_ex ({self.op})",
                   self._lib.kvgen_launch_ex(self._handle, ctypes.byref(args),
                                             ctypes.sizeof(args), stream,
                                             ctypes.byref(_PDL_OPTIONS)))
            return
        _check(f"kvgen_launch ({self.op})",
               self._lib.kvgen_launch(self._handle, ctypes.byref(args),
                                      ctypes.sizeof(args), stream))

    def _need_pdl(self):
        """KvgenError unless the kernel accepts a programmatic dependent
        launch (the runtime's own check, without a launch)."""
        if self.dependent_launch:
            return
        why = ("the runtime library has no kvgen_launch_ex"
               if getattr(self._lib, "kvgen_launch_ex", None) is None else
               f"kvgen_kernel_launch_flags reports no "
               f"KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT (the kernel's plan has "
               f"no dependent_launch, target {self._ctx.target}, backend "
               f"{self._ctx.backend}; kv-plan sets it on sm_90+ for every op "
               f"but paged_attention)")
        raise KvgenError(f"kvgen_launch_ex ({self.op})", 1,
                         f"kernel {self.name} cannot take a programmatic "
                         f"dependent launch: {why}")

    def _need_op(self, op):
        if self.op != op:
            raise TypeError(f"kernel {self.name} is a {self.op} kernel, "
                            f"called as {op}")
