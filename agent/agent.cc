#include "agent/agent.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "agent/held_segments.h"
#include "agent/leader_gate.h"
#include "agent/rate_limiter.h"
#include "agent/control_server.h"
#include "agent/control_service.h"
#include "agent/health_status.h"
#include "agent/data_server.h"
#include "agent/replica_session.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/shipper.h"
#include "agent/stream_order.h"
#include "agent/replica_state.h"
#include "agent/wal_source.h"
#include "common/net.h"
#include "common/sys/thread_name.h"
#include "common/status_macros.h"
#include "common/sys/file_util.h"
#include "common/tls.h"
#include "common/wire/frame.h"
#include "proto/walship.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace walship::agent {
namespace {

// Counts what one replica's shipper sends, then forwards.
class MeteredEvents final : public ShipperEvents {
 public:
  MeteredEvents(ShipperEvents* inner, MetricsRegistry& m, std::string replica)
      : inner_(inner),
        bytes_(m.Counter("walship_agent_bytes_shipped_total", "")),
        frames_(m.Counter("walship_agent_frames_shipped_total", "")),
        segments_(m.Counter("walship_agent_segments_completed_total", "")),
        compressed_(m.Counter("walship_agent_compression_bytes_total", "")),
        replica_(std::move(replica)) {}
  void OnCheckpoint(const std::string& segment, uint64_t length, uint32_t crc32c) override {
    inner_->OnCheckpoint(segment, length, crc32c);
    segments_.Add({{"replica", replica_}}, 1);
  }
  void OnCheckpointWithPatches(const std::string& segment, uint64_t length, uint32_t crc32c,
                               const std::vector<SegmentPatch>& patches) override {
    inner_->OnCheckpointWithPatches(segment, length, crc32c, patches);
    segments_.Add({{"replica", replica_}}, 1);
  }
  void OnSent(const Position& sent, uint64_t bytes, bool zerocopy) override {
    inner_->OnSent(sent, bytes, zerocopy);
    bytes_.Add({{"replica", replica_}, {"transport", zerocopy ? "zerocopy" : "copy"}},
               static_cast<double>(bytes));
    frames_.Add({{"replica", replica_}}, 1);
  }
  void OnCompressed(uint64_t raw, uint64_t wire) override {
    inner_->OnCompressed(raw, wire);
    compressed_.Add({{"replica", replica_}, {"bytes", "uncompressed"}}, static_cast<double>(raw));
    compressed_.Add({{"replica", replica_}, {"bytes", "wire"}}, static_cast<double>(wire));
  }

 private:
  ShipperEvents* const inner_;
  const MetricsRegistry::Family bytes_, frames_, segments_, compressed_;
  const std::string replica_;
};

}  // namespace

Agent::Agent(sys::SysCalls& sys, AgentOptions options, Clock& clock,
             const WalFormatRegistry& formats)
    : clock_(clock),
      formats_(formats),
      sys_(sys),
      options_(std::move(options)),
      metrics_(std::make_unique<MetricsRegistry>()) {}

uint16_t Agent::metrics_port() const {
  return metrics_server_ ? metrics_server_->port() : 0;
}

