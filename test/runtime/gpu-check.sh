#!/bin/bash
# Builds the MLIR-free runtime, its tests and examples/embed on a machine with
# a GPU and runs them (the CUDA tests skip elsewhere). Usage:
#   test/runtime/gpu-check.sh [build dir]   (default /tmp/kvgen-gpu-check)
set -u
B=${1:-/tmp/kvgen-gpu-check}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$B" && mkdir -p "$B"
nvidia-smi -L 2>&1 | head -2
cmake -S "$SRC" -B "$B/build" -G Ninja -DKVGEN_ENABLE_MLIR=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$B/configure.log" 2>&1 ||
  { tail -30 "$B/configure.log"; exit 1; }
grep -i "gtest" "$B/configure.log"
targets=kvgen-runtime
ninja -C "$B/build" -t targets all 2>/dev/null | grep -q '^kvgen-runtime-tests:' &&
  targets="$targets kvgen-runtime-tests"
ninja -C "$B/build" $targets 2>&1 | tail -5
if [ -x "$B/build/bin/kvgen-runtime-tests" ]; then
  KVGEN_CACHE_DIR="$B/cache" "$B/build/bin/kvgen-runtime-tests" 2>&1 |
    grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED|==========) *\]|Failure|Skipped|unavailable' -A3 | tail -80
fi
cmake -DCMAKE_INSTALL_PREFIX="$B/inst" -P "$B/build/runtime/cmake_install.cmake" >/dev/null
cmake -S "$SRC/examples/embed" -B "$B/embed" -G Ninja \
  -DCMAKE_PREFIX_PATH="$B/inst" >/dev/null && ninja -C "$B/embed" | tail -2
for mode in cuda host cuda; do
  echo "== kvgen-embed $mode"
  KVGEN_CACHE_DIR="$B/cache" "$B/embed/kvgen-embed" $mode; echo "rc=$?"
done
