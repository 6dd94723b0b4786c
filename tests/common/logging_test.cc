// Logs go to stderr, never stdout, before and after InitLogging.
#include "common/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "tests/fakes/temp_dir.h"

namespace walship {
namespace {

// While alive, what the process writes to descriptor `fd` goes to a file;
// Take() restores the descriptor and returns what was written.
class FdCapture {
 public:
  FdCapture(int fd, const std::string& path) : fd_(fd), path_(path) {
    std::fflush(nullptr);
    saved_ = dup(fd);
    int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    dup2(file, fd);
    close(file);
  }
  ~FdCapture() { Restore(); }

  std::string Take() {
    Restore();
    return testing::ReadFile(path_);
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    dup2(saved_, fd_);
    close(saved_);
    saved_ = -1;
  }

  int fd_;
  std::string path_;
  int saved_ = -1;
};

void ExpectOnStderrOnly(const std::string& message) {
  std::string dir = testing::FreshTempDir("logging");
  FdCapture out(STDOUT_FILENO, dir + "/stdout");
  FdCapture err(STDERR_FILENO, dir + "/stderr");
  spdlog::warn("{}", message);
  std::string on_err = err.Take();
  std::string on_out = out.Take();
  EXPECT_EQ(on_out, "") << "logged on stdout";
  EXPECT_NE(on_err.find(message), std::string::npos) << on_err;
}

// Runs first (tests run in the order they are defined).
TEST(LoggingTest, LogsGoToStderrBeforeInitLogging) {
  ExpectOnStderrOnly("a warning before InitLogging");
}

TEST(LoggingTest, LogsGoToStderrAfterInitLogging) {
  ASSERT_TRUE(InitLogging("logging_test", "info").ok());
  ExpectOnStderrOnly("a warning after InitLogging");
  EXPECT_EQ(InitLogging("logging_test2", "loud").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walship
