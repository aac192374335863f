#!/usr/bin/env bash
# Installs what building and testing kvgen needs on a Debian 12 (bookworm)
# machine. Idempotent: packages already present are not touched, and apt is
# not run at all when every package is installed.
#
#   scripts/install-deps.sh            # as root (or with sudo available)
#
# Python packages (numpy, ml_dtypes, pytest, pytest-xdist, torch, ...) go to
# the interpreter named by $KVGEN_PYTHON (default: python3 on PATH). If that
# interpreter is "externally managed" (PEP 668, e.g. Debian's
# /usr/bin/python3), they go to a virtual environment at $KVGEN_VENV
# (default: <repo>/build/.venv) instead.
# Either way the interpreter to use is written to <repo>/build/.kvgen-python,
# which scripts/test.sh reads.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVGEN_BUILD_DIR:-$REPO_ROOT/build}"

APT_PACKAGES=(
  cmake ninja-build g++ python3 python3-pip python3-venv git
  llvm-22-dev libmlir-22-dev mlir-22-tools clang-22
  libclang-rt-22-dev
  libamd-comgr-dev libfmt-dev libgtest-dev patchelf
)
# auditwheel: scripts/check_wheel.sh (the wheel's manylinux check).
# pytest-xdist: scripts/test.sh runs pytest on every CPU (pytest -n).
# auditwheel below 6.8: 6.8 requires patchelf >= 0.14.5 and Debian 12's is
# 0.14.3 ("auditwheel repair requires patchelf >= 0.14.5", seen on a fresh
# clone, 2026-12-05); 6.7 requires 0.14.
PIP_PACKAGES=('numpy>=1.26,<3' 'ml_dtypes>=0.5,<0.7' 'pytest>=8,<10'
              'auditwheel>=6,<6.8' 'pytest-xdist>=3.5,<4')
# Import names of PIP_PACKAGES, in the same order.
PIP_MODULES=(numpy ml_dtypes pytest auditwheel xdist)
# torch, for kvgen.torch and its tests (test/python/test_torch_ops.py), the
# version the H200 image has. PyPI's Linux wheel is the CUDA build: it pulls
# ~3.5 GB of nvidia-* wheels (4.7 GB installed, ~1.5-2 min here) and does not
# import without them, even on a CPU-only machine; the CPU-only wheels are
# not on PyPI. KVGEN_SKIP_TORCH=1 leaves it out (those tests then skip).
# transformers with it: test/python/test_transformers_attention.py runs its
# models on kvgen's attention (docs/transformers.md; ~30 MB of wheels with
# its dependencies).
if [[ "${KVGEN_SKIP_TORCH:-0}" != 1 ]]; then
  PIP_PACKAGES+=('torch==2.11.*' 'transformers==5.23.*')
  PIP_MODULES+=(torch transformers)
fi

log() { echo "install-deps: $*"; }
die() { echo "install-deps: error: $*" >&2; exit 1; }

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  fi
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == \
     "install ok installed" ]]
}

#===------------------------------------------------------------------------===#
# apt
#===------------------------------------------------------------------------===#
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  log "all ${#APT_PACKAGES[@]} apt packages are installed; skipping apt"
else
  command -v apt-get >/dev/null 2>&1 ||
    die "apt-get not found; install by hand: ${missing[*]}"
  if [[ $(id -u) -ne 0 && ${#SUDO[@]} -eq 0 ]]; then
    die "not root and no sudo; as root install: ${missing[*]}"
  fi
  log "missing: ${missing[*]}"
  "${SUDO[@]}" apt-get update
  # Every name must be known to apt before installing anything.
  unknown=()
  for pkg in "${missing[@]}"; do
    candidate=$(apt-cache policy "$pkg" 2>/dev/null |
                awk '/Candidate:/ { print $2 }')
    if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
      unknown+=("$pkg")
    fi
  done
  if [[ ${#unknown[@]} -ne 0 ]]; then
    die "no installation candidate for: ${unknown[*]} (LLVM/MLIR 22 " \
        "packages come from the LLVM apt repository or a Debian release " \
        "that carries them)"
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
  for pkg in "${missing[@]}"; do
    is_installed "$pkg" || die "apt did not install $pkg"
  done
fi

#===------------------------------------------------------------------------===#
# Python
#===------------------------------------------------------------------------===#
PYTHON="${KVGEN_PYTHON:-python3}"
command -v "$PYTHON" >/dev/null 2>&1 || die "no Python interpreter '$PYTHON'"
PYTHON="$(command -v "$PYTHON")"

# True when every module imports and every installed distribution of
# PIP_PACKAGES meets its version range (an older or newer one, e.g. an
# auditwheel 6.8 installed before the pin, makes pip install the pinned one).
has_modules() {
  "$1" - "${#PIP_MODULES[@]}" "${PIP_MODULES[@]}" "${PIP_PACKAGES[@]}" \
    <<'PY' >/dev/null 2>&1
import importlib, importlib.metadata, sys
n = int(sys.argv[1])
for name in sys.argv[2:2 + n]:
    importlib.import_module(name)
from packaging.requirements import Requirement
for spec in sys.argv[2 + n:]:
    req = Requirement(spec)
    if not req.specifier.contains(importlib.metadata.version(req.name),
                                  prereleases=True):
        sys.exit(1)
PY
}

externally_managed() {
  "$1" - <<'PY' >/dev/null 2>&1
import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
sys.exit(0 if os.path.exists(marker) and not in_venv else 1)
PY
}

if has_modules "$PYTHON"; then
  log "$PYTHON already has ${PIP_MODULES[*]}"
elif externally_managed "$PYTHON"; then
  VENV="${KVGEN_VENV:-$BUILD_DIR/.venv}"
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "$PYTHON is externally managed (PEP 668); creating venv $VENV"
    mkdir -p "$(dirname "$VENV")"
    # System site packages stay visible (e.g. apt's python3-numpy).
    "$PYTHON" -m venv --system-site-packages "$VENV"
  fi
  PYTHON="$VENV/bin/python"
  if ! has_modules "$PYTHON"; then
    "$PYTHON" -m pip install --disable-pip-version-check "${PIP_PACKAGES[@]}"
  fi
else
  log "installing ${PIP_PACKAGES[*]} for $PYTHON"
  "$PYTHON" -m pip install --disable-pip-version-check "${PIP_PACKAGES[@]}"
fi
has_modules "$PYTHON" || die "$PYTHON still lacks one of ${PIP_MODULES[*]}"

mkdir -p "$BUILD_DIR"
echo "$PYTHON" > "$BUILD_DIR/.kvgen-python"
log "python for tests: $PYTHON (recorded in $BUILD_DIR/.kvgen-python)"
log "done"
