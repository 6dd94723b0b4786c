// logging.h: process-wide spdlog set-up for the walship binaries.
#ifndef WALSHIP_COMMON_LOGGING_H_
#define WALSHIP_COMMON_LOGGING_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace walship {

// Logs to stderr as "<time> <program> <level> <message>". `level` is one of
// trace, debug, info, warn, error; kInvalidArgument otherwise.
absl::Status InitLogging(absl::string_view program, absl::string_view level);

}  // namespace walship

#endif  // WALSHIP_COMMON_LOGGING_H_
