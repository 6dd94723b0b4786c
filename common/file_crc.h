// file_crc.h: CRC32C of a byte range of an open file, read through mmap.
//
// Used by the agent to checksum payloads and whole segments before they are
// sent, and by the replica to verify what it wrote, without copying the bytes
// through a user-space buffer: the CRC reads the page cache directly.
//
// Thread-safety: stateless; safe from any thread. The file may grow while it
// is read, but the range [offset, offset + length) must exist: a range past
// the end of the file returns kOutOfRange and never touches unmapped memory
// (the size is checked with fstat first; a concurrent truncation is the
// caller's contract to prevent, as with any mmap reader).
#ifndef WALSHIP_COMMON_FILE_CRC_H_
#define WALSHIP_COMMON_FILE_CRC_H_

#include <cstdint>
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

// Two CRC32Cs of the same range in one pass over the mapping: extending
// `seed_a` and `seed_b` (e.g. a frame's own CRC and a segment's running CRC).
// Each 64 KiB piece is read once from the page cache and then from the CPU
// cache.
absl::StatusOr<std::pair<uint32_t, uint32_t>> Crc32cOfFileRangeTwice(
    sys::SysCalls& sys, int fd, uint64_t offset, uint64_t length, const std::string& context,
    uint32_t seed_a, uint32_t seed_b);

// FileCrcReader: the two-CRC pass above, for a caller that checksums many
// consecutive ranges of the same file (a shipper's or writer's current
// segment). It keeps one read-only mapping (a window of 2 MiB steps) across
// calls, replaced when the range leaves it or the file (device, inode) changes,
// so a frame costs no mmap/munmap (munmap's TLB shootdowns dominated the
// per-frame cost). Pages are populated with MADV_POPULATE_READ for just the
// range read; nothing past the end of the file is touched.
//
// Not thread-safe: one owner thread. The mapping is released by Reset() or
// the destructor.
class FileCrcReader {
 public:
  explicit FileCrcReader(sys::SysCalls& sys) : sys_(sys) {}
  ~FileCrcReader() { Reset(); }
  FileCrcReader(const FileCrcReader&) = delete;
  FileCrcReader& operator=(const FileCrcReader&) = delete;

  absl::StatusOr<std::pair<uint32_t, uint32_t>> Twice(int fd, uint64_t offset,
                                                      uint64_t length,
                                                      const std::string& context,
                                                      uint32_t seed_a, uint32_t seed_b);
  void Reset();

 private:
  sys::SysCalls& sys_;
  void* addr_ = nullptr;
  uint64_t start_ = 0;  // file offset of addr_
  uint64_t len_ = 0;
  uint64_t dev_ = 0, ino_ = 0;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_FILE_CRC_H_
