// AppendSource follows a directory with inotify and publishes what may be
// shipped; SegmentCatalog hands out snapshots and wakes waiters.
#include "agent/append_source.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "agent/segment_catalog.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

void Append(const std::string& path, size_t n, char c = 'x') {
  std::ofstream f(path, std::ios::binary | std::ios::app);
  f << std::string(n, c);
}

// Waits (bounded) until `pred(snapshot)` holds; returns the last snapshot.
template <typename Pred>
CatalogSnapshot WaitFor(const SegmentCatalog& catalog, Pred pred) {
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  CatalogSnapshot s = catalog.Get();
  while (!pred(s) && absl::Now() < deadline) {
    catalog.WaitForChange(s.version, absl::Now() + absl::Milliseconds(100));
    s = catalog.Get();
  }
  return s;
}

TEST(AppendSourceTest, FollowsGrowthAndNewSegments) {
  std::string dir = testing::FreshTempDir("follow");
  Append(dir + "/seg-001", 100);
  Append(dir + "/.hidden", 10);
  Append(dir + "/seg-000.tmp", 10);  // not a segment name
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  EXPECT_EQ(source.FormatName(), "append");
  EXPECT_FALSE(source.StreamId().empty());

  CatalogSnapshot s = catalog.Get();  // populated synchronously by Start
  ASSERT_EQ(s.segments->size(), 1u);
  EXPECT_EQ((*s.segments)[0].name, "seg-001");
  EXPECT_EQ((*s.segments)[0].shippable, 100u);
  EXPECT_FALSE((*s.segments)[0].complete);

  Append(dir + "/seg-001", 50);
  s = WaitFor(catalog, [](const CatalogSnapshot& c) {
    return !c.segments->empty() && (*c.segments)[0].shippable == 150;
  });
  EXPECT_EQ((*s.segments)[0].shippable, 150u);

  Append(dir + "/seg-002", 7);
  s = WaitFor(catalog, [](const CatalogSnapshot& c) { return c.segments->size() == 2; });
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_FALSE((*s.segments)[1].complete);
  EXPECT_EQ(s.End(), (Position{"seg-002", 7}));
  EXPECT_EQ(s.BytesAfter(Position{"seg-001", 100}), 57u);
  EXPECT_TRUE(s.source_status.ok());
  source.Stop();
}

TEST(AppendSourceTest, ShrinkingSegmentFailsTheSource) {
  std::string dir = testing::FreshTempDir("shrink");
  Append(dir + "/seg-001", 1000);
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  ASSERT_EQ(truncate((dir + "/seg-001").c_str(), 10), 0);
  CatalogSnapshot s =
      WaitFor(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kDataLoss) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, CompleteSegmentThatGrowsFailsTheSource) {
  std::string dir = testing::FreshTempDir("regrow");
  Append(dir + "/seg-001", 10);
  Append(dir + "/seg-002", 10);
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.rescan_interval = absl::Milliseconds(50);
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  Append(dir + "/seg-001", 10);
  CatalogSnapshot s =
      WaitFor(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kDataLoss) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, MissingDirectoryIsAClearError) {
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = "/nonexistent/walship-test-dir";
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  absl::Status s = source.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST(AppendSourceTest, StreamIdIsStableAndDistinct) {
  std::string a = testing::FreshTempDir("id-a"), b = testing::FreshTempDir("id-b");
  auto ia = DeriveStreamId(sys::DefaultSysCalls(), a, "append");
  auto ia2 = DeriveStreamId(sys::DefaultSysCalls(), a, "append");
  auto ib = DeriveStreamId(sys::DefaultSysCalls(), b, "append");
  ASSERT_TRUE(ia.ok() && ia2.ok() && ib.ok());
  EXPECT_EQ(*ia, *ia2);
  EXPECT_NE(*ia, *ib);
}

TEST(SegmentCatalogTest, WaitWakesOnPublishAndShutdown) {
  SegmentCatalog catalog;
  uint64_t v = catalog.Get().version;
  absl::Time start = absl::Now();
  EXPECT_TRUE(catalog.WaitForChange(v, absl::Now() + absl::Milliseconds(20)));
  catalog.Publish({SegmentInfo{"a", 1, false}});
  EXPECT_TRUE(catalog.WaitForChange(v, absl::Now() + absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  catalog.Shutdown();
  EXPECT_FALSE(catalog.WaitForChange(catalog.Get().version, absl::Now() + absl::Seconds(10)));
}

TEST(SegmentCatalogTest, ShippableSinceIsTheAgeOfTheOldestMissingByte) {
  SegmentCatalog catalog;
  EXPECT_FALSE(catalog.ShippableSince(Position{}).has_value());
  catalog.Publish({SegmentInfo{"a", 100, false}});
  absl::Time t1 = catalog.Get().published;
  absl::SleepFor(absl::Milliseconds(5));
  catalog.Publish({SegmentInfo{"a", 200, false}});
  absl::Time t2 = catalog.Get().published;
  ASSERT_LT(t1, t2);
  EXPECT_EQ(catalog.ShippableSince(Position{}), t1);
  EXPECT_EQ(catalog.ShippableSince(Position{"a", 99}), t1);
  EXPECT_EQ(catalog.ShippableSince(Position{"a", 100}), t2);  // byte 100 came later
  EXPECT_FALSE(catalog.ShippableSince(Position{"a", 200}).has_value());  // caught up
}

}  // namespace
}  // namespace walship::agent
