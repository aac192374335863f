#!/usr/bin/env bash
# The docs must be readable from a clone of the repository: they may not
# cite files outside it (the session's shared folder, absolute machine
# paths), and the seed report, which is not in the repository, must be
# introduced as an external report where it is cited (with what it says).
#
#   docs-self-contained.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1
docs=(README.md docs/*.md)
status=0
if grep -nE '\.\./shared|shared/seeds|/work/' "${docs[@]}"; then
  echo "docs-self-contained: the lines above cite files outside the repository"
  status=1
fi
# Each file that mentions the seed report says it is an external report.
for f in "${docs[@]}"; do
  if grep -qi 'seed report' "$f" && ! grep -qi 'external report' "$f"; then
    echo "docs-self-contained: $f cites the seed report without saying it is an external report"
    status=1
  fi
done
n=$(grep -li 'seed report' "${docs[@]}" | wc -l)
[[ $status -eq 0 ]] && echo "docs-self-contained: ok (${#docs[@]} files, $n cite the seed report)"
exit $status
