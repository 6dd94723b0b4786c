// Publisher and HelperPool (replica/publisher.h) on their own; publication
// under crashes is tested through SegmentWriter (segment_writer_test.cc).
#include "replica/publisher.h"

#include <fcntl.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/sys/file_util.h"
#include "common/sys/syscalls.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "replica/state_store.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

using testing::FreshTempDir;
using testing::ReadFile;
using testing::WriteFile;

SegmentSum SumOf(const std::string& bytes) {
  return SegmentSum{bytes.size(), wire::Crc32c(bytes.data(), bytes.size())};
}

// Job 0 returns only once job 1 has begun: the jobs run at the same time.
TEST(HelperPoolTest, RunsTheJobsAtOnce) {
  HelperPool pool;
  absl::Mutex mu;
  bool second_started = false;
  std::vector<std::function<absl::Status()>> jobs;
  jobs.push_back([&] {
    absl::MutexLock lock(&mu);
    // Bounded: a pool that ran the jobs one after the other lands here with
    // job 1 not begun, and the test fails after 10 s.
    mu.AwaitWithTimeout(absl::Condition(&second_started), absl::Seconds(10));
    return second_started ? absl::OkStatus() : absl::DeadlineExceededError("ran in turn");
  });
  jobs.push_back([&] {
    absl::MutexLock lock(&mu);
    second_started = true;
    return absl::OkStatus();
  });
  EXPECT_TRUE(pool.RunAtOnce(std::move(jobs)).ok());
}

// After a failure every job still runs to its end, and the first error in
// job order is returned; the pool is reused by the next call.
TEST(HelperPoolTest, WaitsForAllAndReturnsTheFirstErrorInJobOrder) {
  HelperPool pool;
  EXPECT_TRUE(pool.RunAtOnce({}).ok());
  for (int round = 0; round < 3; ++round) {
    std::vector<int> ran(4, 0);
    std::vector<std::function<absl::Status()>> jobs;
    jobs.push_back([&] {
      ran[0] = 1;
      return absl::OkStatus();
    });
    jobs.push_back([&] {
      ran[1] = 1;
      return absl::DataLossError("second");
    });
    jobs.push_back([&] {
      ran[2] = 1;
      return absl::UnavailableError("third");
    });
    jobs.push_back([&] {
      ran[3] = 1;
      return absl::OkStatus();
    });
    absl::Status s = pool.RunAtOnce(std::move(jobs));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(ran, std::vector<int>({1, 1, 1, 1}));
  }
}

TEST(PublisherTest, VerifySegmentFileTellsSizeAndContentApart) {
  sys::SysCalls& sys = sys::DefaultSysCalls();
  const std::string dir = FreshTempDir("publisher-verify");
  WriteFile(dir + "/seg-1.partial", "abcdef");
  EXPECT_TRUE(VerifySegmentFile(sys, dir, "seg-1", SumOf("abcdef"), true).ok());
  EXPECT_EQ(VerifySegmentFile(sys, dir, "seg-1", SumOf("abcde"), true).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(VerifySegmentFile(sys, dir, "seg-1", SumOf("abcdeg"), true).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(VerifySegmentFile(sys, dir, "seg-1", SumOf("abcdef"), false).code(),
            absl::StatusCode::kNotFound);
}

TEST(PublisherTest, SumLineThenRenamePublishes) {
  sys::SysCalls& sys = sys::DefaultSysCalls();
  const std::string dir = FreshTempDir("publisher-publish");
  WriteFile(dir + "/seg-1.partial", "abcdef");
  Publisher p(sys, dir, /*drop_behind=*/false);
  const SegmentSum sum = SumOf("abcdef");
  ASSERT_TRUE(p.AppendSum("seg-1", sum.length, sum.crc32c).ok());
  ASSERT_TRUE(p.Rename("seg-1").ok());
  ASSERT_TRUE(p.SyncDir().ok());
  EXPECT_EQ(ReadFile(dir + "/seg-1"), "abcdef");
  EXPECT_EQ(ReadFile(dir + "/walship.sums"), SegmentSumLine("seg-1", sum.length, sum.crc32c));
  std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys, dir);
  ASSERT_EQ(sums.count("seg-1"), 1u);
  EXPECT_EQ(sums["seg-1"].crc32c, sum.crc32c);
  EXPECT_EQ(p.Rename("seg-1").code(), absl::StatusCode::kNotFound);
}

TEST(PublisherTest, QueuesPagesToDropOnlyWithDropBehind) {
  sys::SysCalls& sys = sys::DefaultSysCalls();
  const std::string dir = FreshTempDir("publisher-drop");
  WriteFile(dir + "/seg-1", std::string(3 << 20, 'x'));
  for (bool drop_behind : {false, true}) {
    Publisher p(sys, dir, drop_behind);
    auto fd = sys::OpenFile(sys, dir + "/seg-1", O_RDONLY);
    ASSERT_TRUE(fd.ok()) << fd.status();
    p.QueueDrop(std::make_shared<sys::UniqueFd>(std::move(*fd)), "seg-1");
    EXPECT_EQ(p.HasPagesToDrop(), drop_behind);
    p.DropPublishedPages();
    EXPECT_FALSE(p.HasPagesToDrop());
  }
}

}  // namespace
}  // namespace walship::replica
