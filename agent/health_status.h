// health_status.h: what grpc.health.v1.Health/Check answers on the agent's
// control port (proto/health.proto): SERVING or NOT_SERVING for the server
// as a whole ("") and for each service registered, NOT_FOUND for any other
// name, as gRPC's own health service does.
//
// Thread-safety: all methods are thread-safe.
#ifndef WALSHIP_AGENT_HEALTH_STATUS_H_
#define WALSHIP_AGENT_HEALTH_STATUS_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/health.pb.h"

namespace walship::agent {

class HealthStatus {
 public:
  // Registers `service` (if new) with `serving`.
  void Set(const std::string& service, bool serving);
  // Every registered service.
  void SetAll(bool serving);
  // Check's answer for `req`.
  grpc::Status Check(const grpc::health::v1::HealthCheckRequest& req,
                     grpc::health::v1::HealthCheckResponse* resp) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_HEALTH_STATUS_H_
