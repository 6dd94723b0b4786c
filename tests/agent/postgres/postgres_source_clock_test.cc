// PostgresSource's pacing of its flush-position queries, stepped on a
// FakeClock against a fake PostgreSQL (tests/fakes/fake_postgres.h): without
// a flush feed it asks at most once every min_query_interval of its clock;
// while the feed is live, once every feed_query_interval (the safety net).
#include "agent/postgres/postgres_source.h"

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/segment_catalog.h"
#include "common/sys/syscalls.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_postgres.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

using testing::FakePostgres;

constexpr absl::Duration kMinQueryInterval = absl::Milliseconds(100);

class PostgresSourceClockTest : public ::testing::Test {
 protected:
  // A primary of 16 MiB segments flushed to the start of segment 1 on
  // timeline 1; every flush-position query is counted.
  absl::StatusOr<std::vector<FakePostgres::Row>> Answer(const std::string& sql) {
    if (absl::StrContains(sql, "pg_control_system()")) {
      return std::vector<FakePostgres::Row>{{"7000000000000000001", "16777216", "8192"}};
    }
    if (absl::StrContains(sql, "pg_current_wal_flush_lsn()")) {
      ++flush_queries_;
      return std::vector<FakePostgres::Row>{{"0/1000000", "000000010000000000000001", "4242"}};
    }
    if (sql == "IDENTIFY_SYSTEM") {
      return std::vector<FakePostgres::Row>{
          {"7000000000000000001", "1", "0/1000000", std::nullopt}};
    }
    return absl::FailedPreconditionError(absl::StrCat("the fake does not answer ", sql));
  }

  PostgresSourceOptions Options() const {
    PostgresSourceOptions o;
    o.wal_dir = wal_dir_;
    o.conninfo = pg_.conninfo();
    o.feed = false;
    o.min_query_interval = kMinQueryInterval;
    o.poll_interval = absl::Milliseconds(10);
    return o;
  }

  // Waits (bounded) until the source thread pauses on the clock.
  ::testing::AssertionResult Pausing() const {
    if (clock_.AwaitSleeper(absl::Seconds(10))) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the source never paused on its clock";
  }

  // The source thread has completed a pass of its loop that began after
  // this call: the walsender asks for a reply twice, and two status updates
  // come back (one pass sends at most one, and reads the time for its
  // safety-net query only after sending it).
  ::testing::AssertionResult FeedPassDone() {
    // 'k' keepalive: walEnd 0/1000000, sendTime 0, reply requested.
    std::string keepalive = std::string("k") + std::string(4, '\0') +
                            std::string("\x01\0\0\0", 4) + std::string(8, '\0') + "\x01";
    const int before = pg_.status_updates();
    for (int n = before + 1; n <= before + 2; ++n) {
      if (!pg_.SendCopyData(keepalive)) {
        return ::testing::AssertionFailure() << "no replication connection";
      }
      if (!pg_.AwaitStatusUpdates(n, absl::Seconds(10))) {
        return ::testing::AssertionFailure() << "no status update came back";
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Three rounds of: no flush-position query until `interval` (`name`) has
  // passed on the clock, then one. `settled` waits until the source thread
  // has acted on the time the test set.
  void ExpectOneQueryEvery(const std::string& name, absl::Duration interval,
                           const std::function<::testing::AssertionResult()>& settled) {
    for (int round = 1; round <= 3; ++round) {
      ASSERT_TRUE(settled());
      const int asked = flush_queries_.load();
      clock_.Advance(interval - absl::Milliseconds(1));
      ASSERT_TRUE(settled());
      EXPECT_EQ(flush_queries_.load(), asked)
          << "round " << round << ": asked again within " << name;
      clock_.Advance(absl::Milliseconds(1));
      ASSERT_TRUE(settled());
      EXPECT_EQ(flush_queries_.load(), asked + 1)
          << "round " << round << ": not asked again once " << name << " had passed";
    }
  }

  std::atomic<int> flush_queries_{0};
  FakePostgres pg_{[this](const std::string& sql) { return Answer(sql); }};
  const std::string wal_dir_ = testing::FreshTempDir("pg_wal");
  testing::FakeClock clock_{absl::Now(), testing::FakeClock::Sleeps::kWaitForAdvance};
  SegmentCatalog catalog_{clock_};
};

TEST_F(PostgresSourceClockTest, WithoutAFeedQueriesAtMostOnceAMinQueryInterval) {
  PostgresSource source(sys::DefaultSysCalls(), Options(), catalog_, clock_);
  ASSERT_TRUE(source.Start().ok());
  ExpectOneQueryEvery("min_query_interval", kMinQueryInterval, [this] { return Pausing(); });
  clock_.Release();
  source.Stop();
}

TEST_F(PostgresSourceClockTest, WithALiveFeedQueriesOnceAFeedQueryInterval) {
  PostgresSourceOptions o = Options();
  o.feed = true;
  o.feed_query_interval = absl::Seconds(10);
  PostgresSource source(sys::DefaultSysCalls(), o, catalog_, clock_);
  ASSERT_TRUE(source.Start().ok());
  ASSERT_TRUE(source.feed_active());
  ExpectOneQueryEvery("feed_query_interval", o.feed_query_interval,
                      [this] { return FeedPassDone(); });
  clock_.Release();
  source.Stop();
}

}  // namespace
}  // namespace walship::agent
