// fake_clock.h: a Clock (common/clock.h) whose time moves only when told.
//
// Now() returns the fake time; Advance(d) moves it; SleepFor(d) does not
// wait: it moves the fake time by `d` at once (so a loop that sleeps between
// tries runs its tries back to back) and counts the call. Thread-safe.
#ifndef WALSHIP_TESTS_FAKES_FAKE_CLOCK_H_
#define WALSHIP_TESTS_FAKES_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace walship::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    if (d > absl::ZeroDuration()) now_ += d;
    ++sleeps_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  // How many times SleepFor was called.
  int sleeps() const {
    absl::MutexLock lock(&mu_);
    return sleeps_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleeps_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_FAKE_CLOCK_H_
