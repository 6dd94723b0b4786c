#include "replica/session.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sched_slice.h"
#include "common/sys/thread_name.h"
#include "common/wire/frame.h"
#include "replica/agent_list.h"
#include "replica/data_tls.h"
#include "replica/receive_policy.h"
#include "spdlog/spdlog.h"

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

constexpr int64_t kNoAckDue = std::numeric_limits<int64_t>::max();

WriterOptions WriterOptionsFor(const ReplicaOptions& options, MetricsRegistry& metrics) {
  WriterOptions wo;
  wo.transport = options.transport;
  wo.pipe_bytes = options.pipe_bytes;
  wo.drop_behind = options.drop_behind;
  wo.io.io_timeout = options.io_timeout;
  wo.trace = options.commit_trace;
  wo.on_data_sync = [sync_seconds = metrics.Histogram("walship_replica_data_fdatasync_seconds",
                                                      "", {})](absl::Duration d) {
    sync_seconds.Observe({}, absl::ToDoubleSeconds(d));
  };
  wo.on_spare_prepared = [spare_seconds = metrics.Histogram(
                              "walship_replica_spare_prepare_seconds", "", {})](absl::Duration d) {
    spare_seconds.Observe({}, absl::ToDoubleSeconds(d));
  };
  return wo;
}

}  // namespace

Session::Session(sys::SysCalls& sys, const ReplicaOptions& options, MetricsRegistry& metrics,
                 std::atomic<bool>& after_failed_flush, Clock& clock)
    : clock_(clock),
      sys_(sys),
      options_(options),
      metrics_(metrics),
      after_failed_flush_(after_failed_flush),
      store_(sys, options.dest),
      writer_(sys, options.dest, WriterOptionsFor(options, metrics), clock),
      progress_(sys, options.dest),
      ack_due_us_(kNoAckDue),
      flush_seconds_(metrics.Histogram("walship_replica_flush_seconds", "", {})),
      received_(metrics.Counter("walship_replica_bytes_received_total", "")),
      completed_(metrics.Counter("walship_replica_segments_completed_total", "")),
      durable_offset_(metrics.Gauge("walship_replica_durable_offset_bytes", "")),
      receive_sched_(sys, options.sched_slice, static_cast<int>(options.sched_fifo_priority),
                     "ws-receive") {}

Session::~Session() = default;

// ---- Open: recovery, handshake, data socket ----

absl::Status Session::Open() {
  WALSHIP_RETURN_IF_ERROR(Recover());
  WALSHIP_RETURN_IF_ERROR(Handshake());
  return ConnectData();
}

absl::Status Session::Recover() {
  WALSHIP_ASSIGN_OR_RETURN(std::optional<ReplicaState> state, store_.Load());
  // After a failed flush, bytes past the last durable point (as
  // walship.progress or walship.state name it) are not presented as a tail:
  // the cache may hold them while the disk does not.
  const bool distrust_tail = after_failed_flush_.exchange(false);
  absl::StatusOr<DurablePoint> recovered = RecoverFromStore(
      store_, writer_, &state,
      distrust_tail ? SegmentWriter::Tail::kTruncate : SegmentWriter::Tail::kKeep);
  if (!recovered.ok()) return recovered.status();
  durable_ = *recovered;
  stream_id_ = state.has_value() ? state->stream_id : std::string();
  return absl::OkStatus();
}

