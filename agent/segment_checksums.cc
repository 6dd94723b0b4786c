#include "agent/segment_checksums.h"

#include <fcntl.h>

#include "absl/strings/str_cat.h"
#include "common/file_crc.h"
#include "common/sys/file_util.h"

namespace walship::agent {

SegmentChecksums::SegmentChecksums(sys::SysCalls& sys, std::string wal_dir,
                                   size_t capacity)
    : sys_(sys), wal_dir_(std::move(wal_dir)), capacity_(capacity) {}

absl::StatusOr<uint32_t> SegmentChecksums::Get(const std::string& name,
                                               uint64_t length) {
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find({name, length});
    if (it != cache_.end()) return it->second;
  }
  auto crc = Prefix(name, length);
  if (!crc.ok()) return crc.status();
  absl::MutexLock lock(&mu_);
  cache_[{name, length}] = *crc;
  while (cache_.size() > capacity_) cache_.erase(cache_.begin());
  return *crc;
}

void SegmentChecksums::Put(const std::string& name, uint64_t length, uint32_t crc32c) {
  absl::MutexLock lock(&mu_);
  cache_[{name, length}] = crc32c;
  while (cache_.size() > capacity_) cache_.erase(cache_.begin());
}

absl::StatusOr<uint32_t> SegmentChecksums::Prefix(const std::string& name,
                                                  uint64_t length) {
  std::string path = absl::StrCat(wal_dir_, "/", name);
  auto fd = sys::OpenRegularFile(sys_, path);
  if (!fd.ok()) return fd.status();
  return Crc32cOfFileRange(sys_, fd->get(), 0, length, path);
}

}  // namespace walship::agent
