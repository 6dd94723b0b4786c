// postgres_options.h: the PostgreSQL format's options, filled from its flags
// (--pg-conninfo, --pg-data, --pg-slot, --state-dir, --max-retained-bytes,
// --pg-feed, --pg-feed-name, --pg-feed-query-interval-ms,
// --pg-query-interval-ms), which are also its config-file keys.
#ifndef WALSHIP_AGENT_POSTGRES_POSTGRES_OPTIONS_H_
#define WALSHIP_AGENT_POSTGRES_POSTGRES_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/format_options.h"
#include "common/flags.h"

namespace walship::agent {

struct PostgresOptions final : FormatOptions {
  // libpq connection string of the primary (required).
  std::string conninfo;
  // The primary's data directory (PGDATA). With it, and only with it, the
  // crash rule runs (PostgresSourceOptions::pg_data); empty: off.
  std::string pg_data;
  // Physical replication slot that keeps unshipped WAL; empty for none.
  std::string slot = "walship";
  // With a slot: the agent's own state directory (created if missing, one
  // level). Its file `replicas` records every replica's last acknowledged
  // flushed position, so that the slot keeps their WAL across the agent's
  // restarts (replica_positions.h). Required with a slot.
  std::string state_dir;
  // Most WAL the slot may hold back for lagging replicas.
  uint64_t max_retained_bytes = 4ull << 30;
  // A walsender pushes each new flush position and takes the replicas'
  // positions back (PostgresSourceOptions::feed).
  bool feed = true;
  // The feed's application_name (pg_stat_replication,
  // synchronous_standby_names).
  std::string feed_name = "walship";
  // While the feed is live, the longest pause between the flush-position
  // queries kept as a safety net.
  absl::Duration feed_query_interval = absl::Seconds(1);
  // Without a live feed: the shortest pause between flush-position queries
  // while PostgreSQL writes WAL. Longer means fewer, larger frames and flush
  // cycles (less CPU beside the primary), and that much more lag.
  absl::Duration query_interval = absl::Milliseconds(2);

  void RegisterFlags(FlagSet& flags) override;
  // Selected: --pg-conninfo given, --state-dir with a slot. Not selected:
  // none of --pg-conninfo, --pg-data, --state-dir. Either way: the feed's
  // name and both intervals in range.
  absl::Status Validate(bool selected) const override;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_POSTGRES_OPTIONS_H_
