#include "agent/postgres/postgres_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_crc.h"
#include "common/reason.h"
#include "common/sched_slice.h"
#include "common/pgwal/wal_scan.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "spdlog/spdlog.h"
#include "common/sys/thread_name.h"

namespace walship::agent {
namespace {

// A backend that outlived the postmaster may write for a while; each scan
// reads from the segment start, so rescans are spaced. A write seen within
// the spacing is scanned at the next poll.
constexpr absl::Duration kCrashRescanSpacing = absl::Milliseconds(20);

// libpq's messages run over several lines; a log line is one.
std::string OneLine(absl::string_view text) {
  std::string out;
  for (char c : absl::StripAsciiWhitespace(text)) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (!space) {
      out.push_back(c);
    } else if (out.back() != ' ') {
      out.push_back(' ');
    }
  }
  return out;
}

}  // namespace

PostgresSource::PostgresSource(sys::SysCalls& sys, PostgresSourceOptions options,
                               SegmentCatalog& catalog, Clock& clock)
    : sys_(sys),
      clock_(clock),
      options_(std::move(options)),
      catalog_(catalog),
      pg_(options_.conninfo),
      postmaster_(sys_, options_.pg_data) {}

PostgresSource::~PostgresSource() { Stop(); }

absl::Status PostgresSource::Start() {
  absl::Time deadline = clock_.Now() + options_.start_timeout;
  absl::StatusOr<PgClient::Rows> rows;
  for (;;) {
    rows = pg_.Query(
        "SELECT s.system_identifier, i.bytes_per_wal_segment, i.wal_block_size "
        "FROM pg_control_system() s, pg_control_init() i");
    if (rows.ok() || clock_.Now() > deadline) break;
    spdlog::warn("waiting for PostgreSQL: {}", rows.status().ToString());
    for (int i = 0; i < 10 && !cancel_start_.load(); ++i) clock_.SleepFor(absl::Milliseconds(100));
    if (cancel_start_.load()) {
      return absl::CancelledError("stopped while waiting for PostgreSQL to start");
    }
  }
  if (!rows.ok()) return rows.status();
  if (rows->size() != 1 || (*rows)[0].size() != 3 ||
      !absl::SimpleAtoi((*rows)[0][0], &exp_.system_id) ||
      !absl::SimpleAtoi((*rows)[0][1], &exp_.segment_size) ||
      !absl::SimpleAtoi((*rows)[0][2], &exp_.block_size)) {
    return absl::FailedPreconditionError("unexpected answer to the pg_control query");
  }
  if (!pg::IsValidSegmentSize(exp_.segment_size)) {
    return absl::FailedPreconditionError(
        absl::StrCat("unsupported WAL segment size ", exp_.segment_size));
  }
  stream_id_ = options_.stream_id.empty() ? absl::StrCat("pg-", exp_.system_id)
                                          : options_.stream_id;
  spdlog::info("PostgreSQL cluster {}: WAL segments of {} bytes, pages of {} bytes, in {}",
               exp_.system_id, exp_.segment_size, exp_.block_size, options_.wal_dir);
  WALSHIP_RETURN_IF_ERROR(CheckPgData());

  auto watch = sys::DirWatch::Open(sys_, options_.wal_dir, WatchMask(false));
  if (!watch.ok()) return watch.status();
  watch_.emplace(std::move(*watch));
  if (absl::Status s = Poll(); !s.ok()) return s;
  MaybeStartFeed();
  NoteSync();
  thread_ = std::thread([this] {
    NameThisThread("ws-pg-source");
    CommitPathThread(sys_, options_.sched_slice, options_.sched_fifo_priority, "ws-pg-source")
        .Start();
    Loop();
  });
  return absl::OkStatus();
}

uint32_t PostgresSource::WatchMask(bool feed_live) const {
  // With the feed, a write to a segment says nothing the feed has not said
  // (and said once it was flushed): waking for each would only cost CPU.
  return IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CLOSE_WRITE |
         (feed_live ? 0 : IN_MODIFY);
}

