// serve.h: the WAL a replica holds, served over the network
// (walship.v1.WalServe, `walship-replica --serve-listen=HOST:PORT`).
//
// A standby on another host cannot read the replica's directory, so the
// replica serves it what `walship-replica restore --dest` would serve
// locally, decided and verified by the same code (PlanRestore(),
// replica/restore.h), over a gRPC server-streaming call:
//   * Held: the verified durable end (walship.state, extended as far as
//     walship.progress names acknowledged bytes the file still backs), the
//     segment size and the complete files recorded in walship.sums;
//   * Fetch: one file's bytes after PlanRestore() verified them, with the
//     CRC32C their record gives so that the receiver checks them again
//     (replica/fetch.h). While streaming, the server recomputes the CRC32C
//     of the verified bytes as it reads them and ends the call with
//     DATA_LOSS if they changed since the check.
// Why gRPC and not the data socket: these are rare, whole-file reads by a
// standby about to be promoted, not the per-commit path; one more service
// on a gRPC server gets the project's mutual TLS, deadlines and status
// codes for free, and a file streamed in 1 MiB messages stays well under
// gRPC's 4 MiB message limit.
//
// Thread-safety: WalServeService's methods run on gRPC's threads at once;
// they only read the directory (the replica's writer may append to it
// meanwhile, which PlanRestore() allows for). `sys` must outlive the
// objects.
#ifndef WALSHIP_REPLICA_SERVE_H_
#define WALSHIP_REPLICA_SERVE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"
#include "proto/walship.grpc.pb.h"

namespace walship::replica {

// Bytes of file data in one FetchChunk.
inline constexpr size_t kFetchChunkBytes = size_t{1} << 20;
// Complete files listed by Held, the newest ones.
inline constexpr size_t kHeldFilesMax = 4096;

// Counts every Fetch in `metrics` (when not null):
// walship_replica_wal_fetches_total{result="served|not_found|refused|failed"}
// and walship_replica_wal_fetched_bytes_total.
class WalServeService final : public v1::WalServe::Service {
 public:
  WalServeService(sys::SysCalls& sys, std::string dest, MetricsRegistry* metrics = nullptr);

  grpc::Status Held(grpc::ServerContext* ctx, const v1::HeldRequest* req,
                    v1::HeldResponse* resp) override;
  grpc::Status Fetch(grpc::ServerContext* ctx, const v1::FetchRequest* req,
                     grpc::ServerWriter<v1::FetchChunk>* writer) override;

 private:
  void Count(const char* result, uint64_t bytes);

  sys::SysCalls& sys_;
  const std::string dest_;
  MetricsRegistry* const metrics_;
  std::optional<MetricsRegistry::Family> fetches_;
  std::optional<MetricsRegistry::Family> fetched_bytes_;
};

// The gRPC server around a WalServeService.
class WalServer {
 public:
  WalServer(sys::SysCalls& sys, std::string dest, MetricsRegistry* metrics = nullptr,
            Clock& clock = DefaultClock());
  ~WalServer();

  // Listens on `listen` (HOST:PORT; port 0 picks one, see port()) with
  // `tls` (mutual TLS, or plaintext when tls.insecure). kUnavailable if it
  // cannot listen; the file errors of MakeServerCredentials.
  absl::Status Start(const std::string& listen, const TlsOptions& tls);
  // Ends calls under way and stops; idempotent.
  void Shutdown();
  uint16_t port() const { return port_; }

 private:
  sys::SysCalls& sys_;
  Clock& clock_;
  WalServeService service_;
  std::unique_ptr<grpc::Server> server_;
  uint16_t port_ = 0;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_SERVE_H_
