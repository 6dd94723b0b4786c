// Copyright walship authors.

#include "common/sys/unique_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include "gtest/gtest.h"

namespace walship {
namespace sys {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// Each call gives a fresh descriptor the test owns.
int NewFd() {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd other(fds[1]);  // Only one end is needed.
  return fds[0];
}

TEST(UniqueFdTest, DefaultIsEmpty) {
  UniqueFd fd;
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(fd.get(), -1);
}

TEST(UniqueFdTest, NegativeValuesNormalizeToMinusOne) {
  UniqueFd fd(-42);
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(fd.get(), -1);
}

TEST(UniqueFdTest, DestructorCloses) {
  const int raw = NewFd();
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, MoveConstructionTransfersOwnership) {
  const int raw = NewFd();
  UniqueFd a(raw);
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), raw);
  EXPECT_TRUE(IsOpen(raw));
}

TEST(UniqueFdTest, MoveAssignmentClosesTheOldDescriptor) {
  const int first = NewFd();
  const int second = NewFd();
  UniqueFd a(first);
  UniqueFd b(second);
  a = std::move(b);
  EXPECT_FALSE(IsOpen(first));
  EXPECT_EQ(a.get(), second);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
}

TEST(UniqueFdTest, SelfMoveAssignmentKeepsTheDescriptor) {
  const int raw = NewFd();
  UniqueFd a(raw);
  UniqueFd& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.get(), raw);
  EXPECT_TRUE(IsOpen(raw));
}

TEST(UniqueFdTest, ReleaseGivesUpOwnershipWithoutClosing) {
  const int raw = NewFd();
  int released;
  {
    UniqueFd fd(raw);
    released = fd.release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_EQ(released, raw);
  EXPECT_TRUE(IsOpen(raw));
  UniqueFd cleanup(raw);
}

TEST(UniqueFdTest, ResetClosesAndAdopts) {
  const int first = NewFd();
  const int second = NewFd();
  UniqueFd fd(first);
  fd.reset(second);
  EXPECT_FALSE(IsOpen(first));
  EXPECT_EQ(fd.get(), second);
  fd.reset();
  EXPECT_FALSE(IsOpen(second));
  EXPECT_FALSE(fd.valid());
}

TEST(UniqueFdTest, ResetToTheSameDescriptorDoesNotCloseIt) {
  const int raw = NewFd();
  UniqueFd fd(raw);
  fd.reset(raw);
  EXPECT_TRUE(IsOpen(raw));
  EXPECT_EQ(fd.get(), raw);
}

TEST(UniqueFdTest, CloseReportsAndEmpties) {
  const int raw = NewFd();
  UniqueFd fd(raw);
  EXPECT_EQ(fd.Close(), 0);
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(IsOpen(raw));
  EXPECT_EQ(fd.Close(), EBADF);
}

}  // namespace
}  // namespace sys
}  // namespace walship
