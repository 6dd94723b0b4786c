// spare_segment.h: one segment file zero-filled ahead of time, so that a
// live segment never grows.
//
// fdatasync of a file that grew must also commit the journal transaction
// for its new size; of a file whose blocks were all written and synced
// before, it writes only the data. PostgreSQL's walreceiver and
// pg_receivewal therefore write into segments zero-filled to full size in
// advance. SpareSegment does the same for the replica's live tail: a thread
// of its own writes `walship.spare` in the destination directory, zeros to
// the segment size (written, not fallocate'd: unwritten extents would be
// converted, and journalled, at the first fdatasync after each write),
// fdatasync'ed, and fsyncs the directory; the receiver thread then renames
// it into NAME.partial (Take) instead of creating an empty file.
//
// The name starts with the reserved prefix `walship.`, so it is never a
// segment name (wire/segment_name.h): recovery, the restore helper and
// WalServe never list or serve it. A spare left by a stopped replica is
// written again from the start by the next Request().
//
// Threading: Request() and Take() from one thread (the receiver), so that a
// spare is never asked for while one is being renamed; ready() and
// WaitReady() from any thread. The destructor stops the thread (waiting for
// a spare being written to be finished).
#ifndef WALSHIP_REPLICA_SPARE_SEGMENT_H_
#define WALSHIP_REPLICA_SPARE_SEGMENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/sys/syscalls.h"

namespace walship::replica {

inline constexpr char kSpareFileName[] = "walship.spare";

class SpareSegment {
 public:
  // `on_prepared`: called on the spare's thread after each spare is ready,
  // with the time it took to write and sync it; may be empty.
  SpareSegment(sys::SysCalls& sys, std::string dir, Clock& clock,
               std::function<void(absl::Duration)> on_prepared = nullptr);
  ~SpareSegment();
  SpareSegment(const SpareSegment&) = delete;
  SpareSegment& operator=(const SpareSegment&) = delete;

  // Asks for a spare of `size` bytes (> 0). Returns at once; no-op while a
  // spare of that size is ready or being written. A failure to write it is
  // logged and leaves no spare (segments are then created empty, as
  // without a spare); the next Request() tries again.
  void Request(uint64_t size);

  // If a spare of `size` bytes is ready (zero-filled and synced, its entry
  // durable): renames it to `to` and returns true; the rename is durable
  // only after the caller's next fsync of the directory. False when none
  // is ready (never waits for one being written). An error of the rename
  // leaves no spare.
  absl::StatusOr<bool> Take(uint64_t size, const std::string& to);

  // A spare of `size` bytes is ready.
  bool ready(uint64_t size) const;
  // Waits up to `timeout` for ready(size); its value then.
  bool WaitReady(uint64_t size, absl::Duration timeout) const;

 private:
  enum class State { kNone, kWanted, kWriting, kReady };
  void Loop();
  absl::Status Write(uint64_t size);

  sys::SysCalls& sys_;
  const std::string dir_;
  const std::string path_;
  Clock& clock_;
  const std::function<void(absl::Duration)> on_prepared_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNone;
  uint64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_SPARE_SEGMENT_H_
