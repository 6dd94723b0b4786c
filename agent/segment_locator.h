// segment_locator.h: which file a segment's name stands for.
//
// Most formats keep every segment in the WAL directory. RocksDB moves a log
// it no longer needs into the archive/ subdirectory (WAL_ttl_seconds,
// WAL_size_limit_MB) instead of deleting it, under the same name, while a
// replica may still be receiving it. A locator lists the directories a
// segment may be in, the WAL directory first; readers (shippers, checksums)
// find a segment's file through it, so a log renamed into archive/ between
// two reads is the same file found again (same inode), not a lost segment.
//
// Example: SegmentLocator({"/db", "/db/archive"}).Path(sys, "000012.log")
// is "/db/000012.log" while that file exists, else "/db/archive/000012.log"
// if that one does, else "/db/000012.log" (whose open then fails).
//
// Immutable; safe to use from any number of threads.
#ifndef WALSHIP_AGENT_SEGMENT_LOCATOR_H_
#define WALSHIP_AGENT_SEGMENT_LOCATOR_H_

#include <string>
#include <utility>
#include <vector>

#include "common/sys/syscalls.h"

namespace walship::agent {

class SegmentLocator {
 public:
  // One directory. Implicit on purpose: a WAL directory is a locator.
  SegmentLocator(std::string wal_dir)  // NOLINT(google-explicit-constructor)
      : dirs_{std::move(wal_dir)} {}
  SegmentLocator(const char* wal_dir)  // NOLINT(google-explicit-constructor)
      : dirs_{std::string(wal_dir)} {}
  // `dirs` in the order to look; the first is the WAL directory. Must not
  // be empty.
  explicit SegmentLocator(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

  // The path of segment `name` (see the file comment).
  std::string Path(sys::SysCalls& sys, const std::string& name) const;
  const std::string& wal_dir() const { return dirs_.front(); }
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  std::vector<std::string> dirs_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SEGMENT_LOCATOR_H_
