#!/usr/bin/env bash
# Runs the memcheck subset of the grid harness on the cuda backend
# (python3 -m pytest test/python/grid --backend cuda -m memcheck: the items
# cases.py marks memcheck, T <= 300: every order/packing, fp8, strided and
# misaligned inputs, checked kernels with out-of-range slots, explicit and
# dynamic strides, copy_blocks) under `compute-sanitizer --tool memcheck`.
#
#   scripts/device_memcheck.sh --bundle .dev/bundle \
#       --lib build-dev/lib/libkvgen-runtime.so --out $OUT/memcheck
#
# torch's caching allocator is turned off (PYTORCH_NO_CUDA_MEMORY_CACHING=1)
# and the grid leaves no slack after the caches (--slack 0), so that an
# access past a cache's end leaves its allocation and memcheck reports it.
# Only kernels whose name contains "kvgen" are instrumented
# (MEMCHECK_ALL=1 checks torch's kernels too; much slower). The sanitizer
# run is limited to $MEMCHECK_TIMEOUT seconds (default 300).
# Writes memcheck.log (the sanitizer's report), grid_stdout.txt (pytest's
# output) and grid.xml (JUnit) to --out; prints the sanitizer's ERROR
# SUMMARY line. Exit status: 0 when
# memcheck reports no error and the grid passes, 2 when compute-sanitizer
# is not installed, else 1.
set -uo pipefail
cd "$(dirname "$0")/.."

BUNDLE=.dev/bundle
LIB=
OUT=out/memcheck
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$2; shift 2 ;;
    --lib) LIB=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "device_memcheck: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

CS=$(command -v compute-sanitizer || true)
if [ -z "$CS" ]; then
  for c in /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer \
           /usr/local/cuda-*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    if [ -x "$c" ]; then CS=$c; break; fi
  done
fi
if [ -z "$CS" ]; then
  echo "device_memcheck: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)" \
    | tee "$OUT/memcheck.log"
  exit 2
fi
echo "device_memcheck: $("$CS" --version | tail -1)"

FILTER=()
if [ "${MEMCHECK_ALL:-0}" != 1 ] && "$CS" --help 2>/dev/null | grep -q -- "--kernel-name "; then
  FILTER=(--kernel-name kns=kvgen)
fi
echo "device_memcheck: kernel filter: ${FILTER[*]:-none (all kernels)}"
LIBARG=()
[ -n "$LIB" ] && LIBARG=(--lib "$LIB")

PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 10 "${MEMCHECK_TIMEOUT:-300}" \
  "$CS" --tool memcheck "${FILTER[@]}" \
  --leak-check no --error-exitcode 3 --print-limit 100 \
  --log-file "$OUT/memcheck.log" \
  python3 -m pytest -q -rfEs -p no:cacheprovider test/python/grid \
    --backend cuda -m memcheck --slack 0 --bundle "$BUNDLE" "${LIBARG[@]}" \
    --junitxml "$OUT/grid.xml" \
  > "$OUT/grid_stdout.txt" 2>&1
rc=$?
tail -n 25 "$OUT/grid_stdout.txt"
summary=$(grep -h "ERROR SUMMARY" "$OUT/memcheck.log" | tail -1)
echo "memcheck: ${summary:-no ERROR SUMMARY line (see $OUT/memcheck.log)}"
if [ $rc -eq 3 ]; then
  grep -m 20 -E "^========= (Invalid|Out of|Address|Misaligned|Program hit)" \
    "$OUT/memcheck.log"
fi
[ $rc -eq 124 ] && echo "memcheck: timed out after ${MEMCHECK_TIMEOUT:-300} s"
echo "memcheck: exit status $rc (0 = clean and grid passed, 3 = memcheck errors, 124 = timeout)"
[ $rc -eq 0 ] && exit 0 || exit 1
