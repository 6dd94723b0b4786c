#include "agent/postgres/postgres_options.h"

#include <algorithm>

namespace walship::agent {
namespace {

constexpr char kFormat[] = "postgres";

}  // namespace

void PostgresOptions::RegisterFlags(FlagSet& flags) {
  flags.String("pg-conninfo", &conninfo,
               "postgres: libpq connection string of the primary, e.g. 'host=/run/postgresql "
               "port=5432 user=postgres dbname=postgres'.");
  flags.String("pg-data", &pg_data,
               "postgres: the primary's data directory (PGDATA), checked at start against the "
               "cluster's data_directory (the role needs pg_read_all_settings) and --wal-dir "
               "against its pg_wal. Only with it does the crash rule run: once the postmaster "
               "named in PGDATA/postmaster.pid (verified as the parent of the agent's backend, "
               "so the agent must share its PID namespace and OS user) has exited, the agent "
               "ships the valid WAL past the last flush position, as crash recovery replays "
               "it. Empty: after a crash the agent waits for PostgreSQL to come back.");
  flags.String("pg-slot", &slot,
               "postgres: physical replication slot the agent creates and advances to the "
               "oldest position every replica has flushed, so unshipped WAL is kept; empty "
               "disables it.");
  flags.String("state-dir", &state_dir,
               "postgres with a slot (required then): the agent's state directory (created "
               "if missing). Its file 'replicas' records every replica's last acknowledged "
               "position, so that the slot keeps the WAL of a replica that is down across an "
               "agent restart. Delete it (agent stopped) to forget every replica, or take a "
               "replica out of --allow-replicas to forget that one.");
  flags.Uint("max-retained-bytes", &max_retained_bytes,
             "postgres: most WAL the slot may hold back for lagging replicas; past it the "
             "agent releases WAL and logs which replicas are at risk (alert at 80%).");
  flags.Bool("pg-feed", &feed,
             "postgres: open one replication connection (a walsender) that pushes each new "
             "flush position the moment PostgreSQL flushes, and carries the replicas' "
             "positions back to pg_stat_replication (and synchronous_standby_names). Needs "
             "the REPLICATION attribute and a pg_hba.conf replication line; without them "
             "the agent logs why and follows the flush position by query.");
  flags.String("pg-feed-name", &feed_name,
               "postgres: application_name of the feed's connection, as pg_stat_replication "
               "and synchronous_standby_names see it.");
  flags.Milliseconds("pg-feed-query-interval-ms", &feed_query_interval,
                     "postgres: while the feed is live, the longest pause between the "
                     "flush-position queries kept as a safety net.");
  flags.Milliseconds("pg-query-interval-ms", &query_interval,
                     "postgres, without a live feed: the shortest pause between flush-position "
                     "queries while PostgreSQL writes WAL (1 to 1000). Longer: fewer, larger "
                     "frames and replica flush cycles, so less CPU beside the primary, and up "
                     "to that much more lag.");
}

absl::Status PostgresOptions::Validate(bool selected) const {
  if (selected && conninfo.empty()) {
    return absl::InvalidArgumentError("--format=postgres needs --pg-conninfo");
  }
  if (!selected && !conninfo.empty()) return OnlyForFormat("pg-conninfo", kFormat);
  if (!selected && !pg_data.empty()) return OnlyForFormat("pg-data", kFormat);
  if (selected && !slot.empty() && state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--format=postgres with a replication slot (--pg-slot) needs --state-dir: the agent "
        "records there the position of every replica it has seen, so that the slot keeps "
        "their WAL across its restarts (--pg-slot= runs without a slot)");
  }
  if (!selected && !state_dir.empty()) {
    return OnlyForFormat("state-dir", kFormat,
                         "it records replica positions for the replication slot");
  }
  if (feed_name.empty() || feed_name.size() > 63 ||
      !std::all_of(feed_name.begin(), feed_name.end(),
                   [](char c) { return c > ' ' && c < 127; })) {
    // PostgreSQL truncates application_name at 63 bytes and rewrites
    // non-ASCII: the name would not be the one an operator configured.
    return absl::InvalidArgumentError(
        "--pg-feed-name must be 1 to 63 printable ASCII characters without spaces");
  }
  if (feed_query_interval < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("--pg-feed-query-interval-ms must be at least 1");
  }
  if (query_interval < absl::Milliseconds(1) || query_interval > absl::Seconds(1)) {
    return absl::InvalidArgumentError("--pg-query-interval-ms must be 1 to 1000");
  }
  return absl::OkStatus();
}

}  // namespace walship::agent
