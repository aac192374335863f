#!/usr/bin/env bash
# Issue 24's transformers check on a GPU machine without network (the H200):
# installs the kvgen wheel and transformers from wheels carried with the
# work tree into a venv that sees the machine's torch, then runs
# examples/transformers_kvgen.py on CUDA and
# test/python/test_transformers_attention.py (CPU and CUDA cases).
#
#   pip wheel . -w .whl --no-deps                         # here
#   pip download 'transformers==5.23.*' -d .whl/hf \
#     --only-binary=:all: --python-version 3.X            # here, 3.X = there's
#   bash scripts/device_transformers_check.sh [wheel] [wheel dir] [out dir]
#
# transformers already importable there: the wheel dir is not used.
set -u
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WHEEL="${1:-$(ls "$REPO"/.whl/kvgen-*.whl | head -1)}"
HF="${2:-$REPO/.whl/hf}"
OUT="${3:-/tmp/kvgen-transformers-check}"
. "$REPO/scripts/wheel_venv.sh"
wheel_venv "$OUT" "$WHEEL" || exit 1
if ! "$V/bin/python" -c 'import transformers' 2>/dev/null; then
  "$V/bin/pip" install --no-index --find-links "$HF" 'transformers==5.23.*' |
    tail -1
fi
"$V/bin/python" -c 'import torch, transformers
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      "transformers", transformers.__version__)' || exit 1
# The tests import kvgen from the repository's python/; it loads the
# wheel's runtime and generator library.
export KVGEN_LIB="$site/kvgen/lib" KVGEN_CACHE_DIR="$OUT/cache"
dev=cpu
"$V/bin/python" -c 'import torch; assert torch.cuda.is_available()' \
  2>/dev/null && dev=cuda
rc=0
echo "== examples/transformers_kvgen.py --device $dev"
(cd "$OUT" && "$V/bin/python" "$REPO/examples/transformers_kvgen.py" \
  --device "$dev") || rc=1
echo "== test/python/test_transformers_attention.py"
(cd "$REPO" && "$V/bin/python" -m pytest -q -rs \
  test/python/test_transformers_attention.py 2>&1 | tail -15;
  exit "${PIPESTATUS[0]}") || rc=1
echo "rc=$rc"
exit $rc
