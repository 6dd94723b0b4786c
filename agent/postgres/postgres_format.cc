#include "agent/postgres/postgres_format.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/pgwal/wal_names.h"
#include "common/status_macros.h"

namespace walship::agent {

PostgresFormat::PostgresFormat(sys::SysCalls& sys, const AgentOptions& agent,
                               const PostgresOptions& options, SegmentCatalog& catalog,
                               Clock& clock)
    : clock_(clock),
      sys_(sys),
      options_(options),
      ack_interval_(agent.ack_interval),
      trace_(agent.commit_trace),
      allowed_replicas_(agent.allow_replicas),
      source_(sys, SourceOptions(agent, options), catalog, clock) {}

PostgresFormat::~PostgresFormat() { Stop(); }

PostgresSourceOptions PostgresFormat::SourceOptions(const AgentOptions& agent,
                                                    const PostgresOptions& options) {
  PostgresSourceOptions po;
  po.wal_dir = agent.wal_dir;
  po.conninfo = options.conninfo;
  po.pg_data = options.pg_data;
  po.stream_id = agent.stream_id;
  po.feed = options.feed;
  po.feed_name = options.feed_name;
  po.feed_query_interval = options.feed_query_interval;
  po.min_query_interval = options.query_interval;
  po.feed_async_report_interval = agent.ack_interval;
  po.sched_slice = agent.sched_slice;
  po.sched_fifo_priority = static_cast<int>(agent.sched_fifo_priority);  // validated
  po.trace = agent.commit_trace;
  return po;
}

void PostgresFormat::FollowReplicas(ReplicaLink link) {
  link_ = std::move(link);
  // Replicas acknowledge at once only while the primary may wait for them.
  std::function<void(absl::Duration)> set_pacing = link_.set_ack_pacing;
  const absl::Duration paced = ack_interval_;
  if (!set_pacing) return;
  source_.SetSyncObserver([set_pacing, paced](bool synchronous) {
    set_pacing(synchronous ? absl::ZeroDuration() : paced);
  });
}

void PostgresFormat::OnReplicaAcknowledged() {
  // Every acknowledgement goes on to the primary at once, so that its lag
  // tracker and synchronous commits see it without a polling delay.
  if (!link_.replicas) return;
  pg::Lsn write = 0, flush = 0;
  Position flushed;  // the replica position `flush` comes from
  for (const ReplicaProgress& r : link_.replicas()) {
    if (auto w = source_.PositionToLsn(r.written); w.ok()) write = std::max(write, *w);
    if (auto f = source_.PositionToLsn(r.flushed); f.ok() && *f > flush) {
      flush = *f;
      flushed = r.flushed;
    }
  }
  if (source_.ReportReplicas(write, flush) && trace_ != nullptr) {
    trace_->Record(TraceStage::kStatus, flushed.segment, flushed.offset);
  }
}

absl::Status PostgresFormat::Start() {
  WALSHIP_RETURN_IF_ERROR(source_.Start());
  return StartSlotKeeper();
}

absl::Status PostgresFormat::StartSlotKeeper() {
  if (options_.slot.empty()) return absl::OkStatus();
  SlotKeeperOptions ko;
  ko.conninfo = options_.conninfo;
  ko.slot = options_.slot;
  ko.max_retained_bytes = options_.max_retained_bytes;
  ko.state_dir = options_.state_dir;
  ko.stream_id = source_.StreamId();
  ko.allowed_replicas = allowed_replicas_;
  slot_keeper_ = std::make_unique<SlotKeeper>(
      sys_, ko,
      [replicas = link_.replicas] {
        std::vector<ReplicaFlush> out;
        if (!replicas) return out;
        for (const ReplicaProgress& r : replicas()) out.push_back({r.name, r.flushed});
        return out;
      },
      [this](const Position& p) { return source_.PositionToLsn(p); }, clock_);
  return slot_keeper_->Start();
}

void PostgresFormat::StopFollowingReplicas() {
  if (slot_keeper_) slot_keeper_->Stop();
}

void PostgresFormat::Stop() {
  StopFollowingReplicas();
  source_.Stop();
}

void PostgresFormat::DeclareMetrics(MetricsRegistry& m) {
  MetricsRegistry::Family feed = m.Gauge(
      "walship_agent_pg_flush_feed_up",
      "postgres: 1 while the flush feed (a walsender) pushes flush positions and carries "
      "acknowledgements back; 0 while the agent follows the flush position by query.");
  MetricsRegistry::Family feed_sync = m.Gauge(
      "walship_agent_pg_feed_synchronous",
      "postgres: 1 while the primary may wait for the agent (pg_stat_replication lists the "
      "feed as a sync, quorum or potential standby, or has not said yet): every "
      "acknowledgement is reported at once; 0 while it is async or the feed is down.");
  MetricsRegistry::Family status_updates = m.Counter(
      "walship_agent_pg_status_updates_total",
      "postgres: standby status updates (replica write and flush positions) sent to the "
      "primary through the flush feed; when=at_once (an acknowledgement, keepalive or "
      "server request called for it) or paced (a position held back while the primary "
      "lists the feed as async, sent when due).");
  MetricsRegistry::Family slot_replicas = m.Gauge(
      "walship_agent_slot_replicas",
      "postgres: replicas the agent knows (connected since it started, or recorded in "
      "--state-dir), by state: held (the slot keeps their WAL) or released (past "
      "--max-retained-bytes; nothing held until they acknowledge a new position).");
  MetricsRegistry::Family save_failures = m.Counter(
      "walship_agent_replica_positions_save_failures_total",
      "postgres: failed saves of the replica positions file in --state-dir (the slot is not "
      "advanced meanwhile).");
  MetricsRegistry::Family role = m.Gauge(
      "walship_agent_pg_primary",
      "postgres: 1 while the agent's PostgreSQL is a primary (the agent ships); 0 while it "
      "is in recovery (a standby: handshakes are refused as not_primary, nothing ships).");
  MetricsRegistry::Family timeline = m.Gauge(
      "walship_agent_pg_timeline",
      "postgres: the timeline the agent serves (its primary's current timeline; the last "
      "one seen while in recovery); 0 before the first query.");
  m.AddCollector([this, role, timeline]() mutable {
    role.Set({}, source_.Readiness().ok() ? 1 : 0);
    timeline.Set({}, static_cast<double>(source_.Timeline()));
  });
  m.AddCollector([this, slot_replicas, save_failures, saves_counted = uint64_t{0}]() mutable {
    if (!slot_keeper_) return;
    const SlotKeeper::Stats st = slot_keeper_->stats();
    slot_replicas.Set({{"state", "held"}}, static_cast<double>(st.held));
    slot_replicas.Set({{"state", "released"}}, static_cast<double>(st.released));
    save_failures.Add({}, static_cast<double>(st.save_failures - saves_counted));
    saves_counted = st.save_failures;
  });
  m.AddCollector([this, feed, feed_sync, status_updates,
                  counted = PostgresSource::StatusUpdates{}]() mutable {
    feed.Set({}, source_.feed_active() ? 1 : 0);
    feed_sync.Set({}, source_.feed_synchronous() ? 1 : 0);
    const PostgresSource::StatusUpdates u = source_.status_updates();
    status_updates.Add({{"when", "at_once"}},
                       static_cast<double>((u.sent - u.paced) - (counted.sent - counted.paced)));
    status_updates.Add({{"when", "paced"}}, static_cast<double>(u.paced - counted.paced));
    counted = u;
  });
}

void RegisterPostgresFormat(WalFormatRegistry& registry) {
  registry.Add(MakeWalFormat<PostgresOptions>(
      "postgres",
      "--wal-dir is PGDATA/pg_wal; ships only WAL the primary has flushed, page headers "
      "validated, timeline history files included.",
      [](const SourceContext& c, const PostgresOptions& o)
          -> absl::StatusOr<std::unique_ptr<WalSource>> {
        return std::make_unique<PostgresFormat>(c.sys, c.agent, o, c.catalog, c.clock);
      }));
}

}  // namespace walship::agent
