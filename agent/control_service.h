// control_service.h: the gRPC Control service (proto/walship.proto).
//
// Handshake validates the replica's claims against the source before any
// byte moves: the stream identity, that its durable segment still exists (or
// it is complete and every segment from the next one on is still here), that
// it does not hold more of a complete segment than the source, and that the
// CRC of its durable prefix equals the source's. A proven mismatch or a gap is
// FAILED_PRECONDITION with a message an operator can act on and a reason
// (common/reason.h: kDivergent, kGap, kWrongStream, kSourceFailed); only
// kDivergent lets a replica cut bytes it never recorded. A source that cannot
// answer yet (not a primary, no segment yet, behind the replica) is
// UNAVAILABLE with its reason: the replica retries and keeps every byte. A replica whose name is not
// on a non-empty AgentOptions::allow_replicas is refused with
// PERMISSION_DENIED before anything else is checked; with mutual TLS so is a
// replica whose name its client certificate does not carry (CN or DNS SAN),
// which binds each data token to the identity the TLS layer authenticated.
//
// The control server (control_server.h) calls Handshake and Status from its
// worker threads; session_call.h runs the Session streams.
//
// Thread-safety: the methods run concurrently; all state lives in the
// thread-safe catalog and registry.
#ifndef WALSHIP_AGENT_CONTROL_SERVICE_H_
#define WALSHIP_AGENT_CONTROL_SERVICE_H_

#include <map>
#include <optional>
#include <string>

#include "agent/agent_options.h"
#include "agent/leader_gate.h"
#include "agent/replica_session.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/stream_order.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "proto/walship.grpc.pb.h"

namespace walship::agent {

class ControlServiceImpl final {
 public:
  ControlServiceImpl(const AgentOptions& options, const WalSource& source,
                     const SegmentCatalog& catalog, SegmentChecksums& checksums,
                     SessionRegistry& registry, const uint16_t& data_port,
                     MetricsRegistry* metrics = nullptr,
                     Clock& clock = DefaultClock());

  grpc::Status Handshake(grpc::ServerContext* ctx,
                         const walship::v1::HandshakeRequest* req,
                         walship::v1::HandshakeResponse* resp);
  grpc::Status Status(grpc::ServerContext* ctx, const walship::v1::StatusRequest* req,
                      walship::v1::StatusResponse* resp);

  // With --leader-etcd: handshakes go on only when `gate` admits them, and
  // Status reports what it says. Set once, before serving; it must outlive
  // the service.
  void SetLeaderGate(LeaderGate* gate) { gate_ = gate; }

 private:
  friend class SessionCall;

  // Where shipping starts for a replica durable at `durable`, or why not
  // (a status with a reason, common/reason.h).
  absl::StatusOr<ShipStart> StartPosition(const walship::v1::HandshakeRequest& req);
  // The replica's durable segment is `seg` in the catalog: the bytes it holds
  // are the source's.
  absl::StatusOr<ShipStart> CheckHeldPrefix(const SegmentInfo& seg,
                                            const walship::v1::HandshakeRequest& req);
  // The replica's durable segment is not in the catalog: where it continues
  // (a timeline switch, the next segment when it holds all of it), or why not.
  absl::StatusOr<ShipStart> ContinueMissing(const CatalogSnapshot& snap,
                                            const walship::v1::HandshakeRequest& req);
  // Logs and counts a refused handshake; the status to return.
  grpc::Status Refuse(const grpc::ServerContext& ctx,
                      const walship::v1::HandshakeRequest& req, const absl::Status& why);
  // At most one line per replica and reason every 30 s for refusals the
  // replica retries.
  void RefusalLog(const std::string& replica, const std::string& peer,
                  const absl::Status& why);
  // With mutual TLS: OK when `replica_name` is a name the caller's
  // (verified) client certificate carries, else PERMISSION_DENIED saying so.
  // Plaintext: always OK.
  grpc::Status CheckIdentity(const grpc::ServerContextBase& ctx,
                             const std::string& replica_name) const;
  // Counts a refused handshake by reason (when metrics are on).
  void CountRefusal(const std::string& reason);

  Clock& clock_;

  const AgentOptions& options_;
  const WalSource& source_;
  const SegmentCatalog& catalog_;
  SegmentChecksums& checksums_;
  SessionRegistry& registry_;
  const uint16_t& data_port_;
  MetricsRegistry* const metrics_;
  // walship_agent_acks_total, declared once: it counts on every
  // acknowledgement (when metrics are on).
  std::optional<MetricsRegistry::Family> acks_total_;
  const StreamOrder order_;
  LeaderGate* gate_ = nullptr;
  absl::Mutex log_mu_;
  std::map<std::string, absl::Time> last_refusal_log_ ABSL_GUARDED_BY(log_mu_);
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_CONTROL_SERVICE_H_
