// metrics.h: a small Prometheus metrics registry and its /metrics endpoint.
//
// A MetricsRegistry holds metric families (counter, gauge, histogram), each
// with a name, help text and any number of series distinguished by labels.
// Render() produces the Prometheus text exposition format (version 0.0.4):
//
//   # HELP walship_agent_bytes_shipped_total Payload bytes written ...
//   # TYPE walship_agent_bytes_shipped_total counter
//   walship_agent_bytes_shipped_total{replica="r1",transport="zerocopy"} 1048576
//
// Families are declared once (Counter/Gauge/Histogram return a handle that is
// cheap to copy and valid as long as the registry). Series are created on
// first use. Gauges that are cheaper to compute on demand (lag) are set by
// collectors, which Render() runs first, outside the registry lock.
//
// Example:
//   MetricsRegistry m;
//   auto frames = m.Counter("walship_agent_frames_total", "DATA frames sent.");
//   frames.Add({{"replica", "r1"}}, 1);
//   std::string text = m.Render();
//
// Thread-safety: every method is thread-safe. Label values are escaped
// (backslash, quote, newline); names are the caller's to get right.
#ifndef WALSHIP_COMMON_METRICS_H_
#define WALSHIP_COMMON_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace walship {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  class Family {
   public:
    // Counter: adds `delta` (>= 0). Gauge: adds `delta` (any sign).
    void Add(const MetricLabels& labels, double delta) const;
    // Gauge: sets the value.
    void Set(const MetricLabels& labels, double value) const;
    // Histogram: records one observation.
    void Observe(const MetricLabels& labels, double value) const;
    // Gauge: removes every series (a collector that sets the current set of
    // replicas calls it first so departed replicas disappear).
    void Clear() const;

   private:
    friend class MetricsRegistry;
    Family(MetricsRegistry* r, size_t i) : registry_(r), index_(i) {}
    MetricsRegistry* registry_;
    size_t index_;
  };

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Declares a family (or returns the existing one of that name).
  Family Counter(const std::string& name, const std::string& help);
  Family Gauge(const std::string& name, const std::string& help);
  // `bounds`: ascending upper bounds of the buckets; +Inf is implicit.
  Family Histogram(const std::string& name, const std::string& help,
                   std::vector<double> bounds);

  // Runs before every Render(), on the rendering thread, without the
  // registry lock held (it may call Set/Add/Clear).
  void AddCollector(std::function<void()> collector);

  std::string Render();

  // Current value of a counter or gauge series; 0 if absent. For tests.
  double Value(const std::string& name, const MetricLabels& labels);

 private:
  struct Series {
    double value = 0;                // counter, gauge
    std::vector<uint64_t> buckets;   // histogram: cumulative at render time
    uint64_t count = 0;
    double sum = 0;
  };
  struct FamilyData {
    std::string name, help;
    Type type;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // key: rendered label set
  };
  Family Declare(const std::string& name, const std::string& help, Type type,
                 std::vector<double> bounds);
  static std::string LabelKey(const MetricLabels& labels);

  absl::Mutex mu_;
  std::vector<std::unique_ptr<FamilyData>> families_ ABSL_GUARDED_BY(mu_);
  absl::Mutex collectors_mu_;
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(collectors_mu_);
};

// Default buckets for durations in seconds: 50 µs .. 10 s.
std::vector<double> LatencyBuckets();

// Serves GET /metrics (text format 0.0.4) from `registry` on its own threads.
// Start() binds `host:port` (port 0 picks a free one, see port()); Stop()
// stops and joins. The registry must outlive the server.
class MetricsServer {
 public:
  explicit MetricsServer(MetricsRegistry& registry);
  ~MetricsServer();
  // kUnavailable if the address cannot be bound.
  absl::Status Start(const std::string& host, uint16_t port);
  void Stop();
  uint16_t port() const { return port_; }

 private:
  struct Impl;
  MetricsRegistry& registry_;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_METRICS_H_
