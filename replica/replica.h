// replica.h: walship-replica, assembled.
//
// Run() subscribes to the agent and keeps the destination directory an exact,
// durable copy of the agent's WAL stream until Stop() is called or a fatal
// error occurs. Each session:
//   1. recovers the durable position from the directory (state_store.h,
//      segment_writer.h);
//   2. handshakes over gRPC, presenting the stream identity, the durable
//      position and the CRC of the durable prefix; bytes of NAME.partial past
//      the recorded position (received before a stop, never recorded) are
//      presented first and kept only if the agent's prefix check accepts
//      them, else cut off (SegmentWriter::Recover with Tail::kKeep);
//   3. connects the data socket and presents the one-time token;
//   4. runs three threads: the receiver (frames -> SegmentWriter), the
//      flusher (fdatasync, finalize, persist state, then Ack: only durable
//      positions are ever acknowledged as flushed) and the control reader
//      (checkpoints, heartbeats, errors). The receiver reads on while the
//      whole next frame is already waiting, and once the data socket is
//      empty and no flush cycle is running it runs the cycle itself instead
//      of waking the flusher (receive_policy.h); cycles never overlap.
// Transient failures (network, agent restart, a corrupt frame, a failed
// fdatasync) end the session; the next one starts after a backoff from the
// durable position. A refusal the agent proves (REASON_DIVERGENT) is the only
// one that cuts bytes received before a stop and never recorded; any other
// keeps them. Run() holds DEST/walship.lock (dest_lock.h) throughout.
// Failures an operator must resolve (another stream, divergent history, a gap
// behind the agent's retention) stop Run() with kFailedPrecondition.
//
// Thread-safety: Run() on one thread; Stop() from any thread (e.g. a signal
// watcher).
#ifndef WALSHIP_REPLICA_REPLICA_H_
#define WALSHIP_REPLICA_REPLICA_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/sys/syscalls.h"
#include "replica/replica_options.h"

namespace walship::replica {

class SessionRun;

class Replica {
 public:
  // `metrics` (optional, not owned, must outlive the object) receives the
  // walship_replica_* series.
  Replica(sys::SysCalls& sys, ReplicaOptions options, MetricsRegistry* metrics = nullptr);
  ~Replica();

  absl::Status Run();
  void Stop();

  // True for statuses that end Run(): retrying cannot help.
  static bool IsFatal(const absl::Status& s);

 private:
  absl::Status RunOnce();
  // Counts why a session ended, for the metrics.
  void CountFailure(const absl::Status& s);

  sys::SysCalls& sys_;
  const ReplicaOptions options_;
  MetricsRegistry own_metrics_;  // used when the caller passes none
  MetricsRegistry& metrics_;
  std::atomic<bool> stopping_{false};
  // Set when a session reached the data socket; resets the backoff.
  std::atomic<bool> established_{false};
  // Set when a session's writer failed a flush (SegmentWriter::Flush): the
  // next session recovers without a tail.
  std::atomic<bool> after_failed_flush_{false};
  absl::Mutex mu_;
  SessionRun* current_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_REPLICA_H_
