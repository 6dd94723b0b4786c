// agent.h: walship-agent, assembled.
//
// Owns the WAL source, the segment catalog, the session registry, the data
// server, the gRPC control server (control_server.h: with grpc.health.v1
// health checking, which says NOT_SERVING while the source has failed or
// cannot serve, and server reflection) and the metrics registry (served on /metrics when
// options.metrics_listen is set). Start() binds both ports (port 0 picks
// a free one; the chosen ports are logged and returned); Shutdown() stops
// accepting, ends every session and joins every thread.
//
// Thread-safety: Start, Shutdown and Wait from one controlling thread; the
// servers run on their own threads.
#ifndef WALSHIP_AGENT_AGENT_H_
#define WALSHIP_AGENT_AGENT_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "agent/agent_options.h"
#include "agent/wal_format.h"
#include "agent/wal_source_factory.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

class ControlServer;
class HealthStatus;
class SegmentCatalog;
class SegmentChecksums;
class SessionRegistry;
class DataServer;
class LeaderGate;
class WalSource;
class ControlServiceImpl;

class Agent {
 public:
  // `options.format` names one of `formats` (which must outlive the agent).
  Agent(sys::SysCalls& sys, AgentOptions options, Clock& clock = DefaultClock(),
        const WalFormatRegistry& formats = KnownWalFormats());
  ~Agent();

  absl::Status Start();
  // From another thread while Start() runs (a signal during start-up):
  // Start() gives up soon with kCancelled, also while its source waits for
  // the database. Thread-safe.
  void CancelStart();
  void Shutdown();

  uint16_t control_port() const { return control_port_; }
  uint16_t data_port() const;
  // 0 unless metrics_listen is set and Start() succeeded.
  uint16_t metrics_port() const;
  // Valid for the agent's lifetime; for tests and embedding.
  MetricsRegistry& metrics() { return *metrics_; }

 private:
  void DeclareMetrics();
  // Start(): the catalog, the session registry and the WAL source for
  // --format (WalFormatRegistry::MakeSource), linked to each other, the
  // source started.
  absl::Status StartSource();
  // Start(): the gRPC control server (service_ set) and its health watch.
  absl::Status StartControlServer();
  // Start(), with --leader-etcd: the leader gate (leader_gate.h), its watch
  // started and the control service gated by it.
  absl::Status StartLeaderGate();
  // Until Shutdown: NOT_SERVING (and an error line) while the source has
  // failed or cannot serve new replicas (leader_gate.h ServingReadiness),
  // SERVING otherwise.
  void WatchHealth(HealthStatus& health);

  Clock& clock_;
  const WalFormatRegistry& formats_;

  sys::SysCalls& sys_;
  const AgentOptions options_;
  std::unique_ptr<SegmentCatalog> catalog_;
  std::unique_ptr<WalSource> source_;
  std::unique_ptr<SegmentChecksums> checksums_;
  std::unique_ptr<SessionRegistry> registry_;
  std::unique_ptr<DataServer> data_server_;
  std::unique_ptr<ControlServiceImpl> service_;
  std::unique_ptr<LeaderGate> gate_;
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<MetricsServer> metrics_server_;
  uint16_t control_port_ = 0;
  std::thread health_thread_;
  absl::Notification health_stop_;
  // Referenced by the control service for handshake responses.
  uint16_t data_port_ = 0;
  absl::Mutex start_mu_;
  // The source while its Start() runs; CancelStart() reaches it there.
  WalSource* starting_ ABSL_GUARDED_BY(start_mu_) = nullptr;
  bool start_cancelled_ ABSL_GUARDED_BY(start_mu_) = false;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_AGENT_H_
