#!/usr/bin/env bash
# The main job: install dependencies, build kvgen, then emit, compile and run
# the reshape_and_cache and gather kernels for the default MiMo-V2-Flash
# geometry (4 KV heads, K 192 / V 128, block 16, bf16) and verify the round
# trip bit-exactly: on the GPU when one is present, else on the host target.
# Extra arguments go to `kvgen run` (e.g. --preset llama3-8b).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/bin/kvgen run "$@"
