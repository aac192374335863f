"""Shared fixtures and options of kvgen's Python tests.

KVGEN_BUILD_DIR selects the build tree whose bin/ holds kvgen-translate
(default: <repo>/build). The options below belong to the grid harness
(test/python/grid, see its README.md); they live here so that pytest knows
them whichever test path it is given.

Host kernels compile with KVGEN_HOST_CXXFLAGS=-Og (kvgen.h) unless the
variable is set: see pytest_configure.

One kernel disk cache for the whole run: unless KVGEN_CACHE_DIR is set, it
is set to <build>/test-kernel-cache (kept between runs, like the grid's
<build>/test-grid/kernel-cache), so every process of the run (pytest-xdist
workers, subprocesses, kvgen.torch's default context) and every module's
context (the kernel_cache fixture) compiles a kernel once: the cache's key
is the source, the compiler command and the kvgen version, and its per-key
lock lets one process compile while the others wait and read. Tests of the
cache itself give their contexts a directory of their own.

In parallel (scripts/test.sh: `pytest -n 2 --dist loadfile`, pytest-xdist):
a worker runs a whole test file, so a file's module fixtures (which emit
and load its kernels) run on one worker only; the grid's items are handed
out one by one (pytest_xdist_make_scheduler below).
"""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def pytest_addoption(parser):
    g = parser.getgroup("kvgen grid", "kvgen grid harness (test/python/grid)")
    g.addoption("--backend", default="auto",
                help="comma list of backends to run the grid on: host, "
                "cuda, or auto (default: every one that can run here; the "
                "others are reported as skipped, with the reason). A "
                "backend named explicitly that cannot run is an error.")
    g.addoption("--bundle", default=str(REPO_ROOT / ".dev" / "bundle"),
                help="the cuda backend's kernel bundle (a directory emitted "
                "by test/python/grid/emit_bundle.py; default .dev/bundle)")
    g.addoption("--lib", default=None,
                help="libkvgen-runtime.so to load (sets KVGEN_LIB)")
    g.addoption("--device", type=int, default=0, help="CUDA device ordinal")
    g.addoption("--slack", type=int, default=4096,
                help="canary bytes after each cache (0 under "
                "compute-sanitizer: overruns then leave the allocation)")
    g.addoption("--max-tokens", type=int, default=None,
                help="run only grid items with T (tokens / block pairs) <= "
                "this")
    g.addoption("--kernel-cache", dest="cache_dir", default=None,
                help="the runtime's disk cache (default: host "
                "<build>/test-grid/kernel-cache, cuda the runtime's)")
    g.addoption("--host-reference", default="numpy",
                choices=("numpy", "torch"),
                help="the host backend's reference: numpy (kvgen_ref.py) or "
                "torch on the CPU (checks the cuda backend's reference "
                "code without a GPU)")


def pytest_configure(config):
    lib = config.getoption("--lib")
    if lib:
        os.environ["KVGEN_LIB"] = str(Path(lib).resolve())
    # The grid's summary (grid/summary.py), in this process whichever tests
    # it runs: under pytest-xdist it prints the workers' reports.
    from grid import summary
    if not config.pluginmanager.is_registered(summary):
        config.pluginmanager.register(summary, "kvgen-grid-summary")
    # Before xdist starts its workers (they inherit the environment).
    # Host kernels (the host backend, the grid's host backend) compile with
    # -Og unless KVGEN_HOST_CXXFLAGS is set (to "" for the runtime's -O2
    # alone): the suite's largest cost is compiling them, and with the
    # grid's UndefinedBehaviorSanitizer checks -Og halves a MiMo attention
    # kernel's compile (3.05 -> 1.32 s of CPU here) and takes 40% off a
    # write's (0.82 -> 0.50 s); the kernels run slower (the grid's 65536-
    # token writes 27 -> 42 s). test_attention.py's
    # test_host_kernels_compile_at_the_default_options keeps one -O2 compile
    # of the attention bodies (warnings only -O2's analyses find).
    os.environ.setdefault("KVGEN_HOST_CXXFLAGS", "-Og")
    if not os.environ.get("KVGEN_CACHE_DIR") and kvgen_build_dir().is_dir():
        os.environ["KVGEN_CACHE_DIR"] = str(kvgen_build_dir() /
                                            "test-kernel-cache")
    config.addinivalue_line(
        "markers", "memcheck: the grid items run under compute-sanitizer "
        "(scripts/device_memcheck.sh)")
    config.addinivalue_line(
        "markers", "backends(*names): run the grid test on these backends "
        "only")


def kvgen_build_dir() -> Path:
    return Path(os.environ.get("KVGEN_BUILD_DIR", REPO_ROOT / "build"))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, except for the grid: a worker runs a whole test
    file (its module fixtures emit and load its kernels once), while the
    grid's items (test/python/grid: hundreds of short tests over one
    session backend) go to the workers one by one. xdist hands out the
    files with the most tests first and the grid's single items last, so
    they even out the workers' ends. Each worker that runs grid items makes
    the grid backend; they share its shards and kernel cache, starting at
    different points of its kernel list (grid/backends.py), so each kernel
    is still emitted and compiled once. Any other --dist: xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndGridItems(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return nodeid if "/grid/" in f"/{path}" else path

    return FilesAndGridItems(config, log)


@pytest.fixture(scope="session")
def kernel_cache() -> str:
    """The run's kernel disk cache ($KVGEN_CACHE_DIR, see the module
    docstring), for the contexts of the module fixtures: a kernel that
    several files (or xdist workers) load is compiled once."""
    d = os.environ.get("KVGEN_CACHE_DIR")
    if not d:
        pytest.skip("no kernel cache directory: KVGEN_CACHE_DIR is unset "
                    "and there is no build directory")
    return d


@pytest.fixture(scope="session")
def kvgen_translate() -> Path:
    tool = kvgen_build_dir() / "bin" / "kvgen-translate"
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        pytest.skip(f"kvgen-translate not found at {tool} "
                    "(build kvgen or set KVGEN_BUILD_DIR)")
    return tool


def jit_skip_reason():
    """Why kvgen's JIT (the runtime library and libkvgen-generator.so, which
    kvgen.torch's ops generate their kernels with) cannot run here, or None
    when it can: the reason for a module's skipif."""
    import sys
    sys.path.insert(0, str(REPO_ROOT / "python"))
    import kvgen
    try:
        kvgen.library_path()
    except OSError as e:
        return f"runtime library not loadable: {e}"
    if kvgen.generator_path() is None:
        return "no generator library (libkvgen-generator.so) found"
    return None


@pytest.fixture(scope="session")
def kvgen_cli() -> Path:
    """The built `kvgen` CLI, for fixtures that emit kernels with it;
    skips (with the reason) when it is not built or the runtime library it
    goes with does not load."""
    import sys
    sys.path.insert(0, str(REPO_ROOT / "python"))
    import kvgen
    tool = kvgen_build_dir() / "bin" / "kvgen"
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        pytest.skip(f"{tool} not found: build it (ninja -C build kvgen) "
                    "or set KVGEN_BUILD_DIR")
    try:
        kvgen.library_path()
    except OSError as e:
        pytest.skip(f"runtime library not loadable: {e}")
    return tool


@pytest.fixture(scope="session")
def kvgen_session_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kvgen")
