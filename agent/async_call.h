// async_call.h: the pieces every call of the agent's control server is made
// of (control_server.h).
//
// The server runs gRPC's asynchronous API from one completion queue and one
// thread. Every tag handed to gRPC is a CallTag; the thread calls Proceed
// with the completion's `ok`. Nothing else in the process polls gRPC's
// connections, so the thread that reads an acknowledgement off the socket is
// the one that handles it: with gRPC's synchronous or callback API, every
// completion woke a second polling thread first (its epoll engine hands the
// polling over before it runs what it found).
//
// Thread-safety: a tag's Proceed runs on the completion-queue thread only.
#ifndef WALSHIP_AGENT_ASYNC_CALL_H_
#define WALSHIP_AGENT_ASYNC_CALL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/work_queue.h"

namespace walship::agent {

// Who may still start operations on the completion queue. gRPC aborts the
// process when an operation starts on a queue that is shutting down, and a
// Session call's event thread starts them on its own schedule, so each
// thread enters the gate before it starts one and leaves once it will start
// no more; the server closes the gate, then shuts the queue down.
class OperationGate {
 public:
  // True: operations may start until the matching Leave(). False once
  // Close() has begun: start none.
  bool Enter() {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    ++inside_;
    return true;
  }
  void Leave() {
    absl::MutexLock lock(&mu_);
    --inside_;
  }
  // Refuses every later Enter() and waits, at most `timeout`, until all
  // who entered have left. Returns how many are still inside (0: none).
  int Close(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    mu_.AwaitWithTimeout(absl::Condition(this, &OperationGate::AllLeft), timeout);
    return inside_;
  }

 private:
  bool AllLeft() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return inside_ == 0; }

  absl::Mutex mu_;
  int inside_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class CallTag {
 public:
  virtual ~CallTag() = default;
  // One completion of the operation this tag was handed to.
  virtual void Proceed(bool ok) = 0;
};

// A tag that calls a function: a call with several operations in flight
// (read, write, finish, done) has one of these per operation.
class FnTag final : public CallTag {
 public:
  explicit FnTag(std::function<void(bool)> fn) : fn_(std::move(fn)) {}
  void Proceed(bool ok) override { fn_(ok); }

 private:
  std::function<void(bool)> fn_;
};

// A unary method: Listen() asks gRPC for the next call of it; each call, once
// it arrives, asks for the next one, runs `handle` (on `workers` when given,
// else on the completion-queue thread: only for handlers that never block)
// and sends its answer. The call frees itself. Each of its operations starts
// inside `gate`; once the gate is closed, a call that arrives is dropped
// unanswered (the server is cancelling every call by then).
template <typename Req, typename Resp>
class UnaryCall final : public CallTag {
 public:
  // The generated RequestMETHOD of an AsyncService, bound to it.
  using Request = std::function<void(grpc::ServerContext*, Req*,
                                     grpc::ServerAsyncResponseWriter<Resp>*,
                                     grpc::ServerCompletionQueue*, void*)>;
  using Handle = std::function<grpc::Status(grpc::ServerContext*, const Req*, Resp*)>;

  static void Listen(Request request, Handle handle, grpc::ServerCompletionQueue* cq,
                     WorkQueue* workers, OperationGate& gate) {
    if (!gate.Enter()) return;  // shutting down: no more calls
    new UnaryCall(std::move(request), std::move(handle), cq, workers, gate);
    gate.Leave();
  }

  void Proceed(bool ok) override {
    if (answering_ || !ok) {  // answered, or the server is shutting down
      delete this;
      return;
    }
    answering_ = true;
    Listen(request_, handle_, cq_, workers_, gate_);
    if (workers_ == nullptr) return Answer(/*run_handler=*/true);
    if (!workers_->Post([this] { Answer(/*run_handler=*/true); })) {
      Answer(/*run_handler=*/false);  // the workers stopped: the agent is shutting down
    }
  }

 private:
  UnaryCall(Request request, Handle handle, grpc::ServerCompletionQueue* cq,
            WorkQueue* workers, OperationGate& gate)
      : request_(std::move(request)),
        handle_(std::move(handle)),
        cq_(cq),
        workers_(workers),
        gate_(gate),
        writer_(&ctx_) {
    request_(&ctx_, &req_, &writer_, cq_, this);
  }

  // Sends the handler's answer, or UNAVAILABLE without running it. Once the
  // gate is closed the queue may be shutting down: the call is dropped
  // (freeing an unfinished call cancels it inside gRPC, with no operation).
  void Answer(bool run_handler) {
    OperationGate& gate = gate_;  // the answer's completion may free `this`
    if (!gate.Enter()) {
      delete this;
      return;
    }
    const grpc::Status s =
        run_handler ? handle_(&ctx_, &req_, &resp_)
                    : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is shutting down");
    if (s.ok()) {
      writer_.Finish(resp_, s, this);
    } else {
      writer_.FinishWithError(s, this);
    }
    gate.Leave();
  }

  const Request request_;
  const Handle handle_;
  grpc::ServerCompletionQueue* const cq_;
  WorkQueue* const workers_;
  OperationGate& gate_;
  grpc::ServerContext ctx_;
  Req req_;
  Resp resp_;
  grpc::ServerAsyncResponseWriter<Resp> writer_;
  bool answering_ = false;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_ASYNC_CALL_H_
