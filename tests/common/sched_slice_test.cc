// RequestThreadSlice: the calling thread's scheduler slice, read back from
// the kernel (/proc/thread-self/sched), its nice value and an operator's
// policy kept; the seam's failures and a kernel that ignores the request
// reported as such. RequestThreadFifo and CommitPathThread: SCHED_FIFO read
// back, never inherited, left for a backlog (slice and nice value kept) and
// taken again, a refusal warned once with the slice instead, an operator's
// policy kept.
#include "common/sched_slice.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/fakes/log_capture.h"

namespace walship {
namespace {

// The calling thread's slice in ns as the scheduler reports it ("se.slice"),
// or nullopt when this kernel reports none (before Linux 6.6).
std::optional<uint64_t> KernelSlice() {
  std::ifstream in("/proc/thread-self/sched");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l(line);
    if (!absl::ConsumePrefix(&l, "se.slice")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(l, ':');
    uint64_t ns = 0;
    if (parts.size() == 2 && absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[1]), &ns)) {
      return ns;
    }
  }
  return std::nullopt;
}

// Runs `fn` on a thread of its own, so that the test's thread keeps its
// scheduling.
void OnNewThread(const std::function<void()>& fn) { std::thread(fn).join(); }

TEST(SchedSliceTest, FlagValuesOutsideTheKernelsRangeAreRefused) {
  EXPECT_TRUE(ValidateSchedSlice(absl::ZeroDuration(), "s").ok());
  EXPECT_TRUE(ValidateSchedSlice(absl::Microseconds(100), "s").ok());
  EXPECT_TRUE(ValidateSchedSlice(absl::Milliseconds(100), "s").ok());
  for (absl::Duration bad : {absl::Microseconds(99), absl::Microseconds(100001),
                             absl::Microseconds(-5)}) {
    absl::Status s = ValidateSchedSlice(bad, "sched-slice-us");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--sched-slice-us"), absl::string_view::npos) << s;
  }
}

TEST(SchedSliceTest, TheThreadRunsWithTheSliceItAskedForAndOnlyIt) {
  if (!KernelSlice().has_value()) GTEST_SKIP() << "this kernel reports no slice";
  std::optional<uint64_t> before, after, started, other;
  absl::Status s;
  OnNewThread([&] {
    before = KernelSlice();
    s = RequestThreadSlice(sys::DefaultSysCalls(), absl::Microseconds(150));
    after = KernelSlice();
    OnNewThread([&] { started = KernelSlice(); });
  });
  OnNewThread([&] { other = KernelSlice(); });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(before, 150000u);
  EXPECT_EQ(after, 150000u);
  EXPECT_EQ(other, before) << "another thread's slice changed";
  EXPECT_EQ(started, before) << "a thread it started inherited the slice";
}

