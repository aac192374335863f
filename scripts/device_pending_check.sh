#!/usr/bin/env bash
# What no GPU has run yet on the final tree of session 15 (its device time
# ran out), in one device call of about 8 minutes:
#   1. issue 24's transformers check over the default prefill plan of
#      sm_90 (wgmma, 2 warpgroups, 3 stages, swizzled, unpadded rows),
#      which the torch op now JIT-generates: scripts/
#      device_transformers_check.sh (carry .whl/kvgen-*.whl from `pip wheel
#      . -w .whl --no-deps` and .whl/hf from `pip download
#      'transformers==5.23.*' -d .whl/hf --only-binary=:all:
#      --python-version 3.12`);
#   2. unified_attention's host time without a kernel (the step-5 run that
#      did not finish in call 5): bench/unified_attention_overhead.py
#      --no-kernel, and with KVGEN_TORCH_FAST=0.
# Writes a compact summary to $OUT/summary.txt:
#   bash scripts/device_pending_check.sh $OUT
set -u
OUT=$1; S=$OUT/summary.txt
export PYTHONUNBUFFERED=1
timeout 330 bash scripts/device_transformers_check.sh > /tmp/hf.txt 2>&1
echo "transformers check rc=$?" >> "$S"
grep -E "passed|failed|FAILED|rror|match|max" /tmp/hf.txt | tail -25 | cut -c1-250 >> "$S"
. scripts/wheel_venv.sh
wheel_venv /tmp/kvgen-transformers-check "$(ls .whl/kvgen-*.whl | head -1)" > /dev/null 2>&1
(cd /tmp && timeout 120 "$V/bin/python" "$OLDPWD/bench/unified_attention_overhead.py" \
   --device cuda --no-kernel &&
 KVGEN_TORCH_FAST=0 timeout 100 "$V/bin/python" \
   "$OLDPWD/bench/unified_attention_overhead.py" --device cuda -n 5000) \
   >> "$S" 2>&1
echo "overhead rc=$?" >> "$S"
echo done >> "$S"
