// append_source.h: WAL source for directories of append-only segment files.
//
// The shape of MySQL binlogs, RocksDB and etcd WALs and many custom logs:
// regular files whose names sort in WAL order, each growing only by appends.
// Every visible byte is shippable (the writer is trusted to append only
// durable bytes; formats that need a durability horizon have their own
// source). A segment is complete once a later segment exists. Hidden files
// (leading '.') and names that are not valid segment names are ignored.
//
// Changes are followed with inotify (IN_MODIFY on the tail segment costs one
// fstat; creations, renames and deletions trigger a directory rescan), with a
// slow periodic rescan as a safety net for missed events (e.g. queue
// overflow).
//
// Errors: a segment that shrinks, or a complete segment that grows, means the
// directory is not append-only: the catalog is failed with kDataLoss and the
// shippers stop. An unreadable directory fails the catalog with the errno
// status.
#ifndef WALSHIP_AGENT_APPEND_SOURCE_H_
#define WALSHIP_AGENT_APPEND_SOURCE_H_

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/segment_catalog.h"
#include "agent/wal_source.h"
#include "common/sys/dir_watch.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::agent {

struct AppendSourceOptions {
  std::string wal_dir;
  // Overrides the derived stream identity (e.g. when the directory moves).
  std::string stream_id;
  absl::Duration rescan_interval = absl::Seconds(2);
};

class AppendSource final : public WalSource {
 public:
  AppendSource(sys::SysCalls& sys, AppendSourceOptions options,
               SegmentCatalog& catalog);
  ~AppendSource() override;

  absl::Status Start() override;
  void Stop() override;
  std::string StreamId() const override { return stream_id_; }
  std::string FormatName() const override { return "append"; }
  std::string wal_dir() const override { return options_.wal_dir; }

 private:
  void Loop();
  // Lists the directory and publishes. Returns the source failure, if any.
  absl::Status Rescan();
  // Re-reads the tail segment's size only.
  absl::Status RefreshTail();
  absl::Status PublishChecked(std::map<std::string, uint64_t> sizes);

  sys::SysCalls& sys_;
  const AppendSourceOptions options_;
  SegmentCatalog& catalog_;
  std::string stream_id_;
  std::optional<sys::DirWatch> watch_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  bool failed_ = false;
  // Last published sizes by name; only touched by the source thread (and by
  // Start before the thread exists).
  std::map<std::string, uint64_t> published_;
  std::string tail_name_;
  sys::UniqueFd tail_fd_;
};

// The stream identity for a directory: a hash of the host name, the
// directory's real path and its device/inode, so two primaries' directories
// never collide even at the same path.
absl::StatusOr<std::string> DeriveStreamId(sys::SysCalls& sys,
                                           const std::string& dir,
                                           const std::string& prefix);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_APPEND_SOURCE_H_
