#!/usr/bin/env bash
# kvgen.torch on a GPU machine without LLVM (the H200): installs the wheel
# built elsewhere (`pip wheel . -w .whl`, carried with the work tree) into a
# venv that sees the machine's torch, then runs, on CUDA:
#   1. test/python/test_torch_ops.py and test_torch_legacy.py: every
#      preset's write/gather through torch.ops.kvgen vs the torch
#      reference, vLLM's legacy reshape_and_cache (chunked layouts), CUDA
#      graph capture + replay, and the CPU tests;
#   2. the examples (quickstart: a layout not seen before is generated,
#      compiled and cached on the spot; engine_swap);
#   3. two processes on one fresh cache directory, then a third that must
#      find the kernels on disk;
#   4. bench/torch_overhead.py --device cuda (host time per call: C API vs
#      the Python entry vs torch.ops, and the parts: torch's entry to a C++
#      / Python kernel, kvgen's C++ kernel), with kvgen's C++ kernel (1 and
#      64 tokens, then --no-kernel) and with its Python kernels
#      (KVGEN_TORCH_FAST=0), for the before / after of issue 11;
#   5. test/python/test_torch_attention.py (unified_attention against the
#      torch reference on CUDA, CUDA graphs at several batch sizes),
#      test_torch_attention_legacy.py (over vLLM's legacy / aiter caches) and
#      bench/unified_attention_overhead.py (issue 24: <= 5 us over a raw
#      launch).
#
#   bash scripts/device_torch_check.sh [wheel] [out dir]
#
# STEPS (default 012345) runs the steps whose digits it holds, e.g.
# STEPS=45 for the host-time benches and the attention tests only.
set -u
STEPS=${STEPS:-012345}
# TESTS1: step 1's test files (default the three below).
TESTS1=${TESTS1:-test/python/test_torch_ops.py test/python/test_torch_ds_mla.py test/python/test_torch_legacy.py}
step() { [[ "$STEPS" == *"$1"* ]]; }
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WHEEL="${1:-$(ls "$REPO"/.whl/kvgen-*.whl | head -1)}"
OUT="${2:-/tmp/kvgen-torch-check}"
. "$REPO/scripts/wheel_venv.sh"
wheel_venv "$OUT" "$WHEEL" || exit 1
LIB="$site/kvgen/lib"
ls -la "$LIB"
# `kvgen presets` (the tests' preset list) from an MLIR-free build.
cmake -S "$REPO" -B "$OUT/rt" -G Ninja -DKVGEN_ENABLE_MLIR=OFF \
  -DKVGEN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >"$OUT/rt.log" 2>&1 &&
  ninja -C "$OUT/rt" kvgen >>"$OUT/rt.log" 2>&1 || tail -20 "$OUT/rt.log"
export KVGEN_LIB="$LIB" KVGEN_BUILD_DIR="$OUT/rt"
export KVGEN_CACHE_DIR="$OUT/cache"

if step 0; then
echo "== 0. which kernel torch.ops.kvgen.reshape_and_cache_flash runs"
# The first import builds kvgen's C++ kernel against this torch (cached).
(cd "$OUT" && time "$V/bin/python" -c 'import kvgen.torch as kt
print(kt.fast_path_info())')
fi
if step 1; then
echo "== 1. pytest $TESTS1"
(cd "$REPO" && "$V/bin/python" -m pytest -q -rfEs $TESTS1 2>&1 | tail -60)
fi
if step 2; then
echo "== 2. examples on cuda (fresh cache: generate + compile)"
export KVGEN_CACHE_DIR="$OUT/cache2"
(cd "$OUT" && "$V/bin/python" "$REPO/examples/torch_quickstart.py" --device cuda &&
  "$V/bin/python" "$REPO/examples/torch_quickstart.py" --device cuda --fp8 &&
  "$V/bin/python" "$REPO/examples/engine_swap.py" --device cuda; echo "rc=$?")
fi
if step 3; then
echo "== 3. two processes on one fresh cache directory, then a third"
export KVGEN_CACHE_DIR="$OUT/cache3"
(cd "$OUT" && { "$V/bin/python" "$REPO/examples/torch_quickstart.py" --device cuda > p1.txt 2>&1 &
  "$V/bin/python" "$REPO/examples/torch_quickstart.py" --device cuda > p2.txt 2>&1 &
  wait; cat p1.txt p2.txt
  "$V/bin/python" "$REPO/examples/torch_quickstart.py" --device cuda; echo "rc=$?"
  ls "$KVGEN_CACHE_DIR" | sed 's/^[0-9a-f]\{56\}/.../' | sort | uniq -c; })
fi
if step 4; then
echo "== 4. host overhead per call (cuda)"
(cd "$OUT" && "$V/bin/python" "$REPO/bench/torch_overhead.py" --device cuda &&
  "$V/bin/python" "$REPO/bench/torch_overhead.py" --device cuda --tokens 64 &&
  "$V/bin/python" "$REPO/bench/torch_overhead.py" --device cuda --no-kernel &&
  echo "-- the Python kernels (KVGEN_TORCH_FAST=0), as before issue 11:" &&
  KVGEN_TORCH_FAST=0 "$V/bin/python" "$REPO/bench/torch_overhead.py" \
    --device cuda)
fi
if step 5; then
echo "== 5. torch.ops.kvgen.unified_attention: tests on cuda, host time"
(cd "$REPO" && "$V/bin/python" -m pytest -q -rfEs \
  test/python/test_torch_attention.py \
  test/python/test_torch_attention_legacy.py 2>&1 | tail -15)
(cd "$OUT" && "$V/bin/python" "$REPO/bench/unified_attention_overhead.py" \
    --device cuda &&
  "$V/bin/python" "$REPO/bench/unified_attention_overhead.py" \
    --device cuda --no-kernel &&
  KVGEN_TORCH_FAST=0 "$V/bin/python" \
    "$REPO/bench/unified_attention_overhead.py" --device cuda -n 5000)
fi
