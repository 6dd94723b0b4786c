#include "agent/stream_order.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/reason.h"

namespace walship::agent {

absl::Status StreamOrder::CheckNext(const std::string& prev, const std::string& next) const {
  std::optional<std::string> expected = source_.Successor(prev);
  const char* by = "by the source's naming rule";
  if (!expected.has_value()) {
    expected = catalog_.PublishedAfter(prev);
    by = "by the segments the agent has seen";
  }
  if (!expected.has_value()) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "gap: cannot prove that no segment is missing between ", prev, " and ", next,
            ": the agent never saw what followed ", prev,
            " and segment names carry no sequence number (see --segment-pattern)")),
        Reason::kGap);
  }
  if (*expected == next) return absl::OkStatus();
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        "gap: segment ", *expected, " (after ", prev, ", ", by,
                        ") is missing from the WAL directory; the next one there is ", next,
                        "; rebuild the replica from a newer base")),
                    Reason::kGap);
}

}  // namespace walship::agent
