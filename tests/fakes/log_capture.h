// log_capture.h: what the code under test logged through spdlog.
#ifndef WALSHIP_TESTS_FAKES_LOG_CAPTURE_H_
#define WALSHIP_TESTS_FAKES_LOG_CAPTURE_H_

#include <memory>
#include <string>

#include "spdlog/sinks/ringbuffer_sink.h"

namespace walship::testing {

// While alive, keeps the default logger's last lines (besides its usual
// output). Create and destroy it on the test's thread; Logged() may be
// called while other threads log.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // True when one captured line contains `needle` and, if given, `also`.
  bool Logged(const std::string& needle, const std::string& also = "") const;

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_LOG_CAPTURE_H_
