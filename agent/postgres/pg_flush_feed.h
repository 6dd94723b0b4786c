// -----------------------------------------------------------------------------
// File: agent/postgres/pg_flush_feed.h
// -----------------------------------------------------------------------------
//
// Learns a PostgreSQL primary's flush position the moment it moves, and
// reports walship replicas' durable positions back to the primary.
//
// The feed is one physical replication connection (a walsender). PostgreSQL
// wakes every walsender as soon as it has flushed WAL, and each XLogData
// message carries the flush position at the time it was sent (see
// pg_stream_protocol.h). A query for pg_current_wal_flush_lsn() must instead
// wait for a backend to be scheduled, and cannot be repeated without cost.
// The WAL payload of the stream is read and discarded: walship ships from
// pg_wal's files, so the stream is only a clock. Streaming starts at the
// server's flush position when Start() runs, so a backlog is never sent
// twice; new WAL is, which costs the primary what one streaming standby
// costs.
//
// Standby status updates report `write` as the highest position a replica
// has written and `flush` as the highest position a replica has made
// durable; `apply` is 0 (walship replicas replay nothing). The primary then
// lists the agent in pg_stat_replication under the feed's application_name,
// with PostgreSQL's own write and flush lag, and synchronous_standby_names
// may name it: a commit then returns only once a walship replica holds it
// durably. When updates go out is a Pacer's decision (common/pacer.h): at
// once while the primary may wait for the agent (set_synchronous(), true
// until the caller learns otherwise), at most once an async_report_interval
// while it does not.
//
// Failure: any error closes the connection (active() turns false); the
// caller falls back to queries and may Start() again later.
//
// Thread-compatible: the caller serializes all calls (PostgresSource holds a
// mutex around them).
#ifndef WALSHIP_AGENT_POSTGRES_PG_FLUSH_FEED_H_
#define WALSHIP_AGENT_POSTGRES_PG_FLUSH_FEED_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/pacer.h"
#include "common/pgwal/wal_names.h"

struct pg_conn;

namespace walship::agent {

struct PgFlushFeedOptions {
  // libpq connection string of the primary (the agent's --pg-conninfo);
  // replication=true is added.
  std::string conninfo;
  // What pg_stat_replication and synchronous_standby_names call the agent.
  std::string application_name = "walship";
  // A status update at least this often even when nothing moved, well
  // inside PostgreSQL's wal_sender_timeout (60 s by default).
  absl::Duration status_interval = absl::Seconds(1);
  // While the primary does not wait for the agent: the shortest pause
  // between status updates that carry new positions.
  absl::Duration async_report_interval = absl::ZeroDuration();
};

class PgFlushFeed {
 public:
  explicit PgFlushFeed(PgFlushFeedOptions options);
  ~PgFlushFeed();
  PgFlushFeed(const PgFlushFeed&) = delete;
  PgFlushFeed& operator=(const PgFlushFeed&) = delete;

  // Connects, checks IDENTIFY_SYSTEM against `system_id` and `timeline`, and
  // starts streaming at the server's flush position. Errors, each with the
  // server's message: kUnavailable when the server cannot be reached;
  // kFailedPrecondition when it refuses (no REPLICATION privilege, no
  // pg_hba.conf line for replication, max_wal_senders reached); kAborted
  // when it is another cluster or on another timeline (the caller re-reads
  // the timeline first).
  absl::Status Start(uint64_t system_id, uint32_t timeline);
  // Ends streaming politely and closes the connection. Idempotent.
  void Close();

  bool active() const { return conn_ != nullptr; }
  // The connection's socket while active(), else -1; poll it for POLLIN.
  int socket() const;
  // Where streaming started (the server's flush position then).
  pg::Lsn start_lsn() const { return start_lsn_; }
  // The walsender's process id (pg_stat_replication.pid) while active().
  int backend_pid() const;

  // Reads every message that has arrived, without blocking, and returns the
  // highest flush position announced since Start() (start_lsn() before any
  // message). kUnavailable, closing the feed, when the connection broke or
  // the server ended the stream; kDataLoss for a malformed message. Once
  // closed, it returns the error that closed it.
  absl::StatusOr<pg::Lsn> Drain();

  // Sends a status update when the pacer says so (new positions,
  // status_interval passed, or the server asked); otherwise a
  // new position may be held back until report_due(), when the caller
  // calls Report() again. kUnavailable, closing the feed, when sending fails.
  absl::Status Report(pg::Lsn write, pg::Lsn flush, absl::Time now);
  // Whether the primary may wait for this feed (its sync_state is not
  // async); true after Start() until the caller says otherwise.
  void set_synchronous(bool synchronous);
  bool synchronous() const { return synchronous_; }
  // When a held-back update is due; InfiniteFuture() when none is.
  absl::Time report_due() const { return pacer_.Due(); }
  // Status updates sent since construction, and how many of them carried
  // a position the pacer had held back.
  uint64_t reports_sent() const { return reports_sent_; }
  uint64_t reports_paced() const { return reports_paced_; }

 private:
  absl::Status Fail(absl::Status status);

  const PgFlushFeedOptions options_;
  pg_conn* conn_ = nullptr;
  absl::Status failure_;
  pg::Lsn start_lsn_ = 0;
  pg::Lsn flush_ = 0;
  bool synchronous_ = true;
  Pacer<std::pair<pg::Lsn, pg::Lsn>> pacer_;  // (write, flush)
  uint64_t reports_sent_ = 0;
  uint64_t reports_paced_ = 0;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_PG_FLUSH_FEED_H_
