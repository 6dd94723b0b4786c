// data_tls.h: the replica's end of TLS on the data socket.
//
// After the handshake (whose response says what the agent runs, checked by
// CheckAgentDataTls), the session connects the data socket and opens it with
// OpenDataConn: plaintext (the session's transport), or, with --data-tls=on,
// a TLS session (common/net/tls_conn.h) verifying the agent's certificate
// like the control channel, inside which the HELLO and all frames travel.
// The chosen path (DataPathName: "ktls", "userspace", "off") is logged,
// counted (walship_replica_data_sessions_total{path}) and sent in
// SessionOpen for the agent's status.
#ifndef WALSHIP_REPLICA_DATA_TLS_H_
#define WALSHIP_REPLICA_DATA_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/net/data_conn.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "proto/walship.pb.h"
#include "replica/replica_options.h"

namespace walship::replica {

// OK when the agent's answer matches our --data-tls; otherwise
// kFailedPrecondition with Reason::kDataTlsMismatch (an agent too old to
// know TLS on the data socket answers UNSPECIFIED: it would read our token
// and send WAL in plaintext, so a replica with TLS on refuses it).
absl::Status CheckAgentDataTls(bool data_tls_on, walship::v1::DataTls agent_says,
                               const std::string& agent);

// The data connection over the connected socket `fd` (borrowed) to `host`.
// With TLS, runs the handshake (each wait bounded by io.io_timeout):
// kUnauthenticated when the agent's certificate is not accepted,
// kUnavailable when the agent is unreachable or closes.
absl::StatusOr<std::unique_ptr<net::DataConn>> OpenDataConn(sys::SysCalls& sys, Clock& clock,
                                                            const ReplicaOptions& options,
                                                            int fd, const std::string& host,
                                                            const sys::TransferOptions& io);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_DATA_TLS_H_
