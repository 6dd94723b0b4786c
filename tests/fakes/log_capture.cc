#include "tests/fakes/log_capture.h"

#include <algorithm>

#include "spdlog/spdlog.h"

namespace walship::testing {

LogCapture::LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(200)) {
  spdlog::default_logger()->sinks().push_back(sink_);
}

LogCapture::~LogCapture() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

bool LogCapture::Logged(const std::string& needle, const std::string& also) const {
  for (const std::string& line : sink_->last_formatted()) {
    if (line.find(needle) != std::string::npos &&
        (also.empty() || line.find(also) != std::string::npos)) {
      return true;
    }
  }
  return false;
}

}  // namespace walship::testing
