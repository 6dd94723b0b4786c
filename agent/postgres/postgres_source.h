// postgres_source.h: WAL source for a PostgreSQL primary's pg_wal.
//
// PostgreSQL creates segments at full size and recycles old ones by renaming
// them to future names, so a file's size says nothing about valid data. This
// source therefore ships only what the primary reports as flushed:
//
//   * While the primary is up, the shippable end is pg_current_wal_flush_lsn()
//     on the current timeline; never a byte past it.
//   * Before any page is published, its header is validated: magic, page
//     address equal to its position (a recycled or stale page fails), and on
//     each segment's first page the cluster's system identifier, segment size
//     and block size (taken from the cluster, not assumed).
//   * Timeline history files (NNNNNNNN.history) of the current timeline's
//     ancestry are shipped as complete files. Segments of ancestor timelines
//     are shipped up to their switch point; files of unrelated timelines and
//     PostgreSQL's own .partial files are ignored.
//   * The flush position is pushed, not only asked for: a flush feed
//     (pg_flush_feed.h), one walsender connection, reports each new flush
//     position as PostgreSQL flushes, and carries the replicas' durable
//     positions back (pg_stat_replication, synchronous_standby_names). While
//     it is live the source queries only once a feed_query_interval, as a
//     safety net; when it cannot be opened (no REPLICATION privilege, no
//     pg_hba.conf line, max_wal_senders reached) or breaks, the source logs
//     why and follows the flush position by query, woken by inotify, until
//     the feed can be opened again.
//   * When the primary process dies but its host does not, PostgreSQL's
//     crash recovery would replay every valid record left in pg_wal. The
//     source then ships exactly those (the crash rule): it scans from the
//     segment holding the last flush position and publishes up to the end
//     of the last record whose header and CRC are valid
//     (common/pgwal/wal_scan.h). It never ships a record PostgreSQL itself
//     would discard.
//   * The crash rule runs only on positive evidence that the postmaster is
//     gone (postmaster_watch.h), never because a query failed: it needs
//     `pg_data` (--pg-data), checked at Start() against the cluster's
//     data_directory (and `wal_dir` against its pg_wal; a mismatch fails
//     Start() with kFailedPrecondition); the postmaster named in
//     PGDATA/postmaster.pid verified, after each new query connection, as
//     the parent of the agent's own backend working in PGDATA (so the agent
//     shares its PID namespace); and, when a query fails, that PID gone
//     while postmaster.pid still names it. Without `pg_data` the rule is off
//     (logged at start). Any doubt (no lock file, another PID in it, a
//     failed verification, the postmaster running) means waiting for
//     PostgreSQL, never shipping past the flush position; the reason is
//     logged when it changes and at most every 10 s.
//
// The stream identity is "pg-<system identifier>"; the timeline is part of
// every segment name.
//
// Thread-safety: as WalSource. The source owns one libpq connection used
// only by its thread.
#ifndef WALSHIP_AGENT_POSTGRES_POSTGRES_SOURCE_H_
#define WALSHIP_AGENT_POSTGRES_POSTGRES_SOURCE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/postgres/pg_client.h"
#include "agent/postgres/pg_flush_feed.h"
#include "agent/postgres/postmaster_watch.h"
#include "agent/segment_catalog.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/commit_trace.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/position.h"
#include "common/sys/dir_watch.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::agent {

struct PostgresSourceOptions {
  // PGDATA/pg_wal (or the directory it links to).
  std::string wal_dir;
  // PGDATA, for the crash rule's evidence (see above); empty: the crash rule
  // is off.
  std::string pg_data;
  std::string conninfo;
  std::string stream_id;  // override; default pg-<system identifier>
  // Longest pause between flush-position queries; inotify wakes it sooner.
  absl::Duration poll_interval = absl::Milliseconds(50);
  // Shortest pause between queries, so a busy primary is not flooded.
  // Each query costs the primary a backend round trip; at most 500 a second
  // keeps that a small fraction of a core under heavy write load.
  absl::Duration min_query_interval = absl::Milliseconds(2);
  // How long Start() keeps trying to reach the primary.
  absl::Duration start_timeout = absl::Seconds(30);
  // The flush feed (see above); off: queries only.
  bool feed = true;
  // The feed's application_name on the primary.
  std::string feed_name = "walship";
  // While the feed is live: the longest pause between safety-net queries.
  absl::Duration feed_query_interval = absl::Seconds(1);
  // While the primary does not wait for the agent (the feed's sync_state
  // is async): the shortest pause between status updates carrying new
  // replica positions. A sync, quorum or potential standby reports each
  // acknowledgement at once. See common/pacer.h.
  absl::Duration feed_async_report_interval = absl::ZeroDuration();
  // How often the feed's sync_state is read from pg_stat_replication.
  absl::Duration sync_state_interval = absl::Seconds(1);
  // Pause before opening the feed again after it failed or broke; a refusal
  // by the server (which an operator must fix) waits 12 times longer.
  absl::Duration feed_retry = absl::Seconds(5);
  // The scheduler slice of the source's thread, which reads the feed and
  // ships what it announces (common/sched_slice.h); zero: the kernel's.
  absl::Duration sched_slice = absl::ZeroDuration();
  // Above zero: the thread runs under SCHED_FIFO at this priority instead.
  int sched_fifo_priority = 0;
  // Records each new flush position the feed announces (TraceStage::kFeed,
  // at the byte before it); null: off. Borrowed.
  CommitTrace* trace = nullptr;
};

