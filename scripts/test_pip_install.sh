#!/usr/bin/env bash
# `pip install .` as a user would, tested: builds the kvgen wheel (runtime +
# generator library, scikit-build-core; only the build backend comes from
# the package index) into a fresh virtual environment, then, from outside the
# repository, imports the installed package, checks that it loads the
# installed libraries (not a build tree), JIT-generates a layout no bundle
# has, and runs examples/torch_quickstart.py and examples/engine_swap.py;
# then builds the wheel and checks it with auditwheel (manylinux tag, no
# library beyond glibc / libstdc++: scripts/check_wheel.sh).
#
#   scripts/test_pip_install.sh [python]      (default: python3)
#
# The venv sees the given interpreter's site-packages (a .pth file), so the
# torch that install-deps.sh installed is used, not downloaded again.
# Prints "pip install: N passed, M failed"; exits non-zero on a failure.
set -uo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVGEN_BUILD_DIR:-$REPO_ROOT/build}"
PYTHON="${1:-python3}"
VENV="$BUILD_DIR/pip-venv"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...
  local name=$1; shift
  if "$@"; then
    echo "pip-install: ok: $name"; passed=$((passed + 1))
  else
    echo "pip-install: FAILED: $name"; failed=$((failed + 1))
  fi
}

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV" || { echo "pip-install: cannot make a venv"; exit 1; }
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$PYTHON" -c 'import site, sys; print("\n".join(site.getsitepackages()))' \
  > "$site/kvgen-test-parent.pth"

start=$(date +%s)
check "pip install ." "$VENV/bin/python" -m pip install \
  --disable-pip-version-check --no-cache-dir "$REPO_ROOT"
echo "pip-install: build + install took $(( $(date +%s) - start )) s"

cd "$WORK"
check "installed package and libraries" env -u KVGEN_LIB -u KVGEN_GENERATOR \
  KVGEN_CACHE_DIR="$WORK/cache" "$VENV/bin/python" - "$site" <<'PY'
import sys
site = sys.argv[1]
import kvgen
assert kvgen.__file__.startswith(site), kvgen.__file__
assert kvgen.library_path().startswith(site + "/kvgen/lib/"), \
    kvgen.library_path()
gen = kvgen.generator_path()
assert gen == site + "/kvgen/lib/libkvgen-generator.so", gen
# One version: the wheel's metadata (pyproject.toml reads CMakeLists.txt)
# is the runtime's.
import importlib.metadata
assert importlib.metadata.version("kvgen") == kvgen.version(), \
    (importlib.metadata.version("kvgen"), kvgen.version())
import numpy as np
lay = kvgen.Layout(3, 80, 48, 8, dtype="f16", order="hnd")
ctx = kvgen.Context("host")
k = ctx.kernel("reshape_and_cache", lay, io="f16")
key = np.ones((2, 3, 80), np.float16)
value = np.full((2, 3, 48), 2, np.float16)
kc = np.zeros(lay.extent_bytes("k", 2) // 2, np.float16)
vc = np.zeros(lay.extent_bytes("v", 2) // 2, np.float16)
k.reshape_and_cache(key, value, kc, vc, np.array([0, 9]), num_blocks=2)
assert kc.sum() == 2 * 3 * 80 and vc.sum() == 2 * 2 * 3 * 48
print("installed:", kvgen.__file__, kvgen.library_path(), gen)
PY
if "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  check "examples/torch_quickstart.py" env KVGEN_CACHE_DIR="$WORK/cache" \
    "$VENV/bin/python" "$REPO_ROOT/examples/torch_quickstart.py"
  check "examples/torch_quickstart.py --fp8" env KVGEN_CACHE_DIR="$WORK/cache" \
    "$VENV/bin/python" "$REPO_ROOT/examples/torch_quickstart.py" --fp8
  check "examples/engine_swap.py" env KVGEN_CACHE_DIR="$WORK/cache" \
    "$VENV/bin/python" "$REPO_ROOT/examples/engine_swap.py"
else
  echo "pip-install: skipped the torch examples: torch is not installed"
fi
# The release wheel: built as docs/torch.md says (pip wheel; the build
# directory is the install's, so only the packaging runs again), checked
# with auditwheel and given its manylinux tag (scripts/check_wheel.sh).
wheel_check() {
  "$PYTHON" -m pip wheel --disable-pip-version-check --no-cache-dir \
    --no-deps -w "$WORK/whl" "$REPO_ROOT" > "$WORK/wheel.log" 2>&1 ||
    { tail -20 "$WORK/wheel.log"; return 1; }
  bash "$REPO_ROOT/scripts/check_wheel.sh" "$WORK"/whl/kvgen-*.whl \
    "$WORK/whl-manylinux" "$PYTHON"
}
check "wheel: auditwheel, manylinux tag (scripts/check_wheel.sh)" wheel_check
echo "pip-install: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
