// When a moving position goes out (a replica's acknowledgement, the flush
// feed's status update to the primary), on a simulated clock.
#include "common/pacer.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace walship {
namespace {

constexpr absl::Duration kInterval = absl::Milliseconds(10);
constexpr absl::Duration kKeepalive = absl::Seconds(1);

// Sends when told to; returns how many updates went out.
int Drive(Pacer<uint64_t>& p, uint64_t flush, absl::Time now) {
  if (!p.ShouldSend(flush, now)) return 0;
  p.Sent(flush, now);
  return 1;
}

TEST(PacerTest, SynchronousReportsEveryNewPositionAtOnce) {
  Pacer<uint64_t> p(kKeepalive);
  ASSERT_EQ(p.interval(), absl::ZeroDuration());  // at once until told otherwise
  absl::Time now = absl::UnixEpoch();
  int sent = 0;
  for (uint64_t flush = 1; flush <= 100; ++flush) {
    now += absl::Microseconds(100);
    sent += Drive(p, flush, now);
    EXPECT_EQ(p.Due(), absl::InfiniteFuture());
  }
  EXPECT_EQ(sent, 100);
  // The same position again is not news.
  EXPECT_FALSE(p.ShouldSend(100, now + absl::Milliseconds(1)));
}

TEST(PacerTest, AsyncHoldsNewPositionsBackToOneUpdatePerInterval) {
  Pacer<uint64_t> p(kKeepalive);
  p.set_interval(kInterval);  // nothing waits: paced
  absl::Time now = absl::UnixEpoch();
  EXPECT_EQ(Drive(p, 1, now), 1);  // the first ever goes out
  const absl::Time first = now;
  int sent = 0;
  // 100 acknowledgements in 10 ms: held back, due one interval after the
  // last update.
  for (uint64_t flush = 2; flush <= 100; ++flush) {
    now += absl::Microseconds(99);
    sent += Drive(p, flush, now);
  }
  EXPECT_EQ(sent, 0);
  EXPECT_EQ(p.Due(), first + kInterval);
  // When due, the newest position goes out and nothing is held any more.
  now = p.Due();
  EXPECT_TRUE(p.ShouldSend(100, now));
  EXPECT_TRUE(p.Sent(100, now));  // released what was held
  EXPECT_EQ(p.Due(), absl::InfiniteFuture());
  // A position after a quiet interval goes out at once.
  now += kInterval;
  EXPECT_EQ(Drive(p, 101, now), 1);
}

TEST(PacerTest, AsyncRateIsBoundedWhateverTheAckRate) {
  Pacer<uint64_t> p(kKeepalive);
  p.set_interval(kInterval);  // nothing waits: paced
  absl::Time now = absl::UnixEpoch();
  int sent = 0;
  uint64_t flush = 0;
  // One second of acknowledgements every 50 us, the caller also sending
  // whatever is due (as the source thread does).
  while (now - absl::UnixEpoch() < absl::Seconds(1)) {
    now += absl::Microseconds(50);
    sent += Drive(p, ++flush, now);
    if (p.Due() <= now) sent += Drive(p, flush, now);
  }
  EXPECT_GE(sent, 99);
  EXPECT_LE(sent, 101);
  // Nothing newer than the last update is ever left unsent past its due time.
  if (p.Due() != absl::InfiniteFuture()) {
    EXPECT_LE(p.Due() - now, kInterval);
  }
}

TEST(PacerTest, BecomingSynchronousReleasesAHeldPositionAtOnce) {
  Pacer<uint64_t> p(kKeepalive);
  p.set_interval(kInterval);  // nothing waits: paced
  absl::Time now = absl::UnixEpoch();
  Drive(p, 1, now);
  now += absl::Milliseconds(1);
  EXPECT_EQ(Drive(p, 2, now), 0);
  p.set_interval(absl::ZeroDuration());  // synchronous_standby_names now names the agent
  now += absl::Microseconds(10);
  ASSERT_TRUE(p.ShouldSend(3, now));
  EXPECT_FALSE(p.Sent(3, now));  // sent at once, not when due
  EXPECT_EQ(p.Due(), absl::InfiniteFuture());
}

TEST(PacerTest, KeepaliveAndServerRequestsGoOutEvenWithoutNews) {
  Pacer<uint64_t> p(kKeepalive);
  p.set_interval(kInterval);  // nothing waits: paced
  absl::Time now = absl::UnixEpoch();
  Drive(p, 5, now);
  EXPECT_FALSE(p.ShouldSend(5, now + absl::Milliseconds(500)));
  EXPECT_TRUE(p.ShouldSend(5, now + kKeepalive));
  p.RequestReply();
  EXPECT_TRUE(p.ShouldSend(5, now + absl::Milliseconds(1)));
  p.Sent(5, now + absl::Milliseconds(1));
  EXPECT_FALSE(p.ShouldSend(5, now + absl::Milliseconds(2)));
}

}  // namespace
}  // namespace walship
