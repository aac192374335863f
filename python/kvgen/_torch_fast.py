"""The C++ kernel of kvgen.torch's ops (_torch_fast.cpp): built on first
use against the running torch, cached on disk, loaded with ctypes.
Internal to kvgen.torch (see its fast_path_info() and docs/torch.md).

Why C++: torch's dispatcher calling a kernel written in Python costs about
2.8 us per call on the H200 host before the kernel's first line runs (3.3 us
on the 2-core CI machine), more than the whole budget of issue 11 (op -
C API <= 3 us); a C++ kernel is entered after about 1.9 us (2.2 us), all of
it torch's own Python-to-C++ call. The kernel launches a plan that the
Python implementation checked and remembered for the same tensor metadata,
and sends every other call to that implementation.

The library is compiled from _torch_fast.cpp with the system C++ compiler
($CXX, else c++; the one kvgen's host backend uses) and torch's headers and
libraries (torch/include, torch/lib: no Python.h, no kvgen header), into
$KVGEN_CACHE_DIR/torch-fast (else ~/.cache/kvgen/torch-fast), as C++20,
named by a digest of the source, torch's version and location, the compiler command
and torch's C++ ABI flag. Compiling takes about 6 s on the H200 host, 11 s
on the 2-core CI machine, once per cache directory and torch; a failure
(no compiler, no torch headers) is remembered there too, and kvgen.torch
then registers its Python kernels (the same results, more host time) and
warns once (RuntimeWarning) with the reason.
KVGEN_TORCH_FAST=0 in the environment at import skips all of this. The
build is logged on logger "kvgen" at INFO (its start, then its time in ms).
"""

import ctypes
import fcntl
import hashlib
import logging
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

_SOURCE = Path(__file__).resolve().with_name("_torch_fast.cpp")
_TAG = "2"  # bump when the build command changes meaning
# kvgen's logger (kvgen.log): the build is logged at INFO with its time.
_log = logging.getLogger("kvgen")


def _cache_root():
    """The runtime's default cache directory (DiskCache::defaultDir)."""
    d = os.environ.get("KVGEN_CACHE_DIR")
    if d:
        return Path(d)
    d = os.environ.get("XDG_CACHE_HOME")
    if d:
        return Path(d) / "kvgen"
    d = os.environ.get("HOME")
    if d:
        return Path(d) / ".cache" / "kvgen"
    return Path(tempfile.gettempdir()) / "kvgen-cache"


class FastPath:
    """The loaded library (ctypes) and what it was built from."""

    def __init__(self, path):
        self.path = str(path)
        lib = ctypes.CDLL(self.path)
        v, p = ctypes.c_void_p, ctypes.c_char_p
        lib.kvgen_torch_fast_register.restype = p
        lib.kvgen_torch_fast_register.argtypes = [p, p, p, p]
        lib.kvgen_torch_fast_set_launch.restype = None
        lib.kvgen_torch_fast_set_launch.argtypes = [v, v, v]
        lib.kvgen_torch_fast_remember.restype = ctypes.c_int
        lib.kvgen_torch_fast_remember.argtypes = [
            v, v, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
            ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int32]
        lib.kvgen_torch_fast_remember_ex.restype = ctypes.c_int
        lib.kvgen_torch_fast_remember_ex.argtypes = [
            v, v, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
            ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int32,
            ctypes.c_int32]
        lib.kvgen_torch_fast_remember_split.restype = ctypes.c_int
        lib.kvgen_torch_fast_remember_split.argtypes = [
            v, v, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
            ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int32,
            ctypes.c_int32, ctypes.c_int64]
        lib.kvgen_torch_fast_clear.restype = None
        lib.kvgen_torch_fast_clear.argtypes = []
        u = ctypes.POINTER(ctypes.c_uint64)
        lib.kvgen_torch_fast_stats.restype = None
        lib.kvgen_torch_fast_stats.argtypes = [u, u, u]
        self.lib = lib
        self.remember_raw = lib.kvgen_torch_fast_remember
        #: remember_raw plus the num_seqs field's offset (unified_attention)
        self.remember_ex = lib.kvgen_torch_fast_remember_ex
        #: remember_ex plus the split (unified_attention): the
        #: min(max_seqlen_q, num_tokens) from which the signature's calls
        #: take the prefill kernel's plan; the plan is filed on the side of
        #: the call that made it
        self.remember_split = lib.kvgen_torch_fast_remember_split
        self.clear = lib.kvgen_torch_fast_clear

    def register(self, ns, op, slow, roles):
        """The C++ kernel for ns::op (CPU, CUDA), falling back to ns::slow.
        Raises RuntimeError with the library's message."""
        err = self.lib.kvgen_torch_fast_register(
            ns.encode(), op.encode(), slow.encode(), roles.encode())
        if err is not None:
            raise RuntimeError(err.decode(errors="replace"))

    def register_noop(self, ns, op):
        """A C++ kernel for ns::op (CPU, CUDA) that returns at once
        (bench/torch_overhead.py: torch's cost of calling a C++ kernel)."""
        f = self.lib.kvgen_torch_fast_register_noop
        f.restype, f.argtypes = ctypes.c_char_p, [ctypes.c_char_p] * 2
        err = f(ns.encode(), op.encode())
        if err is not None:
            raise RuntimeError(err.decode(errors="replace"))

    def set_launch(self, launch, launch_ex, pdl_options):
        """Function addresses of kvgen_launch / kvgen_launch_ex and the
        address of the kvgen_launch_options for pdl=True."""
        self.lib.kvgen_torch_fast_set_launch(launch, launch_ex, pdl_options)

    def no_launch(self):
        """Addresses of (launch, launch_ex) stand-ins that launch nothing
        and return 0 (bench/torch_overhead.py --no-kernel)."""
        cast = ctypes.cast
        return (cast(self.lib.kvgen_torch_fast_no_launch,
                     ctypes.c_void_p).value,
                cast(self.lib.kvgen_torch_fast_no_launch_ex,
                     ctypes.c_void_p).value)

    def stats(self):
        """(hits, misses, entries): calls launched by the C++ kernel, calls
        it sent to the Python implementation, plans it holds."""
        h, m, e = (ctypes.c_uint64() for _ in range(3))
        self.lib.kvgen_torch_fast_stats(ctypes.byref(h), ctypes.byref(m),
                                        ctypes.byref(e))
        return h.value, m.value, e.value


