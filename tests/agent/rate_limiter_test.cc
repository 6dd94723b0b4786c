// The shipper's token bucket, on a simulated clock.
#include "agent/rate_limiter.h"

#include "gtest/gtest.h"
#include "tests/fakes/fake_clock.h"

namespace walship::agent {
namespace {

TEST(RateLimiterTest, BurstIsFreeThenEachByteCostsOneOverRate) {
  absl::Time now = absl::UnixEpoch();
  RateLimiter l(1000, 500, [&] { return now; });
  EXPECT_EQ(l.Take(500), absl::ZeroDuration());  // the burst
  EXPECT_EQ(l.Take(100), absl::Milliseconds(100));
  now += absl::Milliseconds(100);  // the caller waited as told
  EXPECT_EQ(l.Take(0), absl::ZeroDuration());
  EXPECT_EQ(l.Take(1000), absl::Seconds(1));  // a large frame: debt, never split
}

TEST(RateLimiterTest, LongRunRateIsExactWhateverTheFrameSizes) {
  absl::Time now = absl::UnixEpoch();
  const uint64_t rate = 20 << 20;
  RateLimiter l(rate, 0, [&] { return now; });
  uint64_t sent = 0;
  const uint64_t sizes[] = {1 << 20, 4096, 300000, 1, 65536};
  for (int i = 0; now - absl::UnixEpoch() < absl::Seconds(5); ++i) {
    uint64_t n = sizes[i % 5];
    sent += n;
    now += l.Take(n);
  }
  // 5 s at the rate plus at most the initial burst (a quarter second) and
  // one frame.
  double expected = 5.0 * rate;
  EXPECT_GE(sent, expected);
  EXPECT_LE(sent, expected + rate / 4 + (1 << 20));
}

TEST(RateLimiterTest, IdleTimeRefillsOnlyUpToTheBurst) {
  absl::Time now = absl::UnixEpoch();
  RateLimiter l(1000, 200, [&] { return now; });
  EXPECT_EQ(l.Take(200), absl::ZeroDuration());
  now += absl::Hours(1);
  EXPECT_EQ(l.Take(200), absl::ZeroDuration());
  EXPECT_EQ(l.Take(1), absl::Milliseconds(1));
}

class Recorder : public ShipperEvents {
 public:
  void OnCheckpoint(const std::string&, uint64_t, uint32_t) override { ++checkpoints; }
  void OnSent(const Position&, uint64_t bytes, bool) override { sent += bytes; }
  int checkpoints = 0;
  uint64_t sent = 0;
};

TEST(ThrottledEventsTest, ForwardsEverythingAndAStopEndsTheWait) {
  Recorder r;
  testing::FakeClock clock;
  RateLimiter l(4096, 4096, [&clock] { return clock.Now(); });
  std::atomic<bool> stop{true};
  ThrottledEvents t(&r, &l, stop, clock);
  t.OnSent(Position{"s", 100}, 1 << 20, true);  // 255 s of debt, but stop is set
  t.OnCheckpoint("s", 100, 7);
  EXPECT_EQ(clock.sleeps(), 0);
  EXPECT_EQ(r.sent, 1u << 20);
  EXPECT_EQ(r.checkpoints, 1);
}

TEST(ThrottledEventsTest, SleepsOffTheDebtOnItsClockInSlices) {
  Recorder r;
  testing::FakeClock clock;
  RateLimiter l(4096, 4096, [&clock] { return clock.Now(); });
  std::atomic<bool> stop{false};
  ThrottledEvents t(&r, &l, stop, clock);
  const absl::Time begin = clock.Now();
  t.OnSent(Position{"s", 100}, 1 << 20, true);  // (1 MiB - 4 KiB burst) / 4 KiB/s
  EXPECT_EQ(clock.Now() - begin, absl::Seconds(255));
  EXPECT_EQ(clock.sleeps(), 255 * 20);  // slices of 50 ms, so a stop is seen promptly
  EXPECT_EQ(r.sent, 1u << 20);
}

}  // namespace
}  // namespace walship::agent
