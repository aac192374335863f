#!/usr/bin/env bash
# Configures and builds kvgen (MLIR build) into build/.
#
# The configure line is the one scripts/test.sh uses (same build directory,
# same cache values, Python3_EXECUTABLE included), so running main.sh and
# then test.sh neither reconfigures nor relinks. Keep the two in step.
#
# Environment: KVGEN_BUILD_DIR (default <repo>/build), KVGEN_PYTHON (default:
# the interpreter install-deps.sh recorded in <build>/.kvgen-python, else
# python3), JOBS (build parallelism, default: ninja's).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVGEN_BUILD_DIR:-$REPO_ROOT/build}"
cd "$REPO_ROOT"

PYTHON="${KVGEN_PYTHON:-python3}"
if [[ -z "${KVGEN_PYTHON:-}" && -s "$BUILD_DIR/.kvgen-python" ]]; then
  PYTHON="$(cat "$BUILD_DIR/.kvgen-python")"
fi
# test.sh passes "$(command -v "$PYTHON")", empty if not found: the same.
PYTHON_PATH="$(command -v "$PYTHON" || true)"
if [[ -z "$PYTHON_PATH" ]]; then
  echo "build.sh: warning: python interpreter '$PYTHON' not found" \
       "(set KVGEN_PYTHON or run scripts/install-deps.sh)" >&2
fi

# Re-running cmake with unchanged values regenerates nothing, so configure
# every time, as test.sh does.
cmake -S "$REPO_ROOT" -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
  -DPython3_EXECUTABLE="$PYTHON_PATH"
ninja -C "$BUILD_DIR" ${JOBS:+-j "$JOBS"}
