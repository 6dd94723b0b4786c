// status_watch.h: the arithmetic and formatting behind `walship-status
// --watch`: throughput from successive counter values, catch-up progress and
// ETA, human-readable bytes, rates and durations.
//
// Pure functions and a small per-replica tracker; no I/O, no clock (callers
// pass the sample times), so everything here is unit-tested with made-up
// samples (tests/status/status_watch_test.cc). Not thread-safe.
#ifndef WALSHIP_STATUS_STATUS_WATCH_H_
#define WALSHIP_STATUS_STATUS_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace walship {
namespace status {

// Decimal units, three significant digits: "0 B", "999 B", "1.50 kB",
// "12.3 MB", "1.00 GB". Negative values are formatted as 0.
std::string FormatBytes(double bytes);

// FormatBytes(bytes_per_sec) + "/s", e.g. "20.0 MB/s".
std::string FormatRate(double bytes_per_sec);

// A remaining time, rounded up to the second: "0s", "45s", "3m05s",
// "2h03m"; at or past 100 hours ">99h".
std::string FormatEta(absl::Duration d);

// `width` cells between brackets, the first round(fraction * width) of them
// '#', the rest '.': ProgressBar(0.5, 4) == "[##..]". fraction is clamped to
// [0, 1].
std::string ProgressBar(double fraction, int width);

// One observation of one replica.
struct Sample {
  absl::Time time;
  uint64_t bytes_sent = 0;  // payload bytes the agent wrote to its data socket (a counter)
  uint64_t lag_bytes = 0;   // shippable bytes not yet flushed by the replica
};

// What the watcher shows for one replica after a sample.
struct Progress {
  bool have_rate = false;  // false on the first sample (nothing to compare with)
  double bytes_per_sec = 0;      // shipping throughput since the previous sample
  double catchup_per_sec = 0;    // decrease of lag_bytes per second (negative: falling behind)
  bool moving = false;           // bytes were shipped since the previous sample
  // Set when lag_bytes > 0 and the replica is moving:
  bool show_progress = false;
  double fraction_done = 0;            // of the largest lag seen since it was last 0
  std::optional<absl::Duration> eta;   // lag / catch-up rate; unset when not catching up
};

// Follows one replica across samples. A counter that goes backwards (the
// agent restarted) is taken as a new start: that sample has no rate.
class ReplicaTracker {
 public:
  Progress Update(const Sample& s);

 private:
  std::optional<Sample> prev_;
  uint64_t peak_lag_ = 0;
};

// The line printed under a replica's row while it catches up, e.g.
// "[########............]  40%  lag 12.3 MB  catching up at 4.00 MB/s  ETA 3s";
// empty unless p.show_progress.
std::string ProgressLine(const Progress& p, uint64_t lag_bytes, int bar_width = 30);

}  // namespace status
}  // namespace walship

#endif  // WALSHIP_STATUS_STATUS_WATCH_H_
