#!/usr/bin/env bash
# Issue 25's JIT goal on a GPU machine: cold JIT (generate or read from the
# bundle, NVRTC compile, module load) <= 60 ms for every kernel of every
# `kvgen presets` entry, disk hit <= 0.5 ms, memory hit <= 100 ns.
#
#   scripts/device_jit_times.sh --kvgen build-dev/bin/kvgen \
#       --lib build-dev/lib/libkvgen-runtime.so [--bundle .dev/bundle] \
#       --out $OUT/jit
#
# Runs, in this order:
#   1. bench/jit_cold.py on the cuda backend: one fresh process per preset,
#      CUDA_CACHE_DISABLE=1 (NVRTC 13 otherwise reads an earlier process's
#      PTX and cubins back from the driver's compute cache), a fresh kvgen
#      disk cache; per kernel cold ms (wall and CPU), compile ms, load ms,
#      disk-hit ms, memory-hit ns (C loop) -> jit_cold.txt / jit_cold.json.
#      Kernels neither the bundle nor a generator library has are listed as
#      not measured (a runtime-only build needs --bundle with the preset
#      kernels: test/python/grid/emit_bundle.py --set all emits them).
#   2. the same with the driver's compute cache on, run twice (the second
#      run is what a machine that compiled the sources before sees) ->
#      jit_cold_driver_cache.txt.
#   3. scripts/jit_times.py (NVRTC CPU ms to PTX / cubin of the plain
#      entry, of the _pdl twin and of both entries, NVRTC --time phases,
#      sizes, registers) when the MLIR build's kvgen (`kvgen emit`) is
#      given -> jit_times.txt / jit_times.json.
#   4. nproc, lscpu and nvidia-smi for the record -> machine.txt.
# Exit status: 0 when every step ran (goals met or not: see the summary
# lines), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

KVGEN=build-dev/bin/kvgen
[ -x "$KVGEN" ] || KVGEN=build/bin/kvgen
LIB=
BUNDLE=
OUT=out/jit
while [ $# -gt 0 ]; do
  case "$1" in
    --kvgen) KVGEN=$2; shift 2 ;;
    --lib) LIB=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "device_jit_times: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
[ -n "$LIB" ] && export KVGEN_LIB=$(realpath "$LIB")
BUNDLEARG=()
[ -n "$BUNDLE" ] && BUNDLEARG=(--bundle "$BUNDLE")
rc=0

{ nproc; lscpu | grep -E "Model name|^CPU\(s\)"; nvidia-smi -L; } \
  > "$OUT/machine.txt" 2>&1

echo "device_jit_times: cold, driver compute cache off"
python3 bench/jit_cold.py --kvgen "$KVGEN" "${BUNDLEARG[@]}" \
  --out "$OUT/jit_cold.json" 2>&1 | tee "$OUT/jit_cold.txt" || rc=1

echo "device_jit_times: driver compute cache on (second of two runs)"
CC_DIR=$(mktemp -d)
for i in 1 2; do
  CUDA_CACHE_PATH=$CC_DIR python3 bench/jit_cold.py --kvgen "$KVGEN" \
    "${BUNDLEARG[@]}" --driver-cache > "$OUT/jit_cold_driver_cache.txt" \
    2>&1 || rc=1
done
rm -rf "$CC_DIR"

if "$KVGEN" emit --help > /dev/null 2>&1; then
  echo "device_jit_times: NVRTC phases (jit_times.py)"
  python3 scripts/jit_times.py --kvgen "$KVGEN" --presets all --repeat 3 \
    --json "$OUT/jit_times.json" 2>&1 | tee "$OUT/jit_times.txt" || rc=1
else
  echo "device_jit_times: $KVGEN has no emit (runtime-only build): no" \
    "jit_times.py" | tee "$OUT/jit_times.txt"
fi
exit $rc
