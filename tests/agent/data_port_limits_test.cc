// The data port's bookkeeping with a fake time: the pending-HELLO table,
// the per-address failure limiter, and the rejection log.
#include "agent/data_port_limits.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace walship::agent {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

PendingHello Hello(const std::string& address, absl::Time accepted,
                   absl::Duration timeout = absl::Seconds(5)) {
  PendingHello p;
  p.address = address;
  p.peer = absl::StrCat(address, ":40000");
  p.accepted = accepted;
  p.deadline = accepted + timeout;
  return p;
}

// ---------------------------------------------------------------------------
// PendingTable

TEST(PendingTableTest, OneAddressCannotHoldMoreThanItsShare) {
  PendingTable table(64, 2);
  std::optional<PendingHello> evicted;
  EXPECT_FALSE(table.AddressFull("10.0.0.1"));
  table.Add(Hello("10.0.0.1", kT0), &evicted);
  const uint64_t second = table.Add(Hello("10.0.0.1", kT0), &evicted);
  EXPECT_TRUE(table.AddressFull("10.0.0.1"));
  EXPECT_FALSE(table.AddressFull("10.0.0.2"));
  EXPECT_EQ(table.CountFrom("10.0.0.1"), 2);
  // A HELLO that finishes (or fails) frees its address's slot.
  PendingHello done = table.Take(second);
  EXPECT_EQ(done.address, "10.0.0.1");
  EXPECT_FALSE(table.AddressFull("10.0.0.1"));
  EXPECT_EQ(table.size(), 1u);
}

TEST(PendingTableTest, AFullTableEvictsTheConnectionThatWaitedLongest) {
  PendingTable table(3, 8);
  std::optional<PendingHello> evicted;
  std::vector<uint64_t> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(table.Add(Hello(absl::StrCat("10.0.0.", i + 1), kT0 + absl::Seconds(i)),
                             &evicted));
    EXPECT_FALSE(evicted.has_value());
  }
  const uint64_t newest = table.Add(Hello("127.0.0.1", kT0 + absl::Seconds(3)), &evicted);
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(evicted->address, "10.0.0.1");
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.Find(keys[0]), nullptr);
  EXPECT_EQ(table.CountFrom("10.0.0.1"), 0);
  ASSERT_NE(table.Find(newest), nullptr);
  EXPECT_EQ(table.Keys(), (std::vector<uint64_t>{keys[1], keys[2], newest}));
  // The next newcomer evicts the next oldest, never the newest.
  table.Add(Hello("10.0.0.9", kT0 + absl::Seconds(4)), &evicted);
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(evicted->address, "10.0.0.2");
  EXPECT_NE(table.Find(newest), nullptr);
}

TEST(PendingTableTest, DeadlinesAreForTheWholeHello) {
  PendingTable table(64, 8);
  std::optional<PendingHello> evicted;
  table.Add(Hello("10.0.0.1", kT0), &evicted);
  const uint64_t later = table.Add(Hello("10.0.0.2", kT0 + absl::Seconds(2)), &evicted);
  // Progress does not extend a deadline.
  table.Find(later)->have = 39;
  EXPECT_EQ(table.NextDeadline(), kT0 + absl::Seconds(5));
  EXPECT_TRUE(table.TakeExpired(kT0 + absl::Seconds(4)).empty());
  std::vector<PendingHello> expired = table.TakeExpired(kT0 + absl::Seconds(5));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].address, "10.0.0.1");
  EXPECT_EQ(table.NextDeadline(), kT0 + absl::Seconds(7));
  expired = table.TakeExpired(kT0 + absl::Seconds(7));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].have, 39u);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.NextDeadline(), absl::InfiniteFuture());
}

TEST(PendingTableTest, TakeAllEmptiesTheTableInAcceptOrder) {
  PendingTable table(64, 8);
  std::optional<PendingHello> evicted;
  table.Add(Hello("10.0.0.1", kT0), &evicted);
  table.Add(Hello("10.0.0.2", kT0), &evicted);
  std::vector<PendingHello> all = table.TakeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].address, "10.0.0.1");
  EXPECT_EQ(all[1].address, "10.0.0.2");
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.AddressFull("10.0.0.1"));
}

// ---------------------------------------------------------------------------
// FailureLimiter