bool PostgresSource::feed_active() const {
  absl::MutexLock lock(&feed_mu_);
  return feed_ != nullptr && feed_->active();
}

bool PostgresSource::feed_synchronous() const {
  absl::MutexLock lock(&feed_mu_);
  return feed_ != nullptr && feed_->active() && feed_->synchronous();
}

PostgresSource::StatusUpdates PostgresSource::status_updates() const {
  absl::MutexLock lock(&feed_mu_);
  StatusUpdates u = updates_of_closed_feeds_;
  if (feed_ != nullptr) {
    u.sent += feed_->reports_sent();
    u.paced += feed_->reports_paced();
  }
  return u;
}

bool PostgresSource::ReportReplicas(pg::Lsn write, pg::Lsn flush) {
  absl::MutexLock lock(&feed_mu_);
  report_write_ = std::max(report_write_, write);
  report_flush_ = std::max(report_flush_, flush);
  if (feed_ == nullptr || !feed_->active()) return false;
  const bool was_held = feed_->report_due() != absl::InfiniteFuture();
  const uint64_t sent_before = feed_->reports_sent();
  absl::Status s = feed_->Report(report_write_, report_flush_, clock_.Now());
  // A failed report: the source thread notices the closed feed and falls
  // back to queries. A position newly held back: the source thread sends it
  // when due, and must wake for that rather than sleep its usual second.
  const bool newly_held = !was_held && feed_->report_due() != absl::InfiniteFuture();
  if ((!s.ok() || newly_held) && watch_.has_value()) watch_->Wake();
  return s.ok() && feed_->reports_sent() > sent_before;
}

void PostgresSource::NoteSync() {
  const bool now = feed_synchronous();
  if (sync_noted_ == now) return;
  sync_noted_ = now;
  if (sync_observer_) sync_observer_(now);
}

void PostgresSource::CheckSyncState() {
  int pid = 0;
  {
    absl::MutexLock lock(&feed_mu_);
    if (feed_ == nullptr || !feed_->active()) return;
    pid = feed_->backend_pid();
  }
  next_sync_check_ = clock_.Now() + options_.sync_state_interval;
  auto rows = pg_.Query(
      absl::StrCat("SELECT sync_state FROM pg_stat_replication WHERE pid = ", pid));
  // Until the primary says async (no answer, no row yet), the feed keeps
  // assuming it may wait: reporting at once costs more, never commits.
  if (!rows.ok() || rows->size() != 1 || (*rows)[0].size() != 1) return;
  const std::string state = (*rows)[0][0];
  const bool synchronous = state != "async";
  {
    absl::MutexLock lock(&feed_mu_);
    if (feed_ == nullptr || feed_->backend_pid() != pid) return;
    feed_->set_synchronous(synchronous);
  }
  NoteSync();
  if (state != sync_state_) {
    if (synchronous) {
      spdlog::info("the primary lists the flush feed as a {} standby: every acknowledgement "
                   "is reported to it at once",
                   state);
    } else {
      spdlog::info("the primary lists the flush feed as an async standby: replica positions "
                   "are reported to it at most every {}",
                   absl::FormatDuration(options_.feed_async_report_interval));
    }
    sync_state_ = state;
  }
}

