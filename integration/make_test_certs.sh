#!/usr/bin/env bash
# Creates a certificate authority and certificates for a walship test
# cluster with openssl, for the gRPC control channel's mutual TLS.
#
#   integration/make_test_certs.sh DIR [--agent-host=NAME]... [--serving-replica=NAME]... CLIENT...
#
# Writes into DIR (created, mode 700):
#   ca.pem, ca.key          the CA (ca.pem is what every --tls-ca points at)
#   agent.pem, agent.key    the agent's server certificate, valid for
#                           localhost, 127.0.0.1, ::1 and each --agent-host
#   CLIENT.pem, CLIENT.key  a client certificate per CLIENT with CN and DNS
#                           SAN CLIENT: a replica's must carry its --name;
#                           walship-status may use any one (e.g. "operator")
#   NAME.pem, NAME.key      per --serving-replica: a replica's certificate
#                           for client and server use (its --serve-listen
#                           port), CN NAME, DNS SAN NAME and the agent's
#                           host names
# Keys are unencrypted, mode 600. Run it again with another DIR for a second,
# unrelated CA. For production, issue the same shapes from your own CA:
# serverAuth for agents, clientAuth with the replica's name for replicas
# (and serverAuth with the replica host's name when it serves WAL).
set -euo pipefail

if (($# < 1)); then
  echo "usage: $0 DIR [--agent-host=NAME]... CLIENT..." >&2
  exit 2
fi
dir=$1
shift
hosts=(DNS:localhost IP:127.0.0.1 IP:::1)
clients=()
serving=()
for a in "$@"; do
  case $a in
    --agent-host=*) hosts+=("DNS:${a#--agent-host=}") ;;
    --serving-replica=*) serving+=("${a#--serving-replica=}") ;;
    -*) echo "$0: unknown option $a" >&2; exit 2 ;;
    *) clients+=("$a") ;;
  esac
done

umask 077
mkdir -p "$dir"
cd "$dir"

newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)

openssl req -x509 "${newkey[@]}" -keyout ca.key -out ca.pem -days 3650 \
  -subj "/CN=walship test CA $(date +%s%N)" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# issue NAME SUBJECT_ALT_NAMES EXTENDED_KEY_USAGE
issue() {
  local name=$1 san=$2 eku=$3
  openssl req -new "${newkey[@]}" -keyout "$name.key" -out "$name.csr" \
    -subj "/CN=$name" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$eku" "$san" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
    -days 825 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

san=$(IFS=,; echo "${hosts[*]}")
issue agent "$san" serverAuth
for c in "${clients[@]}"; do
  issue "$c" "DNS:$c" clientAuth
done
for c in "${serving[@]}"; do
  issue "$c" "DNS:$c,$san" serverAuth,clientAuth
done
chmod 644 ./*.pem
echo "certificates in $dir: ca.pem agent.pem ${clients[*]/%/.pem} ${serving[*]/%/.pem}"