absl::Status Session::Handshake() {
  // Presented at handshake: the agent checks each against the source.
  WALSHIP_ASSIGN_OR_RETURN(std::vector<HeldCopy> held,
                           ListHeldSegments(sys_, options_.dest, kMaxHeldSegments));
  WALSHIP_ASSIGN_OR_RETURN(control_, ControlClient::Create(sys_, options_, clock_));
  const std::optional<DurablePoint> tail = writer_.tail();
  WALSHIP_ASSIGN_OR_RETURN(
      Negotiated negotiated,
      control_->Handshake(stream_id_, durable_, tail, held,
                          [this](bool keep) { return writer_.ResolveTail(keep); }));
  durable_ = negotiated.durable;
  handshake_ = std::move(negotiated.response);
  const walship::v1::HandshakeResponse& resp = handshake_;
  WALSHIP_RETURN_IF_ERROR(
      CheckAgentDataTls(options_.data_tls_on(), resp.data_tls(), options_.agent));
  // The timeline fence (agent_list.h): never an agent of an older timeline
  // than the newest this directory holds durably, even one that accepted.
  fence_timeline_ = TimelineOfWalName(durable_.position.segment);
  if (absl::Status fence = CheckTimelineFence(resp.timeline(), fence_timeline_, options_.agent);
      !fence.ok()) {
    return fence;
  }
  if (fence_timeline_ != 0) {
    metrics_.Gauge("walship_replica_timeline", "").Set({}, fence_timeline_);
  }
  if (tail.has_value() && durable_.position == tail->position) {
    // The confirmed tail is recorded before anything is acknowledged.
    WALSHIP_RETURN_IF_ERROR(store_.Save(StateOf(stream_id_, durable_)));
  }
  if (stream_id_.empty()) {
    // Bind the directory to the stream before any byte of it lands.
    WALSHIP_RETURN_IF_ERROR(store_.Save(StateOf(resp.stream_id(), durable_)));
    stream_id_ = resp.stream_id();
  }
  metrics_.Counter("walship_replica_sessions_total", "").Add({}, 1);
  spdlog::info("session {} with {} (stream {}): durable at {}, shipping from {}",
               resp.session_id(), options_.agent, resp.stream_id(),
               durable_.position.ToString(), resp.start().segment().empty()
                                                ? std::string("the oldest segment")
                                                : absl::StrCat(resp.start().segment(), "@",
                                                               resp.start().offset()));
  return absl::OkStatus();
}

absl::Status Session::ConnectData() {
  HostPort data{control_->agent().host, static_cast<uint16_t>(handshake_.data_port())};
  if (!options_.data_address.empty()) {
    WALSHIP_ASSIGN_OR_RETURN(data, ParseHostPort(options_.data_address));
  }
  // Non-blocking: a stall inside a frame ends after io_timeout instead of
  // hanging the session while heartbeats keep it looking alive.
  WALSHIP_ASSIGN_OR_RETURN(
      sock_, ConnectTcp(sys_, data, options_.connect_timeout, /*nonblocking=*/true));
  WALSHIP_RETURN_IF_ERROR(SetNoDelay(sys_, sock_.get()));
  int rcvbuf = 4 << 20;
  if (sys::SysResult r =
          sys_.Setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
      !r.ok()) {
    // Only a tuning hint: the session works with the kernel's default.
    spdlog::warn("setsockopt SO_RCVBUF {}: {}; the kernel's default receive buffer stays",
                 rcvbuf, std::strerror(r.err));
  }
  std::string hello = wire::EncodeFrame(wire::FrameType::kHello, handshake_.session_id(), 0,
                                        handshake_.data_token());
  io_.io_timeout = options_.io_timeout;
  WALSHIP_ASSIGN_OR_RETURN(conn_,
                           OpenDataConn(sys_, clock_, options_, sock_.get(), data.host, io_));
  metrics_.Counter("walship_replica_data_sessions_total", "")
      .Add({{"path", net::DataPathName(conn_->path())}}, 1);
  return conn_->SendFully(hello.data(), hello.size(), /*more=*/false, io_);
}

// ---- Run: the threads ----

