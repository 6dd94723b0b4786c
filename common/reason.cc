#include "common/reason.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace walship {
namespace {
constexpr char kReasonUrl[] = "type.walship.dev/walship.Reason";
constexpr Reason kLast = Reason::kNotLeader;
}  // namespace

absl::Status WithReason(absl::Status s, Reason reason) {
  if (s.ok()) return s;
  s.SetPayload(kReasonUrl, absl::Cord(std::to_string(static_cast<int>(reason))));
  return s;
}

Reason ReasonOf(const absl::Status& s) {
  absl::optional<absl::Cord> p = s.GetPayload(kReasonUrl);
  if (!p.has_value()) return Reason::kUnspecified;
  int v = 0;
  if (!absl::SimpleAtoi(std::string(*p), &v)) return Reason::kUnspecified;
  return ReasonFromInt(v);
}

Reason ReasonFromInt(int value) {
  if (value < 0 || value > static_cast<int>(kLast)) return Reason::kUnspecified;
  return static_cast<Reason>(value);
}

absl::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kUnspecified: return "unspecified";
    case Reason::kDivergent: return "divergent";
    case Reason::kGap: return "gap";
    case Reason::kWrongStream: return "wrong_stream";
    case Reason::kNotPrimary: return "not_primary";
    case Reason::kNotReady: return "not_ready";
    case Reason::kSourceBehind: return "source_behind";
    case Reason::kSourceFailed: return "source_failed";
    case Reason::kDamagedCopy: return "damaged_copy";
    case Reason::kSourceChanged: return "source_changed";
    case Reason::kChecksum: return "checksum";
    case Reason::kOlderTimeline: return "older_timeline";
    case Reason::kDataTlsMismatch: return "data_tls_mismatch";
    case Reason::kPatchUnsupported: return "patch_unsupported";
    case Reason::kNotLeader: return "not_leader";
  }
  return "unspecified";
}

}  // namespace walship
