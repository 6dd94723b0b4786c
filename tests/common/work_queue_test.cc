// WorkQueue: closures run on the queue's threads, in order on one thread,
// and Stop() runs what was queued before it joins.
#include "common/work_queue.h"

#include <sys/prctl.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace walship {
namespace {

std::string ThisThreadName() {
  char name[16] = {};
  prctl(PR_GET_NAME, name);
  return name;
}

TEST(WorkQueueTest, RunsInOrderOnItsOwnNamedThread) {
  WorkQueue q("ws-test-work", 1);
  absl::Mutex mu;
  std::vector<int> order;
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(q.Post([&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      names.push_back(ThisThreadName());
    }));
  }
  q.Stop();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const std::string& n : names) EXPECT_EQ(n, "ws-test-work");
}

TEST(WorkQueueTest, ABlockedClosureDoesNotHoldUpTheOtherThread) {
  WorkQueue q("ws-test-work", 2);
  absl::Notification release, second_ran;
  ASSERT_TRUE(q.Post([&] { release.WaitForNotification(); }));
  ASSERT_TRUE(q.Post([&] { second_ran.Notify(); }));
  // Fails by timing out (the test's own limit) if both share one thread.
  second_ran.WaitForNotification();
  release.Notify();
}

TEST(WorkQueueTest, StopRunsWhatWasQueuedAndRefusesMore) {
  std::atomic<int> ran{0};
  absl::Notification release;
  WorkQueue q("ws-test-work", 1);
  ASSERT_TRUE(q.Post([&] {
    release.WaitForNotification();
    ++ran;
  }));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(q.Post([&] { ++ran; }));
  std::thread stopper([&] { q.Stop(); });
  release.Notify();
  stopper.join();
  EXPECT_EQ(ran.load(), 11);
  EXPECT_FALSE(q.Post([&] { ++ran; }));
  q.Stop();  // idempotent
  EXPECT_EQ(ran.load(), 11);
}

}  // namespace
}  // namespace walship
