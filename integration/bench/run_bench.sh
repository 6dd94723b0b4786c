#!/usr/bin/env bash
# The walship benchmark, one command: builds what it runs, then runs
# integration/bench/bench.py. See integration/bench/README.md.
#
#   integration/bench/run_bench.sh [--quick] [--out DIR] [other bench.py flags]
#
# The binaries are copied to a private directory first, so a rebuild by
# someone else during the run cannot swap them under it.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash bazel/setup.sh
bazel build //agent:walship-agent //status:walship-status //replica:walship-replica \
    //integration/bench:benchtool

bin_dir="$(mktemp -d /tmp/walship-bench-bin-XXXXXX)"
trap 'rm -rf "$bin_dir"' EXIT
cp bazel-bin/agent/walship-agent bazel-bin/status/walship-status \
   bazel-bin/replica/walship-replica bazel-bin/integration/bench/benchtool "$bin_dir/"
# The Bazel server (a JVM) keeps garbage-collecting and compiling in the
# background: about 2 % of this machine's CPU, taken from every variant.
bazel shutdown

WALSHIP_BIN_DIR="$bin_dir" python3 -m integration.bench.bench "$@"