void Agent::DeclareMetrics() {
  MetricsRegistry& m = *metrics_;
  m.Counter("walship_agent_bytes_shipped_total",
            "Payload bytes written to replicas' data sockets, by replica and transport "
            "path (zerocopy = sendfile, copy = pread/write).");
  m.Counter("walship_agent_frames_shipped_total", "DATA frames written, by replica.");
  m.Counter("walship_agent_compression_bytes_total",
            "Of the copy path's bytes, those shipped in compressed (ZDATA) frames, by replica: "
            "bytes=uncompressed (segment bytes) and bytes=wire (what carried them).");
  m.Counter("walship_agent_segments_completed_total",
            "Segments fully sent and checkpointed, by replica.");
  m.Counter("walship_agent_data_connections_rejected_total",
            "Connections refused on the data port, by reason (with --data-tls=on also "
            "tls_handshake, no_client_certificate, untrusted_certificate, wrong_identity).");
  m.Counter("walship_agent_data_sessions_total",
            "Data sockets admitted, by replica and path (ktls = kernel TLS with "
            "SSL_sendfile, userspace = TLS through a copy, off = plaintext).");
  m.Counter("walship_agent_control_calls_rejected_total",
            "gRPC calls refused on the control port for their client certificate, by "
            "reason (no_client_certificate, untrusted_certificate).");
  MetricsRegistry::Family lag_bytes = m.Gauge(
      "walship_agent_replica_lag_bytes",
      "Shippable bytes not yet acknowledged as flushed (durable) by the replica.");
  MetricsRegistry::Family lag_seconds = m.Gauge(
      "walship_agent_replica_lag_seconds",
      "Age of the oldest shippable byte the replica has not flushed (0 when caught up).");
  MetricsRegistry::Family backlog = m.Gauge(
      "walship_agent_replica_backlog_bytes",
      "Shippable bytes not yet sent to the replica (what its shipper still has to do).");
  MetricsRegistry::Family connected =
      m.Gauge("walship_agent_replica_connected", "1 while the replica's data socket is live.");
  MetricsRegistry::Family source_end = m.Gauge(
      "walship_agent_source_bytes", "Total shippable bytes the source currently shows.");
  MetricsRegistry::Family replicas = m.Gauge("walship_agent_replicas", "Known replicas.");
  MetricsRegistry::Family stalled = m.Gauge(
      "walship_agent_replica_stalled",
      "1 while a replica needs attention, by replica and reason: stalled (its session is "
      "live but it cannot advance: source_failed, not_primary, not_ready, no_progress, "
      "position_not_in_source) or stopped (its session ended with an error: gap, "
      "divergent, damaged_copy, source_failed, ...). See walship-status's STATE column.");
  MetricsRegistry::Family source_up = m.Gauge(
      "walship_agent_source_up",
      "1 while the WAL source serves (it has not failed and is ready, e.g. its database "
      "server is a primary); 0 otherwise, when the health check also says NOT_SERVING.");
  // The source's own families follow the generic ones (WalSource::DeclareMetrics).
  source_->DeclareMetrics(m);
  m.AddCollector([this, lag_bytes, lag_seconds, backlog, connected, source_end, replicas,
                  stalled, source_up]() mutable {
    if (!catalog_ || !registry_ || !source_) return;
    CatalogSnapshot snap = catalog_->Get();
    lag_bytes.Clear();
    lag_seconds.Clear();
    backlog.Clear();
    connected.Clear();
    stalled.Clear();
    const absl::Status source = source_->Readiness();
    const absl::Status readiness = SessionReadiness(source, gate_.get());
    source_up.Set({},
                  snap.source_status.ok() && ServingReadiness(source, gate_.get()).ok() ? 1 : 0);
    const absl::Time now = clock_.Now();
    uint64_t total = 0;
    if (snap.segments) {
      for (const SegmentInfo& s : *snap.segments) total += s.shippable;
    }
    source_end.Set({}, static_cast<double>(total));
    auto all = registry_->All();
    replicas.Set({}, static_cast<double>(all.size()));
    for (const auto& session : all) {
      MetricLabels l = {{"replica", session->name()}};
      walship::v1::ReplicaStatus st = session->Snapshot();
      const ReplicaCondition c =
          Classify(session->Facts(), snap, readiness, now, options_.stall_timeout);
      if (NeedsAttention(c.state)) {
        stalled.Set({{"replica", session->name()}, {"reason", c.reason}}, 1);
      }
      uint64_t lag = c.lag_bytes;
      lag_bytes.Set(l, static_cast<double>(lag));
      std::optional<absl::Time> since = catalog_->ShippableSince(session->flushed());
      lag_seconds.Set(l, lag == 0 || !since.has_value()
                             ? 0.0
                             : absl::ToDoubleSeconds(now - *since));
      backlog.Set(l, static_cast<double>(
                         snap.BytesAfter(Position{st.sent().segment(), st.sent().offset()})));
      connected.Set(l, st.connected() ? 1 : 0);
    }
  });
}

Agent::~Agent() { Shutdown(); }

uint16_t Agent::data_port() const { return data_server_ ? data_server_->port() : 0; }

absl::Status Agent::StartSource() {
  catalog_ = std::make_unique<SegmentCatalog>(clock_);
  registry_ = std::make_unique<SessionRegistry>(sys_, clock_);
  WALSHIP_ASSIGN_OR_RETURN(source_, formats_.MakeSource(sys_, options_, *catalog_, clock_));
  DeclareMetrics();
  // Replicas acknowledge at --ack-interval unless the source asks for sooner.
  registry_->SetAckPacing(options_.ack_interval);
  SessionRegistry* registry = registry_.get();
  ReplicaLink link;
  link.replicas = [registry] {
    std::vector<ReplicaProgress> out;
    for (const auto& s : registry->All()) out.push_back({s->name(), s->written(), s->flushed()});
    return out;
  };
  link.set_ack_pacing = [registry](absl::Duration d) { registry->SetAckPacing(d); };
  source_->FollowReplicas(std::move(link));
  WalSource* source = source_.get();
  registry_->SetAckObserver([source] { source->OnReplicaAcknowledged(); });
  {
    absl::MutexLock lock(&start_mu_);
    if (start_cancelled_) return absl::CancelledError("stopped during start-up");
    starting_ = source;
  }
  absl::Status started = source_->Start();
  absl::MutexLock lock(&start_mu_);
  starting_ = nullptr;
  return started;
}

