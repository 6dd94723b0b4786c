// rpc_status.h: absl::Status <-> grpc::Status, with the typed reason.
//
// A Status's code and message cross as gRPC's; its reason (common/reason.h)
// crosses as a serialized walship.v1.Refusal in the gRPC status details, so
// the replica reads why the agent refused a handshake without matching
// message text.
#ifndef WALSHIP_COMMON_RPC_STATUS_H_
#define WALSHIP_COMMON_RPC_STATUS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace walship {

// Same code and message; the reason, if any, in the details.
grpc::Status ToGrpc(const absl::Status& s);
// Same code; message "`what`: <message>" (just the message when `what` is
// empty); the reason from the details, if they hold a Refusal.
absl::Status FromGrpc(const grpc::Status& s, absl::string_view what = "");

}  // namespace walship

#endif  // WALSHIP_COMMON_RPC_STATUS_H_