class PostgresSource final : public WalSource {
 public:
  // Time (deadlines, pacing, log intervals) is read from `clock`.
  PostgresSource(sys::SysCalls& sys, PostgresSourceOptions options, SegmentCatalog& catalog,
                 Clock& clock = DefaultClock());
  ~PostgresSource() override;

  absl::Status Start() override;
  void CancelStart() override { cancel_start_.store(true); }
  void Stop() override;
  std::string StreamId() const override { return stream_id_; }
  std::string FormatName() const override { return "postgres"; }
  std::string wal_dir() const override { return options_.wal_dir; }
  // A replica in an ancestor timeline's switch segment, at or before the
  // switch point, continues with the next timeline's history file once its
  // bytes are shown equal to the next timeline's copy of that segment.
  absl::StatusOr<std::optional<Position>> RedirectMissing(
      const Position& durable, uint32_t prefix_crc32c) const override;
  // The next segment number of the timeline; after the last segment wholly
  // before a switch point, the next timeline's history file; after a history
  // file, the segment of that timeline holding its switch point. nullopt for
  // names outside the current timeline's ancestry.
  std::optional<std::string> Successor(const std::string& name) const override;
  // kUnavailable (Reason::kNotPrimary) while PostgreSQL is in recovery.
  absl::Status Readiness() const override;
  // The primary's current timeline (the last seen while it is in recovery
  // or down); 0 before the first successful query.
  uint32_t Timeline() const override { return served_timeline_.load(); }

  // Reports what the replicas hold to the primary through the feed: `write`
  // the highest LSN a replica has written, `flush` the highest it has made
  // durable (0: none). Remembered and sent again at least once a second;
  // a no-op while the feed is down. Any thread. True when a status update
  // went out now (false: the feed is down, failed, or the pacer holds it).
  bool ReportReplicas(pg::Lsn write, pg::Lsn flush);
  // True while the flush feed is streaming. Any thread.
  bool feed_active() const;
  // True while the primary may wait for the feed's reports (its sync_state
  // is sync, quorum or potential, or not read yet); false while it is async
  // or the feed is down. Any thread.
  bool feed_synchronous() const;
  // `observer(synchronous)` runs whenever feed_synchronous() changes, and
  // once at Start(), on the thread that changed it (the source's, or
  // Start()'s caller). Set before Start().
  void SetSyncObserver(std::function<void(bool)> observer) {
    sync_observer_ = std::move(observer);
  }
  // Status updates sent to the primary by every feed so far: all of them,
  // and those that carried a position held back by the pacer. Any thread.
  struct StatusUpdates {
    uint64_t sent = 0;
    uint64_t paced = 0;
  };
  StatusUpdates status_updates() const;

  uint64_t segment_size() const { return exp_.segment_size; }
  uint64_t system_id() const { return exp_.system_id; }
  // The position of `lsn` on the current timeline, for retention bookkeeping.
  absl::StatusOr<pg::Lsn> PositionToLsn(const Position& p) const;

 private:
  struct TimelineRange {
    uint32_t timeline;
    pg::Lsn begin;
    pg::Lsn end;  // exclusive; the flush LSN for the current timeline
  };

