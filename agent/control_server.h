// control_server.h: the agent's gRPC control port.
//
// Serves walship.v1.Control (control_service.h, session_call.h),
// grpc.health.v1.Health/Check (health_status.h) and
// grpc.reflection.v1alpha.ServerReflection (reflection_call.h) on gRPC's
// asynchronous API: one completion queue, one thread ("ws-control") that
// reads every call's messages off the connections and handles them
// (async_call.h says why). Handshake and Status, which read files and take
// locks, run on two threads of their own ("ws-control-work"), so a
// handshake that reads a segment from disk never delays another replica's
// acknowledgement.
//
// Thread-safety: Start, then Shutdown, from one thread; health() from any.
#ifndef WALSHIP_AGENT_CONTROL_SERVER_H_
#define WALSHIP_AGENT_CONTROL_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/async_call.h"
#include "agent/control_service.h"
#include "agent/health_status.h"
#include "common/sys/syscalls.h"
#include "common/work_queue.h"
#include "proto/health.grpc.pb.h"
#include "proto/reflection.grpc.pb.h"
#include "proto/walship.grpc.pb.h"

namespace walship::agent {

class ControlServer {
 public:
  // `control` and `sys` must outlive the server. The serving thread asks for
  // `sched_slice`, or SCHED_FIFO at `sched_fifo_priority` when above zero
  // (common/sched_slice.h; zero and zero: the kernel's defaults).
  ControlServer(ControlServiceImpl& control, sys::SysCalls& sys, absl::Duration sched_slice,
                int sched_fifo_priority);
  ~ControlServer();  // Shutdown, cancelling every call at once

  // Listens on `listen` ("host:port", port 0 for any) with `creds`; the
  // port bound. Every service starts SERVING.
  absl::StatusOr<uint16_t> Start(const std::string& listen,
                                 std::shared_ptr<grpc::ServerCredentials> creds);
  // Ends every call (cancelling those still running at `deadline`), then
  // stops the threads. Idempotent.
  void Shutdown(absl::Time deadline);

  HealthStatus& health() { return health_; }

 private:
  ControlServiceImpl& control_;
  sys::SysCalls& sys_;
  const absl::Duration sched_slice_;
  const int sched_fifo_priority_;
  HealthStatus health_;
  walship::v1::Control::AsyncService control_async_;
  grpc::health::v1::Health::AsyncService health_async_;
  grpc::reflection::v1alpha::ServerReflection::AsyncService reflection_async_;
  const std::vector<std::string> services_;
  WorkQueue workers_;
  OperationGate gate_;  // who may start operations on cq_ (async_call.h)
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::thread thread_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_CONTROL_SERVER_H_
