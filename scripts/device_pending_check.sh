#!/usr/bin/env bash
# What session 13 wrote and no GPU has run yet, in one device call of
# about 8 minutes (the device time ran out):
#   1. test_torch_ds_mla.py on CUDA: the per_tile (fp8_ds_mla) write
#      concat_and_cache_mla and its reader
#      cp_gather_and_upconvert_fp8_kv_cache through kvgen.torch, from the
#      wheel (pip wheel . -w .whl --no-deps here; carry
#      .whl/kvgen-*.whl);
#   2. scripts/device_prefill_check.sh on the pipelined wgmma bundle
#      (bundle_wgs3 and the 128-key tiles bundle_wgt128: their prefill / mixed cases and compute-sanitizer
#      memcheck; emit with scripts/emit_prefill_variants.sh, carry
#      .dev/attn.tar.xz). Widen ONLY / MEMCHECK there for more.
# Writes a compact summary to $OUT/summary.txt:
#   bash scripts/device_pending_check.sh $OUT
set -u
OUT=$1; S=$OUT/summary.txt; R=$PWD
export PYTHONUNBUFFERED=1
. scripts/wheel_venv.sh
wheel_venv /tmp/tv .whl/kvgen-*.whl >> "$S" 2>&1
(export KVGEN_LIB="$site/kvgen/lib" KVGEN_BUILD_DIR="$R/build-dev" KVGEN_CACHE_DIR=/tmp/kc
 timeout 200 "$V/bin/python" -m pytest -q -rs test/python/test_torch_ds_mla.py 2>&1 | tail -25) > "$OUT/torch_ds_mla.txt"
echo "== torch ds_mla" >> "$S"; tail -4 "$OUT/torch_ds_mla.txt" >> "$S"
ONLY='^(bundle_wgs3|bundle_wgt128)$' MEMCHECK='^(bundle_wgs3|bundle_wgt128)$' \
  DECODE=0 timeout 300 bash scripts/device_prefill_check.sh "$OUT/prefill" > /dev/null 2>&1
echo "prefill check rc=$?" >> "$S"
grep -h "ERROR SUMMARY\|^passed\|^== \|^prefill" "$OUT/prefill/summary.txt" | cut -c1-200 >> "$S"
echo done >> "$S"
