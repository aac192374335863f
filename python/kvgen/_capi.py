"""ctypes declarations of the kvgen C API (runtime/include/kvgen/kvgen.h and
kernel_abi.h). Internal: use the classes of the `kvgen` package instead.

The library is found, in order, at:
  1. $KVGEN_LIB (a path to libkvgen-runtime.so, or a directory holding it);
  2. <repo>/build/lib, <repo>/build-dev/lib (a source checkout);
  3. the system search path (ctypes.util.find_library("kvgen-runtime")).
It is loaded on first use, not at import.
"""

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
_LIB_NAME = "libkvgen-runtime.so"

# kvgen_status
SUCCESS = 0
STATUS_NAMES = {
    0: "KVGEN_SUCCESS",
    1: "KVGEN_ERROR_INVALID_ARGUMENT",
    2: "KVGEN_ERROR_OUT_OF_BOUNDS",
    3: "KVGEN_ERROR_MISALIGNED",
    4: "KVGEN_ERROR_NOT_FOUND",
    5: "KVGEN_ERROR_BACKEND_UNAVAILABLE",
    6: "KVGEN_ERROR_COMPILE",
    7: "KVGEN_ERROR_LOAD",
    8: "KVGEN_ERROR_LAUNCH",
    9: "KVGEN_ERROR_BUNDLE",
    10: "KVGEN_ERROR_COMPILE_ONLY",
    11: "KVGEN_ERROR_INTERNAL",
}

# kvgen_backend
BACKENDS = {"auto": 0, "cuda": 1, "hip": 2, "host": 3}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}

# kvgen_op
OPS = {"reshape_and_cache": 0, "gather": 1}
OP_NAMES = {v: k for k, v in OPS.items()}

_I64x3 = ctypes.c_int64 * 3


class ReshapeAndCacheArgs(ctypes.Structure):
    """kvgen_reshape_and_cache_args (kernel_abi.h); strides in elements."""
    _fields_ = [
        ("key", ctypes.c_void_p),
        ("value", ctypes.c_void_p),
        ("key_cache", ctypes.c_void_p),
        ("value_cache", ctypes.c_void_p),
        ("slot_mapping", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("error_flag", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int64),
        ("num_blocks", ctypes.c_int64),
        ("key_stride_token", ctypes.c_int64),
        ("key_stride_head", ctypes.c_int64),
        ("value_stride_token", ctypes.c_int64),
        ("value_stride_head", ctypes.c_int64),
        ("k_cache_strides", _I64x3),
        ("v_cache_strides", _I64x3),
    ]


class GatherArgs(ctypes.Structure):
    """kvgen_gather_args (kernel_abi.h); strides in elements."""
    _fields_ = [
        ("key_cache", ctypes.c_void_p),
        ("value_cache", ctypes.c_void_p),
        ("slot_mapping", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("error_flag", ctypes.c_void_p),
        ("key_out", ctypes.c_void_p),
        ("value_out", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int64),
        ("num_blocks", ctypes.c_int64),
        ("key_out_stride_token", ctypes.c_int64),
        ("key_out_stride_head", ctypes.c_int64),
        ("value_out_stride_token", ctypes.c_int64),
        ("value_out_stride_head", ctypes.c_int64),
        ("k_cache_strides", _I64x3),
        ("v_cache_strides", _I64x3),
    ]


class KernelSpecC(ctypes.Structure):
    """kvgen_kernel_spec."""
    _fields_ = [
        ("op", ctypes.c_int),
        ("layout", ctypes.c_char_p),
        ("io_dtype", ctypes.c_char_p),
        ("slot_dtype", ctypes.c_char_p),
        ("checked", ctypes.c_int),
        ("dequantize", ctypes.c_int),
    ]


class CacheStats(ctypes.Structure):
    """kvgen_cache_stats."""
    _fields_ = [
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("compiles", ctypes.c_uint64),
        ("disk_writes", ctypes.c_uint64),
        ("evictions", ctypes.c_uint64),
        ("last_compile_ms", ctypes.c_double),
        ("last_load_ms", ctypes.c_double),
    ]


WARNING_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)

_c = ctypes.c_void_p  # opaque handles (kvgen_context, kvgen_kernel)
_PROTOTYPES = {
    "kvgen_last_error": (ctypes.c_char_p, []),
    "kvgen_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "kvgen_version": (ctypes.c_char_p, []),
    "kvgen_context_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(_c)]),
    "kvgen_context_create_compile_only": (
        ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_c)]),
    "kvgen_context_destroy": (None, [_c]),
    "kvgen_context_backend": (ctypes.c_int, [_c]),
    "kvgen_context_target": (ctypes.c_char_p, [_c]),
    "kvgen_context_set_cache_dir": (ctypes.c_int, [_c, ctypes.c_char_p]),
    "kvgen_context_cache_dir": (ctypes.c_char_p, [_c]),
    "kvgen_context_set_warning_callback": (None, [_c, WARNING_FN,
                                                  ctypes.c_void_p]),
    "kvgen_context_get_stats": (ctypes.c_int, [_c,
                                               ctypes.POINTER(CacheStats)]),
    "kvgen_context_load_bundle": (ctypes.c_int, [_c, ctypes.c_char_p]),
    "kvgen_context_get_kernel": (ctypes.c_int, [_c, ctypes.c_char_p,
                                                ctypes.POINTER(_c)]),
    "kvgen_context_get_kernel_by_spec": (
        ctypes.c_int, [_c, ctypes.POINTER(KernelSpecC), ctypes.POINTER(_c)]),
    "kvgen_kernel_name": (ctypes.c_char_p, [_c]),
    "kvgen_kernel_op": (ctypes.c_int, [_c]),
    "kvgen_kernel_layout": (ctypes.c_char_p, [_c]),
    "kvgen_kernel_vector_bytes": (ctypes.c_int, [_c]),
    "kvgen_launch_reshape_and_cache": (
        ctypes.c_int, [_c, ctypes.POINTER(ReshapeAndCacheArgs),
                       ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]),
    "kvgen_launch_gather": (
        ctypes.c_int, [_c, ctypes.POINTER(GatherArgs), ctypes.c_uint64,
                       ctypes.c_uint64, ctypes.c_void_p]),
}