void PostgresSource::MaybeStartFeed() {
  if (!options_.feed || primary_down_ || in_recovery_ || timeline_ == 0) return;
  if (clock_.Now() < next_feed_attempt_) return;
  {
    absl::MutexLock lock(&feed_mu_);
    if (feed_ != nullptr) return;  // live, or lost and not yet handled
  }
  PgFlushFeedOptions fo;
  fo.conninfo = options_.conninfo;
  fo.application_name = options_.feed_name;
  fo.async_report_interval = options_.feed_async_report_interval;
  auto feed = std::make_unique<PgFlushFeed>(fo);
  absl::Status s = feed->Start(exp_.system_id, timeline_);
  if (!s.ok()) {
    const bool refused = absl::IsFailedPrecondition(s);
    next_feed_attempt_ = clock_.Now() + options_.feed_retry * (refused ? 12 : 1);
    std::string msg(s.message());
    if (msg != last_feed_error_) {
      spdlog::warn("flush feed unavailable, following the flush position by query instead "
                   "(retrying every {} s): {}{}",
                   absl::ToInt64Seconds(options_.feed_retry * (refused ? 12 : 1)), msg,
                   refused ? " -- the agent's PostgreSQL role needs the REPLICATION attribute "
                             "and pg_hba.conf a 'replication' line for it"
                           : "");
      last_feed_error_ = msg;
    }
    return;
  }
  last_feed_error_.clear();
  if (watch_.has_value()) {
    if (absl::Status m = watch_->SetMask(WatchMask(true)); !m.ok()) {
      spdlog::warn("{}", m.ToString());
    }
  }
  spdlog::info("flush feed: a walsender pushes each flush from {} on timeline {}; the "
               "primary lists the agent as application_name '{}' in pg_stat_replication",
               pg::FormatLsn(feed->start_lsn()), timeline_, options_.feed_name);
  // The first FollowFeed() pass sends the replicas' positions.
  next_sync_check_ = absl::InfinitePast();  // at the first pass
  {
    absl::MutexLock lock(&feed_mu_);
    feed_ = std::move(feed);
  }
  NoteSync();  // synchronous until its sync_state is read
}

absl::Status PostgresSource::FollowFeed(absl::Time* last_query) {
  absl::StatusOr<pg::Lsn> announced;
  {
    absl::MutexLock lock(&feed_mu_);
    announced = feed_->Drain();
    if (announced.ok()) {
      // Periodic, asked for by the server, or held back by the pacer and
      // now due; otherwise acknowledgements report from ReportReplicas().
      absl::Status r = feed_->Report(report_write_, report_flush_, clock_.Now());
      if (!r.ok()) announced = r;
    }
  }
  if (!announced.ok()) {
    spdlog::warn("flush feed lost ({}); following the flush position by query",
                 std::string(announced.status().message()));
    DropFeed();
    *last_query = clock_.Now();
    return Poll();  // at once: the primary may have gone down
  }
  if (*announced > flush_ && !primary_down_) {
    flush_ = *announced;
    if (options_.trace != nullptr && flush_ > 0) {
      // The byte before the position: its segment and the offset after it.
      const uint64_t seg = pg::SegmentOfLsn(flush_ - 1, exp_.segment_size);
      options_.trace->Record(TraceStage::kFeed,
                             pg::SegmentName(timeline_, seg, exp_.segment_size),
                             flush_ - pg::SegmentStartLsn(seg, exp_.segment_size));
    }
  }
  if (absl::Status s = Publish(timeline_, flush_); !s.ok()) return s;
  if (clock_.Now() >= next_sync_check_) CheckSyncState();
  if (clock_.Now() - *last_query >= options_.feed_query_interval) {
    *last_query = clock_.Now();
    return Poll();
  }
  return absl::OkStatus();
}

void PostgresSource::Stop() {
  if (stopping_.exchange(true)) return;
  if (watch_.has_value()) watch_->Wake();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&feed_mu_);
  feed_.reset();
}

