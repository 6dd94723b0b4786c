#!/bin/bash
# Checks walship::pg::ScanWal against WAL written by a real PostgreSQL 15.
#
# Creates a throwaway cluster with 1 MiB segments in a temp dir, writes some
# rows, notes the flush LSN and the system identifier, kills the server
# (pg_ctl stop -m immediate, i.e. a crash) and then:
#   * scan_pg_wal from the checkpoint's REDO record and from the start of the
#     oldest segment must both end at or after the flush LSN, at the same end;
#   * pg_waldump must agree: same last record ("error in WAL record at X"),
#     same end ("invalid record length at Y" when it says so), same number of
#     records;
#   * with a wrong system identifier the scan must stop at once.
#
# PostgreSQL refuses to run as root; when the test runs as root (as Bazel
# tests do here) the server runs as the "postgres" user, created with
# useradd if missing. The cluster lives under /tmp, not TEST_TMPDIR, because
# that user cannot reach Bazel's output base.
#
# Usage: real_wal_test.sh PATH_TO_scan_pg_wal

set -euo pipefail

SCAN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
PGBIN=/usr/lib/postgresql/15/bin
SEGSIZE=1048576

fail() { echo "FAIL: $*" >&2; exit 1; }

if [[ ! -x "$PGBIN/initdb" || ! -x "$PGBIN/pg_ctl" ]]; then
  echo "SKIP: PostgreSQL 15 binaries not found in $PGBIN"
  exit 0
fi

RUNAS=()
PGUSER_NAME="$(id -un)"
if [[ "$(id -u)" == 0 ]]; then
  PGUSER_NAME=postgres
  if ! getent passwd "$PGUSER_NAME" >/dev/null; then
    useradd --system --no-create-home --shell /usr/sbin/nologin \
      "$PGUSER_NAME" || fail "cannot create user $PGUSER_NAME"
  fi
  RUNAS=(setpriv --reuid="$(id -u "$PGUSER_NAME")"
         --regid="$(id -g "$PGUSER_NAME")" --init-groups)
fi

T="$(mktemp -d /tmp/walship_real_wal.XXXXXX)"
DATA="$T/data"
cleanup() {
  if [[ -f "$DATA/postmaster.pid" ]]; then
    pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$T"
}
trap cleanup EXIT
chmod 0755 "$T"
if [[ "$(id -u)" == 0 ]] && ! chown "$PGUSER_NAME" "$T" 2>/dev/null; then
  # Inside a user-namespace sandbox only root is mapped: no other user to
  # run PostgreSQL as. The BUILD target asks for no sandbox; say why if not.
  echo "SKIP: cannot hand a directory to user $PGUSER_NAME (sandboxed?)"
  exit 0
fi

# Runs a PostgreSQL binary as the unprivileged user, with a clean environment.
# (From inside $T: that user cannot enter Bazel's runfiles directory.)
pg() {
  (cd "$T" && "${RUNAS[@]}" env -i PATH=/usr/bin:/bin HOME="$T" LC_ALL=C "$@")
}

pg "$PGBIN/initdb" -D "$DATA" --wal-segsize=1 -A trust -U walship \
  --no-sync >"$T/initdb.log" 2>&1 || { cat "$T/initdb.log"; fail initdb; }

pg "$PGBIN/pg_ctl" -D "$DATA" -l "$T/server.log" -w -t 20 \
  -o "-c listen_addresses='' -c unix_socket_directories=$T -c shared_buffers=16MB" \
  start >/dev/null || { cat "$T/server.log"; fail "server start"; }

psql() {
  pg "$PGBIN/psql" -h "$T" -U walship -d postgres -X -A -t -q -v ON_ERROR_STOP=1 "$@"
}

# Enough WAL to fill a few 1 MiB segments, with records crossing pages and
# segments (large commit records, full-page images after the checkpoint) and
# an XLOG_SWITCH record in the middle.
psql -c "create table t(i int, s text)" \
     -c "insert into t select g, repeat(md5(g::text), 10) from generate_series(1, 4000) g" \
     -c "checkpoint" \
     -c "update t set i = i + 1 where i % 3 = 0" \
     -c "select pg_switch_wal()" \
     -c "insert into t select g, repeat('y', 2000) from generate_series(1, 50) g" \
     >/dev/null
