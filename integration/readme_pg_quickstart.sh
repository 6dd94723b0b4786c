#!/usr/bin/env bash
# Runs the README's "Try it on one machine" block word for word and checks
# that the standby saw the rows. Run from the repository root as root (it
# installs packages and binaries, as the README says). Bazel cannot run this
# as a Bazel test (the block calls bazel itself), so tests/run_all.sh runs it
# after the Bazel suite.
set -uo pipefail
cd "$(dirname "$0")/.."
block=$(awk '/<!-- pg-quickstart:begin -->/{on=1; next} /<!-- pg-quickstart:end -->/{on=0} on' README.md |
        sed '/^```/d')
if [[ -z "$block" ]]; then
  echo "readme_pg_quickstart: no quickstart block in README.md" >&2
  exit 1
fi
demo=/var/tmp/walship-pg-demo
out=$(mktemp)
cleanup() {
  rm -f "$out"
  pkill -x walship-agent -U postgres 2>/dev/null
  pkill -x walship-replica -U postgres 2>/dev/null
  for d in standby primary; do
    [[ -d "$demo/$d" ]] && runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl \
      -D "$demo/$d" -m immediate stop >/dev/null 2>&1
  done
}
trap cleanup EXIT
show_logs() {
  for f in agent.log replica.log standby.log primary.log; do
    echo "--- $f"
    tail -n 20 "$demo/$f" 2>/dev/null
  done
}
timeout 900 bash -euo pipefail -c "$block" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [[ $rc -ne 0 ]]; then
  echo "readme_pg_quickstart: the block failed (exit $rc)" >&2
  show_logs
  exit 1
fi
if ! grep -qx 'standby sees 1000 rows' "$out"; then
  echo "readme_pg_quickstart: the standby did not see the rows" >&2
  show_logs
  exit 1
fi
echo "readme_pg_quickstart: OK"
