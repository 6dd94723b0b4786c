// reflection_call.h: one grpc.reflection.v1alpha.ServerReflection stream
// (proto/reflection.proto) on the control server's completion queue
// (async_call.h), so that grpcurl and other reflection clients can list the
// agent's services and fetch their descriptors.
//
// Each request is answered from the descriptors compiled into the binary:
// list_services with the services the server registered; file_by_filename
// and file_containing_symbol with that file and every file it imports,
// serialized FileDescriptorProtos; anything else NOT_FOUND.
//
// Thread-safety: runs on the completion-queue thread only.
#ifndef WALSHIP_AGENT_REFLECTION_CALL_H_
#define WALSHIP_AGENT_REFLECTION_CALL_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "agent/async_call.h"
#include "proto/reflection.grpc.pb.h"

namespace walship::agent {

namespace reflection = grpc::reflection::v1alpha;

// The answer to one request; `services` are the full names list_services
// reports.
reflection::ServerReflectionResponse AnswerReflection(
    const reflection::ServerReflectionRequest& req, const std::vector<std::string>& services);

class ReflectionCall {
 public:
  // Asks gRPC for the next call unless `gate` is closed; the call frees
  // itself. `services` and `gate` must outlive the server.
  static void Listen(const std::vector<std::string>& services,
                     reflection::ServerReflection::AsyncService& async,
                     grpc::ServerCompletionQueue* cq, OperationGate& gate);

 private:
  ReflectionCall(const std::vector<std::string>& services,
                 reflection::ServerReflection::AsyncService& async,
                 grpc::ServerCompletionQueue* cq, OperationGate& gate);

  void OnRequest(bool ok);
  void OnRead(bool ok);
  void OnWritten(bool ok);
  void Finish();
  // Starts `op`, one operation of this call, inside the gate; nothing once
  // the gate is closed.
  void Start(absl::FunctionRef<void()> op);
  // One operation of this call completed; frees the call once it is over.
  void Completed();

  const std::vector<std::string>& services_;
  reflection::ServerReflection::AsyncService& async_;
  grpc::ServerCompletionQueue* const cq_;
  OperationGate& gate_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<reflection::ServerReflectionResponse,
                                reflection::ServerReflectionRequest>
      stream_;
  FnTag request_tag_, read_tag_, write_tag_, finish_tag_, done_tag_;
  reflection::ServerReflectionRequest request_;
  reflection::ServerReflectionResponse response_;
  int pending_ = 0;  // reads, writes and the finish gRPC holds
  bool call_done_ = false;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_REFLECTION_CALL_H_
