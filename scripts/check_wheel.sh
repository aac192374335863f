#!/usr/bin/env bash
# Checks a kvgen wheel with auditwheel and gives it its manylinux tag (the
# release wheel: `pip wheel . -w .whl --no-deps`, then this script):
#
#   scripts/check_wheel.sh WHEEL OUTDIR [python]
#
# 1. `auditwheel show WHEEL`: the wheel's libraries (libkvgen-runtime.so,
#    libkvgen-generator.so) may need only what every manylinux system has
#    (glibc, libstdc++, libgcc_s): auditwheel must name a manylinux tag and
#    no external library to graft. The GPU libraries (libcuda, NVRTC,
#    libamdhip64, comgr) are dlopen'ed by the runtime when a context needs
#    them, so they are not dependencies of the file; libcrypto and libfmt
#    are not needed at all (the runtime's own SHA-256, fmt compiled in).
# 2. The same, directly: every DT_NEEDED entry (readelf -d) of every ELF
#    file in the wheel is one of ALLOWED below.
# 3. `auditwheel repair --plat TAG`: the wheel retagged (nothing grafted),
#    written to OUTDIR; `auditwheel show` of it names TAG again.
#
# Needs auditwheel (pip) and patchelf (scripts/install-deps.sh installs
# both). Prints "check-wheel: ok: OUTDIR/<wheel> (TAG)"; exits non-zero,
# saying why, otherwise.
set -euo pipefail
WHEEL="${1:?usage: check_wheel.sh WHEEL OUTDIR [python]}"
OUT="${2:?usage: check_wheel.sh WHEEL OUTDIR [python]}"
PYTHON="${3:-python3}"
ALLOWED='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64|ld-linux-aarch64)\.so(\.[0-9]+)*$'
fail() { echo "check-wheel: FAILED: $*"; exit 1; }

"$PYTHON" -m auditwheel --version >/dev/null 2>&1 ||
  fail "auditwheel is not installed for $PYTHON (pip install auditwheel)"
[[ -f "$WHEEL" ]] || fail "$WHEEL: no such wheel"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# 1. auditwheel's view.
show="$("$PYTHON" -m auditwheel show "$WHEEL" 2>&1)" ||
  fail "auditwheel show $WHEEL: $show"
echo "$show" | sed 's/^/check-wheel: | /'
# Its wording (auditwheel 6): '... is consistent with the following
# platform tag: "manylinux_2_36_x86_64".'
tag="$(echo "$show" | tr '\n' ' ' |
       sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')"
[[ -n "$tag" ]] || fail "auditwheel show named no platform tag"
[[ "$tag" == manylinux_* ]] ||
  fail "the wheel is consistent with $tag only, not a manylinux tag"
if echo "$show" | grep -q "external shared libraries are required"; then
  fail "auditwheel found external libraries to graft (see above)"
fi

# 2. Every ELF file's DT_NEEDED entries.
"$PYTHON" -m zipfile -e "$WHEEL" "$WORK/unpacked"
nelf=0
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q 'ELF' || continue
  nelf=$((nelf + 1))
  while IFS= read -r lib; do
    [[ "$lib" =~ $ALLOWED ]] ||
      fail "${f#"$WORK/unpacked/"} needs $lib (allowed: glibc, libstdc++, libgcc_s)"
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done < <(find "$WORK/unpacked" -type f -print0)
[[ $nelf -ge 2 ]] || fail "found $nelf ELF files in the wheel, expected the runtime and the generator library"

# 3. Retag.
mkdir -p "$OUT"
"$PYTHON" -m auditwheel repair --plat "$tag" -w "$OUT" "$WHEEL" \
  > "$WORK/repair.log" 2>&1 || { cat "$WORK/repair.log"; fail "auditwheel repair"; }
repaired="$(ls -t "$OUT"/*"$tag"*.whl 2>/dev/null | head -1)"
[[ -n "$repaired" ]] || { cat "$WORK/repair.log"; fail "auditwheel repair wrote no *$tag*.whl to $OUT"; }
again="$("$PYTHON" -m auditwheel show "$repaired" 2>&1)"
echo "$again" | tr '\n' ' ' | grep -q "platform tag: *\"$tag\"" ||
  fail "auditwheel show $repaired: $again"
echo "check-wheel: ok: $repaired ($tag; $nelf ELF files, each needing only glibc / libstdc++ / libgcc_s)"
