// publisher.h: turns a finished NAME.partial into a published segment NAME.
//
// Publication, in order (SegmentWriter::Flush drives it; see
// segment_writer.h for the layout of the destination directory):
//   1. AppendSum: the line "NAME LENGTH CRC32C" is appended to walship.sums
//      and fdatasync'ed. Durable when it returns: a crash from then on finds
//      the line, so recovery (recovery.h) can finish a rename the crash lost.
//   2. Rename: NAME.partial becomes NAME. Not durable when it returns.
//   3. SyncDir: one fsync of the directory makes every rename (and every
//      entry created) before it durable.
//   4. QueueDrop: with drop-behind, the published segment's cached pages are
//      dropped later by DropPublishedPages(), on a thread of the caller's
//      choosing, so the flusher never waits for it.
// The caller publishes a segment only when every byte of it is fdatasync'ed
// and its CRC32C equals the agent's checkpoint; the Publisher checks neither.
//
// Threading: AppendSum, Rename, SyncDir and RecordMissingSums from the
// flusher, one call at a time (one of them may run on a helper thread the
// flusher waits for). QueueDrop from the flusher; DropPublishedPages from one
// thread at a time, any thread; HasPagesToDrop from any thread.
//
// HelperPool runs the device flushes of a Flush() cycle that do not depend on
// each other at once (a segment's fdatasync beside the record's save or a
// checksum line's, the directory fsync beside the next segment's bytes):
// waiting for two flushes at once without creating a thread per cycle.
//
// Errors: kNotFound/kPermissionDenied/... from the failing syscall
// (sys::ErrnoToStatus, with the path). A failed step leaves the segment as it
// was before that step; the caller fails its Flush() and recovery sorts out
// the directory. Dropping pages never fails: a refusal is logged once.
#ifndef WALSHIP_REPLICA_PUBLISHER_H_
#define WALSHIP_REPLICA_PUBLISHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "replica/state_store.h"

namespace walship::replica {

// The suffix of a segment still being received.
inline constexpr char kPartialSuffix[] = ".partial";

// DIR/NAME, or DIR/NAME.partial with `partial`.
std::string SegmentPath(const std::string& dir, const std::string& name, bool partial);

// The size of the open file `fd`; `label` names it in the error.
absl::StatusOr<uint64_t> FileSizeOf(sys::SysCalls& sys, int fd, const std::string& label);

// `name` (NAME.partial with `partial`) in `dir` holds exactly `sum.length`
// bytes whose CRC32C is `sum.crc32c`: kFailedPrecondition with
// Reason::kDivergent otherwise, or the error of opening or reading it.
absl::Status VerifySegmentFile(sys::SysCalls& sys, const std::string& dir,
                               const std::string& name, const SegmentSum& sum,
                               bool partial = false);

// Renames DIR/NAME.partial to DIR/NAME (step 2 above). Not durable until the
// directory is fsync'ed.
absl::Status RenamePartial(sys::SysCalls& sys, const std::string& dir, const std::string& name);

class Publisher {
 public:
  // `dir` is the destination directory; with `drop_behind`, QueueDrop keeps
  // segments for DropPublishedPages(), else it ignores them.
  Publisher(sys::SysCalls& sys, std::string dir, bool drop_behind,
            Clock& clock = DefaultClock());
  ~Publisher();

  // Step 1: appends the line for `name` to walship.sums (creating the file,
  // and fsyncing the directory for its entry, on first use) and fdatasyncs
  // it. A last line torn by an earlier crash is ended first, so it stays one
  // unreadable line instead of swallowing this one.
  absl::Status AppendSum(const std::string& name, uint64_t length, uint32_t crc32c);
  // Step 2.
  // Before AppendSum: when the open NAME.partial `fd` is longer than
  // `length` (zeros past the segment's end: a pre-sized file, see
  // spare_segment.h), truncates it to `length` and fdatasyncs it, so the
  // published file's length is its segment's. Durable when it returns.
  absl::Status CutToLength(const sys::UniqueFd& fd, const std::string& name, uint64_t length);
  absl::Status Rename(const std::string& name);
  // Step 3.
  absl::Status SyncDir();
  // Step 4: `fd` is the published segment's open file.
  void QueueDrop(std::shared_ptr<sys::UniqueFd> fd, std::string name);

  // Segments published before this session whose walship.sums line is
  // missing, and whose checkpoint the agent confirmed: each gets its line
  // again once its file matches the checkpoint (a mismatch is logged and the
  // line left out). Fails only when appending a line fails.
  absl::Status RecordMissingSums(
      const std::vector<std::pair<std::string, SegmentSum>>& confirmed);

  // Drops the cached pages of the segments queued since the last call:
  // every byte is fdatasync'ed, so they are clean and simply freed. A
  // segment goes in 1 MiB slices with a short pause between them while no
  // other segment waits, so that it does not compete for the CPU with the
  // flusher's cycle. Advisory: a failure is logged once, never returned.
  void DropPublishedPages();
  // True when DropPublishedPages() has segments to drop.
  bool HasPagesToDrop() const;

 private:
  struct Queued {
    std::shared_ptr<sys::UniqueFd> fd;
    std::string name;
  };
  void DropPages(const Queued& q);

  Clock& clock_;

  sys::SysCalls& sys_;
  const std::string dir_;
  const bool drop_behind_;
  sys::UniqueFd sums_;  // AppendSum only
  bool drop_warned_ = false;  // DropPublishedPages only
  mutable absl::Mutex drop_mu_;
  std::vector<Queued> to_drop_ ABSL_GUARDED_BY(drop_mu_);
};

// Long-lived helper threads, started on first use ("ws-state-write" for the
// first, "ws-sync-N" for the others) and joined by the destructor.
class HelperPool {
 public:
  HelperPool();
  ~HelperPool();

  // Runs jobs[0] on the calling thread and each other job on a helper
  // thread of its own, all at once; waits for all of them (even after one
  // failed) and returns the first error in job order. OK for no jobs. One
  // caller at a time (the flusher).
  absl::Status RunAtOnce(std::vector<std::function<absl::Status()>> jobs);

 private:
  class Helper;
  std::vector<std::unique_ptr<Helper>> helpers_;  // RunAtOnce only
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_PUBLISHER_H_
