#!/usr/bin/env bash
# Runs every walship test: installs what the build needs (Debian packages),
# builds offline with Bazel, runs the whole suite, and ends with a line
# "N passed, M failed" counting test targets.
set -uo pipefail
cd "$(dirname "$0")/.."

bash bazel/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test --jobs=2 //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1  # the build itself failed
fi

# The README's PostgreSQL walk-through, word for word. It runs bazel and
# installs binaries itself, so it cannot be a Bazel test.
if bash integration/readme_pg_quickstart.sh > "$log.readme" 2>&1; then
  echo "//integration:readme_pg_quickstart                              PASSED"
  passed=$((passed + 1))
else
  tail -n 60 "$log.readme"
  echo "//integration:readme_pg_quickstart                              FAILED"
  failed=$((failed + 1))
  rc=1
fi
rm -f "$log.readme"

echo "${passed} passed, ${failed} failed"
exit "$rc"
