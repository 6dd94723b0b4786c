// segment_checksums.h: CRC32C of complete segments, computed once per file.
//
// Handshakes check the complete segments a replica presents against the
// source (held_segments.h); shippers record the CRC of each segment they
// verified at its completion. A cached CRC is used only while the file under
// the name is the one it was computed from (same inode, size and
// modification time), so a file rewritten in place or replaced is read
// again, never vouched for with an old checksum.
//
// Thread-safety: thread-safe. Memory: at most `capacity` entries (oldest
// names evicted first).
#ifndef WALSHIP_AGENT_SEGMENT_CHECKSUMS_H_
#define WALSHIP_AGENT_SEGMENT_CHECKSUMS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/segment_locator.h"
#include "common/segment_patch.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

class SegmentChecksums {
 public:
  SegmentChecksums(sys::SysCalls& sys, SegmentLocator segments, size_t capacity = 4096);

  // CRC32C of bytes [0, length) of segment `name`.
  absl::StatusOr<uint32_t> Get(const std::string& name, uint64_t length);
  // Records a CRC a shipper verified against the file whose fstat(2),
  // taken before it read the file, is `st`: a write since changes the
  // modification time, so the entry is not used for it.
  void Put(const std::string& name, uint64_t length, uint32_t crc32c, const struct stat& st);
  // CRC32C of bytes [0, length) of segment `name`, uncached (prefixes of
  // growing segments, for divergence checks at handshake).
  absl::StatusOr<uint32_t> Prefix(const std::string& name, uint64_t length);
  // True when `other_crc` is the CRC32C of bytes [0, length) of segment
  // `name` (`crc`, from Prefix) with some of the declared `bits` flipped, or
  // `crc` itself (segment_patches.h: MatchesButMutable).
  absl::StatusOr<bool> PrefixMatchesButMutable(const std::string& name, uint64_t length,
                                               uint32_t crc, uint32_t other_crc,
                                               const std::vector<MutableBits>& bits);

 private:
  sys::SysCalls& sys_;
  const SegmentLocator segments_;
  const size_t capacity_;
  absl::Mutex mu_;
  struct Entry {
    uint32_t crc32c;
    uint64_t ino;
    int64_t mtime_ns;
  };
  void Remember(const std::string& name, uint64_t length, uint32_t crc32c,
                const struct stat& st);
  std::map<std::pair<std::string, uint64_t>, Entry> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SEGMENT_CHECKSUMS_H_