absl::Status Session::Run() {
  {
    absl::MutexLock lock(&fail_mu_);
    last_heard_ = clock_.Now();
  }
  stream_ = control_->OpenSession(&session_ctx_);
  Attach(sock_.get(), &session_ctx_);
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(handshake_.session_id());
  open.mutable_open()->set_data_path(net::DataPathName(conn_->path()));
  if (!stream_->Write(open)) Fail(absl::UnavailableError("control stream closed"));
  if (handshake_.ack_stream()) OpenAckStream();

  max_payload_ = std::min<uint32_t>(handshake_.max_payload_bytes()
                                        ? handshake_.max_payload_bytes()
                                        : wire::kMaxPayloadLength,
                                    wire::kMaxPayloadLength);
  compressed_ = std::make_unique<CompressedFrames>(options_, handshake_, metrics_);
  {
    absl::MutexLock lock(&save_mu_);
    saved_ = StateOf(stream_id_, durable_);
  }
  {
    absl::MutexLock lock(&latest_mu_);
    latest_ = durable_;
  }
  std::thread recorder([this] { RecordLoop(); });
  {
    absl::MutexLock lock(&flush_mu_);
    WriteProgress(durable_);  // never a claim left from an earlier session
    last_progress_ = durable_.position;
    last_complete_ = durable_.complete ? durable_.position.segment : "";
  }
  std::thread dropper([this] { DropLoop(); });
  std::thread flusher([this] { FlushLoop(); });
  std::thread receiver([this] { Receive(); });

  ReadControl();
  Fail(absl::UnavailableError("control stream closed"));
  receiver.join();
  flusher.join();
  StopRecorder();
  if (recorder.joinable()) recorder.join();
  StopDropper();
  dropper.join();
  // Fail() has cancelled both calls: Finish() returns at once.
  grpc::Status fin = stream_->Finish();
  (void)fin;
  if (ack_stream_ != nullptr) (void)ack_stream_->Finish();
  Detach();
  return WindDown();
}

void Session::ReadControl() {
  walship::v1::SessionEvent ev;
  while (stream_->Read(&ev)) {
    Heard();
    if (ev.has_checkpoint()) {
      std::vector<SegmentPatch> patches;
      for (const walship::v1::SegmentPatch& p : ev.checkpoint().patches()) {
        patches.push_back(SegmentPatch{p.offset(), p.bytes()});
      }
      writer_.AddCheckpoint(ev.checkpoint().segment(), ev.checkpoint().length(),
                            ev.checkpoint().crc32c(), std::move(patches));
      Kick();
    } else if (ev.has_ack_pacing()) {
      const absl::Duration pacing = absl::Milliseconds(ev.ack_pacing().min_interval_ms());
      if (absl::Microseconds(ack_pacing_us_.exchange(absl::ToInt64Microseconds(pacing))) !=
          pacing) {
        spdlog::info("agent: acknowledge new durable positions {}",
                     pacing == absl::ZeroDuration()
                         ? std::string("at once (the primary may wait for them)")
                         : absl::StrCat("at most every ", absl::FormatDuration(pacing)));
      }
      Kick();  // a position held back goes out now if it may
    } else if (ev.has_error()) {
      Fail(WithReason(
          absl::Status(static_cast<absl::StatusCode>(ev.error().code()),
                       absl::StrCat("agent ended the session: ", ev.error().message())),
          ReasonFromInt(ev.error().reason())));
      break;
    }
  }
}

void Session::Receive() {
  NameThisThread("ws-receive");
  receive_sched_.Start();
  std::string name;
  while (ReceiveFrame(name)) {
  }
}

