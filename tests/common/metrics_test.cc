// The Prometheus registry: text exposition, labels, histograms, collectors,
// concurrency.
#include "common/metrics.h"

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace walship {
namespace {

TEST(MetricsTest, CountersAndGaugesRenderInTextFormat) {
  MetricsRegistry m;
  auto c = m.Counter("x_bytes_total", "Bytes.");
  auto g = m.Gauge("x_lag", "Lag.");
  c.Add({{"replica", "r1"}, {"transport", "zerocopy"}}, 10);
  c.Add({{"replica", "r1"}, {"transport", "zerocopy"}}, 5);
  c.Add({{"replica", "r1"}, {"transport", "zerocopy"}}, -3);  // counters never go down
  g.Set({{"replica", "a\"b\\c\nd"}}, 2.5);
  g.Set({}, 7);
  EXPECT_EQ(m.Render(),
            "# HELP x_bytes_total Bytes.\n"
            "# TYPE x_bytes_total counter\n"
            "x_bytes_total{replica=\"r1\",transport=\"zerocopy\"} 15\n"
            "# HELP x_lag Lag.\n"
            "# TYPE x_lag gauge\n"
            "x_lag 7\n"
            "x_lag{replica=\"a\\\"b\\\\c\\nd\"} 2.5\n");
  EXPECT_EQ(m.Value("x_bytes_total", {{"replica", "r1"}, {"transport", "zerocopy"}}), 15);
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry m;
  auto h = m.Histogram("x_seconds", "Latency.", {0.1, 1});
  h.Observe({}, 0.05);
  h.Observe({}, 0.5);
  h.Observe({}, 0.5);
  h.Observe({}, 3);
  EXPECT_EQ(m.Render(),
            "# HELP x_seconds Latency.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.1\"} 1\n"
            "x_seconds_bucket{le=\"1\"} 3\n"
            "x_seconds_bucket{le=\"+Inf\"} 4\n"
            "x_seconds_sum 4.05\n"
            "x_seconds_count 4\n");
}

TEST(MetricsTest, CollectorsRunBeforeRenderAndClearDropsDepartedSeries) {
  MetricsRegistry m;
  auto g = m.Gauge("x_lag", "Lag.");
  std::vector<std::string> live = {"a", "b"};
  m.AddCollector([&] {
    g.Clear();
    for (const auto& r : live) g.Set({{"replica", r}}, 1);
  });
  EXPECT_TRUE(absl::StrContains(m.Render(), "x_lag{replica=\"b\"} 1"));
  live = {"a"};
  std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(text, "x_lag{replica=\"a\"} 1"));
  EXPECT_FALSE(absl::StrContains(text, "replica=\"b\""));
}

TEST(MetricsTest, DeclaringTwiceReturnsTheSameFamily) {
  MetricsRegistry m;
  m.Counter("x_total", "First help.").Add({}, 1);
  m.Counter("x_total", "").Add({}, 1);
  EXPECT_EQ(m.Value("x_total", {}), 2);
  EXPECT_TRUE(absl::StrContains(m.Render(), "# HELP x_total First help.\n"));
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry m;
  auto c = m.Counter("x_total", "");
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.Add({{"k", "v"}}, 1);
    });
  }
  std::thread renderer([&] {
    for (int i = 0; i < 100; ++i) m.Render();
  });
  for (auto& t : threads) t.join();
  renderer.join();
  EXPECT_EQ(m.Value("x_total", {{"k", "v"}}), 80000);
}

TEST(MetricsServerTest, BindsPortZeroAndStops) {
  MetricsRegistry m;
  MetricsServer s(m);
  ASSERT_TRUE(s.Start("127.0.0.1", 0).ok());
  EXPECT_NE(s.port(), 0);
  s.Stop();
}

}  // namespace
}  // namespace walship