# Present in newer libraries only (bound when found; see has()).
_OPTIONAL = {
    "kvgen_context_alloc": (ctypes.c_int, [_c, ctypes.c_uint64,
                                           ctypes.POINTER(ctypes.c_void_p)]),
    "kvgen_context_free": (ctypes.c_int, [_c, ctypes.c_void_p]),
    "kvgen_context_copy": (ctypes.c_int, [_c, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_uint64,
                                          ctypes.c_int]),
    "kvgen_context_synchronize": (ctypes.c_int, [_c]),
}
COPY_KINDS = {"h2d": 1, "d2h": 2, "d2d": 3}

_lock = threading.Lock()
_lib = None
_lib_path = None


def candidate_paths():
    """Where the library is looked for, in order (see the module doc)."""
    out = []
    env = os.environ.get("KVGEN_LIB")
    if env:
        p = Path(env)
        out.append(p / _LIB_NAME if p.is_dir() else p)
    for build in ("build", "build-dev"):
        out.append(_REPO / build / "lib" / _LIB_NAME)
    return out


def lib():
    """The loaded CDLL with prototypes set; raises OSError naming every
    place that was tried."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        handle = None
        for p in candidate_paths():
            if not p.exists():
                tried.append(f"{p} (missing)")
                continue
            try:
                handle = ctypes.CDLL(str(p))
                _lib_path = str(p)
                break
            except OSError as e:
                tried.append(f"{p} ({e})")
        if handle is None and not os.environ.get("KVGEN_LIB"):
            found = ctypes.util.find_library("kvgen-runtime")
            if found:
                try:
                    handle = ctypes.CDLL(found)
                    _lib_path = found
                except OSError as e:
                    tried.append(f"{found} ({e})")
            else:
                tried.append("find_library('kvgen-runtime') (not found)")
        if handle is None:
            raise OSError(
                "kvgen: cannot load the runtime library "
                f"{_LIB_NAME}; tried: " + "; ".join(tried) +
                ". Build it (ninja -C build kvgen-runtime) or set KVGEN_LIB "
                "to its path.")
        missing = []
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(handle, name, None)
            if fn is None:
                missing.append(name)
                continue
            fn.restype = res
            fn.argtypes = args
        for name, (res, args) in _OPTIONAL.items():
            fn = getattr(handle, name, None)
            if fn is not None:
                fn.restype = res
                fn.argtypes = args
        if missing:
            raise OSError(f"kvgen: {_lib_path} lacks the C API functions "
                          f"{', '.join(missing)} (an older library?)")
        _lib = handle
        return _lib


def has(name):
    """True when the loaded library exports C function `name`."""
    return getattr(lib(), name, None) is not None


def lib_path():
    """The path of the loaded library (loads it)."""
    lib()
    return _lib_path


def last_error():
    return lib().kvgen_last_error().decode("utf-8", "replace")


def status_name(code):
    return STATUS_NAMES.get(code, f"KVGEN_ERROR_UNKNOWN({code})")
