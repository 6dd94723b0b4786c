#include "agent/rate_limiter.h"

#include <algorithm>

namespace walship::agent {

RateLimiter::RateLimiter(uint64_t bytes_per_second, uint64_t burst, Clock clock)
    : rate_(static_cast<double>(bytes_per_second)),
      burst_(burst != 0 ? static_cast<double>(burst)
                        : std::max(1.0, static_cast<double>(bytes_per_second) / 4)),
      clock_(std::move(clock)),
      credit_(burst_),
      last_(clock_()) {}

absl::Duration RateLimiter::Take(uint64_t bytes) {
  absl::Time now = clock_();
  if (now > last_) {
    credit_ = std::min(burst_, credit_ + absl::ToDoubleSeconds(now - last_) * rate_);
    last_ = now;
  }
  credit_ -= static_cast<double>(bytes);
  if (credit_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-credit_ / rate_);
}

ThrottledEvents::ThrottledEvents(ShipperEvents* inner, RateLimiter* limiter,
                                 const std::atomic<bool>& stop, Clock& clock)
    : clock_(clock), inner_(inner), limiter_(limiter), stop_(stop) {}

void ThrottledEvents::OnCheckpoint(const std::string& segment, uint64_t length,
                                   uint32_t crc32c) {
  inner_->OnCheckpoint(segment, length, crc32c);
}

void ThrottledEvents::OnCheckpointWithPatches(const std::string& segment, uint64_t length,
                                              uint32_t crc32c,
                                              const std::vector<SegmentPatch>& patches) {
  inner_->OnCheckpointWithPatches(segment, length, crc32c, patches);
}

void ThrottledEvents::OnSent(const Position& sent, uint64_t bytes, bool zerocopy) {
  inner_->OnSent(sent, bytes, zerocopy);
  absl::Duration wait = limiter_->Take(bytes);
  absl::Time until = clock_.Now() + wait;
  while (!stop_.load() && wait > absl::ZeroDuration()) {
    clock_.SleepFor(std::min(wait, absl::Milliseconds(50)));
    wait = until - clock_.Now();
  }
}

}  // namespace walship::agent
