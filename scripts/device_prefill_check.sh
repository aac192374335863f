#!/usr/bin/env bash
# Issue 23's prefill checks on a GPU machine without LLVM (H200 or H100),
# one call. Emit the bundles on the MLIR build first and carry the archive
# (scripts/emit_prefill_variants.sh emits all of the below and archives
# them):
#
#   python3 test/python/test_attention_gpu.py --emit .dev/attn/bundle
#   python3 bench/bench_attention.py --emit .dev/attn/bench_bundle
#   # variants (any .dev/attn/bundle_* / bench_* directory is run):
#   KVGEN_PLAN_OPTIONS=wgmma=1 \
#       python3 test/python/test_attention_gpu.py --emit .dev/attn/bundle_wg
#   KVGEN_PLAN_OPTIONS="wgmma=1 tile-stages=3" \
#       python3 test/python/test_attention_gpu.py --emit .dev/attn/bundle_wgs3
#   KVGEN_PLAN_OPTIONS=wgmma=1 \
#       python3 bench/bench_attention.py --emit .dev/attn/bench_wg
#   KVGEN_PLAN_OPTIONS=threads=256 \
#       python3 bench/bench_attention.py --emit .dev/attn/bench_bundle256
#   KVGEN_PLAN_OPTIONS="wgmma=1 threads=256" \
#       python3 bench/bench_attention.py --emit .dev/attn/bench_wg256
#   KVGEN_PLAN_OPTIONS="wgmma=1 threads=256 tile-stages=4" \
#       python3 bench/bench_attention.py --emit .dev/attn/bench_wg256s4
#   (cd .dev && tar -cJf attn.tar.xz attn)
#
# (threads=256 emits no decode kernels for some geometries: 256 threads
# give the decode CTA more static shared memory than sm_90 allows; the
# bench rows then say "tiled: no kernel". Test bundles need the decode
# kernels too: emit them without threads=256.)
#
# and there:  bash scripts/device_prefill_check.sh $OUT
#
# Runs: the runtime-only build; test_attention_gpu.py's prefill and mixed
# cases (fp32 torch reference) on each test bundle present (bundle,
# bundle_*); compute-sanitizer memcheck of five prefill / mixed cases on
# each (0 errors expected); bench_attention.py --prefill-only on each
# bench bundle present (bench_bundle, bench_*: kvgen's plans beside cuDNN
# SDPA, output checked); the decode rows. Exit status 1 when a step
# failed. ONLY (an extended regex on the directory names) runs the matching
# bundles only, e.g. ONLY='^(bundle_wgs3|bench_wg256s3)$'; DECODE=0 skips
# the decode rows; MEMCHECK (a regex as ONLY) limits memcheck to the
# matching test bundles; ALLCASES (a regex as ONLY, default none) runs
# every case of the matching test bundles (decode, spec-decode, graphs),
# not only the prefill and mixed ones. Each step prints its seconds.
set -u
ALLCASES=${ALLCASES:-^$}
ONLY=${ONLY:-.}
MEMCHECK=${MEMCHECK:-.}
DECODE=${DECODE:-1}
SECONDS=0
OUT=${1:-out/prefill}
# The logs go to $OUT/logs, archived at the end as $OUT/logs.tar.xz (the
# device tool returns at most 8 files of $OUT); what this script prints
# (each step's key lines) is also $OUT/summary.txt.
LOGS="$OUT/logs"
mkdir -p "$LOGS"
exec > >(tee "$OUT/summary.txt") 2>&1
cd "$(dirname "$0")/.."
rc=0
[ -f .dev/attn.tar.xz ] && tar -xJf .dev/attn.tar.xz -C .dev
cmake -S . -B build-dev -G Ninja -DKVGEN_ENABLE_MLIR=OFF \
  -DKVGEN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/cmake.log 2>&1 &&
  ninja -C build-dev >/tmp/ninja.log 2>&1 || { tail -20 /tmp/ninja.log; exit 1; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
MC_CASES="mimo_b16-b1-ctx2048-q2048,llama-b2-ctx8192-q512,wide_v-b12"
MC_CASES="$MC_CASES,mimo_swa-b1-ctx4096-q4096,mimo_fp8_t-b12"
for d in .dev/attn/bundle .dev/attn/bundle_*; do
  [ -d "$d" ] || continue
  b=$(basename "$d")
  echo "$b" | grep -Eq "$ONLY" || continue
  echo "== [${SECONDS}s] test_attention_gpu.py prefill and mixed cases: $b"
  sel=prefill,x8
  echo "$b" | grep -Eq "$ALLCASES" && sel=
  KVGEN_ATTN_BUNDLE=.dev/attn/$b KVGEN_LIB=build-dev/lib \
    python3 test/python/test_attention_gpu.py --run "$sel" \
    >"$LOGS/attn_$b.txt" 2>&1 || rc=1
  grep -v '^PASS' "$LOGS/attn_$b.txt" | head -20
  echo "passed: $(grep -c '^PASS' "$LOGS/attn_$b.txt")"
  echo "$b" | grep -Eq "$MEMCHECK" || continue
  echo "== [${SECONDS}s] memcheck: $b"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 KVGEN_ATTN_BUNDLE=.dev/attn/$b \
    KVGEN_LIB=build-dev/lib timeout 150 "$CS" --tool memcheck \
    --kernel-name kns=kvgen --leak-check no --error-exitcode 3 \
    --print-limit 20 --log-file "$LOGS/memcheck_$b.log" \
    python3 test/python/test_attention_gpu.py --run "$MC_CASES" \
    >/tmp/memcheck_$b.txt 2>&1 || rc=1
  grep -h "ERROR SUMMARY" "$LOGS/memcheck_$b.log"
done
for d in .dev/attn/bench_*; do
  [ -d "$d" ] || continue
  b=$(basename "$d")
  echo "$b" | grep -Eq "$ONLY" || continue
  echo "== [${SECONDS}s] bench_attention.py --prefill-only: $b"
  python3 bench/bench_attention.py --bundle .dev/attn/$b \
    --lib build-dev/lib --out "/tmp/attn_$b" --prefill-only \
    >"$LOGS/$b.log" 2>&1 || rc=1
  grep '^prefill' "$LOGS/$b.log" | sort -u
done
if [ "$DECODE" = 1 ]; then
  echo "== [${SECONDS}s] decode rows"
  python3 bench/bench_attention.py --bundle .dev/attn/bench_bundle \
    --lib build-dev/lib --out "$LOGS/attn_decode" --no-prefill \
    >"$LOGS/bench_decode.log" 2>&1 || rc=1
  head -45 "$LOGS/attn_decode/attention.md" 2>/dev/null
fi
echo "== [${SECONDS}s] done"
tar -C "$OUT" -cJf "$OUT/logs.tar.xz" logs && rm -rf "$LOGS"
exit $rc