  void Loop();
  // Queries the flush position; on failure decides whether the primary is
  // down (crash rule) or merely unreachable.
  absl::Status Poll();
  // The server ended the query session for a shutdown: see the .cc.
  void CloseFeedForShutdown();
  // Closes the feed (if open) and goes back to queries; false without one.
  bool DropFeed();
  // One pass while the feed is live: reads what it announced, publishes,
  // and queries when the safety-net interval has passed.
  absl::Status FollowFeed(absl::Time* last_query);
  // Opens the feed when it is enabled, down, and due for an attempt.
  void MaybeStartFeed();
  // Reads the feed's sync_state and sets its pacer accordingly.
  void CheckSyncState();
  // Tells the sync observer when feed_synchronous() changed; called where
  // it can change (feed opened or lost, sync_state read), not every pass.
  void NoteSync();
  // The inotify mask: writes to segments matter only without the feed.
  uint32_t WatchMask(bool feed_live) const;
  absl::Status Publish(uint32_t timeline, pg::Lsn flush);
  absl::StatusOr<std::vector<TimelineRange>> Ancestry(uint32_t timeline, pg::Lsn flush);
  // Validates page headers of `name` in [from, to); returns how far they
  // are valid.
  uint64_t ValidatePages(const std::string& name, pg::Lsn seg_start, uint64_t from,
                         uint64_t to);
  // Start(): checks pg_data against the cluster (or says that the crash
  // rule is off).
  absl::Status CheckPgData();
  // After a successful query on the connection whose backend is
  // `backend_pid`: verifies the postmaster when the connection is new.
  void VerifyPostmaster(int backend_pid);
  // A failed query while the evidence is not kGone: says why the crash
  // rule does not run, when the reason changes and at most every 10 s.
  void LogNoCrashRule(const absl::Status& failed, const PostmasterWatch::Evidence& e);
  // Ships the valid WAL past flush_ that crash recovery would replay; `first`
  // when the primary has just been found down, false for a rescan after a
  // write in pg_wal while it stays down.
  absl::Status ApplyCrashRule(bool first);
  // Logs what the crash rule shipped since its last line.
  void LogCrashRuleProgress(bool first);

  sys::SysCalls& sys_;
  Clock& clock_;
  const PostgresSourceOptions options_;
  SegmentCatalog& catalog_;
  PgClient pg_;
  std::string stream_id_;
  pg::WalExpectations exp_;
  PostmasterWatch postmaster_;

  std::optional<sys::DirWatch> watch_;
  std::thread thread_;
  // CancelStart(): Start() stops waiting for PostgreSQL.
  std::atomic<bool> cancel_start_{false};
  std::atomic<bool> stopping_{false};

  // Source thread only.
  uint32_t timeline_ = 0;
  pg::Lsn flush_ = 0;
  bool primary_down_ = false;
  // A segment was written since the last crash-rule scan (inotify).
  bool wal_written_ = false;
  absl::Time last_crash_scan_ = absl::InfinitePast();
  absl::Time last_crash_log_ = absl::InfinitePast();
  pg::Lsn crash_logged_ = 0;  // where the last crash-rule log line ended
  std::string crash_stop_reason_;
  int verified_backend_ = 0;  // the backend VerifyPostmaster() last saw
  int armed_logged_ = 0;      // the postmaster PID last logged as verified
  std::string disarmed_logged_;
  std::string no_crash_rule_logged_;
  absl::Time last_no_crash_rule_log_ = absl::InfinitePast();
  // Written by the source thread, read by Readiness() and Timeline().
  std::atomic<bool> in_recovery_{false};
  std::atomic<uint32_t> served_timeline_{0};
  absl::Time next_feed_attempt_ = absl::InfinitePast();
  absl::Time next_sync_check_ = absl::InfinitePast();
  std::string sync_state_;  // as last read and logged; empty: not yet
  std::function<void(bool)> sync_observer_;
  std::optional<bool> sync_noted_;
  std::string last_feed_error_;
  std::map<std::string, uint64_t> validated_;
  std::string last_page_error_;
  // What the last Publish() saw, so a poll that finds the same flush position
  // and no file created, renamed or removed in pg_wal costs no directory
  // scan, history read or page read (inotify reports every such change).
  bool dir_changed_ = true;
  absl::Time last_scan_ = absl::InfinitePast();
  std::vector<std::string> names_;
  uint32_t published_timeline_ = 0;
  pg::Lsn published_flush_ = 0;
  bool published_all_ = false;  // every page up to the flush position was valid
  std::optional<std::vector<TimelineRange>> ancestry_;
  // The segment whose pages were validated last, kept open between polls.
  std::string validate_name_;
  sys::UniqueFd validate_fd_;

  mutable absl::Mutex mu_;
  // Timeline switches known to the source: successor timeline by parent.
  std::vector<TimelineRange> ranges_ ABSL_GUARDED_BY(mu_);

  // The feed is read by the source thread and written to by whichever
  // thread reports an acknowledgement; only the source thread opens it or
  // replaces it.
  mutable absl::Mutex feed_mu_;
  std::unique_ptr<PgFlushFeed> feed_ ABSL_GUARDED_BY(feed_mu_);
  pg::Lsn report_write_ ABSL_GUARDED_BY(feed_mu_) = 0;
  pg::Lsn report_flush_ ABSL_GUARDED_BY(feed_mu_) = 0;
  StatusUpdates updates_of_closed_feeds_ ABSL_GUARDED_BY(feed_mu_);
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_POSTGRES_SOURCE_H_
