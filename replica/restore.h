// restore.h: `walship-replica restore`, a PostgreSQL restore_command.
//
//   restore_command = 'walship-replica restore --dest=DIR %f %p'
//
// Serves, into %p, the file PostgreSQL asks for (%f) from a replica's
// destination directory: what walship has verified and made durable, and
// past it only the rest of the segment being received:
//   * a complete segment or history file NAME: only if its length and CRC32C
//     equal the line recorded for it in walship.sums;
//   * the segment being received (NAME.partial, the segment named in
//     walship.state): its durable bytes, checked against the state's prefix
//     CRC32C, or as far as walship.progress names acknowledged bytes past
//     the state whose CRC32C still matches; then the rest
//     of the file, unverified (after a power loss it holds acknowledged bytes
//     no record vouches for, and maybe damaged ones: PostgreSQL checks every
//     record and stops at the first bad one); zero-padded to the segment
//     size taken from the segment's own first page header (a pre-sized
//     partial, disk_format.md section 8: its zeros after the last non-zero
//     byte count as that padding), so PostgreSQL
//     replays up to the last valid record and asks again later;
//   * nothing else.
// Exit status, as restore_command expects: 0 served; 1 not available (PostgreSQL
// tries again later or ends recovery); 2 refused because verification failed
// (logged loudly on stderr; PostgreSQL treats it as not available, so a
// file that fails verification is never replayed). Names that are not segment or history
// names (`../x`, absolute paths) are refused as not available.
#ifndef WALSHIP_REPLICA_RESTORE_H_
#define WALSHIP_REPLICA_RESTORE_H_

#include <string>

#include "absl/status/status.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::replica {

inline constexpr int kRestoreServed = 0;
inline constexpr int kRestoreNotFound = 1;
inline constexpr int kRestoreRefused = 2;

// What Restore() serves of a file, decided and verified: bytes [0, size) of
// `fd`, then `pad` zero bytes. Bytes [0, verified) had CRC32C
// `verified_crc32c` when planned, the value walship.sums (complete files) or
// walship.state / walship.progress (the segment being received) records
// for them; a reader that copies the bytes later checks them against it
// again (the file may have been damaged in between). Bytes [verified, size)
// are the unverified tail of the segment being received.
struct RestorePlan {
  sys::UniqueFd fd;
  std::string path;  // the file `fd` opens, for messages
  uint64_t size = 0;
  uint64_t verified = 0;
  uint32_t verified_crc32c = 0;
  uint64_t pad = 0;
  bool complete = false;  // a published file (size == verified, pad == 0)
};

// Decides what Restore() would serve of `name` and verifies it; fills
// `plan` only when it returns kRestoreServed. Same codes and `why` as
// Restore() (`why` then says what is served).
int PlanRestore(sys::SysCalls& sys, const std::string& dest, const std::string& name,
                RestorePlan* plan, std::string* why);

// Returns the exit status; `why` receives a one-line explanation.
int Restore(sys::SysCalls& sys, const std::string& dest, const std::string& name,
            const std::string& target, std::string* why);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_RESTORE_H_
