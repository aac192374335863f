#!/usr/bin/env bash
# The MLIR-free build (-DKVGEN_ENABLE_MLIR=OFF, what GPU servers without
# LLVM build) still builds, and its runtime JIT-generates a layout that no
# bundle has through the generator library of the MLIR build: configures
# <build>/runtime-only, builds the runtime and its tests, and runs them with
# KVGEN_TEST_GENERATOR set (GeneratorLibrary.* must pass, not skip).
#
#   scripts/test_runtime_only.sh [generator library]
#       (default: <build>/lib/libkvgen-generator.so)
set -uo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVGEN_BUILD_DIR:-$REPO_ROOT/build}"
GEN="${1:-$BUILD_DIR/lib/libkvgen-generator.so}"
RT="$BUILD_DIR/runtime-only"
[[ -f "$GEN" ]] || { echo "runtime-only: no generator library at $GEN"; exit 1; }
cmake -S "$REPO_ROOT" -B "$RT" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVGEN_ENABLE_MLIR=OFF >"$RT.configure.log" 2>&1 ||
  { tail -20 "$RT.configure.log"; exit 1; }
ninja -C "$RT" ${JOBS:+-j "$JOBS"} kvgen kvgen-runtime-tests || exit 1
if ldd "$RT/lib/libkvgen-runtime.so" | grep -qiE 'libMLIR|libLLVM'; then
  echo "runtime-only: libkvgen-runtime.so links MLIR/LLVM"; exit 1
fi
out="$RT.tests.log"
KVGEN_CACHE_DIR="$RT/test-cache" KVGEN_GENERATOR=none \
  KVGEN_TEST_GENERATOR="$GEN" "$RT/bin/kvgen-runtime-tests" 2>&1 | tee "$out" |
  grep -E '^\[ *(PASSED|FAILED|SKIPPED) *\]|GeneratorLibrary'
rc=${PIPESTATUS[0]}
grep -q '^\[       OK \] GeneratorLibrary.JitsALayoutThatNoBundleHas' "$out" ||
  { echo "runtime-only: GeneratorLibrary.JitsALayoutThatNoBundleHas did not pass"; exit 1; }
exit "$rc"