bool Session::ReceiveFrame(std::string& name) {
  sys::TransferOptions idle;
  idle.io_timeout = kIdleFrameWait;
  uint8_t hdr[wire::kFrameHeaderSize];
  absl::Status s = conn_->ReadFully(hdr, sizeof(hdr), idle);
  if (absl::IsOutOfRange(s)) s = absl::UnavailableError("agent closed the data socket");
  if (!s.ok()) {
    Fail(s);  // already logged by whoever ended the session
    return false;
  }
  absl::StatusOr<wire::FrameHeader> h =
      wire::DecodeFrameHeader(absl::MakeConstSpan(hdr, sizeof(hdr)), max_payload_);
  if (!h.ok()) {
    if (!failed()) spdlog::error("data socket: rejected frame: {}", h.status().ToString());
    Fail(h.status());
    return false;
  }
  if (h->type == wire::FrameType::kSegment) {
    name.resize(h->payload_length);
    s = conn_->ReadFully(name.data(), name.size(), io_);
    if (s.ok()) {
      s = wire::VerifyPayload(
          *h, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(name.data()), name.size()));
    }
    if (s.ok()) {
      // Timelines only go forward within a stream: a segment of an older
      // timeline than one already held would mix two histories.
      const uint32_t tli = TimelineOfWalName(name);
      s = CheckTimelineFence(tli, fence_timeline_, options_.agent);
      if (s.ok() && tli > fence_timeline_) {
        fence_timeline_ = tli;
        metrics_.Gauge("walship_replica_timeline", "").Set({}, tli);
      }
    }
    if (s.ok()) s = writer_.BeginSegment(name, h->segment_id, h->offset);
  } else if (h->type == wire::FrameType::kData || h->type == wire::FrameType::kCompressedData) {
    const uint32_t length = wire::SegmentBytesOf(*h);
    if (options_.commit_trace != nullptr) {
      // The segment the last SEGMENT frame began: the agent sends a DATA
      // frame only for the segment it is in.
      options_.commit_trace->Record(TraceStage::kHeader, name, h->offset + length);
    }
    s = h->type == wire::FrameType::kData
            ? writer_.WriteData(sock_.get(), *h,
                                conn_->path() == net::DataPath::kPlain ? nullptr : conn_.get())
            : compressed_->Receive(*conn_, *h, io_, writer_);  // copy path
    if (s.ok() && !AfterData(length)) return false;  // the cycle recorded why
  } else {
    s = absl::DataLossError(
        absl::StrCat("unexpected ", wire::FrameTypeName(h->type), " frame from the agent"));
  }
  if (!s.ok()) {
    // A failure caused by our own shutdown of the socket is not news.
    if (!failed()) spdlog::error("data socket: {}", s.ToString());
    Fail(s);
    return false;
  }
  return true;
}

// After each DATA frame the receiver decides who syncs it
// (receive_policy.h): it reads on while whole frames are already waiting,
// runs the cycle itself once the socket is empty and no cycle is running,
// and wakes the flusher for a backlog, so that receiving goes on during
// the fdatasync (catch-up). Bytes arriving during a cycle wait in the
// socket for the next one, as they would wait for the flusher's.
bool Session::AfterData(uint32_t length) {
  deferred_ += length;
  const AfterFrame next =
      conn_->path() == net::DataPath::kPlain
          ? DecideAfterFrame(sys_, sock_.get(), deferred_, kMaxDeferredBytes, max_payload_)
          : DecideAfterTlsFrame(sys_, sock_.get(), conn_->Buffered());
  switch (next) {
    case AfterFrame::kReadOn:
      return true;
    case AfterFrame::kSyncNow:
      deferred_ = 0;
      // Live, not catching up: the next segment may start pre-sized, and the
      // thread may run real-time again.
      writer_.NoteCaughtUp();
      receive_sched_.Live();
      if (flush_mu_.TryLock()) {
        const bool ok = FlushCycleLocked();
        flush_mu_.Unlock();
        return ok;
      }
      break;
    case AfterFrame::kHandOff:
      // A backlog: received at the normal policy, never keeping a CPU from
      // the host's other programs for as long as a catch-up takes.
      deferred_ = 0;
      receive_sched_.Bulk();
      break;
  }
  Kick();
  return true;
}

