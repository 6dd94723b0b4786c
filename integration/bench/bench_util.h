// -----------------------------------------------------------------------------
// File: integration/bench/bench_util.h
// -----------------------------------------------------------------------------
//
// What every benchtool command measures with: the shared clock, percentiles
// and the JSON fields of its one summary line. Thread-safe (no state).
#ifndef WALSHIP_INTEGRATION_BENCH_BENCH_UTIL_H_
#define WALSHIP_INTEGRATION_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace walship::bench {

// CLOCK_MONOTONIC in nanoseconds: Python's time.monotonic(), so the logs of
// different processes line up.
int64_t NowNs();

// Percentile `p` (0-100) of a sorted vector, nearest rank; 0 when empty.
int64_t Pct(const std::vector<int64_t>& sorted, double p);

// "vmhwm_kb" (peak RSS, from /proc/self/status) and "read_bytes" (bytes this
// process made the kernel read from storage, /proc/self/io) as JSON fields.
// Not rusage: a child's ru_maxrss includes its parent's RSS before exec.
std::string SelfStatsJson();

// {"count", "p50_us", "p90_us", "p99_us", "max_us"} of durations in ns.
std::string LatencyJson(std::vector<int64_t> ns);

// Writes `text` to `path` (nothing when `path` is empty).
absl::Status WriteText(const std::string& path, const std::string& text);

}  // namespace walship::bench

#endif  // WALSHIP_INTEGRATION_BENCH_BENCH_UTIL_H_
