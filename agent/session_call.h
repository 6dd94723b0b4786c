// session_call.h: one Session stream of the Control service
// (proto/walship.proto), on the control server's completion queue
// (async_call.h).
//
// The first message binds the stream to its ReplicaSession; every later one
// is an acknowledgement, handled (and passed on to the primary) on the
// completion-queue thread that read it. Events go out from a thread of our
// own, which waits for the next event or the heartbeat interval and for each
// write to complete, then finishes the call. A stream of acknowledgements
// only (SessionOpen.acks_only) carries no events: its thread finishes it
// once the session has ended, so that no call outlives its session.
//
// Operations start only through the server's OperationGate (async_call.h):
// the event thread holds it from its start until it has finished the call,
// and the completion-queue thread passes it for each read, finish and the
// next call's request, so that none starts once the queue may be shut down.
//
// Thread-safety: the tags run on the completion-queue thread; the event
// thread shares the call's state under mu_.
#ifndef WALSHIP_AGENT_SESSION_CALL_H_
#define WALSHIP_AGENT_SESSION_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/async_call.h"
#include "agent/control_service.h"
#include "agent/replica_session.h"
#include "proto/walship.grpc.pb.h"

namespace walship::agent {

class SessionCall {
 public:
  // Asks gRPC for the next Session call, unless `gate` is closed; the call
  // frees itself. `gate` outlives every call.
  static void Listen(ControlServiceImpl& service, walship::v1::Control::AsyncService& async,
                     grpc::ServerCompletionQueue* cq, OperationGate& gate);

 private:
  SessionCall(ControlServiceImpl& service, walship::v1::Control::AsyncService& async,
              grpc::ServerCompletionQueue* cq, OperationGate& gate);

  void OnRequest(bool ok);
  void OnReadDone(bool ok);
  void OnAck(ReplicaSession& session);
  void OnWriteDone(bool ok);
  void OnFinished();
  void OnCallDone();
  // Frees the call once gRPC holds none of its tags and its thread is done.
  void MaybeDelete();
  // The first message: SessionOpen for a live session this peer may own.
  void Open(bool ok);
  // Starts the next read unless the call is finishing or the gate is closed.
  void ReadNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishNow(const grpc::Status& status);
  // FinishNow from the completion-queue thread, unless the gate is closed.
  void FinishFromQueue(const grpc::Status& status);
  bool cancelled();
  // Writes `ev` and waits for the write to complete (event thread).
  bool Write(const walship::v1::SessionEvent& ev);
  void WriteEvents(ReplicaSession& session);
  // A heartbeat, or the session failed for a reason the wait revealed.
  bool Idle(ReplicaSession& session, walship::v1::SessionEvent* ev);

  ControlServiceImpl& service_;
  walship::v1::Control::AsyncService& async_;
  grpc::ServerCompletionQueue* const cq_;
  OperationGate& gate_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<walship::v1::SessionEvent, walship::v1::SessionRequest> stream_;
  FnTag request_tag_, read_tag_, write_tag_, finish_tag_, done_tag_;
  walship::v1::SessionRequest request_;  // one read at a time
  std::thread writer_;  // WriteEvents(); or, for acknowledgements only, the wait for the end
  bool acks_only_ = false;  // set by Open(), before the thread starts
  absl::Mutex mu_;
  std::shared_ptr<ReplicaSession> session_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish() called
  bool finished_ ABSL_GUARDED_BY(mu_) = false;   // ... and completed
  bool call_done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SESSION_CALL_H_
