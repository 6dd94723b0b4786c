#include "agent/format_options.h"

#include "absl/strings/str_cat.h"

namespace walship::agent {

absl::Status OnlyForFormat(absl::string_view flag, absl::string_view format,
                           absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " is only for --format=", format,
                                                 why.empty() ? "" : " (", why,
                                                 why.empty() ? "" : ")"));
}

}  // namespace walship::agent
