#include "agent/segment_checksums.h"

#include <fcntl.h>

#include "absl/strings/str_cat.h"
#include "agent/segment_patches.h"
#include "common/file_crc.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"

namespace walship::agent {

SegmentChecksums::SegmentChecksums(sys::SysCalls& sys, SegmentLocator segments,
                                   size_t capacity)
    : sys_(sys), segments_(std::move(segments)), capacity_(capacity) {}

namespace {
int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

void SegmentChecksums::Remember(const std::string& name, uint64_t length, uint32_t crc32c,
                                const struct stat& st) {
  absl::MutexLock lock(&mu_);
  cache_[{name, length}] = Entry{crc32c, static_cast<uint64_t>(st.st_ino), MtimeNs(st)};
  while (cache_.size() > capacity_) cache_.erase(cache_.begin());
}

absl::StatusOr<uint32_t> SegmentChecksums::Get(const std::string& name,
                                               uint64_t length) {
  const std::string path = segments_.Path(sys_, name);
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenRegularFile(sys_, path));
  struct stat st;
  if (sys::SysResult r = sys_.Fstat(fd.get(), &st); !r.ok()) {
    return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", path));
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find({name, length});
    if (it != cache_.end() && it->second.ino == static_cast<uint64_t>(st.st_ino) &&
        it->second.mtime_ns == MtimeNs(st)) {
      return it->second.crc32c;
    }
  }
  WALSHIP_ASSIGN_OR_RETURN(uint32_t crc, Crc32cOfFileRange(sys_, fd.get(), 0, length, path));
  Remember(name, length, crc, st);
  return crc;
}

void SegmentChecksums::Put(const std::string& name, uint64_t length, uint32_t crc32c,
                           const struct stat& st) {
  Remember(name, length, crc32c, st);
}

absl::StatusOr<uint32_t> SegmentChecksums::Prefix(const std::string& name,
                                                  uint64_t length) {
  std::string path = segments_.Path(sys_, name);
  auto fd = sys::OpenRegularFile(sys_, path);
  if (!fd.ok()) return fd.status();
  return Crc32cOfFileRange(sys_, fd->get(), 0, length, path);
}

absl::StatusOr<bool> SegmentChecksums::PrefixMatchesButMutable(
    const std::string& name, uint64_t length, uint32_t crc, uint32_t other_crc,
    const std::vector<MutableBits>& bits) {
  if (crc == other_crc) return true;
  if (bits.empty()) return false;
  std::string path = segments_.Path(sys_, name);
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenRegularFile(sys_, path));
  return MatchesButMutable(sys_, fd.get(), 0, length, crc, other_crc, bits);
}

}  // namespace walship::agent
