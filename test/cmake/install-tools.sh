#!/usr/bin/env bash
# `cmake --install` of this build into a scratch prefix puts every tool the
# README names on PATH: each installed tool starts (finding its libraries
# through its RPATH) and does its job on an example layout.
#
#   install-tools.sh CMAKE BUILD_DIR SCRATCH SOURCE_DIR MLIR(ON|OFF)
set -euo pipefail
cmake_cmd=$1 build=$2 prefix=$3 src=$4 mlir=$5
rm -rf "$prefix"
"$cmake_cmd" --install "$build" --prefix "$prefix" >/dev/null
bin=$prefix/bin
layout=$src/examples/layouts/mimo-v2-flash-bf16-b16.mlir
# Whole outputs captured, then searched (grep -q closing a pipe early
# would fail the writer under pipefail).
presets=$("$bin/kvgen" presets)
grep -q mimo <<<"$presets"
if [[ "$mlir" == ON ]]; then
  for tool in kvgen-opt kvgen-translate; do
    [[ -x "$bin/$tool" ]] || { echo "$tool was not installed in $bin"; exit 1; }
  done
  source=$("$bin/kvgen-opt" --kv-plan=target=sm_90 --convert-kv-to-emitc \
             "$layout" | "$bin/kvgen-translate" --mlir-to-kernel-source)
  grep -q '__global__' <<<"$source"
  source=$("$bin/kvgen" emit --layout "$layout" --op reshape_and_cache \
             --target sm_90)
  grep -q '__global__' <<<"$source"
fi
echo "installed tools work from $bin"
