#!/usr/bin/env bash
# Issue 23's prefill checks on a GPU machine without LLVM (the H200), one
# call. Emit the bundles on the MLIR build first and carry the archive:
#
#   python3 test/python/test_attention_gpu.py --emit .dev/attn/bundle
#   python3 bench/bench_attention.py --emit .dev/attn/bench_bundle
#   KVGEN_PLAN_OPTIONS=threads=256 \
#       python3 bench/bench_attention.py --emit .dev/attn/bench_bundle256
#   (cd .dev && tar -cJf attn.tar.xz attn)
#
# and there:  bash scripts/device_prefill_check.sh $OUT
#
# Runs: the runtime-only build; test_attention_gpu.py's prefill and mixed
# cases (fp32 torch reference); bench_attention.py --prefill-only (kvgen's
# two plans beside cuDNN SDPA, output checked); the same rows with 8-warp
# prefill CTAs (128 rows) when bench_bundle256 exists; the decode rows.
# Exit status 1 when a step failed.
set -u
OUT=${1:-out/prefill}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
rc=0
[ -f .dev/attn.tar.xz ] && tar -xJf .dev/attn.tar.xz -C .dev
cmake -S . -B build-dev -G Ninja -DKVGEN_ENABLE_MLIR=OFF \
  -DKVGEN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 &&
  ninja -C build-dev >"$OUT/ninja.log" 2>&1 || { tail -20 "$OUT/ninja.log"; exit 1; }
echo "== test_attention_gpu.py: prefill and mixed cases"
KVGEN_ATTN_BUNDLE=.dev/attn/bundle KVGEN_LIB=build-dev/lib \
  python3 test/python/test_attention_gpu.py --run prefill,x8 \
  >"$OUT/attn_prefill.txt" 2>&1 || rc=1
grep -v '^PASS' "$OUT/attn_prefill.txt" | head -20
echo "passed: $(grep -c '^PASS' "$OUT/attn_prefill.txt")"
echo "== bench_attention.py --prefill-only"
python3 bench/bench_attention.py --bundle .dev/attn/bench_bundle \
  --lib build-dev/lib --out "$OUT/attn" --prefill-only \
  >"$OUT/bench_prefill.log" 2>&1 || rc=1
grep '^prefill' "$OUT/bench_prefill.log"
if [ -d .dev/attn/bench_bundle256 ]; then
  echo "== the same with 8-warp prefill CTAs (threads=256)"
  python3 bench/bench_attention.py --bundle .dev/attn/bench_bundle256 \
    --lib build-dev/lib --out "$OUT/attn256" --prefill-only \
    --prefill-rows mimo_8k,mimo_32k,llama_32k,mimo_chunk2k_32k \
    >"$OUT/bench256.log" 2>&1 || rc=1
  grep '^prefill' "$OUT/bench256.log"
fi
echo "== decode rows"
python3 bench/bench_attention.py --bundle .dev/attn/bench_bundle \
  --lib build-dev/lib --out "$OUT/attn_decode" --no-prefill \
  >"$OUT/bench_decode.log" 2>&1 || rc=1
head -45 "$OUT/attn_decode/attention.md" 2>/dev/null
exit $rc
