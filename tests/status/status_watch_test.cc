// walship-status --watch arithmetic: formatting, throughput, progress, ETA.
#include "status/status_watch.h"

#include "gtest/gtest.h"

namespace walship {
namespace status {
namespace {

TEST(StatusWatchFormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(-5), "0 B");
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(1000), "1.00 kB");
  EXPECT_EQ(FormatBytes(1500), "1.50 kB");
  EXPECT_EQ(FormatBytes(12'345'678), "12.3 MB");
  EXPECT_EQ(FormatBytes(999'999), "1.00 MB");
  EXPECT_EQ(FormatBytes(123'000'000'000), "123 GB");
  EXPECT_EQ(FormatRate(20'000'000), "20.0 MB/s");
}

TEST(StatusWatchFormatTest, Eta) {
  EXPECT_EQ(FormatEta(absl::ZeroDuration()), "0s");
  EXPECT_EQ(FormatEta(absl::Milliseconds(1)), "1s");
  EXPECT_EQ(FormatEta(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatEta(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(FormatEta(absl::Minutes(123) + absl::Seconds(10)), "2h03m");
  EXPECT_EQ(FormatEta(absl::Hours(100)), ">99h");
}

TEST(StatusWatchFormatTest, Bar) {
  EXPECT_EQ(ProgressBar(0.5, 4), "[##..]");
  EXPECT_EQ(ProgressBar(0, 3), "[...]");
  EXPECT_EQ(ProgressBar(2, 3), "[###]");
  EXPECT_EQ(ProgressBar(-1, 2), "[..]");
}

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(ReplicaTrackerTest, FirstSampleHasNoRate) {
  ReplicaTracker t;
  Progress p = t.Update({kT0, 5000, 100});
  EXPECT_FALSE(p.have_rate);
  EXPECT_FALSE(p.show_progress);
  EXPECT_EQ(ProgressLine(p, 100), "");
}

TEST(ReplicaTrackerTest, CatchingUpShowsRateFractionAndEta) {
  ReplicaTracker t;
  t.Update({kT0, 0, 10'000'000});
  // 2 s later: 4 MB shipped, lag down from 10 MB to 6 MB.
  Progress p = t.Update({kT0 + absl::Seconds(2), 4'000'000, 6'000'000});
  ASSERT_TRUE(p.have_rate);
  EXPECT_DOUBLE_EQ(p.bytes_per_sec, 2'000'000);
  EXPECT_DOUBLE_EQ(p.catchup_per_sec, 2'000'000);
  EXPECT_TRUE(p.moving);
  ASSERT_TRUE(p.show_progress);
  EXPECT_DOUBLE_EQ(p.fraction_done, 0.4);
  ASSERT_TRUE(p.eta.has_value());
  EXPECT_EQ(*p.eta, absl::Seconds(3));
  EXPECT_EQ(ProgressLine(p, 6'000'000, 10),
            "[####......]  40%  lag 6.00 MB  catching up at 2.00 MB/s  ETA 3s");
}

TEST(ReplicaTrackerTest, FallingBehindHasNoEta) {
  ReplicaTracker t;
  t.Update({kT0, 0, 1000});
  Progress p = t.Update({kT0 + absl::Seconds(1), 500, 1500});
  EXPECT_TRUE(p.show_progress);
  EXPECT_LT(p.catchup_per_sec, 0);
  EXPECT_FALSE(p.eta.has_value());
  EXPECT_DOUBLE_EQ(p.fraction_done, 0);
  EXPECT_NE(ProgressLine(p, 1500).find("not catching up"), std::string::npos);
}

TEST(ReplicaTrackerTest, StalledOrCaughtUpShowsNoBar) {
  ReplicaTracker t;
  t.Update({kT0, 100, 1000});
  Progress stalled = t.Update({kT0 + absl::Seconds(1), 100, 1000});
  EXPECT_TRUE(stalled.have_rate);
  EXPECT_FALSE(stalled.moving);
  EXPECT_FALSE(stalled.show_progress);
  Progress done = t.Update({kT0 + absl::Seconds(2), 1100, 0});
  EXPECT_TRUE(done.moving);
  EXPECT_FALSE(done.show_progress);
  // The peak resets once caught up: a new backlog starts at 0 %.
  t.Update({kT0 + absl::Seconds(3), 1100, 400});
  Progress again = t.Update({kT0 + absl::Seconds(4), 1200, 300});
  EXPECT_DOUBLE_EQ(again.fraction_done, 0.25);
}

TEST(ReplicaTrackerTest, CounterResetIsANewStart) {
  ReplicaTracker t;
  t.Update({kT0, 1'000'000, 10});
  Progress p = t.Update({kT0 + absl::Seconds(1), 10, 10});
  EXPECT_FALSE(p.have_rate);
  Progress q = t.Update({kT0 + absl::Seconds(2), 1010, 10});
  EXPECT_TRUE(q.have_rate);
  EXPECT_DOUBLE_EQ(q.bytes_per_sec, 1000);
}

}  // namespace
}  // namespace status
}  // namespace walship
