"""The harness's backends: where kernels come from, run, and what builds
the reference.

  host  kernels emitted here for target host (build/bin/kvgen emit, only
        those the selected tests need), compiled by the runtime's host
        backend (the system C++ compiler, with UndefinedBehaviorSanitizer
        checks when it supports them: a vector access on a misaligned row
        faults on GPUs but silently works on x86), launched on numpy
        arrays; reference: numpy (kvgen_ref.py)
  cuda  kernels from a bundle emitted elsewhere (emit_bundle.py), JIT
        compiled with NVRTC, launched on torch tensors of one GPU;
        reference: torch on the GPU

status() says whether one can run here and why not; make() builds it.
"""

import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grid import harness as H
from grid.cases import REPO

BACKENDS = ("host", "cuda")
UBSAN = ("-fsanitize=alignment,null,signed-integer-overflow,shift,"
         "pointer-overflow,bool,enum,return,unreachable")


def build_dir():
    return Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))


class Unavailable(Exception):
    pass


class Backend:
    """What a test gets as `backend`: name, X (array back end), ctx
    (kvgen.Context), slack (canary bytes after caches), sparse_min (host
    caches from this size on are sparse), kernel(spec), launch(fn)."""

    def __init__(self, name, X, ctx, slack, sparse_min=None, ubsan=False):
        self.name, self.X, self.ctx = name, X, ctx
        self.slack, self.sparse_min, self.ubsan = slack, sparse_min, ubsan

    def kernel(self, spec):
        return self.ctx.kernel(spec.op, spec.layout, **spec.opts())

    def launch(self, fn):
        """Runs fn (one or more launches) and waits for the device; on the
        host, fails on any UndefinedBehaviorSanitizer report."""
        if not self.ubsan:
            fn()
            self.X.sync()
            return
        with _CaptureStderr() as cap:
            fn()
        if "runtime error" in cap.text:
            raise AssertionError("UndefinedBehaviorSanitizer report from a "
                                 f"kernel:\n{cap.text[:3000]}")

    def close(self):
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None


class _CaptureStderr:
    """Redirects file descriptor 2 (where UBSan reports) into a file."""

    def __enter__(self):
        self.tmp = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        self.text = self.tmp.read().decode(errors="replace")
        self.tmp.close()
        return False


def _runtime():
    try:
        import kvgen
        kvgen.library_path()
        return kvgen
    except (OSError, ImportError) as e:
        raise Unavailable(f"runtime library not loadable: {e}")


def status(name, opts):
    """None when backend `name` can run here, else the reason."""
    try:
        if name == "host":
            kv = build_dir() / "bin" / "kvgen"
            if not (kv.is_file() and os.access(kv, os.X_OK)):
                raise Unavailable(f"{kv} not found (build kvgen, or set "
                                  "KVGEN_BUILD_DIR): the host backend emits "
                                  "its kernels with it")
            _runtime()
            if opts.host_reference == "torch":
                _torch()
        elif name == "cuda":
            torch = _torch()
            if not torch.cuda.is_available():
                raise Unavailable("torch sees no CUDA device")
            b = Path(opts.bundle)
            if not (b / "kvgen-manifest.txt").is_file():
                raise Unavailable(f"no bundle at {b} (emit one with "
                                  "test/python/grid/emit_bundle.py and pass "
                                  "--bundle)")
            _runtime()
        else:
            raise Unavailable(f"unknown backend {name!r} (one of "
                              f"{', '.join(BACKENDS)})")
    except Unavailable as e:
        return str(e)
    return None


def _torch():
    try:
        import torch
        return torch
    except ImportError as e:
        raise Unavailable(f"torch is not installed ({e})")


def _ubsan_cxx(work):
    """The C++ compiler command with the UBSan checks, or None when the
    compiler lacks them (or KVGEN_TEST_UBSAN=0)."""
    if os.environ.get("KVGEN_TEST_UBSAN", "1") == "0":
        return None
    cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
    src = Path(work) / "ubsan_probe.cpp"
    src.write_text('extern "C" int f(int *p) { return *p; }\n')
    r = subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC",
                        "-Werror", UBSAN, str(src), "-o",
                        str(Path(work) / "ubsan_probe.so")],
                       capture_output=True)
    return f"{cxx} {UBSAN}" if r.returncode == 0 else None


_env_lock = threading.Lock()


class _Env:
    """Sets environment variables for a block (the runtime reads CXX when
    a context is created)."""

    def __init__(self, **kw):
        self.kw = {k: v for k, v in kw.items() if v is not None}

    def __enter__(self):
        _env_lock.acquire()
        self.saved = {k: os.environ.get(k) for k in self.kw}
        os.environ.update(self.kw)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _env_lock.release()


