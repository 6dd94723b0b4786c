// fetch.h: the client side of walship.v1.WalServe (replica/serve.h): WAL
// fetched from a replica on another host, verified before it is handed on.
//
//   restore_command = 'walship-replica restore --from=HOST:PORT[,HOST2:PORT] %f %p'
//
// FetchWalFile() receives one file into `target` and accepts it only if
//   * the stream carried exactly the header's `size` bytes, and
//   * bytes [0, verified) have the CRC32C the header gives, the replica's
//     own record for them (walship.sums, walship.state, walship.progress);
// then appends the header's zero padding. Bytes are written to
// `target`.walship-fetch, then renamed over `target` (with `durable`, after
// an fdatasync, and the directory fsync'ed after the rename), so `target`
// never holds a partial or unverified copy. On failure the temp file is
// removed and `target` left as it was.
//
// RestoreFrom() is the restore_command: the same exit codes and the same
// checks as the local `walship-replica restore --dest` (replica/restore.h),
// asking each replica in turn until one serves the file.
//
// Thread-safety: stateless functions; `sys` and the stub must outlive the
// call.
#ifndef WALSHIP_REPLICA_FETCH_H_
#define WALSHIP_REPLICA_FETCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"
#include "proto/walship.grpc.pb.h"

namespace walship::replica {

// What FetchWalFile() wrote: `size` bytes of the replica's file (the first
// `verified` checked), then `pad` zero bytes.
struct FetchedFile {
  uint64_t size = 0;
  uint64_t verified = 0;
  uint64_t pad = 0;
  bool complete = false;
};

// Fetches `name` into `target` by the rules above, within `deadline`.
// Errors: kNotFound (the replica does not hold it: restore's "not
// available"); kDataLoss (the replica refused it because it fails its record,
// or what arrived fails the checks: restore's "refused"); kUnavailable or
// kDeadlineExceeded (unreachable, too slow); errors writing `target`.
absl::StatusOr<FetchedFile> FetchWalFile(sys::SysCalls& sys, v1::WalServe::StubInterface& stub,
                                         const std::string& name, const std::string& target,
                                         absl::Time deadline, bool durable);

// The replica's Held answer, within `deadline`; the gRPC error as a Status.
absl::StatusOr<v1::HeldResponse> FetchHeld(v1::WalServe::StubInterface& stub,
                                           absl::Time deadline);

// A stub for the replica at `address` (HOST:PORT) with `tls`.
absl::StatusOr<std::unique_ptr<v1::WalServe::StubInterface>> MakeWalServeStub(
    sys::SysCalls& sys, Clock& clock, const std::string& address, const TlsOptions& tls);

// `walship-replica restore --from=...`: asks `addresses` in order for
// `name` and writes the first copy served into `target` (durably is not
// needed: PostgreSQL reads it at once). Returns kRestoreServed,
// kRestoreNotFound (no replica has it, or none is reachable: PostgreSQL
// asks again later) or kRestoreRefused (no copy served, and at least one
// failed verification); `why` says which replica did what.
int RestoreFrom(sys::SysCalls& sys, Clock& clock, const std::vector<std::string>& addresses,
                const TlsOptions& tls, const std::string& name, const std::string& target,
                absl::Duration timeout, std::string* why);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_FETCH_H_
