#include "common/transport.h"

#include "absl/strings/str_cat.h"

namespace walship {

absl::StatusOr<Transport> ParseTransport(absl::string_view text) {
  if (text == "zerocopy") return Transport::kZeroCopy;
  if (text == "copy") return Transport::kCopy;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown transport \"", text, "\": expected zerocopy or copy"));
}

const char* TransportName(Transport t) {
  return t == Transport::kZeroCopy ? "zerocopy" : "copy";
}

}  // namespace walship
