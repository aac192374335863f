#!/usr/bin/env bash
# Issue 24's chunked layouts (vLLM legacy K/V, aiter shuffled V) on a GPU
# machine without LLVM, one call. Emit on the MLIR build first and carry
# .dev/attn.tar.xz, .dev/bundle_chunked.tar.xz and build/lib (the runtime
# and the generator library: the torch ops JIT their layouts through it):
#
#   python3 test/python/test_attention_gpu.py --emit .dev/attn/bundle
#   (cd .dev && tar -cJf attn.tar.xz attn)
#   python3 test/python/grid/emit_bundle.py --cases chunked --target sm_90 \
#       --out .dev/bundle_chunked --archive
#
# and there:  bash scripts/device_chunked_check.sh $OUT
#
# Runs: the grid's chunked cases on CUDA against torch (write, gather,
# dequantize, copy_blocks; T up to 16384, a cache past 4 GiB);
# test_attention_gpu.py's chunked kernels (decode and prefill plans, fp32
# torch reference); the torch ops' CUDA tests over legacy caches
# (reshape_and_cache, gather_cache, unified_attention, graphs).
set -u
OUT=${1:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
tar -xJf .dev/bundle_chunked.tar.xz -C .dev
tar -xJf .dev/attn.tar.xz -C .dev
if [ ! -f build-dev/lib/libkvgen-runtime.so ]; then
  cmake -S . -B build-dev -G Ninja -DKVGEN_ENABLE_MLIR=OFF -DKVGEN_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Release > /tmp/c.log 2>&1 && ninja -C build-dev > /tmp/n.log 2>&1 || tail -20 /tmp/n.log
fi
echo "== grid chunked on cuda"
timeout 170 python3 -m pytest -q -p no:cacheprovider test/python/grid --backend cuda \
  --bundle .dev/bundle_chunked --lib build-dev/lib/libkvgen-runtime.so -k chunked \
  > "$OUT/grid_chunked.txt" 2>&1; echo "rc=$?"; tail -12 "$OUT/grid_chunked.txt"
echo "== attention gpu: chunked kernels (decode + prefill plans)"
KVGEN_ATTN_BUNDLE=.dev/attn/bundle KVGEN_LIB=build-dev/lib timeout 120 \
  python3 test/python/test_attention_gpu.py --run legacy,aiter > "$OUT/attn_chunked.txt" 2>&1
echo "rc=$?"; grep -v '^PASS' "$OUT/attn_chunked.txt" | tail -12; echo "passed: $(grep -c '^PASS' "$OUT/attn_chunked.txt")"
echo "== torch: legacy write / gather / unified_attention on CUDA (JIT through the carried generator)"
KVGEN_LIB=$PWD/build/lib KVGEN_CACHE_DIR=/tmp/kc timeout 150 python3 -m pytest -q -rs -p no:cacheprovider \
  test/python/test_torch_legacy.py test/python/test_torch_attention_legacy.py -k cuda \
  > "$OUT/torch_legacy.txt" 2>&1; echo "rc=$?"; tail -12 "$OUT/torch_legacy.txt"
