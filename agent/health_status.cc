#include "agent/health_status.h"

namespace walship::agent {

void HealthStatus::Set(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  serving_[service] = serving;
}

void HealthStatus::SetAll(bool serving) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, s] : serving_) s = serving;
}

grpc::Status HealthStatus::Check(const grpc::health::v1::HealthCheckRequest& req,
                                 grpc::health::v1::HealthCheckResponse* resp) const {
  absl::MutexLock lock(&mu_);
  auto it = serving_.find(req.service());
  if (it == serving_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
  }
  resp->set_status(it->second ? grpc::health::v1::HealthCheckResponse::SERVING
                              : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

}  // namespace walship::agent