void PostgresSource::Loop() {
  absl::Time last_query = clock_.Now();  // Start() has just queried
  while (!stopping_.load()) {
    int feed_fd = -1;
    bool feed_live = false;  // open, or closed by a failed report not yet handled
    absl::Time report_due = absl::InfiniteFuture();
    {
      absl::MutexLock lock(&feed_mu_);
      feed_live = feed_ != nullptr;
      if (feed_live) {
        feed_fd = feed_->socket();
        report_due = feed_->report_due();
      }
    }
    // Without the feed, any change in pg_wal (PostgreSQL writing WAL) is a
    // reason to ask for the flush position now rather than at the next poll,
    // but not sooner than min_query_interval after the last question. The
    // pause comes before the wait: under load PostgreSQL writes again
    // within it, so the wait returns at once instead of waking this thread
    // for the first write only to put it to sleep again.
    // With the feed, a held-back status update (FollowFeed sends it) sets
    // the deadline too.
    if (!feed_live) {
      const absl::Duration since = clock_.Now() - last_query;
      if (since < options_.min_query_interval) {
        clock_.SleepFor(options_.min_query_interval - since);
        if (stopping_.load()) break;
      }
    }
    watch_->Wait(
        feed_live ? std::max(absl::ZeroDuration(),
                             std::min({options_.feed_query_interval, absl::Seconds(1),
                                       report_due - clock_.Now()}))
                  : options_.poll_interval,
        [this](const inotify_event& ev) {
          if (ev.mask & (IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_Q_OVERFLOW)) {
            dir_changed_ = true;
          }
          if (ev.mask & (IN_MODIFY | IN_CLOSE_WRITE | IN_Q_OVERFLOW)) wal_written_ = true;
        },
        feed_fd);
    if (stopping_.load()) break;
    absl::Status s;
    if (feed_live) {
      s = FollowFeed(&last_query);
    } else {
      last_query = clock_.Now();
      s = Poll();
    }
    if (!s.ok()) {
      spdlog::error("PostgreSQL source failed: {}", s.ToString());
      catalog_.Fail(s);
      return;
    }
    MaybeStartFeed();
  }
}

absl::Status PostgresSource::CheckPgData() {
  if (!postmaster_.enabled()) {
    spdlog::warn("without --pg-data the crash rule is off: after a crash of PostgreSQL the "
                 "agent waits for it to come back instead of shipping the valid WAL past the "
                 "last flush position");
    return absl::OkStatus();
  }
  auto rows = pg_.Query("SELECT current_setting('data_directory')");
  if (!rows.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--pg-data ", options_.pg_data, " cannot be checked against the cluster's "
        "data_directory (", rows.status().message(), "): the agent's role needs "
        "pg_read_all_settings; or leave --pg-data out to run without the crash rule"));
  }
  if (rows->size() != 1 || (*rows)[0].size() != 1) {
    return absl::FailedPreconditionError("unexpected answer to the data_directory query");
  }
  WALSHIP_RETURN_IF_ERROR(postmaster_.CheckDataDirectory((*rows)[0][0], options_.wal_dir));
  spdlog::info("--pg-data {} is the cluster's data directory and --wal-dir its pg_wal",
               options_.pg_data);
  return absl::OkStatus();
}

void PostgresSource::VerifyPostmaster(int backend_pid) {
  if (!postmaster_.enabled() || backend_pid == verified_backend_) return;
  verified_backend_ = backend_pid;
  if (absl::Status s = postmaster_.Verify(backend_pid); !s.ok()) {
    armed_logged_ = 0;
    if (s.message() != disarmed_logged_) {
      disarmed_logged_ = std::string(s.message());
      spdlog::warn("crash rule disarmed: {}; while PostgreSQL cannot be queried the agent "
                   "waits for it",
                   disarmed_logged_);
    }
    return;
  }
  disarmed_logged_.clear();
  if (postmaster_.postmaster_pid() != armed_logged_) {
    armed_logged_ = postmaster_.postmaster_pid();
    spdlog::info("crash rule armed: postmaster PID {} of {} serves the agent; once it has "
                 "exited, the valid WAL left in {} is shipped",
                 armed_logged_, options_.pg_data, options_.wal_dir);
  }
}

void PostgresSource::LogNoCrashRule(const absl::Status& failed,
                                    const PostmasterWatch::Evidence& e) {
  if (e.why == no_crash_rule_logged_ &&
      clock_.Now() - last_no_crash_rule_log_ < absl::Seconds(10)) {
    return;
  }
  spdlog::warn("cannot query the flush position ({}); the crash rule does not run ({}): "
               "waiting for PostgreSQL",
               OneLine(failed.message()), e.why);
  no_crash_rule_logged_ = e.why;
  last_no_crash_rule_log_ = clock_.Now();
}