LSNS="$(psql -F ' ' -c "select pg_current_wal_flush_lsn(), pg_current_wal_insert_lsn(), (select system_identifier from pg_control_system())")"
read -r FLUSH INSERT SYSID <<<"$LSNS"
echo "before crash: flush=$FLUSH insert=$INSERT system_identifier=$SYSID"

pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null || fail "server stop"

REDO="$(pg "$PGBIN/pg_controldata" "$DATA" | sed -n "s/^Latest checkpoint's REDO location: *//p")"
OLDEST="$(ls "$DATA/pg_wal" | grep -E '^[0-9A-F]{24}$' | sort | head -n 1)"
# The oldest segment's start LSN: segno = X * 4096 + Y for 1 MiB segments.
SEG_START="$(printf '%X/%X' $(( 16#${OLDEST:8:8} )) $(( 16#${OLDEST:16:8} * SEGSIZE )))"
echo "redo=$REDO oldest segment=$OLDEST ($SEG_START)"

# LSN "H/L" -> decimal.
lsn_num() { local h="${1%/*}" l="${1#*/}"; echo $(( (16#$h << 32) | 16#$l )); }
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

scan() {
  "$SCAN" --dir="$DATA/pg_wal" --timeline=1 --segment-size=$SEGSIZE \
    --system-id="$SYSID" --start="$1"
}

OUT_REDO="$(scan "$REDO")" || fail "scan from $REDO"
echo "scan from redo:    $OUT_REDO"
OUT_SEG="$(scan "$SEG_START")" || fail "scan from $SEG_START"
echo "scan from segment: $OUT_SEG"

END="$(field end "$OUT_REDO")"
LAST="$(field last_record "$OUT_REDO")"
RECORDS="$(field records "$OUT_REDO")"
[[ "$(field end "$OUT_SEG")" == "$END" ]] || fail "ends differ by start"
(( $(lsn_num "$END") >= $(lsn_num "$FLUSH") )) ||
  fail "end of valid WAL $END is before the flush LSN $FLUSH"
(( $(lsn_num "$END") > $(lsn_num "$REDO") )) || fail "no records found"

# pg_waldump's view of the same WAL.
if [[ -x "$PGBIN/pg_waldump" ]]; then
  pg "$PGBIN/pg_waldump" -p "$DATA/pg_wal" -s "$REDO" >"$T/waldump.out" \
    2>"$T/waldump.err" || true
  ERR="$(cat "$T/waldump.err")"
  echo "pg_waldump: $ERR"
  DUMP_RECORDS="$(grep -c '^rmgr:' "$T/waldump.out" || true)"
  DUMP_LAST="$(sed -n 's/.*error in WAL record at \([0-9A-F]*\/[0-9A-F]*\).*/\1/p' <<<"$ERR")"
  DUMP_END="$(sed -n 's/.*invalid record length at \([0-9A-F]*\/[0-9A-F]*\).*/\1/p' <<<"$ERR")"
  [[ -n "$DUMP_LAST" ]] || fail "unexpected pg_waldump output: $ERR"
  (( $(lsn_num "$DUMP_LAST") == $(lsn_num "$LAST") )) ||
    fail "last record: pg_waldump $DUMP_LAST, scan $LAST"
  if [[ -n "$DUMP_END" ]]; then
    (( $(lsn_num "$DUMP_END") == $(lsn_num "$END") )) ||
      fail "end: pg_waldump $DUMP_END, scan $END"
  fi
  [[ "$DUMP_RECORDS" == "$RECORDS" ]] ||
    fail "records: pg_waldump $DUMP_RECORDS, scan $RECORDS"
fi

# Another cluster's system identifier: nothing is valid.
OUT_OTHER="$("$SCAN" --dir="$DATA/pg_wal" --timeline=1 --segment-size=$SEGSIZE \
  --system-id=12345 --start="$REDO")" || fail "scan with wrong system id"
[[ "$(field records "$OUT_OTHER")" == 0 &&
   "$(field stop "$OUT_OTHER")" == invalid ]] ||
  fail "wrong system id not detected: $OUT_OTHER"
grep -q "belongs to another cluster" <<<"$OUT_OTHER" ||
  fail "wrong system id message: $OUT_OTHER"

echo "PASS: end of valid WAL $END >= flush LSN $FLUSH; $RECORDS records"
