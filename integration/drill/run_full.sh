#!/usr/bin/env bash
# The full failover drill (all five drills, about 4 minutes on 2 cores): builds the
# binaries offline, then runs walship_drill.py. Arguments are passed on, e.g.
#   integration/drill/run_full.sh --out /tmp/drill --seed 42
# Exit status: the drill's (0 every invariant held, 1 one failed).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bazel/setup.sh
bazel build --jobs=2 //integration/drill:drill-loader //agent:walship-agent \
    //status:walship-status //replica:walship-replica
exec python3 -m integration.drill.walship_drill "$@"
