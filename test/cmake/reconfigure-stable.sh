#!/usr/bin/env bash
# A second configure of a fresh build directory must not change any build
# command: scripts/main.sh configures (and builds) once, scripts/test.sh
# configures again with the same values, and a changed command makes ninja
# redo that step (before the fix, kvgen-core's archive command changed, see
# runtime/CMakeLists.txt, and 9 targets relinked). Configures SCRATCH twice
# with the given cmake arguments and compares `ninja -t commands` (every
# command of every target, what ninja compares); builds nothing.
#
#   reconfigure-stable.sh CMAKE SOURCE SCRATCH [cmake args...]
set -euo pipefail
CMAKE=$1 SRC=$2 DIR=$3
shift 3
rm -rf "$DIR"
"$CMAKE" -S "$SRC" -B "$DIR" -G Ninja "$@" >"$DIR.configure1.log" 2>&1 ||
  { tail -20 "$DIR.configure1.log"; exit 1; }
ninja -C "$DIR" -t commands >"$DIR.commands1"
"$CMAKE" -S "$SRC" -B "$DIR" -G Ninja "$@" >"$DIR.configure2.log" 2>&1 ||
  { tail -20 "$DIR.configure2.log"; exit 1; }
ninja -C "$DIR" -t commands >"$DIR.commands2"
n=$(wc -l <"$DIR.commands1")
if [[ $n -lt 10 ]]; then
  echo "reconfigure-stable: only $n commands after the first configure"
  exit 1
fi
if ! diff "$DIR.commands1" "$DIR.commands2"; then
  echo "reconfigure-stable: the second configure changed the commands above"
  exit 1
fi
echo "reconfigure-stable: $n commands, unchanged by a second configure"
rm -rf "$DIR"