void Agent::CancelStart() {
  absl::MutexLock lock(&start_mu_);
  start_cancelled_ = true;
  if (starting_ != nullptr) starting_->CancelStart();
}

absl::Status Agent::Start() {
  WALSHIP_RETURN_IF_ERROR(formats_.Validate(options_));
  WALSHIP_RETURN_IF_ERROR(StartSource());
  checksums_ = std::make_unique<SegmentChecksums>(sys_, source_->Segments());

  ShipperOptions ship;
  ship.transport = options_.transport;
  ship.max_payload = options_.max_payload;
  ship.io.io_timeout = options_.io_timeout;
  // A rate limit paces each send with a sleep, which no publisher may take.
  ship.inline_sends = options_.max_rate_bytes_per_sec <= 0;
  ship.trace = options_.commit_trace;
  ship.mutable_bytes = source_->MutableBytes();
  ShipperRunner runner = [this, ship](int fd, net::DataConn* tls, const std::string& replica,
                                      const ShipStart& start, ShipperEvents* events,
                                      const std::atomic<bool>& stop) mutable {
    ship.compression = start.compression;
    ship.compression_level = start.compression_level;
    // Compressing takes CPU no publisher's thread may spend on one replica.
    if (start.compression != wire::Codec::kNone) ship.inline_sends = false;
    metrics_->Counter("walship_agent_data_sessions_total", "")
        .Add({{"replica", replica},
              {"path", net::DataPathName(tls != nullptr ? tls->path() : net::DataPath::kPlain)}},
             1);
    MeteredEvents metered(events, *metrics_, replica);
    events = &metered;
    std::optional<RateLimiter> limiter;
    std::optional<ThrottledEvents> throttled;
    if (options_.max_rate_bytes_per_sec > 0) {
      limiter.emplace(options_.max_rate_bytes_per_sec, 0, [this] { return clock_.Now(); });
      throttled.emplace(events, &*limiter, stop, clock_);
      events = &*throttled;
    }
    // The replica's complete segments first: a damaged copy ends the
    // session before anything is shipped on top of it.
    WALSHIP_RETURN_IF_ERROR(
        CheckHeldSegments(start.held, catalog_->Get(), *checksums_, events, stop));
    const StreamOrder order(*source_, *catalog_);
    ShipperOptions with_conn = ship;
    with_conn.conn = tls;
    Shipper shipper(sys_, *catalog_, order, *checksums_, source_->Segments(), fd,
                    start.position, start.prefix_crc32c, with_conn, events, clock_);
    return shipper.Run(stop);
  };
  DataServerOptions dso;
  dso.clock = &clock_;
  WALSHIP_ASSIGN_OR_RETURN(dso.listen, ParseHostPort(options_.data_listen));
  MetricsRegistry::Family rejected =
      metrics_->Counter("walship_agent_data_connections_rejected_total", "");
  dso.on_reject = [rejected](const std::string& reason) {
    rejected.Add({{"reason", reason}}, 1);
  };
  WALSHIP_ASSIGN_OR_RETURN(dso.tls, MakeDataPortTls(sys_, clock_, options_.tls, options_.data_tls_on()));
  data_server_ = std::make_unique<DataServer>(sys_, dso, *registry_, std::move(runner));
  WALSHIP_RETURN_IF_ERROR(data_server_->Start());
  data_port_ = data_server_->port();

  service_ = std::make_unique<ControlServiceImpl>(options_, *source_, *catalog_,
                                                  *checksums_, *registry_, data_port_,
                                                  metrics_.get(), clock_);
  WALSHIP_RETURN_IF_ERROR(StartLeaderGate());
  WALSHIP_RETURN_IF_ERROR(StartControlServer());
  WALSHIP_ASSIGN_OR_RETURN(HostPort control, ParseHostPort(options_.listen));
  WALSHIP_ASSIGN_OR_RETURN(HostPort data, ParseHostPort(options_.data_listen));
  control.port = control_port_;
  data.port = data_port_;
  spdlog::info("serving stream {} ({} format) from {}: control on {} ({}), data on {}, "
               "transport {}",
               source_->StreamId(), source_->FormatName(), options_.wal_dir,
               control.ToString(), options_.tls.insecure ? "plaintext" : "mutual TLS",
               data.ToString(), TransportName(options_.transport));
  std::string metrics_line;
  if (!options_.metrics_listen.empty()) {
    WALSHIP_ASSIGN_OR_RETURN(HostPort mhp, ParseHostPort(options_.metrics_listen));
    metrics_server_ = std::make_unique<MetricsServer>(*metrics_);
    WALSHIP_RETURN_IF_ERROR(metrics_server_->Start(mhp.host, mhp.port));
    mhp.port = metrics_server_->port();
    spdlog::info("metrics on http://{}/metrics", mhp.ToString());
    metrics_line = absl::StrCat("metrics=", mhp.ToString(), "\n");
  }
  if (!options_.port_file.empty()) {
    std::string dir = ".", name = options_.port_file;
    size_t slash = options_.port_file.rfind('/');
    if (slash != std::string::npos) {
      dir = options_.port_file.substr(0, slash);
      name = options_.port_file.substr(slash + 1);
    }
    WALSHIP_RETURN_IF_ERROR(sys::WriteFileAtomically(
        sys_, dir, name,
        absl::StrCat("control=", control.ToString(), "\ndata=", data.ToString(), "\n",
                     metrics_line)));
  }
  return absl::OkStatus();
}

