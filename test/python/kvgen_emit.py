"""Kernels for the tests' module fixtures: `kvgen emit` of layouts and ops
into one bundle directory, and a host context over that bundle.

The fixtures that use it take conftest.py's `kvgen_cli` (skipped, with the
reason, where kvgen is not built) and `kernel_cache` (the run's one disk
cache, so a kernel that several files load is compiled once):

    @pytest.fixture(scope="module")
    def ctx(tmp_path_factory, kvgen_cli, kernel_cache):
        d = tmp_path_factory.mktemp("views")
        bundle = emit_all(d, [(LAYOUT, "reshape_and_cache", ("--io", "bf16"))])
        c = host_context(bundle, kernel_cache)
        yield c
        c.close()
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402


def kvgen_exe() -> Path:
    """build/bin/kvgen of $KVGEN_BUILD_DIR (default <repo>/build)."""
    return Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build")) / "bin" / \
        "kvgen"


def emit(directory, layout, op, args=(), target="host", env=None,
         bundle_name="bundle"):
    """Emits one kernel (`kvgen emit --layout F --op op --target target
    *args`) into the bundle `directory / bundle_name`, creating it if
    needed; layout: a kvgen.Layout or its text. Fails the test (assert,
    with kvgen's output) when kvgen refuses. Returns the bundle path."""
    directory = Path(directory)
    text = layout.text if isinstance(layout, kvgen.Layout) else str(layout)
    layouts = directory / "layouts"
    layouts.mkdir(parents=True, exist_ok=True)
    # Named by content: one file per layout text, whatever else is there.
    lf = layouts / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}.mlir"
    lf.write_text(f"#kv.layout<{text}>\n")
    bundle = directory / bundle_name
    cmd = [str(kvgen_exe()), "emit", "--layout", str(lf), "--op", op,
           "--target", target, *[str(a) for a in args], "--bundle",
           str(bundle)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}{r.stderr}"
    return bundle


def emit_all(directory, specs, target="host", env=None):
    """emit() of each (layout, op, args) of `specs` into one bundle;
    returns its path."""
    bundle = Path(directory) / "bundle"
    for layout, op, args in specs:
        bundle = emit(directory, layout, op, args, target, env)
    return bundle


def host_context(bundle, cache):
    """A host kvgen.Context over the disk cache `cache` with `bundle`
    loaded (the caller closes it)."""
    c = kvgen.Context("host", cache_dir=str(cache))
    c.load_bundle(str(bundle))
    return c
