// DestLock: one replica per destination directory.
#include "replica/dest_lock.h"

#include <unistd.h>

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

TEST(DestLockTest, ASecondHolderIsRefusedNamingTheFirst) {
  const std::string dir = testing::FreshTempDir("dest-lock");
  sys::SysCalls& sys = sys::DefaultSysCalls();
  std::optional<absl::StatusOr<DestLock>> first(DestLock::Acquire(sys, dir));
  ASSERT_TRUE(first->ok()) << first->status();
  absl::StatusOr<DestLock> second = DestLock::Acquire(sys, dir);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("pid ", getpid())))
      << second.status();
  // Released with its holder (a crash releases it too): a restart gets it.
  first.reset();
  EXPECT_TRUE(DestLock::Acquire(sys, dir).ok());
}

// getpid answers what a test says.
class PidSysCalls : public sys::RealSysCalls {
 public:
  explicit PidSysCalls(pid_t pid) : pid_(pid) {}
  sys::SysResult Getpid() override { return {pid_, 0}; }

 private:
  const pid_t pid_;
};

TEST(DestLockTest, TheLockFileHoldsTheHoldersPidOnOneLine) {
  const std::string dir = testing::FreshTempDir("dest-lock-pid");
  PidSysCalls holder(4242);
  absl::StatusOr<DestLock> first = DestLock::Acquire(holder, dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(testing::ReadFile(absl::StrCat(dir, "/", kLockFileName)), "4242\n");
  PidSysCalls other(99);
  absl::StatusOr<DestLock> second = DestLock::Acquire(other, dir);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                absl::StrCat("another walship-replica (pid 4242) is already "
                                             "following into ", dir)))
      << second.status();
}

}  // namespace
}  // namespace walship::replica
