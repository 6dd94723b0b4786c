// -----------------------------------------------------------------------------
// File: agent/status_pacer.h
// -----------------------------------------------------------------------------
//
// Decides when the flush feed sends the primary a standby status update
// (the replicas' write and flush positions).
//
// While the primary may wait for the agent (its walsender's sync_state is
// sync, quorum or potential, or not known yet), every new position goes out
// at once: a synchronous commit returns only when it arrives. While it is
// async, nothing waits for it except the lag columns of
// pg_stat_replication, and each update costs the primary a walsender
// wake-up and the agent a send; a new position then goes out at once only
// if the previous update is at least `async_interval` old, and otherwise
// when that interval has passed (Due()), carrying the newest position. So
// an async primary hears at most one update per interval, none later than
// one interval after the position moved.
//
// Independently of positions: an update at least every `keepalive`
// (inside wal_sender_timeout), and at once when the server asked for one.
//
// Thread-compatible; time comes from the caller, so tests need no clock.
#ifndef WALSHIP_AGENT_STATUS_PACER_H_
#define WALSHIP_AGENT_STATUS_PACER_H_

#include <cstdint>

#include "absl/time/time.h"

namespace walship::agent {

class StatusPacer {
 public:
  StatusPacer(absl::Duration async_interval, absl::Duration keepalive)
      : async_interval_(async_interval), keepalive_(keepalive) {}

  // Whether the primary may wait for these updates; true until told.
  void set_synchronous(bool synchronous) { synchronous_ = synchronous; }
  bool synchronous() const { return synchronous_; }

  // The server asked for a reply (keepalive with the reply flag).
  void RequestReply() { reply_requested_ = true; }

  // True when an update with (write, flush) should be sent at `now`; the
  // caller then sends it and calls Sent(). False leaves it pending when the
  // position moved (see Due()).
  bool ShouldSend(uint64_t write, uint64_t flush, absl::Time now);
  // Returns true when the update carried a held-back position that had
  // fallen due (rather than one an acknowledgement sent early).
  bool Sent(uint64_t write, uint64_t flush, absl::Time now);

  // When a held-back position must go out (call ShouldSend() again then);
  // InfiniteFuture() when none is held back.
  absl::Time Due() const;

 private:
  absl::Duration async_interval_;
  absl::Duration keepalive_;
  bool synchronous_ = true;
  bool reply_requested_ = false;
  bool sent_any_ = false;
  bool held_ = false;
  uint64_t sent_write_ = 0;
  uint64_t sent_flush_ = 0;
  absl::Time sent_at_ = absl::InfinitePast();
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_STATUS_PACER_H_