TEST(FailureLimiterTest, ABurstOfFailuresBlocksWithADoublingBackoff) {
  FailureLimiterOptions o;
  o.burst = 3;
  o.forgive_every = absl::Seconds(1);
  o.first_backoff = absl::Seconds(1);
  o.max_backoff = absl::Seconds(4);
  FailureLimiter limiter(o);
  const std::string a = "10.0.0.1";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.RecordFailure(a, kT0), absl::ZeroDuration());
  EXPECT_FALSE(limiter.Blocked(a, kT0));
  EXPECT_EQ(limiter.RecordFailure(a, kT0), absl::Seconds(1));
  absl::Time until;
  ASSERT_TRUE(limiter.Blocked(a, kT0, &until));
  EXPECT_EQ(until, kT0 + absl::Seconds(1));
  EXPECT_FALSE(limiter.Blocked("10.0.0.2", kT0)) << "another address";
  // Failures during a block do not extend it.
  EXPECT_EQ(limiter.RecordFailure(a, kT0 + absl::Milliseconds(500)), absl::ZeroDuration());
  ASSERT_TRUE(limiter.Blocked(a, kT0 + absl::Milliseconds(999), &until));
  EXPECT_EQ(until, kT0 + absl::Seconds(1));
  EXPECT_FALSE(limiter.Blocked(a, kT0 + absl::Seconds(1)));
  // One failure right after a block blocks again, twice as long, up to the
  // cap.
  absl::Time t = kT0 + absl::Seconds(1);
  EXPECT_EQ(limiter.RecordFailure(a, t), absl::Seconds(2));
  t += absl::Seconds(2);
  EXPECT_EQ(limiter.RecordFailure(a, t), absl::Seconds(4));
  t += absl::Seconds(4);
  EXPECT_EQ(limiter.RecordFailure(a, t), absl::Seconds(4)) << "backoff capped at max_backoff";
  // Quiet for 2 s after the block: two failures are forgiven.
  t += absl::Seconds(4 + 2);
  EXPECT_EQ(limiter.RecordFailure(a, t), absl::ZeroDuration());
  EXPECT_EQ(limiter.RecordFailure(a, t), absl::ZeroDuration());
  EXPECT_EQ(limiter.RecordFailure(a, t), absl::Seconds(4));
}

TEST(FailureLimiterTest, FailuresSlowerThanForgivenessNeverBlock) {
  FailureLimiterOptions o;
  o.burst = 3;
  o.forgive_every = absl::Seconds(1);
  FailureLimiter limiter(o);
  for (int i = 0; i < 100; ++i) {
    const absl::Time t = kT0 + absl::Seconds(i);
    EXPECT_EQ(limiter.RecordFailure("10.0.0.1", t), absl::ZeroDuration()) << i;
    EXPECT_FALSE(limiter.Blocked("10.0.0.1", t));
  }
}

TEST(FailureLimiterTest, AQuietAddressIsForgottenAndItsBackoffStartsOver) {
  FailureLimiterOptions o;
  o.burst = 2;
  o.forgive_every = absl::Seconds(1);
  o.first_backoff = absl::Seconds(1);
  FailureLimiter limiter(o);
  for (int i = 0; i < 3; ++i) limiter.RecordFailure("10.0.0.1", kT0);
  ASSERT_TRUE(limiter.Blocked("10.0.0.1", kT0));
  EXPECT_EQ(limiter.tracked(), 1u);
  // Quiet long enough for the debt (2) to be forgiven after the block.
  const absl::Time later = kT0 + absl::Seconds(1 + 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(limiter.RecordFailure("10.0.0.1", later), absl::ZeroDuration());
  }
  EXPECT_EQ(limiter.RecordFailure("10.0.0.1", later), absl::Seconds(1))
      << "the backoff did not start over";
}

TEST(FailureLimiterTest, TracksABoundedNumberOfAddresses) {
  FailureLimiterOptions o;
  o.burst = 1;
  o.max_addresses = 16;
  FailureLimiter limiter(o);
  for (int i = 0; i < 1000; ++i) {
    limiter.RecordFailure(absl::StrCat("10.0.", i / 256, ".", i % 256), kT0);
    EXPECT_LE(limiter.tracked(), 16u);
  }
  // The latest address is still tracked.
  limiter.RecordFailure("10.0.3.231", kT0);
  EXPECT_TRUE(limiter.Blocked("10.0.3.231", kT0));
}

