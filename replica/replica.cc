#include "replica/replica.h"

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

#include <atomic>
#include <limits>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "common/tls.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"
#include "common/wire/frame.h"
#include "proto/walship.grpc.pb.h"
#include "replica/dest_lock.h"
#include "replica/receive_policy.h"
#include "replica/segment_writer.h"
#include "replica/state_store.h"
#include "spdlog/spdlog.h"
#include "common/pacer.h"
#include "common/thread_name.h"

namespace walship::replica {
namespace {

// The record of `dp` for stream `stream`.
ReplicaState StateOf(const std::string& stream, const DurablePoint& dp) {
  return ReplicaState{stream, dp.position, dp.complete, dp.prefix_crc32c};
}

void SetPos(const Position& p, walship::v1::Position* out) {
  out->set_segment(p.segment);
  out->set_offset(p.offset);
}

// At most this many received bytes wait for a sync while the receiver reads
// on: a catch-up frame (1 MiB by default) goes to the flusher at once.
constexpr uint64_t kMaxDeferredBytes = 1u << 20;

// Complete segments presented at handshake (HandshakeRequest.held_segments).
constexpr size_t kMaxHeldSegments = 4096;

// A long wait is normal between frames: the primary may be idle. The agent's
// heartbeats on the control stream detect a dead peer instead.
constexpr absl::Duration kIdleFrameWait = absl::Hours(24 * 365);

}  // namespace

// One session: the threads and the state they share. Fail() records the
// first error and unblocks every thread.
class SessionRun {
 public:
  SessionRun(sys::SysCalls& sys, const ReplicaOptions& options)
      : sys_(sys), options_(options) {}

