// -----------------------------------------------------------------------------
// File: common/clock.h
// -----------------------------------------------------------------------------
//
// The time seam. Code that reads the time or waits for a while does it
// through a `Clock`, so that tests can control time (tests/fakes/fake_clock.h)
// and need no real sleeps, the way all OS access goes through
// sys::SysCalls.
//
// Contract: Now() is the wall-clock time (absl::Now() in production);
// SleepFor(d) returns once `d` has passed on this clock (at once for d <= 0);
// MonotonicNanos() is CLOCK_MONOTONIC in nanoseconds in production: it never
// goes back, and every process on the machine reads the same clock, so two
// daemons' readings can be compared (common/commit_trace.h). None of them
// logs, fails or allocates.
//
// Ownership and lifetime: objects that read the time receive a `Clock&`
// through their constructor (defaulting to DefaultClock()) and must not
// outlive it.
//
// Thread-safety: RealClock is stateless and safe from any number of threads;
// fakes document their own rules.
#ifndef WALSHIP_COMMON_CLOCK_H_
#define WALSHIP_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace walship {

class Clock {
 public:
  Clock() = default;
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;
  virtual void SleepFor(absl::Duration d) = 0;
  virtual int64_t MonotonicNanos() const = 0;
};

// The production clock: absl::Now(), absl::SleepFor() and CLOCK_MONOTONIC.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  int64_t MonotonicNanos() const override {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
};

// The process-lifetime RealClock (never destroyed). The default of every
// constructor that takes a Clock.
inline Clock& DefaultClock() {
  static Clock* const clock = new RealClock();
  return *clock;
}

}  // namespace walship

#endif  // WALSHIP_COMMON_CLOCK_H_
