// session.h: one replication session of walship-replica, from recovery to
// the last flush.
//
// Data path: data socket -> Receive() (frames) -> SegmentWriter (splice or
// copy into NAME.partial) -> FlushCycle() (fdatasync, finalize, record) ->
// acknowledgement on the control stream (ControlClient's Session stream).
//
// Open() runs once, on the caller's thread: it recovers the durable point
// from the destination (state_store.h, SegmentWriter::Recover, keeping the
// unrecorded tail unless the last session's flush failed), handshakes
// (control_client.h: the tail is kept or cut as the agent's prefix check
// says), records a confirmed tail and binds the directory to the stream,
// then connects the data socket and presents the one-time token. Run() then
// runs the session until it fails, on these threads:
//   - the caller's thread, ReadControl(): reads the control stream
//     (checkpoints -> SegmentWriter, acknowledgement pacing, the agent's
//     errors); when the stream ends it ends the session, joins the others
//     and winds down (a last flush and record);
//   - ws-receive, Receive(): reads frames from the data socket into the
//     SegmentWriter; after each DATA frame it reads on while the whole next
//     frame is already waiting, runs a flush cycle itself once the socket is
//     empty and no cycle is running, or wakes the flusher (receive_policy.h);
//   - ws-flush, FlushLoop(): runs flush cycles when woken (a frame, a
//     checkpoint, new pacing) or every flush_interval, and ends the session
//     when the agent has been silent for agent_silence_timeout;
//   - ws-record, RecordLoop(): saves the newest durable point a cycle
//     returned to walship.state, at most every record_interval, off the
//     acknowledgement path;
//   - ws-drop, DropLoop(): drops published segments' pages from the page
//     cache (1-5 ms each) without delaying the next cycle.
// A flush cycle makes what arrived durable, names it in walship.progress,
// and only then acknowledges it: only durable positions are ever
// acknowledged as flushed. Cycles never overlap (flush_mu_).
//
// Ending: Fail() records the first error and unblocks every thread (shuts
// the data socket down, cancels the control stream); Run() returns that
// status, and last_flush() the wind-down's (the Replica decides which one
// counts). A failed fdatasync sets `after_failed_flush` for the next session.
//
// Ownership: the Session owns the SegmentWriter, the state store, the
// ControlClient, the data socket and the control stream. The options,
// metrics and `after_failed_flush` are borrowed from the Replica and must
// outlive it.
//
// Thread-safety: Open() then Run() on one thread, once each; Fail() from any
// thread (Replica::Stop()), at any time.
#ifndef WALSHIP_REPLICA_SESSION_H_
#define WALSHIP_REPLICA_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/pacer.h"
#include "common/position.h"
#include "common/sched_slice.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/net/data_conn.h"
#include "common/sys/unique_fd.h"
#include "replica/compressed_frames.h"
#include "replica/control_client.h"
#include "replica/replica_options.h"
#include "replica/segment_writer.h"
#include "replica/state_store.h"

namespace walship::replica {

class Session {
 public:
  Session(sys::SysCalls& sys, const ReplicaOptions& options, MetricsRegistry& metrics,
          std::atomic<bool>& after_failed_flush,
          Clock& clock = DefaultClock());
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Recovery, handshake and data socket. An error means the session never
  // started (nothing to wind down).
  absl::Status Open();
  // After a successful Open(): runs the threads until the session fails,
  // winds down and returns why it ended.
  absl::Status Run();
  // After Run(): the status of the wind-down's last flush (OK when it
  // made everything received durable).
  const absl::Status& last_flush() const { return last_flush_; }
  // Ends the session with `s` unless it already failed. Any thread.
  void Fail(absl::Status s);
  // After a successful Open(): the timeline the agent said it serves
  // (HandshakeResponse.timeline; 0: none).
  uint32_t agent_timeline() const { return handshake_.timeline(); }

 private:
  // Open()'s steps.
  absl::Status Recover();
  absl::Status Handshake();
  absl::Status ConnectData();

