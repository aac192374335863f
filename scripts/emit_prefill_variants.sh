#!/usr/bin/env bash
# The bundles scripts/device_prefill_check.sh runs, emitted on the MLIR
# build into .dev/attn and archived as .dev/attn.tar.xz (carry that file to
# the GPU machine):
#   bundle, bundle_wg, bundle_wgs3      test_attention_gpu.py's kernels
#                                       (default, wgmma, wgmma with 3 tile
#                                       stages: the pipelined loop)
#   bench_bundle, bench_wg              bench_attention.py's kernels
#   bench_bundle256, bench_wg256        8 warps (2 warpgroups) per CTA
#   bench_wg256s3, bench_wg256s4        2 warpgroups, 3 / 4 tile stages
#                                       (the pipelined wgmma loop)
#   bundle_wgt128, bench_wg256t128      wgmma, 128-token tiles
# Extra variants: EXTRA="options:name;options:name" (test bundles named bundle_*,
# bench bundles bench_*), e.g. EXTRA="wgmma=1 tile-tokens=32:bench_wgt32".
# (threads=256 plans no decode kernel for some geometries: those bench
# rows say "tiled: no kernel".)
#
#   bash scripts/emit_prefill_variants.sh     (the kvgen of build/, or of
#                                              $KVGEN_BUILD_DIR)
set -eu
cd "$(dirname "$0")/.."
KV=${KVGEN_BUILD_DIR:-build}/bin/kvgen
rm -rf .dev/attn
mkdir -p .dev/attn
t() { KVGEN_PLAN_OPTIONS="$1" python3 test/python/test_attention_gpu.py \
        --emit ".dev/attn/$2" >/dev/null; }
b() { KVGEN_PLAN_OPTIONS="$1" python3 bench/bench_attention.py \
        --kvgen "$KV" --emit ".dev/attn/$2" 2>&1 | grep -v "emitted$\|^note: .*decode kernel did not emit" || true; }
t "" bundle
t "wgmma=1" bundle_wg
t "wgmma=1 tile-stages=3" bundle_wgs3
b "" bench_bundle
b "wgmma=1" bench_wg
b "threads=256" bench_bundle256
b "wgmma=1 threads=256" bench_wg256
b "wgmma=1 threads=256 tile-stages=3" bench_wg256s3
b "wgmma=1 threads=256 tile-stages=4" bench_wg256s4
t "wgmma=1 tile-tokens=128" bundle_wgt128
b "wgmma=1 threads=256 tile-tokens=128" bench_wg256t128
IFS=';'
for e in ${EXTRA:-}; do
  case "${e#*:}" in
    bundle_*) t "${e%%:*}" "${e#*:}" ;;
    bench_*) b "${e%%:*}" "${e#*:}" ;;
    *) echo "EXTRA: $e: the name must start with bundle_ or bench_"; exit 1 ;;
  esac
done
unset IFS
(cd .dev && tar -cJf attn.tar.xz attn)
for d in .dev/attn/*; do echo "$d: $(ls "$d" | wc -l) files"; done
ls -l .dev/attn.tar.xz
