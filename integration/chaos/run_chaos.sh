#!/usr/bin/env bash
# walship's seeded fault campaign: see campaign.py beside this file.
#
#   integration/chaos/run_chaos.sh --seed N --faults N --out DIR [--quick] [--only I]
#
# Builds the binaries it needs (unless WALSHIP_BIN_DIR names a directory
# holding them), installs what it needs (bazel/setup.sh), and runs the
# campaign as root (tmpfs mounts, network namespaces; PostgreSQL itself runs
# as an ordinary user the campaign creates).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ $(id -u) -ne 0 ]]; then
  echo "run_chaos.sh: needs root (tmpfs mounts, network namespaces)" >&2
  exit 2
fi
bash bazel/setup.sh
if [[ -z "${WALSHIP_BIN_DIR:-}" ]]; then
  bazel build //agent:walship-agent //status:walship-status //replica:walship-replica \
    //integration/drill:drill-loader //integration/chaos:walship-replica-faulty
fi
exec python3 -m integration.chaos.campaign "$@"
