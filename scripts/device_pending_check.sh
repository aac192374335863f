#!/usr/bin/env bash
# What session 14 changed and no GPU has run yet, in one device call of
# about 8 minutes (its device time ran out):
#   1. the new default prefill plan on sm_90 (wgmma, 2 warpgroups, 3
#      stages, 128-byte swizzled tiles): every case of
#      test_attention_gpu.py on the default bundle and compute-sanitizer
#      memcheck, then the prefill bench beside the mma.sync plan
#      (scripts/device_prefill_check.sh; emit with
#      `EXTRA=... bash scripts/emit_prefill_variants.sh` (below), carry
#      .dev/attn.tar.xz);
#      Also the warp-specialized plan on swizzled tiles (5f3eb6e):
#      `EXTRA="wgmma=0:bench_mma;wgmma=1 threads=384 producer-warps=4:bundle_ws;wgmma=1 threads=384 producer-warps=4:bench_ws"`;
#   2. kvgen.torch's unified_attention over that default on CUDA and its
#      host overhead (device_torch_check.sh step 5; pip wheel . -w .whl
#      --no-deps here, carry .whl/kvgen-*.whl).
# Writes a compact summary to $OUT/summary.txt:
#   bash scripts/device_pending_check.sh $OUT
set -u
OUT=$1; S=$OUT/summary.txt
export PYTHONUNBUFFERED=1
ALLCASES='^bundle$' ONLY='^(bundle|bundle_ws|bench_bundle|bench_mma|bench_ws)$' \
  MEMCHECK='^(bundle|bundle_ws)$' \
  DECODE=0 timeout 300 bash scripts/device_prefill_check.sh "$OUT/prefill" > /dev/null 2>&1
echo "prefill check rc=$?" >> "$S"
grep -h "ERROR SUMMARY\|^passed\|^== \|^prefill\|FAIL" "$OUT/prefill/summary.txt" | cut -c1-200 >> "$S"
STEPS=5 timeout 240 bash scripts/device_torch_check.sh "$(ls .whl/kvgen-*.whl | head -1)" /tmp/tc > /tmp/torch5.txt 2>&1
echo "torch step 5 rc=$?" >> "$S"
grep -E "passed|failed|FAILED|us|rror" /tmp/torch5.txt | tail -30 >> "$S"
echo done >> "$S"
