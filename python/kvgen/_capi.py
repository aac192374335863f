"""ctypes declarations of the kvgen C API (runtime/include/kvgen/kvgen.h and
kernel_abi.h). Internal: use the classes of the `kvgen` package instead.

The library is found, in order, at:
  1. $KVGEN_LIB (a path to libkvgen-runtime.so, or a directory holding it);
  2. <package>/lib (what `pip install .` installs: the runtime and the
     generator library libkvgen-generator.so side by side);
  3. <repo>/build/lib, <repo>/build-dev/lib (a source checkout);
  4. the system search path (ctypes.util.find_library("kvgen-runtime")).
It is loaded on first use, not at import. The runtime finds the generator
library next to itself (or see kvgen.set_generator_path).
"""

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_REPO = _PACKAGE.parents[1]
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
    12: "KVGEN_ERROR_INDEX_OUT_OF_RANGE",
    13: "KVGEN_ERROR_OUT_OF_MEMORY",
}

# kvgen_backend
BACKENDS = {"auto": 0, "cuda": 1, "hip": 2, "host": 3}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}

_I64x3 = ctypes.c_int64 * 3


class OpInfo(ctypes.Structure):
    """kvgen_op_info."""
    _fields_ = [
        ("op", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("args_type", ctypes.c_char_p),
        ("work_from", ctypes.c_char_p),
        ("args_size", ctypes.c_uint64),
        ("num_args", ctypes.c_int),
        ("num_options", ctypes.c_int),
        ("doc", ctypes.c_char_p),
    ]


class ArgInfo(ctypes.Structure):
    """kvgen_arg_info."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_char_p),
        ("role", ctypes.c_char_p),
        ("which", ctypes.c_int),
        ("need", ctypes.c_char_p),
        ("offset", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("doc", ctypes.c_char_p),
    ]


class OptionInfo(ctypes.Structure):
    """kvgen_option_info."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_char_p),
        ("default_value", ctypes.c_char_p),
        ("doc", ctypes.c_char_p),
    ]


class KernelSpecC(ctypes.Structure):
    """kvgen_kernel_spec."""
    _fields_ = [
        ("op", ctypes.c_int),
        ("layout", ctypes.c_char_p),
        ("options", ctypes.c_char_p),
    ]


