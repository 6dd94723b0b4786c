// logging.h: process-wide spdlog set-up for the walship binaries.
//
// Every log line of every walship binary goes to stderr; stdout carries only
// the output a command was asked for (walship-status --json, --help,
// --print-config). spdlog's own default logger writes to stdout, so linking
// this library replaces it, before main() runs, with one that writes to
// stderr; InitLogging then sets the program name, format and level. A
// binary that logs must depend on this library and call InitLogging.
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
