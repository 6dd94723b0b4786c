#include "agent/session_call.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/commit_trace.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "common/sys/thread_name.h"
#include "spdlog/spdlog.h"

namespace walship::agent {

void SessionCall::Listen(ControlServiceImpl& service, walship::v1::Control::AsyncService& async,
                         grpc::ServerCompletionQueue* cq, OperationGate& gate) {
  if (!gate.Enter()) return;  // shutting down: no more calls
  new SessionCall(service, async, cq, gate);
  gate.Leave();
}

SessionCall::SessionCall(ControlServiceImpl& service, walship::v1::Control::AsyncService& async,
                         grpc::ServerCompletionQueue* cq, OperationGate& gate)
    : service_(service),
      async_(async),
      cq_(cq),
      gate_(gate),
      stream_(&ctx_),
      request_tag_([this](bool ok) { OnRequest(ok); }),
      read_tag_([this](bool ok) { OnReadDone(ok); }),
      write_tag_([this](bool ok) { OnWriteDone(ok); }),
      finish_tag_([this](bool) { OnFinished(); }),
      done_tag_([this](bool) { OnCallDone(); }) {
  ctx_.AsyncNotifyWhenDone(&done_tag_);
  async_.RequestSession(&ctx_, &stream_, cq_, cq_, &request_tag_);
}

void SessionCall::OnRequest(bool ok) {
  if (!ok) {  // the server is shutting down; no other tag of this call will come
    delete this;
    return;
  }
  Listen(service_, async_, cq_, gate_);
  absl::MutexLock lock(&mu_);
  ReadNextLocked();
}

void SessionCall::ReadNextLocked() {
  // No read may start once Finish() is under way, nor once the server is
  // shutting the queue down (the call was cancelled then).
  if (finishing_ || !gate_.Enter()) return;
  reading_ = true;
  stream_.Read(&request_, &read_tag_);
  gate_.Leave();
}

void SessionCall::OnReadDone(bool ok) {
  std::shared_ptr<ReplicaSession> session;
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    session = session_;
  }
  if (session == nullptr) {
    Open(ok);
  } else if (!ok) {
    // Both streams' threads finish them once the session has ended.
    session->Fail(absl::UnavailableError("replica closed the control stream"));
  } else {
    if (request_.has_ack()) OnAck(*session);
    absl::MutexLock lock(&mu_);
    ReadNextLocked();
  }
  MaybeDelete();
}

void SessionCall::OnAck(ReplicaSession& session) {
  const walship::v1::Ack& ack = request_.ack();
  if (CommitTrace* trace = service_.options_.commit_trace) {
    trace->Record(TraceStage::kAck, ack.flushed().segment(), ack.flushed().offset());
  }
  session.OnAck(ack);
  service_.registry_.NotifyAck();
  if (service_.acks_total_) service_.acks_total_->Add({{"replica", session.name()}}, 1);
}

void SessionCall::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_done_ = true;
  write_ok_ = ok;
}

void SessionCall::OnFinished() {
  {
    absl::MutexLock lock(&mu_);
    finished_ = true;
  }
  MaybeDelete();
}

void SessionCall::OnCallDone() {
  {
    absl::MutexLock lock(&mu_);
    call_done_ = true;
    // The pending read also ends (not ok), which fails the session; the
    // flag covers a cancellation before the first message.
    cancelled_ = ctx_.IsCancelled();
  }
  MaybeDelete();
}

void SessionCall::MaybeDelete() {
  {
    absl::MutexLock lock(&mu_);
    if (!call_done_ || reading_) return;
    // The thread always finishes the call: wait for that to complete.
    if ((finishing_ || writer_.joinable()) && !finished_) return;
  }
  if (writer_.joinable()) writer_.join();  // past its Finish(): it returns now
  delete this;
}

