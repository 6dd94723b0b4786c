#include "agent/reflection_call.h"

#include <set>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace walship::agent {
namespace {

using google::protobuf::FileDescriptor;

// `file` and, before it, every file it imports (each once).
void AddWithImports(const FileDescriptor* file, std::set<std::string>* seen,
                    reflection::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddWithImports(file->dependency(i), seen, out);
  }
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void NotFound(const std::string& what, reflection::ServerReflectionResponse* resp) {
  resp->mutable_error_response()->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  resp->mutable_error_response()->set_error_message(what);
}

}  // namespace

reflection::ServerReflectionResponse AnswerReflection(
    const reflection::ServerReflectionRequest& req, const std::vector<std::string>& services) {
  reflection::ServerReflectionResponse resp;
  resp.set_valid_host(req.host());
  *resp.mutable_original_request() = req;
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  const FileDescriptor* file = nullptr;
  switch (req.message_request_case()) {
    case reflection::ServerReflectionRequest::kListServices:
      for (const std::string& s : services) {
        resp.mutable_list_services_response()->add_service()->set_name(s);
      }
      return resp;
    case reflection::ServerReflectionRequest::kFileByFilename:
      file = pool->FindFileByName(req.file_by_filename());
      break;
    case reflection::ServerReflectionRequest::kFileContainingSymbol:
      file = pool->FindFileContainingSymbol(req.file_containing_symbol());
      break;
    default:
      NotFound("not served by this agent (it defines no extensions)", &resp);
      return resp;
  }
  if (file == nullptr) {
    NotFound("no such file or symbol", &resp);
    return resp;
  }
  std::set<std::string> seen;
  AddWithImports(file, &seen, resp.mutable_file_descriptor_response());
  return resp;
}

void ReflectionCall::Listen(const std::vector<std::string>& services,
                            reflection::ServerReflection::AsyncService& async,
                            grpc::ServerCompletionQueue* cq, OperationGate& gate) {
  if (!gate.Enter()) return;  // shutting down: no more calls
  new ReflectionCall(services, async, cq, gate);
  gate.Leave();
}

ReflectionCall::ReflectionCall(const std::vector<std::string>& services,
                               reflection::ServerReflection::AsyncService& async,
                               grpc::ServerCompletionQueue* cq, OperationGate& gate)
    : services_(services),
      async_(async),
      cq_(cq),
      gate_(gate),
      stream_(&ctx_),
      request_tag_([this](bool ok) { OnRequest(ok); }),
      read_tag_([this](bool ok) { OnRead(ok); }),
      write_tag_([this](bool ok) { OnWritten(ok); }),
      finish_tag_([this](bool) { Completed(); }),
      done_tag_([this](bool) {
        call_done_ = true;
        ++pending_;  // balanced by Completed()
        Completed();
      }) {
  ctx_.AsyncNotifyWhenDone(&done_tag_);
  async_.RequestServerReflectionInfo(&ctx_, &stream_, cq_, cq_, &request_tag_);
}

void ReflectionCall::OnRequest(bool ok) {
  if (!ok) {  // the server is shutting down; no other tag of this call will come
    delete this;
    return;
  }
  Listen(services_, async_, cq_, gate_);
  Start([this] { stream_.Read(&request_, &read_tag_); });
}

void ReflectionCall::OnRead(bool ok) {
  if (!ok) {
    Finish();  // the client is done asking (or gone)
  } else {
    response_ = AnswerReflection(request_, services_);
    Start([this] { stream_.Write(response_, &write_tag_); });
  }
  Completed();
}

void ReflectionCall::OnWritten(bool ok) {
  if (ok) {
    Start([this] { stream_.Read(&request_, &read_tag_); });
  } else {
    Finish();
  }
  Completed();
}

void ReflectionCall::Finish() {
  Start([this] { stream_.Finish(grpc::Status::OK, &finish_tag_); });
}

void ReflectionCall::Start(absl::FunctionRef<void()> op) {
  // Closed: the server is cancelling the call, whose done tag frees it.
  if (!gate_.Enter()) return;
  ++pending_;
  op();
  gate_.Leave();
}

void ReflectionCall::Completed() {
  if (--pending_ == 0 && call_done_) delete this;
}

}  // namespace walship::agent
