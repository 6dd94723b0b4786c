// Tests for common/commit_trace.h: the file format, the ring's bound, and
// the dump through the syscall seam.
#include "common/commit_trace.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/sys/file_util.h"
#include "common/sys/syscalls.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/temp_dir.h"

namespace walship {
namespace {

using ::walship::testing::FakeClock;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(CommitTraceTest, RecordsStageSegmentAndOffsetOnTheMonotonicClock) {
  FakeClock clock(absl::FromUnixNanos(1000));
  CommitTrace trace(8, clock);
  trace.Record(TraceStage::kFeed, "000000010000000000000003", 8192);
  clock.Advance(absl::Nanoseconds(250));
  trace.Record(TraceStage::kSent, "000000010000000000000003", 8192);
  clock.Advance(absl::Nanoseconds(5));
  trace.Record(TraceStage::kStatus, "000000010000000000000003", 16384);
  EXPECT_EQ(trace.Text(),
            "1000 feed 000000010000000000000003 8192\n"
            "1250 sent 000000010000000000000003 8192\n"
            "1255 status 000000010000000000000003 16384\n");
  EXPECT_EQ(trace.recorded(), 3u);
  EXPECT_EQ(trace.dropped(), 0u);
}

TEST(CommitTraceTest, EveryStageHasItsOwnName) {
  const std::vector<std::string> want = {"feed",     "sent",     "header", "spliced",
                                         "verified", "synced",   "ack_sent", "ack",
                                         "status",   "ack_written"};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(TraceStageName(static_cast<TraceStage>(i)), want[i]);
  }
}

TEST(CommitTraceTest, AFullRingKeepsTheNewestRecordsOldestFirst) {
  FakeClock clock(absl::FromUnixNanos(0));
  CommitTrace trace(3, clock);
  for (int i = 1; i <= 5; ++i) {
    clock.Advance(absl::Nanoseconds(1));
    trace.Record(TraceStage::kSynced, "seg", static_cast<uint64_t>(i));
  }
  EXPECT_EQ(trace.Text(), "3 synced seg 3\n4 synced seg 4\n5 synced seg 5\n");
  EXPECT_EQ(trace.recorded(), 5u);
  EXPECT_EQ(trace.dropped(), 2u);
}

TEST(CommitTraceTest, CutsLongSegmentNames) {
  FakeClock clock(absl::FromUnixNanos(7));
  CommitTrace trace(2, clock);
  const std::string name(CommitTrace::kMaxSegmentName + 10, 'x');
  trace.Record(TraceStage::kHeader, name, 1);
  EXPECT_EQ(trace.Text(),
            "7 header " + std::string(CommitTrace::kMaxSegmentName, 'x') + " 1\n");
}

TEST(CommitTraceTest, ConcurrentRecordsAreAllKept) {
  CommitTrace trace(4000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&trace, t] {
      for (int i = 0; i < 1000; ++i) {
        trace.Record(t % 2 ? TraceStage::kAck : TraceStage::kSent, "seg",
                     static_cast<uint64_t>(i));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(Lines(trace.Text()).size(), 4000u);
  EXPECT_EQ(trace.dropped(), 0u);
}

TEST(CommitTraceTest, DumpWritesTheTextToTheFile) {
  const std::string dir = walship::testing::FreshTempDir("commit_trace_dump");
  FakeClock clock(absl::FromUnixNanos(42));
  CommitTrace trace(4, clock);
  trace.Record(TraceStage::kAckSent, "seg", 99);
  sys::SysCalls& sys = sys::DefaultSysCalls();
  const std::string path = dir + "/trace.txt";
  ASSERT_TRUE(trace.Dump(sys, path).ok());
  absl::StatusOr<std::string> got = sys::ReadFileToString(sys, path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "42 ack_sent seg 99\n");
}

TEST(CommitTraceTest, DumpIntoAMissingDirectoryFailsWithNotFound) {
  const std::string dir = walship::testing::FreshTempDir("commit_trace_missing");
  CommitTrace trace(4);
  absl::Status s = trace.Dump(sys::DefaultSysCalls(), dir + "/none/trace.txt");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

}  // namespace
}  // namespace walship
