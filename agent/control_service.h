// control_service.h: the gRPC Control service (proto/walship.proto).
//
// Handshake validates the replica's claims against the source before any
// byte moves: the stream identity, that its durable segment still exists (or
// it is complete and the stream moved on), that it does not hold more bytes
// than the source shows, and that the CRC of its durable prefix equals the
// source's. Any mismatch is FAILED_PRECONDITION with a message an operator can
// act on; the replica must not retry it blindly. A replica whose name is not
// on a non-empty AgentOptions::allow_replicas is refused with
// PERMISSION_DENIED before anything else is checked; with mutual TLS so is a
// replica whose name its client certificate does not carry (CN or DNS SAN),
// which binds each data token to the identity the TLS layer authenticated.
//
// Thread-safety: gRPC calls the methods concurrently; all state lives in the
// thread-safe catalog and registry.
#ifndef WALSHIP_AGENT_CONTROL_SERVICE_H_
#define WALSHIP_AGENT_CONTROL_SERVICE_H_

#include <optional>
#include <string>

#include "agent/agent_options.h"
#include "agent/replica_session.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/wal_source.h"
#include "common/metrics.h"
#include "proto/walship.grpc.pb.h"

namespace walship::agent {

// Session runs on gRPC's callback API (see SessionReactor in the .cc): the
// thread that reads an acknowledgement off the connection also handles it,
// instead of handing it to a reader thread blocked in a synchronous Read.
class ControlServiceImpl final
    : public walship::v1::Control::WithCallbackMethod_Session<walship::v1::Control::Service> {
 public:
  ControlServiceImpl(const AgentOptions& options, const WalSource& source,
                     const SegmentCatalog& catalog, SegmentChecksums& checksums,
                     SessionRegistry& registry, const uint16_t& data_port,
                     MetricsRegistry* metrics = nullptr);

  grpc::Status Handshake(grpc::ServerContext* ctx,
                         const walship::v1::HandshakeRequest* req,
                         walship::v1::HandshakeResponse* resp) override;
  grpc::ServerBidiReactor<walship::v1::SessionRequest, walship::v1::SessionEvent>* Session(
      grpc::CallbackServerContext* ctx) override;
  grpc::Status Status(grpc::ServerContext* ctx, const walship::v1::StatusRequest* req,
                      walship::v1::StatusResponse* resp) override;

 private:
  friend class SessionReactor;

  // Where shipping starts for a replica durable at `durable`, or why not.
  absl::StatusOr<Position> StartPosition(const walship::v1::HandshakeRequest& req);
  // With mutual TLS: OK when `replica_name` is a name the caller's
  // (verified) client certificate carries, else PERMISSION_DENIED saying so.
  // Plaintext: always OK.
  grpc::Status CheckIdentity(const grpc::ServerContextBase& ctx,
                             const std::string& replica_name) const;
  // Counts a refused handshake by reason (when metrics are on).
  void CountRefusal(const std::string& reason);

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
};

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_CONTROL_SERVICE_H_