// ---------------------------------------------------------------------------
// RejectLog

class RejectLogTest : public ::testing::Test {
 protected:
  RejectLog Make(RejectLogOptions o = RejectLogOptions()) {
    return RejectLog(o, [this](const std::string& line) { lines_.push_back(line); });
  }
  std::vector<std::string> lines_;
};

TEST_F(RejectLogTest, TheFirstOfEachReasonInFullThenOneSummaryPerInterval) {
  RejectLog log = Make();
  for (int i = 0; i < 1200; ++i) {
    log.Record("127.0.0.2", absl::StrCat("127.0.0.2:", 1000 + i), "bad_token",
               "UNAUTHENTICATED: unknown session", kT0 + absl::Milliseconds(i));
  }
  for (int i = 0; i < 34; ++i) {
    log.Record("127.0.0.2", "127.0.0.2:9", "timeout", "DEADLINE_EXCEEDED: timed out",
               kT0 + absl::Seconds(5));
  }
  log.Record("127.0.0.1", "127.0.0.1:7", "closed", "UNAVAILABLE: closed before sending a frame",
             kT0 + absl::Seconds(5));
  EXPECT_EQ(lines_, (std::vector<std::string>{
                        "data port: rejected connection from 127.0.0.2:1000: "
                        "UNAUTHENTICATED: unknown session",
                        "data port: rejected connection from 127.0.0.2:9: "
                        "DEADLINE_EXCEEDED: timed out",
                        "data port: rejected connection from 127.0.0.1:7: "
                        "UNAVAILABLE: closed before sending a frame"}));
  lines_.clear();
  log.Flush(kT0 + absl::Seconds(9));
  EXPECT_TRUE(lines_.empty()) << "summary before the interval ended";
  log.Flush(kT0 + absl::Seconds(10));
  // 127.0.0.1's one rejection was logged in full: no summary for it.
  EXPECT_EQ(lines_, (std::vector<std::string>{
                        "data port: rejected 1234 connections from 127.0.0.2 in 10s "
                        "(bad_token 1200, timeout 34); 1232 of them not logged one by one"}));
  // A new interval starts with a full line again.
  lines_.clear();
  log.Record("127.0.0.2", "127.0.0.2:5", "bad_token", "x", kT0 + absl::Seconds(11));
  EXPECT_EQ(lines_.size(), 1u);
  log.FlushAll();
  EXPECT_EQ(lines_.size(), 1u) << "nothing unlogged, nothing to summarize";
}

TEST_F(RejectLogTest, FullLinesHaveABudgetOverAllAddresses) {
  RejectLogOptions o;
  o.max_full_lines = 5;
  RejectLog log = Make(o);
  for (int i = 0; i < 20; ++i) {
    log.Record(absl::StrCat("10.0.0.", i), absl::StrCat("10.0.0.", i, ":1"), "closed", "x", kT0);
  }
  EXPECT_EQ(lines_.size(), 5u);
  lines_.clear();
  log.Flush(kT0 + absl::Seconds(10));
  EXPECT_EQ(lines_.size(), 15u) << "one summary for each address not logged in full";
  EXPECT_TRUE(absl::StrContains(lines_[0], "rejected 1 connections from 10.0.0."));
}

TEST_F(RejectLogTest, AddressesPastTheLimitAreSummarizedTogether) {
  RejectLogOptions o;
  o.max_addresses = 4;
  o.max_full_lines = 1;
  RejectLog log = Make(o);
  for (int i = 0; i < 100; ++i) {
    log.Record(absl::StrCat("10.0.0.", i), absl::StrCat("10.0.0.", i, ":1"), "closed", "x", kT0);
  }
  lines_.clear();
  log.FlushAll();
  ASSERT_EQ(lines_.size(), 4u);  // 10.0.0.0 was logged in full; .1 .2 .3 and the rest
  EXPECT_EQ(lines_.back(), "data port: rejected 96 connections from other addresses in 10s "
                           "(closed 96); 96 of them not logged one by one");
}

}  // namespace
}  // namespace walship::agent
