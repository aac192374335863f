"""Packaging (issue 24, item 6): one version source, the runtime's run-time
dependencies, and what kvgen logs through Python's logging (each JIT
compile with the kernel's name and milliseconds, the first import's build
of kvgen.torch's C++ kernel). The wheel itself (auditwheel, manylinux tag)
is checked by scripts/check_wheel.sh, run from scripts/test_pip_install.sh.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
GEN = BUILD / "lib" / "libkvgen-generator.so"

#: What the runtime and the generator library may need at run time: glibc,
#: libstdc++ / libgcc_s, and libfmt in a build that links it as a shared
#: library (the wheel compiles it in: KVGEN_FMT_HEADER_ONLY).
ALLOWED_NEEDED = re.compile(
    r"(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|"
    r"ld-linux-x86-64|ld-linux-aarch64|libfmt)\.so(\.[0-9]+)*")


def test_one_version_source():
    """pyproject.toml's version is dynamic, read from CMakeLists.txt's
    project() line by the regex it names; the runtime reports that
    version."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in meta["project"]
    assert meta["project"]["dynamic"] == ["version"]
    v = meta["tool"]["scikit-build"]["metadata"]["version"]
    assert v["provider"] == "scikit_build_core.metadata.regex"
    found = re.findall(v["regex"], (REPO / v["input"]).read_text())
    assert len(found) == 1, found
    assert found[0] == kvgen.version()


def _needed(lib):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not found")
    out = subprocess.run([readelf, "-d", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


@pytest.mark.parametrize("name", ["libkvgen-runtime.so",
                                  "libkvgen-generator.so"])
def test_libraries_need_only_the_system_runtime(name):
    """No libcrypto / libssl (the cache key's SHA-256 is the runtime's
    own), no LLVM / MLIR, no GPU library (those are dlopen'ed)."""
    lib = BUILD / "lib" / name
    if not lib.is_file():
        pytest.skip(f"{lib} not built")
    needed = _needed(lib)
    assert needed, f"readelf found no NEEDED entry in {lib}"
    extra = [n for n in needed if not ALLOWED_NEEDED.fullmatch(n)]
    assert not extra, f"{lib} needs {extra}"


LOG_CHILD = r"""
import logging, sys
sys.path.insert(0, sys.argv[1])
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout,
                    format="%(name)s %(levelname)s %(message)s")
import kvgen
lay = kvgen.Layout(3, 48, 24, 8, dtype="f16")
ctx = kvgen.Context("host")
for _ in range(2):  # the second is a memory hit: no record
    ctx.kernel("reshape_and_cache", lay, io="f16", slots="i32")
"""


def test_jit_compiles_are_logged(tmp_path):
    """A kernel the runtime compiles is logged at INFO on logger "kvgen"
    with its name and milliseconds; the next process, which reads it from
    the disk cache, logs that at DEBUG and compiles nothing."""
    if not GEN.is_file():
        pytest.skip(f"{GEN} not built (an MLIR-free build?)")
    env = dict(os.environ, KVGEN_CACHE_DIR=str(tmp_path / "cache"),
               KVGEN_GENERATOR=str(GEN))
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", LOG_CHILD,
                            str(REPO / "python")], capture_output=True,
                           text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    compiled = re.findall(r"^kvgen INFO kvgen: JIT-compiled kernel "
                          r"(kvgen_reshape_and_cache_\w+) for host in "
                          r"(\d+) ms \(compiler (\d+) ms\)$", outs[0], re.M)
    assert len(compiled) == 1, outs[0]
    name, ms, compiler_ms = compiled[0]
    assert "h3_k48_v24" in name and int(ms) >= int(compiler_ms) > 0
    assert "JIT-compiled" not in outs[1], outs[1]
    assert re.search(rf"^kvgen DEBUG kvgen: kernel {name} for host read "
                     r"from the disk cache .* in [0-9.]+ ms$", outs[1],
                     re.M), outs[1]


def test_logging_off_costs_no_stats_call(monkeypatch):
    """With the kvgen logger below INFO nothing is measured: a lookup
    asks the runtime for no stats."""
    import logging
    monkeypatch.setattr(kvgen.log, "level", logging.WARNING)
    monkeypatch.setattr(kvgen.Context, "stats", lambda self: 1 / 0)
    ctx = kvgen.Context("host", cache_dir="")
    assert ctx._stats_logged() is None
    ctx.close()


def test_torch_fast_build_is_logged(tmp_path, monkeypatch, caplog):
    """The first import's build of kvgen.torch's C++ kernel (_torch_fast)
    logs its start and its milliseconds on logger "kvgen" (here with a
    stand-in compiler command and a stand-in torch: nothing is compiled,
    and loading the empty result fails as a broken build would)."""
    from kvgen import _torch_fast

    class FakeTorch:
        __version__ = "0.0-test"

    def command(torch, out):
        return [sys.executable, "-c",
                "import sys; open(sys.argv[1], 'w').close()", str(out)]

    monkeypatch.setenv("KVGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KVGEN_TORCH_FAST", "1")
    monkeypatch.setattr(_torch_fast, "_build_command", command)
    caplog.set_level("INFO", logger="kvgen")
    fast, why = _torch_fast.load(FakeTorch)
    assert fast is None and why  # the empty file does not load
    msgs = [r.getMessage() for r in caplog.records if r.name == "kvgen"]
    assert any(m.startswith("kvgen.torch: building its C++ kernel")
               for m in msgs), msgs
    assert any(re.match(r"kvgen\.torch: built .*kvgen_torch_fast-\w+\.so "
                        r"in \d+ ms$", m) for m in msgs), msgs
    caplog.clear()
    _torch_fast.load(FakeTorch)  # built already: no build, no record
    assert not [r for r in caplog.records if "build" in r.getMessage()]