  void Fail(absl::Status s) {
    absl::MutexLock lock(&mu_);
    if (failed_) return;
    failed_ = true;
    status_ = std::move(s);
    if (data_fd_ >= 0) ::shutdown(data_fd_, SHUT_RDWR);
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  bool failed() {
    absl::MutexLock lock(&mu_);
    return failed_;
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  void Attach(int data_fd, grpc::ClientContext* ctx) {
    absl::MutexLock lock(&mu_);
    data_fd_ = data_fd;
    ctx_ = ctx;
    if (failed_) {
      if (data_fd_ >= 0) ::shutdown(data_fd_, SHUT_RDWR);
      if (ctx_ != nullptr) ctx_->TryCancel();
    }
  }
  void Detach() {
    absl::MutexLock lock(&mu_);
    data_fd_ = -1;
    ctx_ = nullptr;
  }
  // Wakes the flusher.
  void Kick() {
    absl::MutexLock lock(&kick_mu_);
    kicked_ = true;
  }
  // Waits for a kick or the timeout.
  void WaitKick(absl::Duration timeout) {
    absl::MutexLock lock(&kick_mu_);
    kick_mu_.AwaitWithTimeout(absl::Condition(&kicked_), timeout);
    kicked_ = false;
  }
  void Heard() {
    absl::MutexLock lock(&mu_);
    last_heard_ = absl::Now();
  }
  absl::Time last_heard() {
    absl::MutexLock lock(&mu_);
    return last_heard_;
  }

 private:
  sys::SysCalls& sys_;
  const ReplicaOptions& options_;
  absl::Mutex mu_;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int data_fd_ ABSL_GUARDED_BY(mu_) = -1;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_heard_ ABSL_GUARDED_BY(mu_) = absl::Now();
  absl::Mutex kick_mu_;
  bool kicked_ ABSL_GUARDED_BY(kick_mu_) = false;
};

Replica::Replica(sys::SysCalls& sys, ReplicaOptions options, MetricsRegistry* metrics)
    : sys_(sys), options_(std::move(options)), metrics_(metrics ? *metrics : own_metrics_) {
  // Declared up front so every series exists (at 0) from the first scrape.
  metrics_.Counter("walship_replica_sessions_total", "Sessions started (handshakes sent).");
  metrics_.Counter("walship_replica_session_failures_total",
                   "Sessions that ended with an error, by status code.");
  metrics_.Counter("walship_replica_checksum_failures_total",
                   "Frames or segments whose CRC32C did not match; nothing of them was kept.");
  metrics_.Counter("walship_replica_divergences_total",
                   "Divergent history detected (the replica's bytes differ from the agent's).");
  metrics_.Counter("walship_replica_disk_full_total", "Sessions ended by a full disk.");
  metrics_.Counter("walship_replica_bytes_received_total", "Payload bytes written, by path.");
  metrics_.Counter("walship_replica_segments_completed_total",
                   "Segments verified, fdatasync'ed and renamed to their final name.");
  metrics_.Histogram("walship_replica_flush_seconds",
                     "Time to make received bytes durable before acknowledging them: "
                     "fdatasync, finalize (the position record only where a cycle enters "
                     "or publishes a segment).",
                     {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  // Fine buckets: the disk's own flush latency, against which the lag of
  // acknowledgements is judged (from 50 us to 1 s, 25 % apart).
  std::vector<double> sync_bounds;
  for (double b = 50e-6; b < 1.0; b *= 1.25) sync_bounds.push_back(b);
  metrics_.Histogram("walship_replica_data_fdatasync_seconds",
                     "Duration of each fdatasync of a segment file (the data's device flush).",
                     sync_bounds);
  metrics_.Gauge("walship_replica_durable_offset_bytes",
                 "Byte offset of the durable position within its segment.");
}

void Replica::CountFailure(const absl::Status& s) {
  metrics_.Counter("walship_replica_session_failures_total", "")
      .Add({{"code", absl::StatusCodeToString(s.code())}}, 1);
  const bool checksum = absl::StrContains(s.message(), "checksum mismatch") ||
                        absl::StrContains(s.message(), "CRC32C");
  if (checksum) metrics_.Counter("walship_replica_checksum_failures_total", "").Add({}, 1);
  const Reason reason = ReasonOf(s);
  if (reason == Reason::kDivergent || reason == Reason::kDamagedCopy) {
    metrics_.Counter("walship_replica_divergences_total", "").Add({}, 1);
  }
  if (absl::IsResourceExhausted(s)) metrics_.Counter("walship_replica_disk_full_total", "").Add({}, 1);
}

Replica::~Replica() = default;

bool Replica::IsFatal(const absl::Status& s) {
  switch (ReasonOf(s)) {
    // Trouble on the agent's side that it may get over (its source failed,
    // is not a primary, is behind us): the replica holds nothing wrong and
    // keeps asking, loudly, every backoff.
    case Reason::kSourceFailed:
    case Reason::kNotPrimary:
    case Reason::kNotReady:
    case Reason::kSourceBehind:
    case Reason::kSourceChanged:
      return false;
    default:
      break;
  }
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:
      return false;
  }
}

void Replica::Stop() {
  stopping_.store(true);
  absl::MutexLock lock(&mu_);
  if (current_ != nullptr) current_->Fail(absl::CancelledError("stopping"));
}

absl::Status Replica::Run() {
  absl::StatusOr<DestLock> lock = DestLock::Acquire(sys_, options_.dest);
  if (!lock.ok()) {
    spdlog::error("{}", lock.status().ToString());
    return lock.status();
  }
  absl::Duration backoff = options_.min_backoff;
  while (!stopping_.load()) {
    absl::Time began = absl::Now();
    absl::Status s = RunOnce();
    if (stopping_.load()) break;
    CountFailure(s);
    if (IsFatal(s)) {
      spdlog::error("stopping: {} -- an operator must resolve this; restarting will "
                    "not help until then",
                    s.ToString());
      return s;
    }
    // A session that got as far as shipping resets the backoff: an agent
    // restart is not a reason to wait longer each time.
    if (established_.exchange(false) || absl::Now() - began > absl::Seconds(10)) {
      backoff = options_.min_backoff;
    }
    if (absl::IsResourceExhausted(s)) {
      // Disk full (or out of descriptors): everything durable stays, nothing
      // new is acknowledged, and the next session resumes from the durable
      // position once space returns.
      struct statvfs v;
      uint64_t free_bytes = statvfs(options_.dest.c_str(), &v) == 0
                                ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize
                                : 0;
      spdlog::error("disk full in {}: {} bytes free; acknowledging nothing new; retrying in {} "
                    "({})",
                    options_.dest, free_bytes, absl::FormatDuration(backoff), s.ToString());
    } else {
      spdlog::warn("session ended: {}; retrying in {}", s.ToString(),
                   absl::FormatDuration(backoff));
    }
    absl::Time until = absl::Now() + backoff;
    while (!stopping_.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  return absl::OkStatus();
}

absl::Status Replica::RunOnce() {
  // 1. Recover.
  StateStore store(sys_, options_.dest);
  WALSHIP_ASSIGN_OR_RETURN(std::optional<ReplicaState> state, store.Load());
  WriterOptions wo;
  wo.transport = options_.transport;
  wo.pipe_bytes = options_.pipe_bytes;
  wo.drop_behind = options_.drop_behind;
  wo.io.io_timeout = options_.io_timeout;
  wo.on_data_sync = [sync_seconds = metrics_.Histogram("walship_replica_data_fdatasync_seconds",
                                                       "", {})](absl::Duration d) {
    sync_seconds.Observe({}, absl::ToDoubleSeconds(d));
  };
  SegmentWriter writer(sys_, options_.dest, wo);
  // After a failed flush, bytes past the last durable point (as
  // walship.progress or walship.state name it) are not presented as a tail:
  // the cache may hold them while the disk does not.
  const bool distrust_tail = after_failed_flush_.exchange(false);
  absl::StatusOr<DurablePoint> recovered = RecoverFromStore(
      store, writer, &state,
      distrust_tail ? SegmentWriter::Tail::kTruncate : SegmentWriter::Tail::kKeep);
  if (!recovered.ok()) return recovered.status();
  DurablePoint durable = *recovered;
  std::string stream_id = state.has_value() ? state->stream_id : std::string();
  // Presented at handshake: the agent checks each against the source.
  WALSHIP_ASSIGN_OR_RETURN(std::vector<HeldCopy> held,
                           ListHeldSegments(sys_, options_.dest, kMaxHeldSegments));

  // 2. Handshake.
  WALSHIP_ASSIGN_OR_RETURN(HostPort agent, ParseHostPort(options_.agent));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(options_.agent, options_.tls);
  if (!channel.ok()) {
    // Checked at start-up; failing now means the files changed under a
    // rotation in progress: keep retrying rather than exit.
    return absl::UnavailableError(
        absl::StrCat("TLS files: ", channel.status().message()));
  }
  auto stub = walship::v1::Control::NewStub(*channel);
  auto handshake = [&](const DurablePoint& at, bool unrecorded,
                       walship::v1::HandshakeResponse* out) {
    walship::v1::HandshakeRequest req;
    req.set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
    req.set_replica_name(options_.name);
    req.set_stream_id(stream_id);
    SetPos(at.position, req.mutable_durable());
    req.set_durable_prefix_crc32c(at.prefix_crc32c);
    req.set_durable_segment_complete(at.complete);
    req.set_durable_unrecorded(unrecorded);
    for (const HeldCopy& h : held) {
      walship::v1::HeldSegment* m = req.add_held_segments();
      m->set_name(h.name);
      m->set_length(h.length);
      m->set_crc32c(h.crc32c);
      m->set_unrecorded(h.unrecorded);
    }
    req.set_transport(TransportName(options_.transport));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.connect_timeout));
    return stub->Handshake(&ctx, req, out);
  };
  // Bytes received before the last stop but never recorded are presented
  // first: the agent's prefix check confirms them byte for byte (CRC32C),
  // and only then do they count. If it refuses them (FAILED_PRECONDITION),
  // they are cut off and the recorded position is presented instead.
  const std::optional<DurablePoint> tail = writer.tail();
  walship::v1::HandshakeResponse resp;
  grpc::Status gs = handshake(tail.value_or(durable), tail.has_value(), &resp);
  if (tail.has_value()) {
    if (gs.ok()) {
      WALSHIP_RETURN_IF_ERROR(writer.ResolveTail(true));
      spdlog::info("kept {} bytes of {} received before the last stop: the agent confirmed "
                   "them", tail->position.offset - durable.position.offset,
                   tail->position.segment);
      durable = *tail;
    } else if (ReasonOf(FromGrpc(gs)) == Reason::kDivergent) {
      // Only proof that they differ from the source's bytes cuts them: a
      // gap, a source not ready or not a primary, a wrong stream leave them
      // (acknowledged bytes may be among them) and end this session.
      spdlog::warn("discarding the {} bytes of {} past the recorded position {}: the agent "
                   "showed that they differ from the source's ({})",
                   tail->position.offset - durable.position.offset, tail->position.segment,
                   durable.position.ToString(), gs.error_message());
      WALSHIP_RETURN_IF_ERROR(writer.ResolveTail(false));
      resp.Clear();
      gs = handshake(durable, false, &resp);
    }
  }
  if (!gs.ok()) {
    absl::Status s = FromGrpc(gs, absl::StrCat("handshake with ", options_.agent));
    // The server could not be reached, is shutting down, or its source cannot
    // answer yet (not a primary, no segment yet): retry.
    if (gs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return WithReason(absl::UnavailableError(s.message()), ReasonOf(s));
    }
    // UNAUTHENTICATED (the agent refused our certificate) is retried too,
    // not fatal: an operator fixes it, or a CA rotation completes, without
    // restarting us.
    return s;
  }
  if (resp.protocol_version() != walship::v1::PROTOCOL_VERSION_1) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent speaks protocol version ", resp.protocol_version()));
  }
  if (!stream_id.empty() && resp.stream_id() != stream_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "destination ", options_.dest, " holds stream ", stream_id,
        " but the agent serves ", resp.stream_id()));
  }
  if (tail.has_value() && durable.position == tail->position) {
    // The confirmed tail is recorded before anything is acknowledged.
    WALSHIP_RETURN_IF_ERROR(store.Save(StateOf(stream_id, durable)));
  }
  if (stream_id.empty()) {
    // Bind the directory to the stream before any byte of it lands.
    WALSHIP_RETURN_IF_ERROR(store.Save(StateOf(resp.stream_id(), durable)));
    stream_id = resp.stream_id();
  }
  metrics_.Counter("walship_replica_sessions_total", "").Add({}, 1);
  spdlog::info("session {} with {} (stream {}): durable at {}, shipping from {}",
               resp.session_id(), options_.agent, resp.stream_id(),
               durable.position.ToString(), resp.start().segment().empty()
                                               ? std::string("the oldest segment")
                                               : absl::StrCat(resp.start().segment(), "@",
                                                              resp.start().offset()));