  // The threads (see the top of this file).
  void ReadControl();
  void Receive();
  void FlushLoop();
  void RecordLoop();
  void DropLoop();

  // Receive()'s reading of one frame; false once the session failed.
  bool ReceiveFrame(std::string& name);
  // After a DATA frame of `length` bytes: who syncs it. False once the
  // session failed.
  bool AfterData(uint32_t length);
  // One flush cycle; false once the session failed.
  bool FlushCycle();
  bool FlushCycleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  // FlushCycleLocked()'s metrics for the point `dp` it reached, its flush
  // having taken `flush_took`.
  void CountCycle(const DurablePoint& dp, absl::Duration flush_took)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  // Acknowledges `dp` if the pacer says so; false when the stream closed.
  bool MaybeAck(const DurablePoint& dp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  bool SendAck(const DurablePoint& dp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  // Saves `dp` to walship.state unless a newer generation was saved.
  absl::Status Record(const DurablePoint& dp, uint64_t gen) ABSL_LOCKS_EXCLUDED(save_mu_);
  void WriteProgress(const DurablePoint& dp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  void StopRecorder() ABSL_LOCKS_EXCLUDED(latest_mu_);
  void StopDropper() ABSL_LOCKS_EXCLUDED(drop_mu_);
  // After the threads ended: the last flush and record.
  absl::Status WindDown();

  // The flusher's wake-up.
  void Kick() ABSL_LOCKS_EXCLUDED(kick_mu_);
  void WaitKick(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(kick_mu_);
  void Heard() ABSL_LOCKS_EXCLUDED(fail_mu_);
  absl::Time last_heard() ABSL_LOCKS_EXCLUDED(fail_mu_);
  bool failed() ABSL_LOCKS_EXCLUDED(fail_mu_);
  absl::Status status() ABSL_LOCKS_EXCLUDED(fail_mu_);
  // What Fail() unblocks: the data socket and the control stream's context.
  void Attach(int data_fd, grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(fail_mu_);
  void Detach() ABSL_LOCKS_EXCLUDED(fail_mu_);
  // Opens the stream that carries acknowledgements alone, when the agent
  // takes them so (HandshakeResponse.ack_stream).
  void OpenAckStream() ABSL_LOCKS_EXCLUDED(fail_mu_);

  Clock& clock_;

  sys::SysCalls& sys_;
  const ReplicaOptions& options_;
  MetricsRegistry& metrics_;
  std::atomic<bool>& after_failed_flush_;

  // Set by Open() before any thread starts, then read-only (the writer is
  // thread-safe itself).
  StateStore store_;
  SegmentWriter writer_;
  std::string stream_id_;
  DurablePoint durable_;  // where the session resumed
  std::unique_ptr<ControlClient> control_;
  walship::v1::HandshakeResponse handshake_;
  sys::UniqueFd sock_;
  // How frames come off sock_ (plain, or TLS: replica/data_tls.h).
  std::unique_ptr<net::DataConn> conn_;
  sys::TransferOptions io_;
  uint32_t max_payload_ = 0;
  // Set by Run() before the threads start: the compression agreed.
  std::unique_ptr<CompressedFrames> compressed_;

  // Set by Run() before the threads start: the control stream. ReadControl()
  // reads it; flush cycles (serialized by flush_mu_) write it; Run() finishes
  // it after the threads ended.
  grpc::ClientContext session_ctx_;
  std::unique_ptr<ControlClient::SessionStream> stream_;
  // Acknowledgements go on a stream of their own where the agent takes them
  // so, on a connection of their own (ControlClient::OpenAckSession): a
  // call's blocking Write and blocking Read share one completion queue, so
  // on stream_ each Write's completion would wake the thread reading events,
  // and so would the agent's flow-control answer on a shared connection
  // (common/sys/grpc_polling.h). Null: acknowledgements go on stream_.
  grpc::ClientContext ack_ctx_;
  std::unique_ptr<ControlClient::SessionStream> ack_stream_;

  // The session's end, and the agent's last sign of life.
  absl::Mutex fail_mu_;
  bool failed_ ABSL_GUARDED_BY(fail_mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(fail_mu_);
  int data_fd_ ABSL_GUARDED_BY(fail_mu_) = -1;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(fail_mu_) = nullptr;
  grpc::ClientContext* ack_ctx_attached_ ABSL_GUARDED_BY(fail_mu_) = nullptr;
  absl::Time last_heard_ ABSL_GUARDED_BY(fail_mu_) = clock_.Now();

  // Wakes the flusher.
  absl::Mutex kick_mu_;
  bool kicked_ ABSL_GUARDED_BY(kick_mu_) = false;

  // The position record (state_store.h) is off the acknowledgement path.
  // Flush() saves it where recovery needs it (the first bytes of a segment,
  // a publication), the recorder thread saves the newest durable point at
  // most every record_interval, and the end of the session saves the last.
  // Each cycle has a generation; a save never replaces a newer cycle's
  // record (the recorder may hold an older point than the one a cycle just
  // saved alongside its sync). One saver at a time; held across the
  // fdatasync.
  absl::Mutex save_mu_ ABSL_ACQUIRED_AFTER(flush_mu_);
  ReplicaState saved_ ABSL_GUARDED_BY(save_mu_);
  uint64_t saved_gen_ ABSL_GUARDED_BY(save_mu_) = 0;

  // What the recorder saves: the newest point a cycle returned. Never held
  // across I/O: the flusher takes it.
  absl::Mutex latest_mu_ ABSL_ACQUIRED_AFTER(flush_mu_);
  DurablePoint latest_ ABSL_GUARDED_BY(latest_mu_);
  uint64_t latest_gen_ ABSL_GUARDED_BY(latest_mu_) = 0;
  bool record_stop_ ABSL_GUARDED_BY(latest_mu_) = false;

  // Published pages to drop (SegmentWriter::DropPublishedPages).
  absl::Mutex drop_mu_ ABSL_ACQUIRED_AFTER(flush_mu_);
  bool drop_due_ ABSL_GUARDED_BY(drop_mu_) = false;
  bool drop_stop_ ABSL_GUARDED_BY(drop_mu_) = false;

  // One flush cycle at a time: the flusher's or the receiver's.
  absl::Mutex flush_mu_;
  uint64_t cycle_gen_ ABSL_GUARDED_BY(flush_mu_) = 0;
  Position last_progress_ ABSL_GUARDED_BY(flush_mu_);
  // Before every acknowledgement: how far the acknowledged bytes reach, for
  // a restart after a crash of this process (the record may trail).
  ProgressFile progress_ ABSL_GUARDED_BY(flush_mu_);
  bool progress_warned_ ABSL_GUARDED_BY(flush_mu_) = false;
  // When to acknowledge (common/pacer.h; a keepalive ack every second even
  // when nothing moved). Its interval is what the agent last said
  // (AckPacing): zero, at once, until it says otherwise. A position held
  // back is acknowledged by the first cycle after ack_due_us_ (the flusher
  // wakes for it).
  Pacer<Position> acks_ ABSL_GUARDED_BY(flush_mu_){absl::Seconds(1)};
  WriterCounters counted_ ABSL_GUARDED_BY(flush_mu_);
  std::string last_complete_ ABSL_GUARDED_BY(flush_mu_);
  std::atomic<int64_t> ack_pacing_us_{0};
  std::atomic<int64_t> ack_due_us_;

  // Run()'s thread, after the others ended.
  absl::Status last_flush_;

  // Receive() only: bytes received since the last sync was decided.
  uint64_t deferred_ = 0;
  // The newest timeline held or received (agent_list.h's fence): set by
  // Handshake(), then advanced by Receive() only.
  uint32_t fence_timeline_ = 0;

  MetricsRegistry::Family flush_seconds_;
  MetricsRegistry::Family received_;
  MetricsRegistry::Family completed_;
  MetricsRegistry::Family durable_offset_;
  // Receive() only: the receiving thread's scheduling (common/sched_slice.h),
  // out of the real-time policy while a backlog arrives.
  CommitPathThread receive_sched_;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_SESSION_H_
