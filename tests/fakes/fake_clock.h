// fake_clock.h: a Clock (common/clock.h) whose time moves only when told.
//
// Now() returns the fake time; Advance(d) moves it. What SleepFor(d) does is
// chosen at construction:
//   * Sleeps::kAdvanceTime (the default): it does not wait, it moves the
//     fake time by `d` at once (so a loop that sleeps between tries runs its
//     tries back to back) and counts the call;
//   * Sleeps::kWaitForAdvance: it blocks until Advance() has moved the time
//     to the end of the pause (or Release() was called), so a test steps
//     another thread's pauses itself: AwaitSleeper() waits for that thread
//     to be in such a pause, then the test advances and looks.
// Thread-safe.
#ifndef WALSHIP_TESTS_FAKES_FAKE_CLOCK_H_
#define WALSHIP_TESTS_FAKES_FAKE_CLOCK_H_

#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace walship::testing {

class FakeClock final : public Clock {
 public:
  enum class Sleeps { kAdvanceTime, kWaitForAdvance };

  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000),
                     Sleeps sleeps = Sleeps::kAdvanceTime)
      : sleeps_mode_(sleeps), now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    ++sleeps_;
    if (d <= absl::ZeroDuration()) return;
    if (sleeps_mode_ == Sleeps::kAdvanceTime) {
      now_ += d;
      return;
    }
    const absl::Time wake = now_ + d;
    auto it = wakes_.insert(wake);
    auto woken = [this, wake]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return released_ || now_ >= wake;
    };
    mu_.Await(absl::Condition(&woken));
    wakes_.erase(it);
  }
  // The fake time in nanoseconds since the epoch: monotonic as long as the
  // test only moves it forward.
  int64_t MonotonicNanos() const override {
    absl::MutexLock lock(&mu_);
    return absl::ToUnixNanos(now_);
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
  // kWaitForAdvance: waits (real time, at most `timeout`) until a thread is
  // in SleepFor and the current fake time does not end its pause; false
  // when none is by then.
  bool AwaitSleeper(absl::Duration timeout = absl::Seconds(30)) const {
    absl::MutexLock lock(&mu_);
    auto sleeping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !released_ && !wakes_.empty() && *wakes_.rbegin() > now_;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&sleeping), timeout);
  }
  // kWaitForAdvance: ends every pause, now and later, at once (to let the
  // threads under test finish).
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

 private:
  const Sleeps sleeps_mode_;
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleeps_ ABSL_GUARDED_BY(mu_) = 0;
  // When each thread in SleepFor (kWaitForAdvance) wakes.
  std::multiset<absl::Time> wakes_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_FAKE_CLOCK_H_
