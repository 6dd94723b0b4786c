// file_crc.h: CRC32C of a byte range of an open file.
//
// Used by the agent to checksum payloads and whole segments before they are
// sent, and by the replica to verify what it wrote. The bytes are read with
// pread(2) through the SysCalls seam into a 256 KiB buffer and checksummed
// there (why not mmap: docs/benchmarks.md, "Design choices these
// measurements decided").
//
// Thread-safety: stateless; safe from any thread. The file may grow while it
// is read, but the range [offset, offset + length) must exist: a range past
// the end of the file returns kOutOfRange once the read reaches the end (a
// file that shrinks meanwhile is reported the same way).
#ifndef WALSHIP_COMMON_FILE_CRC_H_
#define WALSHIP_COMMON_FILE_CRC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/sys/syscalls.h"

namespace walship {

// Returns Crc32cExtend(seed, bytes [offset, offset + length) of `fd`).
// `context` names the file in error messages.
absl::StatusOr<uint32_t> Crc32cOfFileRange(sys::SysCalls& sys, int fd,
                                           uint64_t offset, uint64_t length,
                                           const std::string& context,
                                           uint32_t seed = 0);

// The offset just past the last non-zero byte of [from, to) of `fd`, or
// `from` when every byte there is zero. Reads backwards from `to` (a file
// zero-filled in advance has its data at the front). `context` names the
// file in error messages.
absl::StatusOr<uint64_t> EndOfNonZeroBytes(sys::SysCalls& sys, int fd, uint64_t from,
                                           uint64_t to, const std::string& context);

// Two CRC32Cs of the same range in one pass: extending `seed_a` and `seed_b`
// (e.g. a frame's own CRC and a segment's running CRC). Each buffer's worth
// (256 KiB) is read once with pread(2) and checksummed twice while it is in
// the CPU cache.
absl::StatusOr<std::pair<uint32_t, uint32_t>> Crc32cOfFileRangeTwice(
    sys::SysCalls& sys, int fd, uint64_t offset, uint64_t length, const std::string& context,
    uint32_t seed_a, uint32_t seed_b);

// FileCrcReader: the two-CRC pass above, for a caller that checksums many
// consecutive ranges (a shipper's or writer's current segment): it keeps its
// buffer across calls instead of allocating one per call.
//
// Not thread-safe: one owner thread.
class FileCrcReader {
 public:
  explicit FileCrcReader(sys::SysCalls& sys) : sys_(sys) {}
  FileCrcReader(const FileCrcReader&) = delete;
  FileCrcReader& operator=(const FileCrcReader&) = delete;

  absl::StatusOr<std::pair<uint32_t, uint32_t>> Twice(int fd, uint64_t offset,
                                                      uint64_t length,
                                                      const std::string& context,
                                                      uint32_t seed_a, uint32_t seed_b);

 private:
  sys::SysCalls& sys_;
  std::unique_ptr<uint8_t[]> buf_;  // allocated by the first call
};

}  // namespace walship

#endif  // WALSHIP_COMMON_FILE_CRC_H_
