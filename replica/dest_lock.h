// dest_lock.h: one walship-replica per destination directory.
//
// Two replicas following into the same --dest would interleave their segment
// files and overwrite each other's walship.state. A replica therefore holds an
// exclusive flock(2) on DEST/walship.lock for as long as it runs; the file
// holds the holder's PID, for the message a second replica gets. The lock goes
// with the process (a crash releases it), so a stale file never blocks a
// restart. The restore helper reads the directory without the lock.
//
// Thread-safety: a DestLock is owned by one thread; it is movable, not
// copyable.
#ifndef WALSHIP_REPLICA_DEST_LOCK_H_
#define WALSHIP_REPLICA_DEST_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::replica {

inline constexpr char kLockFileName[] = "walship.lock";

class DestLock {
 public:
  // Takes the lock of `dir`. kFailedPrecondition naming the holder's PID when
  // another process holds it; the errno status when the file cannot be
  // opened or locked.
  static absl::StatusOr<DestLock> Acquire(sys::SysCalls& sys, const std::string& dir);

 private:
  explicit DestLock(sys::UniqueFd fd) : fd_(std::move(fd)) {}
  sys::UniqueFd fd_;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_DEST_LOCK_H_