class LayoutInfo(ctypes.Structure):
    """kvgen_layout_info."""
    _fields_ = [
        ("text", ctypes.c_char_p),
        ("num_kv_heads", ctypes.c_int64),
        ("block_size", ctypes.c_int64),
        ("order", ctypes.c_char_p),
        ("packing", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("scale", ctypes.c_char_p),
        ("element_bytes", ctypes.c_int64),
        ("num_components", ctypes.c_int),
        ("is_kv", ctypes.c_int),
    ]


class ComponentInfo(ctypes.Structure):
    """kvgen_component_info."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("head_size", ctypes.c_int64),
        ("strides", ctypes.c_int64 * 3),
        ("explicit_strides", ctypes.c_int),
        ("base", ctypes.c_int64),
        ("tensor", ctypes.c_int),
        ("elem_stride", ctypes.c_int64),
        ("token_chunk", ctypes.c_int64),
        ("token_chunk_stride", ctypes.c_int64),
        ("elem_chunk", ctypes.c_int64),
        ("elem_chunk_stride", ctypes.c_int64),
        ("span", ctypes.c_int64),
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


class LaunchOptions(ctypes.Structure):
    """kvgen_launch_options (kvgen.h)."""
    _fields_ = [("flags", ctypes.c_uint32)]


#: kvgen_launch_flag bits (kvgen.h).
LAUNCH_PROGRAMMATIC_DEPENDENT = 1 << 0

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
    "kvgen_context_check": (ctypes.c_int, [_c]),
    "kvgen_context_get_kernel": (ctypes.c_int, [_c, ctypes.c_char_p,
                                                ctypes.POINTER(_c)]),
    "kvgen_context_get_kernel_by_spec": (
        ctypes.c_int, [_c, ctypes.POINTER(KernelSpecC), ctypes.POINTER(_c)]),
    "kvgen_kernel_name": (ctypes.c_char_p, [_c]),
    "kvgen_kernel_op": (ctypes.c_int, [_c]),
    "kvgen_kernel_layout": (ctypes.c_char_p, [_c]),
    "kvgen_kernel_vector_bytes": (ctypes.c_int, [_c]),
    "kvgen_kernel_options": (ctypes.c_char_p, [_c]),
    "kvgen_kernel_abi_source": (ctypes.c_char_p, []),
    "kvgen_op_count": (ctypes.c_int, []),
    "kvgen_op_info_at": (ctypes.c_int, [ctypes.c_int,
                                        ctypes.POINTER(OpInfo)]),
    "kvgen_op_arg": (ctypes.c_int, [ctypes.c_int, ctypes.c_int,
                                    ctypes.POINTER(ArgInfo)]),
    "kvgen_op_option": (ctypes.c_int, [ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(OptionInfo)]),
    "kvgen_launch": (ctypes.c_int, [_c, ctypes.c_void_p, ctypes.c_uint64,
                                    ctypes.c_void_p]),
    "kvgen_layout_parse": (ctypes.c_int, [ctypes.c_char_p,
                                          ctypes.POINTER(_c)]),
    "kvgen_layout_destroy": (None, [_c]),
    "kvgen_layout_get_info": (ctypes.c_int, [_c,
                                             ctypes.POINTER(LayoutInfo)]),
    "kvgen_layout_component": (ctypes.c_int, [
        _c, ctypes.c_int, ctypes.POINTER(ComponentInfo)]),
    "kvgen_layout_extent_bytes": (ctypes.c_int, [
        _c, ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_int64)]),
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
    "kvgen_kernel_workspace_bytes": (ctypes.c_int, [
        _c, ctypes.c_void_p, ctypes.c_uint64,
        ctypes.POINTER(ctypes.c_uint64)]),
    "kvgen_kernel_max_workspace_bytes": (ctypes.c_int, [
        _c, ctypes.POINTER(ctypes.c_uint64)]),
    "kvgen_launch_ex": (ctypes.c_int, [_c, ctypes.c_void_p, ctypes.c_uint64,
                                       ctypes.c_void_p,
                                       ctypes.POINTER(LaunchOptions)]),
    "kvgen_kernel_launch_flags": (ctypes.c_uint32, [_c]),
    "kvgen_set_generator_path": (ctypes.c_int, [ctypes.c_char_p]),
    "kvgen_generator_library": (ctypes.c_int,
                                [ctypes.POINTER(ctypes.c_char_p)]),
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
    out.append(_PACKAGE / "lib" / _LIB_NAME)
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


def cstr(what, value):
    """`value` (a str) as the NUL-terminated UTF-8 bytes a `const char *`
    parameter of the C API takes: the one place the binding turns a
    string argument into bytes. The C side reads up to the first NUL, so a
    string holding one would be cut there silently (a layout parsed
    without the fields after it, a cache directory that is a prefix of the
    one given): ValueError naming the argument `what` instead. A string
    that is not valid UTF-8 (lone surrogates) raises UnicodeEncodeError,
    also a ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, got "
                        f"{type(value).__name__}")
    i = value.find("\0")
    if i >= 0:
        shown = repr(value[:60]) + ("..." if len(value) > 60 else "")
        raise ValueError(f"{what}: {shown} holds a NUL character (at index "
                         f"{i}); the C API would read only the text before "
                         "it")
    return value.encode()


def status_name(code):
    return STATUS_NAMES.get(code, f"KVGEN_ERROR_UNKNOWN({code})")


#---------------------------------------------------------------------------
# The op table (kvgen/Ops.def), read from the library: every op's argument
# struct is built here from kvgen_op_arg, so no struct is restated by hand.
#---------------------------------------------------------------------------

# Ops.def TYPE -> ctypes type.
_ARG_TYPES = {
    "ptr": ctypes.c_void_p, "mut_ptr": ctypes.c_void_p,
    "f32_ptr": ctypes.c_void_p, "i32_ptr": ctypes.c_void_p,
    "i64": ctypes.c_int64, "u64": ctypes.c_uint64, "i64x3": _I64x3,
    "f32": ctypes.c_float,
}


_INT_RANGES = {ctypes.c_int64: (-(1 << 63), (1 << 63) - 1),
               ctypes.c_uint64: (0, (1 << 64) - 1),
               ctypes.c_void_p: (0, (1 << 64) - 1)}


class _ArgsStruct(ctypes.Structure):
    """Base of the ops' argument structs: an integer field (or an element
    of a stride triple) given a Python int outside its C type's range
    raises ValueError naming the field. ctypes itself keeps the low bits
    silently (sliding_window = 2**64 + 3 ran with a window of 3). Checked
    in __setattr__, which ctypes' keyword __init__ goes through too; an
    int in range costs one dict lookup and a comparison (launch() fills a
    struct per call)."""

    @classmethod
    def _ranges(cls):
        r = cls.__dict__.get("_range_of")
        if r is None:
            r = {name: (_INT_RANGES.get(t), t) for name, t in cls._fields_
                 if t in _INT_RANGES or t is _I64x3}
            cls._range_of = r
        return r

    def __setattr__(self, name, value):
        spec = self._ranges().get(name)
        if spec is not None and value is not None:
            rng, t = spec
            if rng is not None:
                if not (type(value) is int and rng[0] <= value <= rng[1]):
                    self._check_int(name, t, rng, value)
            else:  # a stride triple: each element an int64
                r64 = _INT_RANGES[ctypes.c_int64]
                try:
                    items = list(value)
                except TypeError:
                    items = []
                for k, v in enumerate(items):
                    if not (type(v) is int and r64[0] <= v <= r64[1]):
                        self._check_int(f"{name}[{k}]", ctypes.c_int64, r64,
                                        v)
        super().__setattr__(name, value)

    def _check_int(self, name, t, rng, value):
        if isinstance(value, bool):
            return
        try:
            v = value.__index__()
        except (AttributeError, TypeError):
            return  # ctypes raises its own TypeError
        if not rng[0] <= v <= rng[1]:
            kind = {ctypes.c_int64: "int64_t", ctypes.c_uint64: "uint64_t",
                    ctypes.c_void_p: "a pointer"}[t]
            raise ValueError(f"{type(self).__name__}.{name} = {v} is outside "
                             f"{kind} ([{rng[0]}, {rng[1]}])")