bool PostgresSource::DropFeed() {
  {
    absl::MutexLock lock(&feed_mu_);
    if (feed_ == nullptr) return false;
    updates_of_closed_feeds_.sent += feed_->reports_sent();
    updates_of_closed_feeds_.paced += feed_->reports_paced();
    feed_.reset();
  }
  sync_state_.clear();
  NoteSync();
  next_feed_attempt_ = clock_.Now() + options_.feed_retry;
  if (watch_.has_value()) {
    if (absl::Status m = watch_->SetMask(WatchMask(false)); !m.ok()) {
      spdlog::warn("{}", m.ToString());
    }
  }
  return true;
}

void PostgresSource::CloseFeedForShutdown() {
  // In a shutdown the feed's walsender exits only once the agent confirms
  // everything it sent, the shutdown checkpoint included; it confirms what
  // the replicas hold, so with none holding it the shutdown would wait for
  // ever. Closing the feed lets the walsender go: the shutdown checkpoint
  // is flushed in pg_wal and ships from there. (A shutdown ends the agent's
  // query session at once, so the next query fails and finds
  // postmaster.pid saying "stopping"; without --pg-data the agent cannot
  // read it, and a replica must hold the shutdown checkpoint first.)
  if (DropFeed()) {
    spdlog::info("PostgreSQL is shutting down: closed the flush feed, so that its walsender "
                 "does not hold the shutdown up waiting for replicas");
  }
}

absl::Status PostgresSource::Poll() {
  // Asked up to every min_query_interval: prepared, so the backend does not
  // parse and plan it each time.
  auto rows = pg_.QueryPrepared(
      "walship_flush_position",
      "SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_flush_lsn() END, "
      "CASE WHEN pg_is_in_recovery() THEN NULL "
      "ELSE pg_walfile_name(pg_current_wal_flush_lsn()) END, pg_backend_pid()");
  if (!rows.ok()) {
    if (postmaster_.Stopping()) CloseFeedForShutdown();
    const PostmasterWatch::Evidence e = postmaster_.Check();
    if (e.state != PostmasterWatch::State::kGone) {
      LogNoCrashRule(rows.status(), e);
      return absl::OkStatus();
    }
    if (!primary_down_) {
      primary_down_ = true;
      spdlog::warn("PostgreSQL is down ({}): applying the crash rule", e.why);
      return ApplyCrashRule(/*first=*/true);
    }
    // Backends outlive a killed postmaster until they next wait: one may
    // still be writing and committing. Recovery would replay what they
    // write, so every write in pg_wal while the primary is down is
    // scanned for.
    if (wal_written_ && clock_.Now() - last_crash_scan_ >= kCrashRescanSpacing) {
      return ApplyCrashRule(/*first=*/false);
    }
    if (crash_logged_ < flush_ && clock_.Now() - last_crash_log_ >= absl::Seconds(1)) {
      LogCrashRuleProgress(/*first=*/false);
    }
    return absl::OkStatus();
  }
  if (primary_down_) {
    spdlog::info("PostgreSQL is back");
    primary_down_ = false;
  }
  int backend_pid = 0;
  if (rows->size() != 1 || (*rows)[0].size() != 3 ||
      !absl::SimpleAtoi((*rows)[0][2], &backend_pid)) {
    return absl::FailedPreconditionError("unexpected answer to the flush position query");
  }
  VerifyPostmaster(backend_pid);
  const std::string& lsn_text = (*rows)[0][0];
  const std::string& file = (*rows)[0][1];
  const bool was_in_recovery = in_recovery_.exchange(lsn_text.empty());
  if (lsn_text.empty()) {
    if (!was_in_recovery) {
      spdlog::warn("PostgreSQL is in recovery; shipping nothing until it is a primary");
    }
    return absl::OkStatus();
  }
  if (was_in_recovery) spdlog::info("PostgreSQL is a primary now");
  auto lsn = pg::ParseLsn(lsn_text);
  if (!lsn.ok()) return lsn.status();
  uint32_t tli = 0;
  if (file.size() < 8 || !absl::SimpleHexAtoi(file.substr(0, 8), &tli) || tli == 0) {
    return absl::FailedPreconditionError(absl::StrCat("unexpected WAL file name ", file));
  }
  if (tli < timeline_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the primary's timeline went backwards from ", timeline_, " to ", tli));
  }
  if (tli > timeline_ && timeline_ != 0) {
    spdlog::info("timeline switch: {} -> {}", timeline_, tli);
  }
  if (tli == timeline_ && *lsn < flush_) {
    // Only after a crash-rule scan: PostgreSQL restarted and reports less
    // than the scan shipped. Its recovery replays the same records, so its
    // flush position catches up; never ship backwards meanwhile.
    static absl::Time last_warn = absl::InfinitePast();
    if (clock_.Now() - last_warn > absl::Seconds(10)) {
      spdlog::warn("PostgreSQL reports flush position {} behind the {} already shipped",
                   lsn_text, pg::FormatLsn(flush_));
      last_warn = clock_.Now();
    }
    *lsn = flush_;
  }
  timeline_ = tli;
  flush_ = *lsn;
  served_timeline_.store(tli);
  return Publish(timeline_, flush_);
}