void Session::FlushLoop() {
  NameThisThread("ws-flush");
  CommitPathThread(sys_, options_.sched_slice, static_cast<int>(options_.sched_fifo_priority),
                   "ws-flush")
      .Start();
  while (!failed()) {
    // Every frame and checkpoint kicks the flusher at once; the timeout only
    // paces idle checks (agent silence, keepalive acks).
    if (!writer_.HasUnflushedWork()) {
      const int64_t due = ack_due_us_.load();
      absl::Duration wait = options_.flush_interval;
      if (due != kNoAckDue) wait = std::min(wait, absl::FromUnixMicros(due) - clock_.Now());
      if (wait > absl::ZeroDuration()) WaitKick(wait);
    }
    if (!FlushCycle()) break;
    if (clock_.Now() - last_heard() > options_.agent_silence_timeout) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "agent silent for ", absl::FormatDuration(options_.agent_silence_timeout))));
    }
  }
}

bool Session::FlushCycle() {
  absl::MutexLock lock(&flush_mu_);
  return FlushCycleLocked();
}

// One flush cycle: make what arrived durable, name it in walship.progress,
// and only then acknowledge it. The flusher thread runs cycles; so does the
// receiver, when a frame leaves the socket empty and no cycle is running
// (AfterData). flush_mu_ serializes them.
bool Session::FlushCycleLocked() {
  if (failed()) return false;
  const absl::Time flush_start = clock_.Now();
  const uint64_t gen = ++cycle_gen_;
  absl::StatusOr<DurablePoint> dp =
      writer_.Flush([this, gen](const DurablePoint& p) { return Record(p, gen); });
  if (!dp.ok()) {
    spdlog::error("flush: {}", dp.status().ToString());
    Fail(dp.status());
    return false;
  }
  const absl::Duration flush_took = clock_.Now() - flush_start;
  const bool moved = dp->position != last_progress_;
  if (options_.commit_trace != nullptr && moved) {
    options_.commit_trace->Record(TraceStage::kSynced, dp->position.segment,
                                  dp->position.offset);
  }
  if (moved) {
    last_progress_ = dp->position;
    WriteProgress(*dp);
  }
  // Only now, with the bytes durable and named in walship.progress,
  // acknowledge: at once, or (as the agent allows) once the pacing interval
  // since the last one has passed.
  if (!MaybeAck(*dp)) {
    Fail(absl::UnavailableError("control stream closed"));
    return false;
  }
  // What no acknowledgement waits for comes after it: the recorder's next
  // point (which may wake ws-record), the metrics, the page drops.
  if (moved) {
    absl::MutexLock lock(&latest_mu_);
    latest_ = *dp;
    latest_gen_ = gen;
  }
  CountCycle(*dp, flush_took);
  if (writer_.HasPagesToDrop()) {
    absl::MutexLock lock(&drop_mu_);
    drop_due_ = true;
  }
  return true;
}

void Session::CountCycle(const DurablePoint& dp, absl::Duration flush_took) {
  WriterCounters c = writer_.counters();
  if (c.bytes_zerocopy > counted_.bytes_zerocopy || c.bytes_copy > counted_.bytes_copy) {
    flush_seconds_.Observe({}, absl::ToDoubleSeconds(flush_took));
    received_.Add({{"path", "zerocopy"}},
                  static_cast<double>(c.bytes_zerocopy - counted_.bytes_zerocopy));
    received_.Add({{"path", "copy"}}, static_cast<double>(c.bytes_copy - counted_.bytes_copy));
    counted_ = c;
  }
  if (dp.complete && dp.position.segment != last_complete_) {
    completed_.Add({}, 1);
    last_complete_ = dp.position.segment;
  }
  durable_offset_.Set({}, static_cast<double>(dp.position.offset));
}

bool Session::MaybeAck(const DurablePoint& dp) {
  const absl::Time now = clock_.Now();
  acks_.set_interval(absl::Microseconds(ack_pacing_us_.load()));
  if (acks_.ShouldSend(dp.position, now)) {
    if (!SendAck(dp)) return false;
    acks_.Sent(dp.position, now);
  }
  const absl::Time due = acks_.Due();
  ack_due_us_.store(due == absl::InfiniteFuture() ? kNoAckDue : absl::ToUnixMicros(due));
  return true;
}

