// data_port_tls.h: TLS on the agent's data port, before the HELLO.
//
// With --data-tls=on every connection the data port accepts runs a TLS
// handshake (common/net/tls_conn.h) on the data server's event loop, one
// non-blocking step per readiness, within the same whole-HELLO deadline.
// When it completes, the client's certificate is judged as the control
// channel judges it (ClientCertVerifier: chains to --tls-ca, for client use,
// valid now); then the HELLO is read inside TLS, and its session admits the
// socket only if the certificate is the one that performed the session's
// gRPC handshake (ReplicaSession::CheckIdentity), before its token is
// looked at. Every refusal happens before the agent sends a byte of WAL.
//
// Refusals (DataServerOptions::on_reject labels): "tls_handshake" (not TLS,
// or the handshake failed), "no_client_certificate",
// "untrusted_certificate", "wrong_identity".
#ifndef WALSHIP_AGENT_DATA_PORT_TLS_H_
#define WALSHIP_AGENT_DATA_PORT_TLS_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "agent/data_port_limits.h"
#include "common/net/tls_conn.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"
#include "proto/walship.pb.h"

namespace walship::agent {

// What the data port needs for TLS; both set, or both null (plaintext).
struct DataPortTls {
  std::shared_ptr<net::DataTlsContext> context;
  std::shared_ptr<ClientCertVerifier> verifier;
  bool on() const { return context != nullptr; }
};

// The data port's TLS for --data-tls (resolved from `tls` and `data_tls_on`):
// a server context and a verifier of client certificates on the control
// channel's CA bundle, or nothing for a plaintext data port. Logs the choice
// (and warns when the control channel is TLS but the data socket is not).
absl::StatusOr<DataPortTls> MakeDataPortTls(sys::SysCalls& sys, Clock& clock,
                                            const TlsOptions& tls, bool data_tls_on);

// Begins TLS on the accepted connection `p` (sets p.tls).
absl::Status StartTls(sys::SysCalls& sys, const DataPortTls& tls, PendingHello& p);

// One step of `p`'s handshake. OK with p.tls_ready once it completed and the
// certificate is accepted (p.fingerprint set); OK without it while it waits
// (p.want_write says for what). A refusal sets p.refusal and returns why
// (kUnavailable for the handshake, kUnauthenticated for the certificate).
absl::Status AdvanceTls(const DataPortTls& tls, PendingHello& p);

// The handshake's agreement (wire_format.md, "TLS on the data socket"): OK
// when the replica's `asked` matches this agent's `data_tls_on` (an
// unspecified choice, from a replica too old to know it, means plaintext);
// otherwise kFailedPrecondition with Reason::kDataTlsMismatch saying which
// side to change.
absl::Status CheckDataTlsChoice(bool data_tls_on, walship::v1::DataTls asked);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_DATA_PORT_TLS_H_