absl::Status PostgresSource::ApplyCrashRule(bool first) {
  if (timeline_ == 0) return absl::OkStatus();
  // Cleared before reading: a write during the scan sets it again.
  wal_written_ = false;
  last_crash_scan_ = clock_.Now();
  const uint64_t seg_size = exp_.segment_size;
  const pg::Lsn seg_start = pg::SegmentStartLsn(pg::SegmentOfLsn(flush_, seg_size), seg_size);
  pg::DirectoryWalBytes wal(sys_, options_.wal_dir, timeline_, seg_size);
  auto scan = pg::ScanWal(wal, seg_start, exp_);
  if (!scan.ok()) {
    spdlog::error("crash rule: scanning pg_wal failed: {}; shipping stays at {}",
                  scan.status().ToString(), pg::FormatLsn(flush_));
    return absl::OkStatus();
  }
  if (first) crash_logged_ = flush_;
  crash_stop_reason_ = scan->stop_reason;
  if (scan->end > flush_) {
    flush_ = scan->end;
    // A busy orphaned backend can make this a rescan every few ms: a line a
    // second, covering every scan since the last line, says enough.
    if (first || clock_.Now() - last_crash_log_ >= absl::Seconds(1)) LogCrashRuleProgress(first);
    return Publish(timeline_, flush_);
  }
  if (first) {
    spdlog::warn("crash rule: no valid WAL past the last reported flush position {} ({})",
                 pg::FormatLsn(flush_), scan->stop_reason);
  }
  return absl::OkStatus();
}

void PostgresSource::LogCrashRuleProgress(bool first) {
  spdlog::warn(
      "crash rule: shipping {} bytes of valid WAL past {} {}, up to {} (end of the last valid "
      "record; scan stopped: {})",
      flush_ - crash_logged_,
      first ? "the last reported flush position" : "what it shipped before,",
      pg::FormatLsn(crash_logged_), pg::FormatLsn(flush_), crash_stop_reason_);
  last_crash_log_ = clock_.Now();
  crash_logged_ = flush_;
}

absl::Status PostgresSource::Readiness() const {
  if (in_recovery_.load()) {
    return WithReason(absl::UnavailableError(absl::StrCat(
                          "PostgreSQL (", options_.wal_dir,
                          ") is in recovery, not a primary: this agent ships nothing until it "
                          "is promoted")),
                      Reason::kNotPrimary);
  }
  return absl::OkStatus();
}

}  // namespace walship::agent