bool Session::SendAck(const DurablePoint& dp) {
  walship::v1::SessionRequest msg;
  SetPos(writer_.written(), msg.mutable_ack()->mutable_written());
  SetPos(dp.position, msg.mutable_ack()->mutable_flushed());
  WriterCounters c = writer_.counters();
  msg.mutable_ack()->mutable_counters()->set_bytes_zerocopy(c.bytes_zerocopy);
  msg.mutable_ack()->mutable_counters()->set_bytes_copy(c.bytes_copy);
  msg.mutable_ack()->mutable_counters()->set_bytes_compressed_raw(compressed_->raw_bytes());
  msg.mutable_ack()->mutable_counters()->set_bytes_compressed_wire(compressed_->wire_bytes());
  CommitTrace* const trace = options_.commit_trace;
  if (trace != nullptr) {
    trace->Record(TraceStage::kAckSent, dp.position.segment, dp.position.offset);
  }
  // gRPC's blocking Write: it returns once the send completed, which under
  // load may come well after the agent has read the message (the trace's
  // ack_sent -> ack_written; the callback API's non-blocking write measured
  // no better, see docs/benchmarks.md).
  const bool ok = ack_stream_ != nullptr ? ack_stream_->Write(msg) : stream_->Write(msg);
  if (trace != nullptr) {
    trace->Record(TraceStage::kAckWritten, dp.position.segment, dp.position.offset);
  }
  return ok;
}

void Session::WriteProgress(const DurablePoint& dp) {
  absl::Status s = progress_.Write(StateOf(stream_id_, dp));
  if (!s.ok() && !progress_warned_) {
    progress_warned_ = true;  // once per session: the record still bounds what is lost
    spdlog::warn("writing {}: {}; a restart after a crash re-fetches acknowledged bytes "
                 "past walship.state instead of keeping them",
                 kProgressFileName, s.ToString());
  }
}

absl::Status Session::Record(const DurablePoint& dp, uint64_t gen) {
  absl::MutexLock lock(&save_mu_);
  if (gen < saved_gen_) return absl::OkStatus();
  const ReplicaState next = StateOf(stream_id_, dp);
  if (!(next == saved_)) {
    WALSHIP_RETURN_IF_ERROR(store_.Save(next));
    saved_ = next;
  }
  saved_gen_ = gen;
  return absl::OkStatus();
}

void Session::RecordLoop() {
  NameThisThread("ws-record");
  uint64_t taken = 0;
  absl::Time last_save = absl::InfinitePast();
  for (;;) {
    DurablePoint at;
    {
      absl::MutexLock lock(&latest_mu_);
      auto due = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(latest_mu_) {
        return record_stop_ || latest_gen_ > taken;
      };
      latest_mu_.Await(absl::Condition(&due));
      if (record_stop_) return;
      // At most one save per interval; the point taken is the newest then.
      auto stop = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(latest_mu_) { return record_stop_; };
      if (latest_mu_.AwaitWithDeadline(absl::Condition(&stop),
                                       last_save + options_.record_interval)) {
        return;
      }
      at = latest_;
      taken = latest_gen_;
    }
    last_save = clock_.Now();
    if (absl::Status s = Record(at, taken); !s.ok()) {
      spdlog::error("saving the durable position: {}", s.ToString());
      return Fail(s);
    }
  }
}

void Session::StopRecorder() {
  absl::MutexLock lock(&latest_mu_);
  record_stop_ = true;
}