void SessionCall::Open(bool ok) {
  // Not ok: the replica closed its side, or the call was cancelled (then
  // the finish completes, not ok, and the call is freed all the same).
  if (!ok || !request_.has_open()) {
    return FinishFromQueue(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "the first Session message must be SessionOpen"));
  }
  std::shared_ptr<ReplicaSession> session =
      service_.registry_.Find(request_.open().session_id());
  if (!session || session->finished()) {
    return FinishFromQueue(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("no live session ", request_.open().session_id(), "; handshake again")));
  }
  if (grpc::Status id = service_.CheckIdentity(ctx_, session->name()); !id.ok()) {
    spdlog::error("session {} from {}: refused: {}", session->id(), ctx_.peer(),
                  id.error_message());
    return FinishFromQueue(id);
  }
  // The thread holds the gate until it has finished the call. Closed: the
  // server is shutting down and has cancelled the call; it stays unfinished.
  if (!gate_.Enter()) {
    session->Fail(absl::CancelledError("the agent is shutting down"));
    return;
  }
  acks_only_ = request_.open().acks_only();
  if (!acks_only_) session->SetReplicaDataPath(request_.open().data_path());
  absl::MutexLock lock(&mu_);
  session_ = session;
  if (cancelled_) session->Fail(absl::CancelledError("control stream cancelled"));
  writer_ = std::thread([this, session] {
    if (acks_only_) {
      NameThisThread(absl::StrCat("ws-acks-", session->name()));
      session->AwaitFinished();
      FinishNow(grpc::Status::OK);
    } else {
      WriteEvents(*session);
    }
    gate_.Leave();
  });
  ReadNextLocked();
}

bool SessionCall::cancelled() {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void SessionCall::FinishFromQueue(const grpc::Status& status) {
  if (!gate_.Enter()) return;  // cancelled by the server's shutdown
  FinishNow(status);
  gate_.Leave();
}

void SessionCall::FinishNow(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  finishing_ = true;
  // A read still pending completes (not ok) once the call is finished.
  stream_.Finish(status, &finish_tag_);
}

bool SessionCall::Write(const walship::v1::SessionEvent& ev) {
  {
    absl::MutexLock lock(&mu_);
    write_done_ = false;
  }
  stream_.Write(ev, &write_tag_);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&write_done_));
  return write_ok_;
}

bool SessionCall::Idle(ReplicaSession& session, walship::v1::SessionEvent* ev) {
  if (cancelled()) {
    session.Fail(absl::CancelledError("control stream cancelled"));
    return false;
  }
  if (!session.has_data_socket() && service_.clock_.Now() > session.token_deadline()) {
    session.Fail(absl::DeadlineExceededError("the replica never connected its data socket"));
    return false;
  }
  // A node that stopped being a primary (demoted: restarted in recovery)
  // ships nothing more: the session ends with that reason, so that a replica
  // with several agents goes on to the new primary's, and one with a single
  // agent asks again later.
  if (absl::Status ready = service_.source_.Readiness(); ReasonOf(ready) == Reason::kNotPrimary) {
    spdlog::warn("replica {} (session {}): ending the session: {}", session.name(),
                 session.id(), std::string(ready.message()));
    session.Fail(std::move(ready));
    return false;
  }
  const Position end = service_.catalog_.Get().End();
  ev->mutable_heartbeat()->set_agent_unix_nanos(absl::ToUnixNanos(service_.clock_.Now()));
  ev->mutable_heartbeat()->mutable_source_end()->set_segment(end.segment);
  ev->mutable_heartbeat()->mutable_source_end()->set_offset(end.offset);
  return true;
}

void SessionCall::WriteEvents(ReplicaSession& session) {
  NameThisThread(absl::StrCat("ws-events-", session.name()));
  absl::Status end;
  for (;;) {
    walship::v1::SessionEvent ev;
    if (!session.NextEvent(&ev, service_.options_.heartbeat) && !Idle(session, &ev)) continue;
    const bool is_error = ev.has_error();
    if (!Write(ev)) {
      session.Fail(absl::UnavailableError("control stream write failed"));
      if (is_error) break;
      continue;
    }
    if (is_error) {
      end = WithReason(absl::Status(static_cast<absl::StatusCode>(ev.error().code()),
                                    ev.error().message()),
                       ReasonFromInt(ev.error().reason()));
      break;
    }
  }
  session.Close();
  FinishNow(ToGrpc(end));
}

}  // namespace walship::agent
