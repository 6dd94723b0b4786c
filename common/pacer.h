// -----------------------------------------------------------------------------
// File: common/pacer.h
// -----------------------------------------------------------------------------
//
// Decides when to send a peer the newest value of something that keeps
// moving: a replica's acknowledgement of its durable position to the agent,
// the agent's status update of the replicas' positions to the primary.
//
// With a zero interval (the default) every new value goes out at once:
// something may be waiting for it (a synchronous commit). With an interval,
// a new value goes out at once only if the last send is at least that old;
// otherwise it is held back until Due(), one interval after the last send,
// when the caller asks again and sends the newest value then. So the peer
// hears at most one new value per interval, none later than one interval
// after it moved. Changing the interval applies to a value already held
// (zero: it is due at once).
//
// Independently of values: a send at least every `keepalive`, and at once
// after RequestReply() (the peer asked) or before anything was sent.
//
// T must be copyable and equality-comparable. Thread-compatible; time comes
// from the caller, so tests need no clock.
#ifndef WALSHIP_COMMON_PACER_H_
#define WALSHIP_COMMON_PACER_H_

#include "absl/time/time.h"

namespace walship {

template <typename T>
class Pacer {
 public:
  explicit Pacer(absl::Duration keepalive) : keepalive_(keepalive) {}

  void set_interval(absl::Duration interval) { interval_ = interval; }
  absl::Duration interval() const { return interval_; }

  // The peer asked for a reply.
  void RequestReply() { reply_requested_ = true; }

  // True when `value` should be sent at `now`; the caller then sends it and
  // calls Sent(). False holds it back when it differs from the last value
  // sent (see Due()).
  bool ShouldSend(const T& value, absl::Time now) {
    const absl::Duration since = now - sent_at_;
    if (!sent_any_ || reply_requested_ || since >= keepalive_) return true;
    if (value == sent_) return false;
    if (since >= interval_) return true;
    held_ = true;
    return false;
  }

  // Returns true when the send carried a value held back by a nonzero
  // interval that had fallen due (rather than one sent at once).
  bool Sent(const T& value, absl::Time now) {
    const bool released =
        held_ && interval_ > absl::ZeroDuration() && now >= sent_at_ + interval_;
    sent_any_ = true;
    held_ = false;
    reply_requested_ = false;
    sent_ = value;
    sent_at_ = now;
    return released;
  }

  // When a held-back value must go out (call ShouldSend() again then);
  // InfiniteFuture() when none is held back.
  absl::Time Due() const { return held_ ? sent_at_ + interval_ : absl::InfiniteFuture(); }

 private:
  absl::Duration keepalive_;
  absl::Duration interval_ = absl::ZeroDuration();
  bool reply_requested_ = false;
  bool sent_any_ = false;
  bool held_ = false;
  T sent_{};
  absl::Time sent_at_ = absl::InfinitePast();
};

}  // namespace walship

#endif  // WALSHIP_COMMON_PACER_H_
