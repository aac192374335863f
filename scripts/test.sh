#!/usr/bin/env bash
# Installs dependencies, builds kvgen into build/ and runs every test suite:
# ctest (lit FileCheck tests, the lit integration suite, GoogleTest unit
# and runtime tests, the layout fuzzer, anything else registered with
# ctest), the MLIR-free build with the generator library
# (scripts/test_runtime_only.sh), then pytest over test/python, then
# `pip install .` into a fresh venv (scripts/test_pip_install.sh). Prints a
# summary and exits non-zero if any step or test failed.
#
#   scripts/test.sh
#
# ctest runs its tests in parallel (-j JOBS), pytest too (pytest-xdist,
# which install-deps.sh installs: -n JOBS, one test file per worker at a
# time, the grid's files together; test/python/conftest.py). Every step's
# wall time is in the summary.
#
# Environment: KVGEN_BUILD_DIR (default <repo>/build), KVGEN_PYTHON (see
# install-deps.sh), KVGEN_SKIP_DEPS=1 to skip install-deps.sh, JOBS (build
# parallelism, default: ninja's; ctest's and pytest's, default: the number
# of CPUs, pytest at most 8), KVGEN_SKIP_PIP=1 to skip the pip step.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KVGEN_BUILD_DIR:-$REPO_ROOT/build}"
export KVGEN_BUILD_DIR="$BUILD_DIR"
cd "$REPO_ROOT"

declare -a SUMMARY=()
failed=0
note() { SUMMARY+=("$1"); }
step_start=$SECONDS
step() { step_start=$SECONDS; echo; echo "=== $* ==="; }
took() { echo "$((SECONDS - step_start)) s"; }  # the current step's time
NPROC=$(nproc 2>/dev/null || echo 2)
TEST_JOBS=${JOBS:-$NPROC}

finish() {
  echo
  echo "=== summary ==="
  for line in "${SUMMARY[@]}"; do
    echo "  $line"
  done
  if [[ $failed -ne 0 ]]; then
    echo "RESULT: FAILED"
    exit 1
  fi
  echo "RESULT: PASSED"
  exit 0
}

#===------------------------------------------------------------------------===#
# Dependencies
#===------------------------------------------------------------------------===#
if [[ "${KVGEN_SKIP_DEPS:-0}" != 1 ]]; then
  step "dependencies"
  if ! "$REPO_ROOT/scripts/install-deps.sh"; then
    failed=1
    note "dependencies: FAILED ($(took))"
    finish
  fi
  note "dependencies: ok ($(took))"
fi
PYTHON="${KVGEN_PYTHON:-python3}"
if [[ -z "${KVGEN_PYTHON:-}" && -s "$BUILD_DIR/.kvgen-python" ]]; then
  PYTHON="$(cat "$BUILD_DIR/.kvgen-python")"
fi

#===------------------------------------------------------------------------===#
# Configure and build
#===------------------------------------------------------------------------===#
step "configure ($BUILD_DIR)"
if ! cmake -S "$REPO_ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython3_EXECUTABLE="$(command -v "$PYTHON")"; then
  failed=1
  note "configure: FAILED ($(took))"
  finish
fi
note "configure: ok ($(took))"

step "build"
if ! ninja -C "$BUILD_DIR" ${JOBS:+-j "$JOBS"}; then
  failed=1
  note "build: FAILED ($(took))"
  finish
fi
note "build: ok ($(took))"

#===------------------------------------------------------------------------===#
# ctest
#===------------------------------------------------------------------------===#
step "ctest"
ctest_log="$BUILD_DIR/ctest-output.log"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$TEST_JOBS") 2>&1 |
  tee "$ctest_log"
ctest_rc=${PIPESTATUS[0]}
# e.g. "100% tests passed, 0 tests failed out of 119"
ctest_line=$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$ctest_log" |
             tail -1)
if [[ $ctest_rc -ne 0 ]]; then
  failed=1
  note "ctest: FAILED (exit $ctest_rc, $(took)) ${ctest_line}"
elif [[ -z "$ctest_line" ]]; then
  failed=1
  note "ctest: FAILED ($(took)): no tests registered"
else
  note "ctest: ok ($(took)): ${ctest_line}"
fi
# Each lit suite runs as one ctest test (kvgen-lit, kvgen-integration);
# report each suite's own counts from ctest's full log.
last_log=$(ls -t "$BUILD_DIR"/Testing/Temporary/LastTest*.log 2>/dev/null |
           head -1)