class Arg:
    """One field of an op's argument struct (kvgen_arg_info)."""
    __slots__ = ("name", "type", "role", "which", "need", "offset", "size",
                 "doc")

    def __init__(self, info):
        self.name = info.name.decode()
        self.type = info.type.decode()
        self.role = info.role.decode()
        self.which = info.which
        self.need = info.need.decode()
        self.offset = info.offset
        self.size = info.size
        self.doc = info.doc.decode()

    def __repr__(self):
        return f"<kvgen arg {self.name}: {self.type} {self.role}>"


class Option:
    """One spec option of an op (kvgen_option_info)."""
    __slots__ = ("name", "kind", "default", "doc")

    def __init__(self, info):
        self.name = info.name.decode()
        self.kind = info.kind.decode()
        self.default = info.default_value.decode()
        self.doc = info.doc.decode()


class Op:
    """One kernel op: name, id, its argument struct (`args_struct`, a
    ctypes.Structure built from the table), its fields and options."""

    def __init__(self, info):
        self.id = info.op
        self.name = info.name.decode()
        self.args_type = info.args_type.decode()
        self.work_from = info.work_from.decode()
        self.args_size = info.args_size
        self.doc = info.doc.decode()
        L = lib()
        self.args = []
        for i in range(info.num_args):
            a = ArgInfo()
            if L.kvgen_op_arg(self.id, i, ctypes.byref(a)) != SUCCESS:
                raise OSError(f"kvgen_op_arg({self.name}, {i}): "
                              f"{last_error()}")
            self.args.append(Arg(a))
        self.options = []
        for i in range(info.num_options):
            o = OptionInfo()
            if L.kvgen_op_option(self.id, i, ctypes.byref(o)) != SUCCESS:
                raise OSError(f"kvgen_op_option({self.name}, {i}): "
                              f"{last_error()}")
            self.options.append(Option(o))
        fields = [(a.name, _ARG_TYPES[a.type]) for a in self.args]
        self.args_struct = type(self.args_type, (_ArgsStruct,),
                                {"_fields_": fields,
                                 "__doc__": f"{self.args_type} "
                                            "(kvgen/Ops.def)"})
        # The C layout and ctypes' must agree field by field.
        for a in self.args:
            f = getattr(self.args_struct, a.name)
            if f.offset != a.offset or f.size != a.size:
                raise OSError(f"{self.args_type}.{a.name}: ctypes puts it at "
                              f"{f.offset} ({f.size} bytes), the library at "
                              f"{a.offset} ({a.size} bytes)")
        if ctypes.sizeof(self.args_struct) != self.args_size:
            raise OSError(f"{self.args_type}: ctypes size "
                          f"{ctypes.sizeof(self.args_struct)}, library size "
                          f"{self.args_size}")

    def arg(self, name):
        for a in self.args:
            if a.name == name:
                return a
        return None

    def option(self, name):
        for o in self.options:
            if o.name == name:
                return o
        return None

    def __repr__(self):
        return f"<kvgen op {self.name} ({self.id})>"


_ops = None


def ops():
    """{name: Op} for every op of the loaded library, in table order."""
    global _ops
    with _lock:
        if _ops is not None:
            return _ops
    L = lib()
    table = {}
    for i in range(L.kvgen_op_count()):
        info = OpInfo()
        if L.kvgen_op_info_at(i, ctypes.byref(info)) != SUCCESS:
            raise OSError(f"kvgen_op_info_at({i}): {last_error()}")
        op = Op(info)
        table[op.name] = op
    with _lock:
        _ops = table
    return table


def op(name):
    """The Op named `name`; ValueError listing the ops otherwise."""
    table = ops()
    if name not in table:
        raise ValueError(f"op {name!r} must be one of {', '.join(table)}")
    return table[name]


def op_by_id(op_id):
    for o in ops().values():
        if o.id == op_id:
            return o
    raise ValueError(f"unknown op id {op_id}")


def args_struct(name):
    """The ctypes.Structure of op `name`'s arguments (kvgen_<name>_args)."""
    return op(name).args_struct
