#include "agent/control_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/async_call.h"
#include "agent/reflection_call.h"
#include "agent/session_call.h"
#include "common/sched_slice.h"
#include "common/sys/thread_name.h"
#include "spdlog/spdlog.h"

namespace walship::agent {

namespace v1 = walship::v1;
namespace health = grpc::health::v1;

namespace {

// How long Shutdown waits for the sessions' event threads once every call
// has ended (they only send a last event and finish their call by then).
constexpr absl::Duration kEventThreadsWait = absl::Seconds(5);

}  // namespace

ControlServer::ControlServer(ControlServiceImpl& control, sys::SysCalls& sys,
                             absl::Duration sched_slice, int sched_fifo_priority)
    : control_(control),
      sys_(sys),
      sched_slice_(sched_slice),
      sched_fifo_priority_(sched_fifo_priority),
      services_{v1::Control::service_full_name(), health::Health::service_full_name(),
                grpc::reflection::v1alpha::ServerReflection::service_full_name()},
      workers_("ws-control-work", 2) {}

ControlServer::~ControlServer() { Shutdown(absl::InfinitePast()); }

absl::StatusOr<uint16_t> ControlServer::Start(const std::string& listen,
                                              std::shared_ptr<grpc::ServerCredentials> creds) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, std::move(creds), &port);
  builder.RegisterService(&control_async_);
  builder.RegisterService(&health_async_);
  builder.RegisterService(&reflection_async_);
  cq_ = builder.AddCompletionQueue();
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for control on ", listen));
  }
  health_.Set("", true);
  health_.Set(v1::Control::service_full_name(), true);
  grpc::ServerCompletionQueue* cq = cq_.get();
  UnaryCall<v1::HandshakeRequest, v1::HandshakeResponse>::Listen(
      [this](auto* ctx, auto* req, auto* w, auto* q, void* tag) {
        control_async_.RequestHandshake(ctx, req, w, q, q, tag);
      },
      [this](auto* ctx, auto* req, auto* resp) { return control_.Handshake(ctx, req, resp); },
      cq, &workers_, gate_);
  UnaryCall<v1::StatusRequest, v1::StatusResponse>::Listen(
      [this](auto* ctx, auto* req, auto* w, auto* q, void* tag) {
        control_async_.RequestStatus(ctx, req, w, q, q, tag);
      },
      [this](auto* ctx, auto* req, auto* resp) { return control_.Status(ctx, req, resp); },
      cq, &workers_, gate_);
  UnaryCall<health::HealthCheckRequest, health::HealthCheckResponse>::Listen(
      [this](auto* ctx, auto* req, auto* w, auto* q, void* tag) {
        health_async_.RequestCheck(ctx, req, w, q, q, tag);
      },
      [this](auto*, auto* req, auto* resp) { return health_.Check(*req, resp); }, cq, nullptr,
      gate_);
  SessionCall::Listen(control_, control_async_, cq, gate_);
  ReflectionCall::Listen(services_, reflection_async_, cq, gate_);
  thread_ = std::thread([this, cq] {
    NameThisThread("ws-control");
    CommitPathThread(sys_, sched_slice_, sched_fifo_priority_, "ws-control").Start();
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) static_cast<CallTag*>(tag)->Proceed(ok);
  });
  return static_cast<uint16_t>(port);
}

void ControlServer::Shutdown(absl::Time deadline) {
  if (cq_ == nullptr) return;
  health_.SetAll(false);
  // The queue's thread and the workers serve on while the calls end: each
  // call's last operations complete there.
  if (server_) server_->Shutdown(absl::ToChronoTime(deadline));
  workers_.Stop();
  // The calls are over, but their event threads may still be sending a
  // session's last event or finishing, and the queue's thread may still be
  // handling completions that came before; gRPC aborts on an operation
  // started on a queue that is shutting down.
  if (const int left = gate_.Close(kEventThreadsWait); left > 0) {
    spdlog::error("control server: {} session event thread(s) still running after {}; "
                  "exiting without stopping the control port's queue",
                  left, absl::FormatDuration(kEventThreadsWait));
    // Whatever they start may still use the queue and the server: keep both.
    cq_.release();
    server_.release();
    if (thread_.joinable()) thread_.detach();
    return;
  }
  cq_->Shutdown();
  if (thread_.joinable()) {
    thread_.join();
  } else {  // Start() failed before the thread: the queue is drained here
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
    }
  }
  server_.reset();
  cq_.reset();
}

}  // namespace walship::agent