// Dropping a published segment's pages takes 1-5 ms; on its own thread it
// never delays the flusher's next cycle (SegmentWriter::DropPublishedPages).
void Session::DropLoop() {
  NameThisThread("ws-drop");
  for (;;) {
    {
      absl::MutexLock lock(&drop_mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drop_mu_) {
        return drop_due_ || drop_stop_;
      };
      drop_mu_.Await(absl::Condition(&ready));
      if (!drop_due_) return;
      drop_due_ = false;
    }
    writer_.DropPublishedPages();
  }
}

void Session::StopDropper() {
  absl::MutexLock lock(&drop_mu_);
  drop_stop_ = true;
}

// Make what was received durable before leaving, so a restart re-fetches
// less. The writer is still consistent: every error path truncated its
// partial frame.
absl::Status Session::WindDown() {
  absl::StatusOr<DurablePoint> last = writer_.Flush();
  if (writer_.sync_failed()) after_failed_flush_.store(true);
  {
    absl::MutexLock lock(&flush_mu_);  // the threads ended: for the annotations
    DurablePoint latest;
    {
      absl::MutexLock latest_lock(&latest_mu_);
      latest = latest_;
    }
    // The record catches up with the last acknowledgement (or further).
    absl::Status s = Record(last.ok() ? *last : latest, ++cycle_gen_);
    if (!s.ok()) spdlog::warn("saving the durable position: {}", s.ToString());
    if (last.ok()) WriteProgress(*last);
  }
  if (last.ok()) writer_.DropPublishedPages();
  last_flush_ = last.status();
  return status();
}

// ---- The session's end and the flusher's wake-up ----

void Session::Fail(absl::Status s) {
  absl::MutexLock lock(&fail_mu_);
  if (failed_) return;
  failed_ = true;
  status_ = std::move(s);
  // Ignored on purpose: it only wakes the reader; ENOTCONN (the peer went
  // first) leaves nothing to wake.
  if (data_fd_ >= 0) (void)sys_.Shutdown(data_fd_, SHUT_RDWR);
  if (ctx_ != nullptr) ctx_->TryCancel();
  if (ack_ctx_attached_ != nullptr) ack_ctx_attached_->TryCancel();
}

bool Session::failed() {
  absl::MutexLock lock(&fail_mu_);
  return failed_;
}

absl::Status Session::status() {
  absl::MutexLock lock(&fail_mu_);
  return status_;
}

void Session::Attach(int data_fd, grpc::ClientContext* ctx) {
  absl::MutexLock lock(&fail_mu_);
  data_fd_ = data_fd;
  ctx_ = ctx;
  if (failed_) {
    // Ignored on purpose: it only wakes the reader; ENOTCONN (the peer went
  // first) leaves nothing to wake.
  if (data_fd_ >= 0) (void)sys_.Shutdown(data_fd_, SHUT_RDWR);
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
}

void Session::Detach() {
  absl::MutexLock lock(&fail_mu_);
  data_fd_ = -1;
  ctx_ = nullptr;
  ack_ctx_attached_ = nullptr;
}

void Session::OpenAckStream() {
  ack_stream_ = control_->OpenAckSession(&ack_ctx_);
  {
    absl::MutexLock lock(&fail_mu_);
    ack_ctx_attached_ = &ack_ctx_;
    if (failed_) ack_ctx_.TryCancel();
  }
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(handshake_.session_id());
  open.mutable_open()->set_acks_only(true);
  if (!ack_stream_->Write(open)) Fail(absl::UnavailableError("acknowledgement stream closed"));
}

void Session::Kick() {
  absl::MutexLock lock(&kick_mu_);
  kicked_ = true;
}

void Session::WaitKick(absl::Duration timeout) {
  absl::MutexLock lock(&kick_mu_);
  kick_mu_.AwaitWithTimeout(absl::Condition(&kicked_), timeout);
  kicked_ = false;
}

void Session::Heard() {
  absl::MutexLock lock(&fail_mu_);
  last_heard_ = clock_.Now();
}

absl::Time Session::last_heard() {
  absl::MutexLock lock(&fail_mu_);
  return last_heard_;
}

}  // namespace walship::replica
