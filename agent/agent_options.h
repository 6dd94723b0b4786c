// agent_options.h: walship-agent configuration, filled from flags by main.cc.
#ifndef WALSHIP_AGENT_AGENT_OPTIONS_H_
#define WALSHIP_AGENT_AGENT_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "common/transport.h"

namespace walship::agent {

struct AgentOptions {
  std::string wal_dir;
  // "append" (directory of append-only segment files) or "postgres"
  // (PGDATA/pg_wal of a PostgreSQL primary).
  std::string format = "append";
  // postgres: libpq connection string of the primary.
  std::string pg_conninfo;
  // postgres: the primary's data directory (PGDATA). With it, and only with
  // it, the crash rule runs (PostgresSourceOptions::pg_data); empty: off.
  std::string pg_data;
  // postgres: physical replication slot that keeps unshipped WAL; empty for
  // none.
  std::string pg_slot = "walship";
  // postgres with a slot: the agent's own state directory (created if
  // missing, one level). Its file `replicas` records every replica's last
  // acknowledged flushed position, so that the slot keeps their WAL across
  // the agent's restarts (replica_positions.h). Required with a slot.
  std::string state_dir;
  // postgres: most WAL the slot may hold back for lagging replicas.
  uint64_t max_retained_bytes = 4ull << 30;
  // postgres: a walsender pushes each new flush position and takes the
  // replicas' positions back (PostgresSourceOptions::feed).
  bool pg_feed = true;
  // postgres: the feed's application_name (pg_stat_replication,
  // synchronous_standby_names).
  std::string pg_feed_name = "walship";
  // postgres: while the feed is live, the longest pause between the
  // flush-position queries kept as a safety net.
  absl::Duration pg_feed_query_interval = absl::Seconds(1);
  // postgres, without a live feed: the shortest pause between flush-position
  // queries while PostgreSQL writes WAL. Longer means fewer, larger frames
  // and flush cycles (less CPU beside the primary), and that much more lag.
  absl::Duration pg_query_interval = absl::Milliseconds(2);
  // While nothing waits for acknowledgements (the append format, no flush
  // feed, or a primary that lists the feed as an async standby): the shortest pause
  // between a replica's acknowledgements of new positions, and between the
  // feed's status updates to the primary (zero: each at once, as while a
  // primary may wait).
  absl::Duration ack_interval = absl::ZeroDuration();
  // append: regular expression (ECMAScript) a segment's name matches in
  // full; group 1, if any, is its sequence number (AppendSourceOptions::
  // segment_pattern). Empty: the names of the directory's one shape.
  std::string segment_pattern;
  std::string stream_id;  // empty: derived from the WAL directory
  std::string listen = "127.0.0.1:0";
  std::string data_listen = "127.0.0.1:0";
  Transport transport = Transport::kZeroCopy;
  uint32_t max_payload = 1u << 20;
  absl::Duration heartbeat = absl::Seconds(1);
  // A replica behind the source whose durable position has not moved for
  // this long is reported stalled (status, walship_agent_replica_stalled).
  absl::Duration stall_timeout = absl::Seconds(10);
  absl::Duration token_ttl = absl::Seconds(30);
  absl::Duration io_timeout = absl::Seconds(30);
  // Written (atomically) with the bound ports once listening, for scripts.
  std::string port_file;
  // Replica names allowed to handshake; empty allows every name. Others are
  // refused with kPermissionDenied before any byte is shipped.
  std::vector<std::string> allow_replicas;
  // Most payload bytes per second shipped to each replica (a token bucket in
  // its shipper thread); 0 is unlimited.
  uint64_t max_rate_bytes_per_sec = 0;
  // HOST:PORT of the Prometheus /metrics endpoint; empty disables it.
  std::string metrics_listen;
  // Mutual TLS on the control port, or plaintext when tls.insecure is set;
  // Validate() insists on one of the two. With TLS, a replica's name must be
  // one its client certificate carries (CN or DNS SAN).
  TlsOptions tls;

  // kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_AGENT_OPTIONS_H_