TEST(SchedSliceTest, TheNiceValueIsKept) {
  if (!KernelSlice().has_value()) GTEST_SKIP() << "this kernel reports no slice";
  int nice_after = 0;
  absl::Status s;
  OnNewThread([&] {
    // Lowering one's own priority needs no privilege.
    ASSERT_EQ(setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 7), 0);
    s = RequestThreadSlice(sys::DefaultSysCalls(), absl::Microseconds(100));
    nice_after = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(nice_after, 7);
}

TEST(SchedSliceTest, AThreadUnderAnotherPolicyIsLeftAlone) {
  if (!KernelSlice().has_value()) GTEST_SKIP() << "this kernel reports no slice";
  std::optional<uint64_t> before, after;
  int policy = -1;
  absl::Status s;
  OnNewThread([&] {
    sched_param p = {};
    ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &p), 0);
    before = KernelSlice();
    s = RequestThreadSlice(sys::DefaultSysCalls(), absl::Microseconds(100));
    after = KernelSlice();
    policy = sched_getscheduler(0);
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(policy, SCHED_IDLE);
  EXPECT_EQ(after, before);
}

// The real calls, with scripted answers where a test sets them.
class ScriptedSched : public sys::RealSysCalls {
 public:
  sys::SysResult SchedGetattr(sys::SchedAttr* attr) override {
    ++gets;
    sys::SysResult r = RealSysCalls::SchedGetattr(attr);
    if (r.ok() && gets > 1 && reported_runtime.has_value()) {
      attr->sched_runtime = *reported_runtime;
    }
    return r;
  }
  sys::SysResult SchedSetattr(const sys::SchedAttr* attr) override {
    ++sets;
    if (set_error != 0) return sys::SysResult{-1, set_error};
    if (fifo_error != 0 && attr->sched_policy == SCHED_FIFO) return sys::SysResult{-1, fifo_error};
    return RealSysCalls::SchedSetattr(attr);
  }
  int gets = 0;
  int sets = 0;
  int set_error = 0;
  int fifo_error = 0;  // for SCHED_FIFO requests only
  std::optional<uint64_t> reported_runtime;  // what the read-back shows
};

TEST(SchedSliceTest, ZeroAsksForNothing) {
  ScriptedSched sys;
  OnNewThread([&] { EXPECT_TRUE(RequestThreadSlice(sys, absl::ZeroDuration()).ok()); });
  EXPECT_EQ(sys.gets + sys.sets, 0);
}

TEST(SchedSliceTest, ARefusalIsTheSyscallsError) {
  ScriptedSched sys;
  sys.set_error = EPERM;
  absl::Status s;
  OnNewThread([&] { s = RequestThreadSlice(sys, absl::Microseconds(100)); });
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("sched_setattr"), absl::string_view::npos) << s;
}

