// Copyright walship authors.

#include "common/sys/pipe.h"

#include <errno.h>
#include <fcntl.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace walship {
namespace sys {
namespace {

TEST(PipeTest, CreatesCloexecPipeWithRequestedCapacity) {
  absl::StatusOr<Pipe> pipe = Pipe::Create(DefaultSysCalls(), 1 << 20);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  EXPECT_EQ(pipe->capacity(), 1u << 20);
  EXPECT_EQ(::fcntl(pipe->write_fd(), F_GETPIPE_SZ), 1 << 20);
  EXPECT_TRUE(::fcntl(pipe->read_fd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(::fcntl(pipe->write_fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(PipeTest, ZeroKeepsTheDefault) {
  absl::StatusOr<Pipe> pipe = Pipe::Create(DefaultSysCalls(), 0);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  EXPECT_EQ(static_cast<int>(pipe->capacity()),
            ::fcntl(pipe->write_fd(), F_GETPIPE_SZ));
}

// Refuses to resize pipes, as the kernel does above pipe-max-size for an
// unprivileged process.
class NoResizeSysCalls : public RealSysCalls {
 public:
  SysResult Fcntl(int fd, int cmd, long arg) override {  // NOLINT
    if (cmd == F_SETPIPE_SZ) return SysResult{-1, EPERM};
    return RealSysCalls::Fcntl(fd, cmd, arg);
  }
};

TEST(PipeTest, RefusedResizeKeepsDefaultAndReportsRealCapacity) {
  NoResizeSysCalls sys;
  absl::StatusOr<Pipe> pipe = Pipe::Create(sys, 1 << 20);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  EXPECT_EQ(static_cast<int>(pipe->capacity()),
            ::fcntl(pipe->write_fd(), F_GETPIPE_SZ));
  EXPECT_LT(pipe->capacity(), 1u << 20);
}

class NoPipeSysCalls : public RealSysCalls {
 public:
  SysResult Pipe2(int* /*fds*/, int /*flags*/) override {
    return SysResult{-1, EMFILE};
  }
};

TEST(PipeTest, Pipe2FailureIsReported) {
  NoPipeSysCalls sys;
  EXPECT_EQ(Pipe::Create(sys, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(PipeTest, MoveKeepsTheDescriptors) {
  absl::StatusOr<Pipe> pipe = Pipe::Create(DefaultSysCalls(), 0);
  ASSERT_TRUE(pipe.ok());
  const int read_fd = pipe->read_fd();
  Pipe moved = std::move(*pipe);
  EXPECT_EQ(moved.read_fd(), read_fd);
  EXPECT_EQ(pipe->read_fd(), -1);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace sys
}  // namespace walship
