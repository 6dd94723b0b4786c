// segment_patches.h: the agent's side of in-place patches
// (common/segment_patch.h): comparing a replica's bytes with the source's
// where only declared bits may differ, and reading the final values of
// those bits for a segment's Checkpoint.
//
// Example: a replica holds the first 4096 bytes of mysql-bin.000007 as they
// were shipped, in-use flag set; the server has since cleared it. The plain
// CRC32C comparison says "divergent"; MatchesButMutable says the two agree
// but for the declared bit, and the shipper's Checkpoint carries
// FinalPatches (the flag's byte as the source holds it now).
//
// Thread-safety: functions; `sys` must be thread-safe (it is).
#ifndef WALSHIP_AGENT_SEGMENT_PATCHES_H_
#define WALSHIP_AGENT_SEGMENT_PATCHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/segment_patch.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

// True when `other_crc` is the CRC32C of bytes [begin, begin + length) of
// the open file `fd` (whose CRC32C is `file_crc`) with some combination of
// the declared `bits` inside that range flipped (none flipped included).
// Reads only the declared bytes.
absl::StatusOr<bool> MatchesButMutable(sys::SysCalls& sys, int fd, uint64_t begin, uint64_t length, uint32_t file_crc,
                                       uint32_t other_crc, const std::vector<MutableBits>& bits);

// The file's current value of every declared byte inside [0, length), one
// patch per byte, in the order declared.
absl::StatusOr<std::vector<SegmentPatch>> FinalPatches(sys::SysCalls& sys, int fd,
                                                       uint64_t length,
                                                       const std::vector<MutableBits>& bits);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SEGMENT_PATCHES_H_