if [[ -n "$last_log" ]]; then
  lit_counts="$BUILD_DIR/ctest-lit-counts.txt"
  awk '/^[0-9]+\/[0-9]+ Test: /{name=$3}
       /^Total Discovered Tests:/{counting=1; line=""; next}
       counting && /^ +[A-Za-z ]+: +[0-9]+/{
         m=$0; sub(/^ +/, "", m); sub(/ *\(.*$/, "", m); sub(/: */, " ", m)
         line = line (line == "" ? "" : ", ") m; next}
       counting{print name ": " line; counting=0}
       END{if (counting) print name ": " line}' "$last_log" > "$lit_counts"
  while IFS= read -r c; do note "  lit $c"; done < "$lit_counts"
  # Each skipped GoogleTest with its reason (the GTEST_SKIP message, its
  # lines joined). A temporary file, not process substitution: that needs
  # /proc, which a bare chroot may lack.
  skips="$BUILD_DIR/ctest-skipped.txt"
  awk '/^[0-9]+\/[0-9]+ Test: /{name=$3}
       /^[^ ].*: Skipped$/{msg=""
         while ((getline m) > 0 && m != "" && m !~ /^\[/ && m !~ /^[0-9]+\/[0-9]+ Test/)
           { sub(/^ +/, "", m); msg = msg (msg == "" ? "" : " ") m }
         print name ": " msg}' "$last_log" > "$skips"
  while IFS= read -r s; do note "  skipped: $s"; done < "$skips"
fi

#===------------------------------------------------------------------------===#
# The MLIR-free build, JITting through the generator library
#===------------------------------------------------------------------------===#
step "runtime-only build (-DKVGEN_ENABLE_MLIR=OFF) + generator library"
if bash "$REPO_ROOT/scripts/test_runtime_only.sh"; then
  note "runtime-only build: ok ($(took)): its runtime JITs through libkvgen-generator.so"
else
  failed=1
  note "runtime-only build: FAILED ($(took); see $BUILD_DIR/runtime-only.tests.log)"
fi

#===------------------------------------------------------------------------===#
# pytest
#===------------------------------------------------------------------------===#
step "pytest"
shopt -s nullglob globstar
py_tests=(test/python/**/test_*.py test/python/**/*_test.py)
shopt -u nullglob globstar
if [[ ${#py_tests[@]} -eq 0 ]]; then
  note "pytest: skipped (no tests under test/python)"
else
  pytest_log="$BUILD_DIR/pytest-output.log"
  # In parallel with pytest-xdist when it is there (install-deps.sh installs
  # it): one test file per worker at a time, the grid's files together.
  xdist=()
  if "$PYTHON" -c 'import xdist' 2>/dev/null; then
    n=$TEST_JOBS; (( n > 8 )) && n=8
    (( n > 1 )) && xdist=(-n "$n" --dist loadfile)
  fi
  "$PYTHON" -m pytest -q -rs --durations=15 "${xdist[@]}" test/python 2>&1 |
    tee "$pytest_log"
  pytest_rc=${PIPESTATUS[0]}
  pytest_line=$(grep -E '(passed|failed|error|skipped|no tests ran)' \
                "$pytest_log" | tail -1)
  # Exit code 5 is "no tests collected": a failure, since test files exist.
  if [[ $pytest_rc -ne 0 ]]; then
    failed=1
    note "pytest: FAILED (exit $pytest_rc, $(took)) ${pytest_line}"
  else
    note "pytest: ok ($(took)${xdist:+, ${xdist[*]}}): ${pytest_line}"
  fi
  # Each skipped pytest case with its reason (pytest -rs lines).
  grep -E '^SKIPPED \[' "$pytest_log" > "$BUILD_DIR/pytest-skipped.txt" || true
  while IFS= read -r s; do note "  $s"; done < "$BUILD_DIR/pytest-skipped.txt"
fi

#===------------------------------------------------------------------------===#
# pip install . (the Python package with the runtime and generator library)
#===------------------------------------------------------------------------===#
if [[ "${KVGEN_SKIP_PIP:-0}" == 1 ]]; then
  note "pip install: skipped (KVGEN_SKIP_PIP=1)"
else
  step "pip install . (into a fresh venv)"
  pip_log="$BUILD_DIR/pip-install-output.log"
  bash "$REPO_ROOT/scripts/test_pip_install.sh" "$PYTHON" 2>&1 |
    tee "$pip_log"
  pip_rc=${PIPESTATUS[0]}
  pip_line=$(grep -E '^pip-install: [0-9]+ passed' "$pip_log" | tail -1)
  if [[ $pip_rc -ne 0 ]]; then
    failed=1
    note "pip install: FAILED (exit $pip_rc, $(took)) ${pip_line#pip-install: }"
  else
    note "pip install: ok ($(took)): ${pip_line#pip-install: }"
  fi
fi

finish
