#!/usr/bin/env bash
# Installs the Debian 12 packages walship's build, tests and demo need.
# Safe to re-run: apt-get skips what is installed, and the package index is
# refreshed only when a package is missing.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-skylib bazel-rules-java
  g++ protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  libpq-dev zlib1g-dev libzstd-dev liblz4-dev libssl-dev libcpp-httplib-dev libtomlplusplus-dev
  python3 iproute2 procps openssl nftables e2fsprogs util-linux
  postgresql-15 postgresql-client-15
  patroni etcd-server rocksdb-tools sqlite3 mariadb-server mariadb-client
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
