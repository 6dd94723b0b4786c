// rate_limiter.h: a token bucket that paces one replica's shipper.
//
// The bucket holds up to `burst` bytes of credit and refills at
// `bytes_per_second`. Take(n) spends n bytes and returns how long the caller
// must wait before sending more so that, over any window, the bytes sent stay
// within rate * window + burst. Credit may go negative (a frame larger than
// the remaining credit is never split: the wait pays the debt afterwards), so
// the long-run rate is exact whatever the frame sizes.
//
// Time is read from the injected clock, so tests need no sleeps.
//
// Thread-safety: none; one limiter per shipper thread.
#ifndef WALSHIP_AGENT_RATE_LIMITER_H_
#define WALSHIP_AGENT_RATE_LIMITER_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/time/time.h"
#include "agent/shipper.h"
#include "common/clock.h"

namespace walship::agent {

class RateLimiter {
 public:
  using Clock = std::function<absl::Time()>;
  // `bytes_per_second` > 0. `burst` = 0 picks a quarter second's worth.
  RateLimiter(uint64_t bytes_per_second, uint64_t burst, Clock clock);

  // Spends `bytes`; returns the wait before the next send (zero when credit
  // remains).
  absl::Duration Take(uint64_t bytes);

 private:
  const double rate_;   // bytes per second
  const double burst_;  // bytes
  const Clock clock_;
  double credit_;       // bytes; may be negative
  absl::Time last_;
};

// ShipperEvents decorator: forwards every event, then after OnSent sleeps as
// long as the limiter says, in slices of at most 50 ms so that `stop` ends
// the wait promptly. The shipper calls OnSent after every DATA frame on its
// own thread, so the sleep paces that replica's send loop and no other.
class ThrottledEvents final : public ShipperEvents {
 public:
  // Waits are timed and slept on `clock`.
  ThrottledEvents(ShipperEvents* inner, RateLimiter* limiter, const std::atomic<bool>& stop,
                  Clock& clock = DefaultClock());
  void OnCheckpoint(const std::string& segment, uint64_t length, uint32_t crc32c) override;
  void OnCheckpointWithPatches(const std::string& segment, uint64_t length, uint32_t crc32c,
                               const std::vector<SegmentPatch>& patches) override;
  void OnSent(const Position& sent, uint64_t bytes, bool zerocopy) override;
  void OnCompressed(uint64_t raw, uint64_t wire) override { inner_->OnCompressed(raw, wire); }

 private:
  Clock& clock_;
  ShipperEvents* const inner_;
  RateLimiter* const limiter_;
  const std::atomic<bool>& stop_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_RATE_LIMITER_H_
