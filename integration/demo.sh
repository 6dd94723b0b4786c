#!/usr/bin/env bash
# The walship demo: an agent and a replica on loopback over a generated WAL
# directory. A generator appends random records to segment files for a few
# seconds while the replica follows over mutual TLS (certificates made by
# integration/make_test_certs.sh); the demo then waits until the replica
# has acknowledged every byte as durable, prints the agent's status and
# proves the copy byte-identical.
#
# Usage: integration/demo.sh [SECONDS] [MB_PER_SECOND]
# KEEP=1 keeps the working directory (WAL, replica copy, logs).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
rate_mb=${2:-20}

bash bazel/setup.sh
bazel build --jobs=2 //agent:walship-agent //status:walship-status //replica:walship-replica

work=$(mktemp -d "${TMPDIR:-/tmp}/walship-demo.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
mkdir -p "$work/wal" "$work/replica"
echo "demo: working in $work"
integration/make_test_certs.sh "$work/certs" demo-replica operator >/dev/null
tls_flags() {  # tls_flags NAME: the --tls-* flags for NAME's certificate, one per line
  printf '%s\n' "--tls-cert=$work/certs/$1.pem" "--tls-key=$work/certs/$1.key" \
    "--tls-ca=$work/certs/ca.pem"
}
mapfile -t agent_tls < <(tls_flags agent)
mapfile -t replica_tls < <(tls_flags demo-replica)
mapfile -t status_tls < <(tls_flags operator)

bazel-bin/agent/walship-agent --wal-dir="$work/wal" --listen=127.0.0.1:0 \
  --data-listen=127.0.0.1:0 --port-file="$work/ports" "${agent_tls[@]}" \
  --allow-replicas=demo-replica 2>"$work/agent.log" &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/ports" ]] && break; sleep 0.1; done
control=$(sed -n 's/^control=//p' "$work/ports")
echo "demo: agent control on $control ($(sed -n 's/^data=/data on /p' "$work/ports"))"

bazel-bin/replica/walship-replica --agent="$control" --dest="$work/replica" \
  --name=demo-replica "${replica_tls[@]}" 2>"$work/replica.log" &
pids+=($!)

echo "demo: appending random records for ${seconds}s at ${rate_mb} MB/s (4 MiB segments)"
python3 integration/walgen.py --dir "$work/wal" --seconds "$seconds" \
  --rate "$((rate_mb * 1000000))" --segment-bytes $((4 << 20)) --seed 1

echo "demo: waiting for the replica to acknowledge everything as durable"
converged=0
for _ in $(seq 300); do
  if bazel-bin/status/walship-status --agent="$control" --json "${status_tls[@]}" |
     python3 -c '
import json, sys
s = json.load(sys.stdin)
end = s["source_end"]
ok = any(r["flushed"] == end and r["connected"] for r in s["replicas"])
sys.exit(0 if ok else 1)'; then
    converged=1
    break
  fi
  sleep 0.1
done
bazel-bin/status/walship-status --agent="$control" "${status_tls[@]}"
if [[ $converged -ne 1 ]]; then
  echo "demo: FAILED: the replica did not converge; logs in $work" >&2
  exit 1
fi

segments=0
bytes=0
last=$(ls "$work/wal" | sort | tail -n 1)
for f in $(ls "$work/wal" | sort); do
  dst="$work/replica/$f"
  [[ "$f" == "$last" && ! -e "$dst" ]] && dst="$work/replica/$f.partial"
  cmp -s "$work/wal/$f" "$dst" || { echo "demo: FAILED: $f differs" >&2; exit 1; }
  segments=$((segments + 1))
  bytes=$((bytes + $(stat -c %s "$work/wal/$f")))
done
echo "demo: converged: ${segments} segments, ${bytes} bytes byte-identical on the replica"
echo "demo: replica directory:"
ls -l "$work/replica"
if [[ -z "${KEEP:-}" ]]; then
  cleanup
  rm -rf "$work"
fi