def make(name, specs, opts, workdir, log):
    """Backend `name` ready for `specs` (the KSpecs its tests use)."""
    kvgen = _runtime()
    if name == "host":
        return _make_host(kvgen, specs, opts, workdir, log)
    return _make_cuda(kvgen, specs, opts, log)


def _worker_order(specs):
    """`specs`, rotated by this pytest-xdist worker's share: workers that
    make the backend at the same time emit and compile from different
    points of the list, each taking the others' kernels from the shards
    and the disk cache (whose per-key lock makes a worker that reaches a
    kernel being compiled wait for it) instead of doing them again."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 2:
        return list(specs)
    k = len(specs) * (int(worker[2:]) % count) // count
    return list(specs[k:]) + list(specs[:k])


def _make_host(kvgen, specs, opts, workdir, log):
    from grid import emit_bundle
    state = build_dir() / "test-grid"  # kept between runs (build tree)
    specs = _worker_order(specs)
    bundle = emit_bundle.emit(specs, "host", Path(workdir) / "bundle",
                              build_dir() / "bin" / "kvgen",
                              shards=state / "shards", log=log)
    cache = opts.cache_dir or str(state / "kernel-cache")
    cxx = _ubsan_cxx(workdir)
    with _Env(CXX=cxx):
        _precompile(kvgen, bundle, specs, cache, log)
        ctx = kvgen.Context("host", cache_dir=cache)
    ctx.load_bundle(str(bundle))
    if opts.host_reference == "torch":
        X = H.TorchX("cpu")
    else:
        X = H.NumpyX()
    log(f"grid host backend: {len(specs)} kernels, UBSan "
        f"{'on' if cxx else 'off'}, reference {X.name}, kernel cache "
        f"{cache}")
    return Backend("host", X, ctx, opts.slack, H.SPARSE_MIN, bool(cxx))


def _precompile(kvgen, bundle, specs, cache, log, backend="host",
                target="host"):
    """Compiles every spec into the disk cache with compile-only contexts
    of `backend` / `target` in parallel (a context compiles one kernel at a
    time; ctypes releases the GIL in the compile); the launching context
    then loads them from the cache (cache None: the default cache
    directory, as the launching context's)."""
    jobs = max(1, min(len(specs), os.cpu_count() or 2))
    shares = [specs[i::jobs] for i in range(jobs)]
    errors = []

    def work(share):
        c = kvgen.Context.compile_only(backend, target, cache_dir=cache)
        try:
            c.load_bundle(str(bundle))
            for s in share:
                try:
                    c.kernel(s.op, s.layout, **s.opts())
                except kvgen.KvgenError as e:  # reported by its tests
                    errors.append(f"{s}: {e}")
            return c.stats()["compiles"]
        finally:
            c.close()

    with ThreadPoolExecutor(jobs) as pool:
        compiles = sum(pool.map(work, shares))
    log(f"grid {backend} backend: {compiles} kernels compiled, "
        f"{len(specs) - compiles - len(errors)} from the disk cache"
        + (f", {len(errors)} failed (first: {errors[0]})" if errors else ""))


def _make_cuda(kvgen, specs, opts, log):
    X = H.TorchX(f"cuda:{opts.device}")
    ctx = kvgen.Context("cuda", device=opts.device,
                        cache_dir=opts.cache_dir)
    ctx.load_bundle(str(opts.bundle))
    from grid import emit_bundle as E
    from kvgen import read_manifest
    have = {E.entry_key(e) for e in read_manifest(
        Path(opts.bundle) / "kvgen-manifest.txt") if e["target"] == ctx.target}
    missing = [s for s in specs if E.spec_key(s.op, s.layout, s.options)
               not in have]
    # NVRTC in parallel, into the cache the launching context reads (one
    # context compiles one kernel at a time: the whole grid's ~800 kernels
    # took most of a device call serially).
    _precompile(kvgen, str(opts.bundle), [s for s in specs if s not in
                                          missing],
                opts.cache_dir, log, backend="cuda", target=ctx.target)
    log(f"grid cuda backend: target {ctx.target}, bundle {opts.bundle}: "
        f"{len(specs) - len(missing)} of the {len(specs)} kernels the "
        "selected tests need" + (f"; missing (their tests fail), first: "
                                 f"{missing[0]}" if missing else ""))
    return Backend("cuda", X, ctx, opts.slack)
