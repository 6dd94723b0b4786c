#include "common/rpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "proto/walship.pb.h"

namespace walship {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const Reason reason = ReasonOf(s);
  std::string details;
  if (reason != Reason::kUnspecified) {
    walship::v1::Refusal r;
    r.set_reason(static_cast<walship::v1::Reason>(reason));
    r.SerializeToString(&details);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()),
                      details);
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()),
                   what.empty() ? s.error_message() : absl::StrCat(what, ": ", s.error_message()));
  walship::v1::Refusal r;
  if (!s.error_details().empty() && r.ParseFromString(s.error_details())) {
    out = WithReason(std::move(out), ReasonFromInt(static_cast<int>(r.reason())));
  }
  return out;
}

}  // namespace walship
