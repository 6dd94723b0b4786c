// control_client.h: the replica's side of the gRPC control protocol.
//
// A ControlClient holds the channel to the agent (walship.v1.Control) for
// one session. Handshake() presents the stream identity, the durable
// position with the CRC32C of the durable prefix, and the complete segments
// this destination holds; OpenSession() then opens the bidirectional Session
// stream that carries acknowledgements to the agent and checkpoints,
// acknowledgement pacing, heartbeats and errors back (the Session class reads
// and writes it).
//
// Tail negotiation (NegotiateHandshake): bytes of NAME.partial past the
// recorded position, received before the last stop and never recorded
// (SegmentWriter::tail()), are presented first, as `durable_unrecorded`. The
// agent's prefix check confirms them byte for byte (CRC32C):
//   - accepted: the tail is kept (resolve(true)) and becomes the durable
//     point;
//   - refused with REASON_DIVERGENT (proof that they differ from the
//     source's bytes): the tail is cut off (resolve(false)) and the recorded
//     position is presented in a second handshake;
//   - refused for any other reason (a gap, a source not ready or not a
//     primary, a wrong stream): the tail is left as it is (acknowledged
//     bytes may be among it) and the refusal ends the session.
// Without a tail, the recorded position is presented once.
//
// Statuses: a refusal keeps the agent's code and typed reason (FromGrpc),
// prefixed "handshake with AGENT"; a deadline that passed becomes
// kUnavailable (retry); an agent speaking another protocol version or
// serving another stream than the destination holds is kFailedPrecondition
// (an operator must act). An error of resolve() is returned as it is.
//
// Ownership and threads: the options are borrowed and must outlive the
// client. Handshake() and OpenSession() are called on the session's
// opening thread, one at a time; the stream OpenSession() returns belongs to
// the caller, with the ClientContext it passed.
#ifndef WALSHIP_REPLICA_CONTROL_CLIENT_H_
#define WALSHIP_REPLICA_CONTROL_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/sys/syscalls.h"
#include "proto/walship.grpc.pb.h"
#include "replica/replica_options.h"
#include "replica/segment_writer.h"
#include "replica/state_store.h"

namespace walship::replica {

// One handshake call: presents `at` (`unrecorded`: the bytes up to it were
// never recorded) and fills `out` with the agent's answer.
using HandshakeCall = std::function<grpc::Status(
    const DurablePoint& at, bool unrecorded, walship::v1::HandshakeResponse* out)>;
// Keeps (true) or cuts off (false) the tail (SegmentWriter::ResolveTail).
using ResolveTailFn = std::function<absl::Status(bool keep)>;

// What a successful handshake settled.
struct Negotiated {
  walship::v1::HandshakeResponse response;
  // Where the session resumes: the tail if the agent confirmed it, else the
  // recorded point.
  DurablePoint durable;
};

// The handshake with its tail negotiation (see the top of this file), over
// `call`. `recorded`: the durable point walship.state names; `tail`: the
// point the unrecorded bytes reach, if any; `stream_id`: the stream the
// destination holds (empty: none yet). `options` names the agent and the
// destination in messages. Logs what it keeps or discards.
absl::StatusOr<Negotiated> NegotiateHandshake(const ReplicaOptions& options,
                                              const std::string& stream_id,
                                              const DurablePoint& recorded,
                                              const std::optional<DurablePoint>& tail,
                                              const HandshakeCall& call,
                                              const ResolveTailFn& resolve);

class ControlClient {
 public:
  using SessionStream =
      grpc::ClientReaderWriter<walship::v1::SessionRequest, walship::v1::SessionEvent>;

  // Parses the agent's address (kInvalidArgument) and builds the channel
  // (no connection yet). TLS files that no longer load are kUnavailable:
  // they were checked at start-up, so a rotation is in progress. Call
  // deadlines are read from `clock`; the TLS files are read through `sys`.
  static absl::StatusOr<std::unique_ptr<ControlClient>> Create(sys::SysCalls& sys,
                                                               const ReplicaOptions& options,
                                                               Clock& clock = DefaultClock());

  // The agent's control address; its host is the data socket's default.
  const HostPort& agent() const { return agent_; }

  // NegotiateHandshake over the channel: each call carries `held` and the
  // transport, with a deadline of connect_timeout.
  absl::StatusOr<Negotiated> Handshake(const std::string& stream_id, const DurablePoint& recorded,
                                       const std::optional<DurablePoint>& tail,
                                       const std::vector<HeldCopy>& held,
                                       const ResolveTailFn& resolve);

  // Opens the Session stream under `ctx` (cancel it to unblock a Read).
  std::unique_ptr<SessionStream> OpenSession(grpc::ClientContext* ctx);
  // Opens a Session stream for acknowledgements alone, on a connection of
  // its own: gRPC reads what arrives on a connection on whichever thread
  // waits on it, and the agent answers every acknowledgement (HTTP/2 flow
  // control), which would wake the thread waiting for events.
  std::unique_ptr<SessionStream> OpenAckSession(grpc::ClientContext* ctx);

 private:
  ControlClient(const ReplicaOptions& options, HostPort agent,
                std::unique_ptr<walship::v1::Control::Stub> stub,
                std::unique_ptr<walship::v1::Control::Stub> ack_stub, Clock& clock)
      : clock_(clock),
        options_(options),
        agent_(std::move(agent)),
        stub_(std::move(stub)),
        ack_stub_(std::move(ack_stub)) {}

  grpc::Status Call(const std::string& stream_id, const std::vector<HeldCopy>& held,
                    const DurablePoint& at, bool unrecorded,
                    walship::v1::HandshakeResponse* out);

  Clock& clock_;

  const ReplicaOptions& options_;
  const HostPort agent_;
  const std::unique_ptr<walship::v1::Control::Stub> stub_;
  const std::unique_ptr<walship::v1::Control::Stub> ack_stub_;  // its own connection
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_CONTROL_CLIENT_H_
