// segment_checksums.h: CRC32C of complete segments, computed once per agent.
//
// Every replica receives a checkpoint (name, length, crc) for each complete
// segment; the checksum is computed from the file (common/file_crc.h) on
// first use and cached, so N replicas cost one pass over the segment, not N.
//
// Thread-safety: thread-safe. Memory: at most `capacity` entries (oldest
// names evicted first).
#ifndef WALSHIP_AGENT_SEGMENT_CHECKSUMS_H_
#define WALSHIP_AGENT_SEGMENT_CHECKSUMS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

class SegmentChecksums {
 public:
  SegmentChecksums(sys::SysCalls& sys, std::string wal_dir, size_t capacity = 256);

  // CRC32C of bytes [0, length) of segment `name`.
  absl::StatusOr<uint32_t> Get(const std::string& name, uint64_t length);
  // Records a CRC a shipper computed while sending the whole segment, so no
  // replica's checkpoint needs another pass over the file.
  void Put(const std::string& name, uint64_t length, uint32_t crc32c);
  // CRC32C of bytes [0, length) of segment `name`, uncached (prefixes of
  // growing segments, for divergence checks at handshake).
  absl::StatusOr<uint32_t> Prefix(const std::string& name, uint64_t length);

 private:
  sys::SysCalls& sys_;
  const std::string wal_dir_;
  const size_t capacity_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, uint64_t>, uint32_t> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SEGMENT_CHECKSUMS_H_
