// postgres_format.h: the PostgreSQL format as the agent plugs it in.
//
// A WalSource that is a PostgresSource (postgres_source.h) plus what the
// PostgreSQL format does with the agent's replicas:
//   * every acknowledgement goes on to the primary at once through the flush
//     feed (PostgresSource::ReportReplicas: the highest written and flushed
//     LSN of any replica), so that its lag tracker and synchronous commits
//     see it without a polling delay;
//   * replicas acknowledge at once while the primary may wait for them
//     (PostgresSource::feed_synchronous), else at --ack-interval;
//   * with a slot (PostgresOptions::slot), a SlotKeeper (slot_keeper.h)
//     started after the source keeps the WAL the known replicas need, and
//     records their positions when StopFollowingReplicas() stops it;
//   * the metrics of the feed and of the slot (DeclareMetrics).
// RegisterPostgresFormat() adds it to the agent's formats (wal_format.h) as
// --format=postgres, with its options (postgres_options.h).
//
// Thread-safety and lifecycle: as WalSource.
#ifndef WALSHIP_AGENT_POSTGRES_POSTGRES_FORMAT_H_
#define WALSHIP_AGENT_POSTGRES_POSTGRES_FORMAT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/agent_options.h"
#include "agent/postgres/postgres_options.h"
#include "agent/postgres/postgres_source.h"
#include "agent/postgres/slot_keeper.h"
#include "agent/segment_catalog.h"
#include "agent/wal_format.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/position.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

class PostgresFormat final : public WalSource {
 public:
  // `agent` and `options` as validated by WalFormatRegistry::Validate(),
  // format "postgres".
  PostgresFormat(sys::SysCalls& sys, const AgentOptions& agent, const PostgresOptions& options,
                 SegmentCatalog& catalog, Clock& clock = DefaultClock());
  ~PostgresFormat() override;

  // Starts the source, then (with a slot) the slot keeper.
  absl::Status Start() override;
  // Stops the slot keeper (if StopFollowingReplicas() has not), then the
  // source.
  void Stop() override;
  void CancelStart() override { source_.CancelStart(); }
  std::string StreamId() const override { return source_.StreamId(); }
  std::string FormatName() const override { return source_.FormatName(); }
  std::string wal_dir() const override { return source_.wal_dir(); }
  absl::StatusOr<std::optional<Position>> RedirectMissing(
      const Position& durable, uint32_t prefix_crc32c) const override {
    return source_.RedirectMissing(durable, prefix_crc32c);
  }
  std::optional<std::string> Successor(const std::string& name) const override {
    return source_.Successor(name);
  }
  absl::Status Readiness() const override { return source_.Readiness(); }
  uint32_t Timeline() const override { return source_.Timeline(); }

  void DeclareMetrics(MetricsRegistry& metrics) override;
  void FollowReplicas(ReplicaLink link) override;
  void OnReplicaAcknowledged() override;
  void StopFollowingReplicas() override;

 private:
  static PostgresSourceOptions SourceOptions(const AgentOptions& agent,
                                             const PostgresOptions& options);
  // Start(), after the source: the slot keeper, when there is a slot.
  absl::Status StartSlotKeeper();

  Clock& clock_;

  sys::SysCalls& sys_;
  const PostgresOptions options_;
  // The agent's --ack-interval and --allow-replicas.
  const absl::Duration ack_interval_;
  // Records each status update that carried an acknowledgement
  // (TraceStage::kStatus); null: off.
  CommitTrace* const trace_;
  const std::vector<std::string> allowed_replicas_;
  PostgresSource source_;
  ReplicaLink link_;  // set before Start(), then read only
  // Set by Start() (the thread that also stops it); read by the metrics
  // collector, which runs only once the agent serves.
  std::unique_ptr<SlotKeeper> slot_keeper_;
};

// Adds the PostgreSQL format ("postgres") to `registry`.
void RegisterPostgresFormat(WalFormatRegistry& registry);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_POSTGRES_FORMAT_H_
