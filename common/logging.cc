#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace walship {
namespace {

// Whatever logs before InitLogging (a warning while flags are read) goes to
// stderr too.
const bool kDefaultLoggerOnStderr = [] {
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  return true;
}();

}  // namespace

absl::Status InitLogging(absl::string_view program, absl::string_view level) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level \"", level, "\": use trace, debug, info, warn or error"));
  }
  auto logger = spdlog::stderr_logger_mt(std::string(program));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %n %l %v", spdlog::pattern_time_type::utc);
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

}  // namespace walship
