#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/async_call.h"
#include "gtest/gtest.h"

namespace walship::agent {
namespace {

TEST(OperationGateTest, CloseWaitsForThoseInsideAndRefusesLaterOnes) {
  OperationGate gate;
  ASSERT_TRUE(gate.Enter());
  absl::Notification closing, closed;
  std::atomic<int> left_inside{-1};
  std::thread closer([&] {
    closing.Notify();
    left_inside = gate.Close(absl::Seconds(30));
    closed.Notify();
  });
  closing.WaitForNotification();
  // Once Close() has begun, nobody new gets in...
  while (gate.Enter()) gate.Leave();
  // ... and it waits for the one inside.
  EXPECT_FALSE(closed.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  gate.Leave();
  closer.join();
  EXPECT_EQ(left_inside.load(), 0);
  EXPECT_FALSE(gate.Enter());
}

TEST(OperationGateTest, CloseGivesUpAfterItsTimeoutAndSaysHowManyAreInside) {
  OperationGate gate;
  ASSERT_TRUE(gate.Enter());
  ASSERT_TRUE(gate.Enter());
  gate.Leave();
  EXPECT_EQ(gate.Close(absl::Milliseconds(20)), 1);
  gate.Leave();
  EXPECT_EQ(gate.Close(absl::Milliseconds(20)), 0);
}

TEST(OperationGateTest, ClosingAnUnusedGateReturnsAtOnce) {
  OperationGate gate;
  EXPECT_EQ(gate.Close(absl::InfiniteDuration()), 0);
  EXPECT_FALSE(gate.Enter());
}

}  // namespace
}  // namespace walship::agent