TEST(SchedSliceTest, AKernelThatIgnoresTheRequestIsReportedUnimplemented) {
  ScriptedSched sys;
  sys.reported_runtime = 0;  // what kernels before 6.12 report for the normal policy
  absl::Status s;
  OnNewThread([&] { s = RequestThreadSlice(sys, absl::Microseconds(100)); });
  EXPECT_EQ(sys.sets, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

TEST(SchedSliceTest, ACommitPathThreadsRefusalIsAWarningOncePerProcess) {
  ScriptedSched sys;
  sys.set_error = EPERM;
  testing::LogCapture log;
  OnNewThread([&] { RequestCommitPathSlice(sys, absl::Microseconds(100), "ws-first"); });
  OnNewThread([&] { RequestCommitPathSlice(sys, absl::Microseconds(100), "ws-second"); });
  EXPECT_EQ(sys.sets, 2);
  EXPECT_TRUE(log.Logged("[warning] ws-first: cannot shorten", "Operation not permitted"));
  EXPECT_FALSE(log.Logged("[warning] ws-second"));
}

TEST(SchedFifoTest, FlagValuesOutsideThePrioritiesAreRefused) {
  EXPECT_TRUE(ValidateSchedFifoPriority(0, "p").ok());
  EXPECT_TRUE(ValidateSchedFifoPriority(1, "p").ok());
  EXPECT_TRUE(ValidateSchedFifoPriority(99, "p").ok());
  for (int64_t bad : {int64_t{-1}, int64_t{100}, int64_t{1} << 40}) {
    absl::Status s = ValidateSchedFifoPriority(bad, "sched-fifo-priority");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--sched-fifo-priority"), absl::string_view::npos) << s;
  }
}

// The calling thread's policy and real-time priority.
std::pair<int, int> Policy() {
  sched_param p = {};
  const int policy = sched_getscheduler(0) & ~SCHED_RESET_ON_FORK;
  sched_getparam(0, &p);
  return {policy, p.sched_priority};
}

// Whether this process may use SCHED_FIFO (root, CAP_SYS_NICE or
// RLIMIT_RTPRIO); the real-policy tests need it.
bool MayRunRealtime() {
  bool ok = false;
  OnNewThread([&] {
    sched_param p = {};
    p.sched_priority = 1;
    ok = sched_setscheduler(0, SCHED_FIFO, &p) == 0;
  });
  return ok;
}

TEST(SchedFifoTest, TheThreadRunsRealtimeAndThreadsItStartsDoNot) {
  if (!MayRunRealtime()) GTEST_SKIP() << "this process may not use SCHED_FIFO";
  std::pair<int, int> after, started, other;
  absl::Status s;
  OnNewThread([&] {
    s = RequestThreadFifo(sys::DefaultSysCalls(), 3);
    after = Policy();
    OnNewThread([&] { started = Policy(); });
  });
  OnNewThread([&] { other = Policy(); });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(after, std::make_pair(SCHED_FIFO, 3));
  EXPECT_EQ(started, std::make_pair(SCHED_OTHER, 0)) << "a thread it started inherited it";
  EXPECT_EQ(other, std::make_pair(SCHED_OTHER, 0)) << "another thread's policy changed";
}

TEST(SchedFifoTest, ABacklogLeavesTheRealtimePolicyWithTheSliceAndTheNiceValue) {
  if (!MayRunRealtime()) GTEST_SKIP() << "this process may not use SCHED_FIFO";
  ScriptedSched sys;
  std::pair<int, int> live, bulk, live_again;
  std::optional<uint64_t> bulk_slice;
  int bulk_nice = 0;
  int sets_after_start = 0, sets_after_bulk = 0, sets_after_live = 0;
  OnNewThread([&] {
    ASSERT_EQ(setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 4), 0);
    CommitPathThread t(sys, absl::Microseconds(150), 2, "ws-test");
    t.Start();
    live = Policy();
    sets_after_start = sys.sets;
    t.Bulk();
    t.Bulk();  // already out: no call
    bulk = Policy();
    bulk_slice = KernelSlice();
    bulk_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
    sets_after_bulk = sys.sets;
    t.Live();
    t.Live();  // already in: no call
    live_again = Policy();
    sets_after_live = sys.sets;
    EXPECT_TRUE(t.realtime());
  });
  EXPECT_EQ(live, std::make_pair(SCHED_FIFO, 2));
  EXPECT_EQ(sets_after_start, 1);
  EXPECT_EQ(bulk, std::make_pair(SCHED_OTHER, 0));
  EXPECT_EQ(bulk_nice, 4);
  if (bulk_slice.has_value()) EXPECT_EQ(bulk_slice, 150000u);
  EXPECT_EQ(sets_after_bulk, 2);
  EXPECT_EQ(live_again, std::make_pair(SCHED_FIFO, 2));
  EXPECT_EQ(sets_after_live, 3);
}

TEST(SchedFifoTest, ARefusalIsAWarningOnceAndTheThreadTakesTheSlice) {
  ScriptedSched sys;
  sys.fifo_error = EPERM;
  testing::LogCapture log;
  std::optional<uint64_t> slice;
  std::pair<int, int> policy;
  bool realtime = true;
  OnNewThread([&] {
    CommitPathThread t(sys, absl::Microseconds(100), 5, "ws-first");
    t.Start();
    t.Live();  // refused once: not asked again
    realtime = t.realtime();
    slice = KernelSlice();
    policy = Policy();
  });
  OnNewThread([&] { CommitPathThread(sys, absl::Microseconds(100), 5, "ws-second").Start(); });
  EXPECT_FALSE(realtime);
  EXPECT_EQ(policy, std::make_pair(SCHED_OTHER, 0));
  if (slice.has_value()) EXPECT_EQ(slice, 100000u);
  EXPECT_TRUE(log.Logged("[warning] ws-first: cannot run under the real-time policy",
                         "Operation not permitted"));
  EXPECT_FALSE(log.Logged("[warning] ws-second"));
  // Per thread: one refused SCHED_FIFO request and one slice.
  EXPECT_EQ(sys.sets, 4);
}

TEST(SchedFifoTest, AThreadUnderAnOperatorsPolicyIsLeftAlone) {
  ScriptedSched sys;
  int policy = -1;
  OnNewThread([&] {
    sched_param p = {};
    ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &p), 0);
    CommitPathThread t(sys, absl::Microseconds(100), 5, "ws-test");
    t.Start();
    t.Bulk();
    t.Live();
    policy = sched_getscheduler(0);
  });
  EXPECT_EQ(policy, SCHED_IDLE);
  EXPECT_EQ(sys.sets, 0);
}

}  // namespace
}  // namespace walship