def _build_command(torch, out):
    root = Path(torch.__file__).resolve().parent
    inc, lib = root / "include", root / "lib"
    if not (inc / "torch" / "library.h").is_file():
        raise RuntimeError(f"torch's C++ headers are not installed ({inc} "
                           "has no torch/library.h)")
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    # C++20: torch's headers need it from about torch 2.13 on (a fresh
    # `pip install .[torch]` got 2.15, whose headers fail under C++17), and
    # the older ones compile under it too; GCC >= 10 and Clang >= 10 take it.
    return cxx + ["-O2", "-std=c++20", "-shared", "-fPIC",
                  "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                  f"-I{inc}", str(_SOURCE), "-o", str(out), f"-L{lib}",
                  f"-Wl,-rpath,{lib}", "-lc10", "-ltorch_cpu"]


def _digest(torch):
    h = hashlib.sha256()
    h.update(_SOURCE.read_bytes())
    cmd = _build_command(torch, "OUT")
    for part in (_TAG, torch.__version__, *cmd):
        h.update(b"\0" + str(part).encode())
    return h.hexdigest()[:24]


def load(torch):
    """(FastPath, None), or (None, why not)."""
    if os.environ.get("KVGEN_TORCH_FAST", "1") in ("0", ""):
        return None, "KVGEN_TORCH_FAST=0"
    try:
        digest = _digest(torch)
        d = _cache_root() / "torch-fast"
        d.mkdir(parents=True, exist_ok=True)
        so = d / f"kvgen_torch_fast-{digest}.so"
        failed = d / f"kvgen_torch_fast-{digest}.failed"
        if not so.is_file() and not failed.is_file():
            # One process compiles, the others wait for it (flock).
            with open(d / f"kvgen_torch_fast-{digest}.lock", "w") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                if not so.is_file() and not failed.is_file():
                    _log.info("kvgen.torch: building its C++ kernel %s "
                              "(once per torch and cache directory)", so)
                    start = time.perf_counter()
                    _compile(torch, so, failed)
                    ms = (time.perf_counter() - start) * 1e3
                    if so.is_file():
                        _log.info("kvgen.torch: built %s in %.0f ms", so, ms)
                    else:
                        _log.info("kvgen.torch: building %s failed after "
                                  "%.0f ms (%s)", so, ms, failed)
        if failed.is_file():
            return None, (failed.read_text(errors="replace").strip()
                          + f"\n(delete {failed} to try again)")
        return FastPath(so), None
    except Exception as e:  # noqa: BLE001 - any failure: the Python kernels
        return None, f"{type(e).__name__}: {e}"


def _compile(torch, so, failed):
    tmp = so.with_name(f"{so.name}.{os.getpid()}.tmp")
    try:
        cmd = _build_command(torch, tmp)
        r = subprocess.run(cmd, capture_output=True, text=True)
    except (OSError, RuntimeError) as e:
        failed.write_text(f"cannot build {so.name}: {e}\n")
        return
    if r.returncode < 0:  # killed: not remembered, the next import retries
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{cmd[0]} was killed (signal {-r.returncode})")
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-15:]
        failed.write_text(f"compiling {_SOURCE.name} failed (exit "
                          f"{r.returncode}): {shlex.join(cmd)}\n"
                          + "\n".join(tail) + "\n")
        tmp.unlink(missing_ok=True)
        return
    os.replace(tmp, so)