  // 3. Data socket.
  HostPort data{agent.host, static_cast<uint16_t>(resp.data_port())};
  if (!options_.data_address.empty()) {
    WALSHIP_ASSIGN_OR_RETURN(data, ParseHostPort(options_.data_address));
  }
  // Non-blocking: a stall inside a frame ends after io_timeout instead of
  // hanging the session while heartbeats keep it looking alive.
  WALSHIP_ASSIGN_OR_RETURN(
      sys::UniqueFd sock,
      ConnectTcp(sys_, data, options_.connect_timeout, /*nonblocking=*/true));
  WALSHIP_RETURN_IF_ERROR(SetNoDelay(sys_, sock.get()));
  int rcvbuf = 4 << 20;
  sys_.Setsockopt(sock.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  std::string hello = wire::EncodeFrame(wire::FrameType::kHello, resp.session_id(), 0,
                                        resp.data_token());
  sys::TransferOptions io;
  io.io_timeout = options_.io_timeout;
  WALSHIP_RETURN_IF_ERROR(sys::SendFully(sys_, sock.get(), hello.data(), hello.size(), 0, io));
  established_.store(true);

  // 4. Session stream and threads.
  SessionRun run(sys_, options_);
  {
    absl::MutexLock lock(&mu_);
    current_ = &run;
  }
  if (stopping_.load()) run.Fail(absl::CancelledError("stopping"));
  grpc::ClientContext sctx;
  auto stream = stub->Session(&sctx);
  run.Attach(sock.get(), &sctx);
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(resp.session_id());
  absl::Mutex write_mu;  // the flusher and the final ack both write
  if (!stream->Write(open)) run.Fail(absl::UnavailableError("control stream closed"));

  const uint32_t max_payload =
      std::min<uint32_t>(resp.max_payload_bytes() ? resp.max_payload_bytes()
                                                  : wire::kMaxPayloadLength,
                         wire::kMaxPayloadLength);
  auto send_ack = [&](const DurablePoint& dp) -> bool {
    walship::v1::SessionRequest msg;
    SetPos(writer.written(), msg.mutable_ack()->mutable_written());
    SetPos(dp.position, msg.mutable_ack()->mutable_flushed());
    WriterCounters c = writer.counters();
    msg.mutable_ack()->mutable_counters()->set_bytes_zerocopy(c.bytes_zerocopy);
    msg.mutable_ack()->mutable_counters()->set_bytes_copy(c.bytes_copy);
    absl::MutexLock lock(&write_mu);
    return stream->Write(msg);
  };

  // The position record (state_store.h) is off the acknowledgement path.
  // Flush() saves it where recovery needs it (the first bytes of a segment,
  // a publication), the recorder thread saves the newest durable point at
  // most every record_interval, and the end of the session saves the last.
  // Each cycle has a generation; a save never replaces a newer cycle's
  // record (the recorder may hold an older point than the one a cycle just
  // saved alongside its sync).
  absl::Mutex save_mu;  // one saver at a time; held across the fdatasync
  ReplicaState saved = StateOf(stream_id, durable);
  uint64_t saved_gen = 0;
  auto record = [&](const DurablePoint& dp, uint64_t gen) -> absl::Status {
    absl::MutexLock lock(&save_mu);
    if (gen < saved_gen) return absl::OkStatus();
    const ReplicaState next = StateOf(stream_id, dp);
    if (!(next == saved)) {
      WALSHIP_RETURN_IF_ERROR(store.Save(next));
      saved = next;
    }
    saved_gen = gen;
    return absl::OkStatus();
  };
  // What the recorder saves: the newest point a cycle returned.
  absl::Mutex latest_mu;  // never held across I/O: the flusher takes it
  DurablePoint latest = durable;
  uint64_t latest_gen = 0;
  bool record_stop = false;
  std::thread recorder([&] {
    NameThisThread("ws-record");
    uint64_t taken = 0;
    absl::Time last_save = absl::InfinitePast();
    for (;;) {
      DurablePoint at;
      {
        absl::MutexLock lock(&latest_mu);
        auto due = [&] { return record_stop || latest_gen > taken; };
        latest_mu.Await(absl::Condition(&due));
        if (record_stop) return;
        // At most one save per interval; the point taken is the newest then.
        auto stop = [&] { return record_stop; };
        if (latest_mu.AwaitWithDeadline(absl::Condition(&stop),
                                        last_save + options_.record_interval)) {
          return;
        }
        at = latest;
        taken = latest_gen;
      }
      last_save = absl::Now();
      if (absl::Status s = record(at, taken); !s.ok()) {
        spdlog::error("saving the durable position: {}", s.ToString());
        return run.Fail(s);
      }
    }
  });
  auto stop_recorder = [&] {
    {
      absl::MutexLock lock(&latest_mu);
      record_stop = true;
    }
    if (recorder.joinable()) recorder.join();
  };
  // Before every acknowledgement: how far the acknowledged bytes reach,
  // for a restart after a crash of this process (the record may trail).
  ProgressFile progress(sys_, options_.dest);
  bool progress_warned = false;
  auto write_progress = [&](const DurablePoint& dp) {
    absl::Status s = progress.Write(StateOf(stream_id, dp));
    if (!s.ok() && !progress_warned) {
      progress_warned = true;  // once per session: the record still bounds what is lost
      spdlog::warn("writing {}: {}; a restart after a crash re-fetches acknowledged bytes "
                   "past walship.state instead of keeping them",
                   kProgressFileName, s.ToString());
    }
  };
  write_progress(durable);  // never a claim left from an earlier session

  auto flush_seconds = metrics_.Histogram("walship_replica_flush_seconds", "", {});
  auto received = metrics_.Counter("walship_replica_bytes_received_total", "");
  auto completed = metrics_.Counter("walship_replica_segments_completed_total", "");
  auto durable_offset = metrics_.Gauge("walship_replica_durable_offset_bytes", "");
  // Dropping a published segment's pages takes 1-5 ms; on its own thread it
  // never delays the flusher's next cycle (SegmentWriter::DropPublishedPages).
  absl::Mutex drop_mu;
  bool drop_due = false, drop_stop = false;
  std::thread dropper([&] {
    NameThisThread("ws-drop");
    for (;;) {
      {
        absl::MutexLock lock(&drop_mu);
        auto ready = [&] { return drop_due || drop_stop; };
        drop_mu.Await(absl::Condition(&ready));
        if (!drop_due) return;
        drop_due = false;
      }
      writer.DropPublishedPages();
    }
  });
  // One flush cycle: make what arrived durable, name it in walship.progress,
  // and only then acknowledge it. The flusher thread runs cycles; so does the
  // receiver, when a frame leaves the socket empty and no cycle is running
  // (see the receiver). flush_mu serializes them.
  absl::Mutex flush_mu;
  uint64_t cycle_gen = 0;
  Position last_progress = durable.position;
  // When to acknowledge (common/pacer.h; a keepalive ack every second even
  // when nothing moved). Its interval is what the agent last said
  // (AckPacing): zero, at once, until it says otherwise. A position held
  // back is acknowledged by the first cycle after ack_due (the flusher wakes
  // for it).
  Pacer<Position> acks(absl::Seconds(1));  // flush_mu
  std::atomic<int64_t> ack_pacing_us{0};
  std::atomic<int64_t> ack_due_us{std::numeric_limits<int64_t>::max()};
  WriterCounters counted;
  std::string last_complete = durable.complete ? durable.position.segment : "";
  // With flush_mu held; false once the session failed.
  auto flush_cycle_locked = [&]() -> bool {
    if (run.failed()) return false;
    const absl::Time flush_start = absl::Now();
    const uint64_t gen = ++cycle_gen;
    absl::StatusOr<DurablePoint> dp =
        writer.Flush([&record, gen](const DurablePoint& p) { return record(p, gen); });
    if (!dp.ok()) {
      spdlog::error("flush: {}", dp.status().ToString());
      run.Fail(dp.status());
      return false;
    }
    if (dp->position != last_progress) {
      last_progress = dp->position;
      write_progress(*dp);
      absl::MutexLock lock(&latest_mu);
      latest = *dp;
      latest_gen = gen;
    }
    WriterCounters c = writer.counters();
    if (c.bytes_zerocopy > counted.bytes_zerocopy || c.bytes_copy > counted.bytes_copy) {
      flush_seconds.Observe({}, absl::ToDoubleSeconds(absl::Now() - flush_start));
      received.Add({{"path", "zerocopy"}},
                   static_cast<double>(c.bytes_zerocopy - counted.bytes_zerocopy));
      received.Add({{"path", "copy"}}, static_cast<double>(c.bytes_copy - counted.bytes_copy));
      counted = c;
    }
    if (dp->complete && dp->position.segment != last_complete) {
      completed.Add({}, 1);
      last_complete = dp->position.segment;
    }
    durable_offset.Set({}, static_cast<double>(dp->position.offset));
    // Only now, with the bytes durable, acknowledge: at once, or (as the
    // agent allows) once the pacing interval since the last one has passed.
    const absl::Time now = absl::Now();
    acks.set_interval(absl::Microseconds(ack_pacing_us.load()));
    if (acks.ShouldSend(dp->position, now)) {
      if (!send_ack(*dp)) {
        run.Fail(absl::UnavailableError("control stream closed"));
        return false;
      }
      acks.Sent(dp->position, now);
    }
    const absl::Time due = acks.Due();
    ack_due_us.store(due == absl::InfiniteFuture() ? std::numeric_limits<int64_t>::max()
                                                   : absl::ToUnixMicros(due));
    if (writer.HasPagesToDrop()) {
      absl::MutexLock lock(&drop_mu);
      drop_due = true;
    }
    return true;
  };
  auto flush_cycle = [&]() -> bool {
    absl::MutexLock lock(&flush_mu);
    return flush_cycle_locked();
  };
  std::thread flusher([&] {
    NameThisThread("ws-flush");
    while (!run.failed()) {
      // Every frame and checkpoint kicks the flusher at once; the timeout only
      // paces idle checks (agent silence, keepalive acks).
      if (!writer.HasUnflushedWork()) {
        const int64_t due = ack_due_us.load();
        absl::Duration wait = options_.flush_interval;
        if (due != std::numeric_limits<int64_t>::max()) {
          wait = std::min(wait, absl::FromUnixMicros(due) - absl::Now());
        }
        if (wait > absl::ZeroDuration()) run.WaitKick(wait);
      }
      if (!flush_cycle()) break;
      if (absl::Now() - run.last_heard() > options_.agent_silence_timeout) {
        return run.Fail(absl::UnavailableError(absl::StrCat(
            "agent silent for ", absl::FormatDuration(options_.agent_silence_timeout))));
      }
    }
  });
  // After each DATA frame the receiver decides who syncs it
  // (receive_policy.h): it reads on while whole frames are already waiting,
  // runs the cycle itself once the socket is empty and no cycle is running,
  // and wakes the flusher for a backlog, so that receiving goes on during
  // the fdatasync (catch-up). Bytes arriving during a cycle wait in the
  // socket for the next one, as they would wait for the flusher's.
  uint64_t deferred = 0;  // receiver thread only
  auto after_data = [&](uint32_t length) -> bool {
    deferred += length;
    switch (DecideAfterFrame(sys_, sock.get(), deferred, kMaxDeferredBytes, max_payload)) {
      case AfterFrame::kReadOn:
        return true;
      case AfterFrame::kSyncNow:
        deferred = 0;
        if (flush_mu.TryLock()) {
          const bool ok = flush_cycle_locked();
          flush_mu.Unlock();
          return ok;
        }
        break;
      case AfterFrame::kHandOff:
        deferred = 0;
        break;
    }
    run.Kick();
    return true;
  };

  std::thread receiver([&] {
    NameThisThread("ws-receive");
    sys::TransferOptions idle;
    idle.io_timeout = kIdleFrameWait;
    std::string name;
    for (;;) {
      uint8_t hdr[wire::kFrameHeaderSize];
      absl::Status s = sys::ReadFully(sys_, sock.get(), hdr, sizeof(hdr), idle);
      if (absl::IsOutOfRange(s)) s = absl::UnavailableError("agent closed the data socket");
      if (!s.ok()) return run.Fail(s);  // already logged by whoever ended the session
      absl::StatusOr<wire::FrameHeader> h =
          wire::DecodeFrameHeader(absl::MakeConstSpan(hdr, sizeof(hdr)), max_payload);
      if (!h.ok()) {
        if (!run.failed()) spdlog::error("data socket: rejected frame: {}", h.status().ToString());
        return run.Fail(h.status());
      }
      if (h->type == wire::FrameType::kSegment) {
        name.resize(h->payload_length);
        s = sys::ReadFully(sys_, sock.get(), name.data(), name.size(), io);
        if (s.ok()) {
          s = wire::VerifyPayload(*h, absl::MakeConstSpan(
                                          reinterpret_cast<const uint8_t*>(name.data()),
                                          name.size()));
        }
        if (s.ok()) s = writer.BeginSegment(name, h->segment_id, h->offset);
      } else if (h->type == wire::FrameType::kData) {
        s = writer.WriteData(sock.get(), *h);
        if (s.ok() && !after_data(h->payload_length)) return;  // the cycle recorded why
      } else {
        s = absl::DataLossError(absl::StrCat("unexpected ",
                                             wire::FrameTypeName(h->type),
                                             " frame from the agent"));
      }
      if (!s.ok()) {
        // A failure caused by our own shutdown of the socket is not news.
        if (!run.failed()) spdlog::error("data socket: {}", s.ToString());
        return run.Fail(s);
      }
    }
  });

  walship::v1::SessionEvent ev;
  while (stream->Read(&ev)) {
    run.Heard();
    if (ev.has_checkpoint()) {
      writer.AddCheckpoint(ev.checkpoint().segment(), ev.checkpoint().length(),
                           ev.checkpoint().crc32c());
      run.Kick();
    } else if (ev.has_ack_pacing()) {
      const absl::Duration pacing = absl::Milliseconds(ev.ack_pacing().min_interval_ms());
      if (absl::Microseconds(ack_pacing_us.exchange(absl::ToInt64Microseconds(pacing))) !=
          pacing) {
        spdlog::info("agent: acknowledge new durable positions {}",
                     pacing == absl::ZeroDuration()
                         ? std::string("at once (the primary may wait for them)")
                         : absl::StrCat("at most every ", absl::FormatDuration(pacing)));
      }
      run.Kick();  // a position held back goes out now if it may
    } else if (ev.has_error()) {
      run.Fail(WithReason(
          absl::Status(static_cast<absl::StatusCode>(ev.error().code()),
                       absl::StrCat("agent ended the session: ", ev.error().message())),
          ReasonFromInt(ev.error().reason())));
      break;
    }
  }
  run.Fail(absl::UnavailableError("control stream closed"));
  receiver.join();
  flusher.join();
  stop_recorder();
  {
    absl::MutexLock lock(&drop_mu);
    drop_stop = true;
  }
  dropper.join();
  grpc::Status fin = stream->Finish();
  (void)fin;
  run.Detach();
  {
    absl::MutexLock lock(&mu_);
    current_ = nullptr;
  }
  // Make what was received durable before leaving, so a restart re-fetches
  // less. The writer is still consistent: every error path truncated its
  // partial frame.
  absl::StatusOr<DurablePoint> last = writer.Flush();
  if (writer.sync_failed()) after_failed_flush_.store(true);
  {
    // The record catches up with the last acknowledgement (or further).
    absl::Status s = record(last.ok() ? *last : latest, ++cycle_gen);
    if (!s.ok()) spdlog::warn("saving the durable position: {}", s.ToString());
  }
  if (last.ok()) {
    write_progress(*last);
    writer.DropPublishedPages();
  }
  absl::Status result = run.status();
  if (!last.ok() && IsFatal(last.status())) return last.status();
  return result;
}

}  // namespace walship::replica
