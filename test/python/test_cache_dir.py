"""Context.cache_dir after the disk cache turned memory-only (issue 26, row
10): a write that fails (ENOSPC, the directory gone) switches the cache to
memory-only with one warning, and from then on Context.cache_dir is '' as
its docstring says; it used to keep naming the directory.

On the HOST backend, no GPU: a kernel emitted with build/bin/kvgen into a
bundle. The ENOSPC case mounts a one-page tmpfs and is skipped where
mounting is not allowed (not root).

Run:  python3 -m pytest -q test/python/test_cache_dir.py
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"
LAYOUT = kvgen.Layout(2, 64, 32, 16, dtype="bf16")


@pytest.fixture
def bundle(tmp_path, kvgen_cli):
    lf = tmp_path / "layout.mlir"
    lf.write_text(f"#kv.layout<{LAYOUT.text}>\n")
    r = subprocess.run([str(KVGEN), "emit", "--layout", str(lf), "--target",
                        "host", "--op", "reshape_and_cache", "--bundle",
                        str(tmp_path / "b")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp_path / "b"


def first_kernel_turns_cache_off(bundle, cache, spoil, why):
    ctx = kvgen.Context("host", cache_dir=str(cache))
    try:
        warnings = []
        ctx.set_warning_callback(warnings.append)
        ctx.load_bundle(str(bundle))
        assert ctx.cache_dir == str(cache)
        spoil()
        ctx.kernel("reshape_and_cache", LAYOUT)  # compiled; its write fails
        assert len(warnings) == 1, warnings
        assert "caching in memory only" in warnings[0]
        assert why in warnings[0], warnings[0]
        assert ctx.stats()["disk_writes"] == 0
        assert ctx.cache_dir == ""
    finally:
        ctx.close()


def test_cache_dir_is_empty_after_a_failed_write(bundle, tmp_path):
    cache = tmp_path / "cache"

    def spoil():
        # The directory replaced by a regular file (ENOTDIR, even as root).
        cache.rmdir()
        cache.write_text("x")

    first_kernel_turns_cache_off(bundle, cache, spoil, "Not a directory")


def test_cache_dir_is_empty_after_enospc(bundle, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs",
                        str(cache)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        first_kernel_turns_cache_off(bundle, cache, lambda: None,
                                     "No space left on device")
    finally:
        subprocess.run(["umount", "-l", str(cache)], check=False)


def test_host_cxxflags_reach_the_compiler_and_the_cache_key(bundle, tmp_path,
                                                            monkeypatch):
    """KVGEN_HOST_CXXFLAGS (kvgen.h): the host backend's compile command
    ends with them, read when a context is created, and the disk cache's
    key holds them: a kernel compiled without them is not served to a
    context that has them (and the other way round)."""
    cache = tmp_path / "cache"

    def compiles(flags):
        if flags is None:
            monkeypatch.delenv("KVGEN_HOST_CXXFLAGS", raising=False)
        else:
            monkeypatch.setenv("KVGEN_HOST_CXXFLAGS", flags)
        ctx = kvgen.Context("host", cache_dir=str(cache))
        try:
            ctx.load_bundle(str(bundle))
            ctx.kernel("reshape_and_cache", LAYOUT)
            return ctx.stats()["compiles"]
        finally:
            ctx.close()

    assert compiles(None) == 1
    assert compiles(None) == 0  # a disk hit
    assert compiles("-Og") == 1  # another key: compiled again
    assert compiles("-Og") == 0
    assert compiles("") == 0  # empty: the defaults' key
    # A flag the compiler refuses fails the compile, naming the command.
    monkeypatch.setenv("KVGEN_HOST_CXXFLAGS", "-fno-such-kvgen-flag")
    ctx = kvgen.Context("host", cache_dir=str(cache))
    try:
        ctx.load_bundle(str(bundle))
        with pytest.raises(kvgen.KvgenError, match="-fno-such-kvgen-flag"):
            ctx.kernel("reshape_and_cache", LAYOUT)
    finally:
        ctx.close()
