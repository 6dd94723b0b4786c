#include "agent/status_pacer.h"

namespace walship::agent {

bool StatusPacer::ShouldSend(uint64_t write, uint64_t flush, absl::Time now) {
  const absl::Duration since = now - sent_at_;
  if (!sent_any_ || reply_requested_ || since >= keepalive_) return true;
  if (write == sent_write_ && flush == sent_flush_) return false;
  if (synchronous_ || since >= async_interval_) return true;
  held_ = true;
  return false;
}

bool StatusPacer::Sent(uint64_t write, uint64_t flush, absl::Time now) {
  const bool released = held_ && now >= sent_at_ + async_interval_;
  sent_any_ = true;
  held_ = false;
  reply_requested_ = false;
  sent_write_ = write;
  sent_flush_ = flush;
  sent_at_ = now;
  return released;
}

absl::Time StatusPacer::Due() const {
  return held_ ? sent_at_ + async_interval_ : absl::InfiniteFuture();
}

}  // namespace walship::agent