absl::Status Agent::StartLeaderGate() {
  if (!options_.leader.enabled()) return absl::OkStatus();
  options_.leader.LogStart(absl::StrCat(
      "serving replicas only while etcd's leader key names member ", options_.member));
  WALSHIP_ASSIGN_OR_RETURN(
      std::unique_ptr<LeaderKey> key,
      LeaderKey::Make(sys_, clock_, options_.leader, options_.leader_check_interval));
  SessionRegistry* registry = registry_.get();
  gate_ = std::make_unique<LeaderGate>(
      std::move(key), options_.member, options_.leader_check_interval, *metrics_,
      [registry](const absl::Status& fenced) {
        for (const auto& session : registry->All()) {
          if (session->finished()) continue;
          spdlog::warn("replica {} (session {}): ending the session: {}", session->name(),
                       session->id(), std::string(fenced.message()));
          session->Fail(fenced);
        }
      });
  gate_->Start();
  service_->SetLeaderGate(gate_.get());
  return absl::OkStatus();
}

absl::Status Agent::StartControlServer() {
  MetricsRegistry::Family refused_calls =
      metrics_->Counter("walship_agent_control_calls_rejected_total", "");
  WALSHIP_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> creds,
      MakeServerCredentials(sys_, clock_, options_.tls,
                            [refused_calls](const std::string& reason, const std::string& detail) {
        spdlog::warn("control port: refused a call: {}", detail);
        refused_calls.Add({{"reason", reason}}, 1);
      }));
  server_ = std::make_unique<ControlServer>(*service_, sys_, options_.sched_slice,
                                            static_cast<int>(options_.sched_fifo_priority));
  WALSHIP_ASSIGN_OR_RETURN(control_port_, server_->Start(options_.listen, std::move(creds)));
  health_thread_ = std::thread([this] {
    NameThisThread("ws-health");
    WatchHealth(server_->health());
  });
  return absl::OkStatus();
}

void Agent::WatchHealth(HealthStatus& health) {
  std::string last;  // why not serving; empty while serving
  do {
    absl::Status why = catalog_->Get().source_status;
    if (why.ok()) why = ServingReadiness(source_->Readiness(), gate_.get());
    const std::string now = why.ok() ? std::string() : why.ToString();
    if (now != last) {
      health.Set("", why.ok());
      health.Set(walship::v1::Control::service_full_name(), why.ok());
      if (why.ok()) {
        spdlog::info("health: SERVING (the WAL source serves again)");
      } else {
        spdlog::error("health: NOT_SERVING: {}", now);
      }
      last = now;
    }
  } while (!health_stop_.WaitForNotificationWithTimeout(absl::Seconds(1)));
}

void Agent::Shutdown() {
  if (!health_stop_.HasBeenNotified()) health_stop_.Notify();
  if (health_thread_.joinable()) health_thread_.join();
  if (metrics_server_) metrics_server_->Stop();
  if (server_) server_->health().SetAll(false);
  if (source_) source_->StopFollowingReplicas();
  if (gate_) gate_->Stop();
  if (data_server_) data_server_->Stop();
  if (catalog_) catalog_->Shutdown();
  if (registry_) registry_->CloseAll();
  if (server_) {
    server_->Shutdown(clock_.Now() + absl::Seconds(2));
    server_.reset();
  }
  if (source_) source_->Stop();
}

}  // namespace walship::agent
