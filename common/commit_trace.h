// -----------------------------------------------------------------------------
// File: common/commit_trace.h
// -----------------------------------------------------------------------------
//
// Where a synchronous commit's time goes: an opt-in recorder of timestamps
// along the per-commit path through both daemons (--trace-commits=FILE).
//
// The path of one flush, and the stage each daemon records at its step
// (each record names a position: a byte offset within segment SEGMENT, the
// end of the bytes the step concerns):
//
//   agent    feed        the flush feed learned a new flush position
//   agent    sent        a DATA frame's payload went out (sendfile returned)
//   replica  header      the replica read a DATA frame's header
//   replica  spliced     the frame's payload landed in the segment file
//   replica  verified    its checksum matched
//   replica  synced      a flush cycle's fdatasync returned (position: the
//                        durable point it reached)
//   replica  ack_sent    the acknowledgement of that point was handed to gRPC
//   replica  ack_written gRPC's Write of it returned (the flushing thread
//                        waits for that before it reads on)
//   agent    ack         the agent read the acknowledgement
//   agent    status      the standby status update carrying it was written
//                        to the walsender
//
// Times are Clock::MonotonicNanos() (CLOCK_MONOTONIC), which both daemons
// on one machine share, so the two files join by position
// (integration/bench/commit_trace.py does it).
//
// Cost: nothing when off (callers hold a null CommitTrace*). When on, one
// mutex-guarded store of a fixed-size record per stage and flush; the
// records sit in a ring of `capacity` entries allocated up front, and when
// it is full the oldest are overwritten (dropped() counts them). Dump()
// writes the ring once, when the daemon stops.
//
// File format, text, one record per line, oldest first:
//   NANOSECONDS STAGE SEGMENT OFFSET
// e.g. "81234567890123 sent 000000010000000000000003 1843200". Segment
// names longer than kMaxSegmentName bytes are cut to that length.
//
// Thread-safety: Record() from any number of threads; Text() and Dump()
// too (they copy under the lock). The clock must outlive the trace.
#ifndef WALSHIP_COMMON_COMMIT_TRACE_H_
#define WALSHIP_COMMON_COMMIT_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/sys/syscalls.h"

namespace walship {

enum class TraceStage : uint8_t {
  kFeed,
  kSent,
  kHeader,
  kSpliced,
  kVerified,
  kSynced,
  kAckSent,
  kAck,
  kStatus,
  kAckWritten,
};

// The stage's name in the file ("feed", "sent", ...).
const char* TraceStageName(TraceStage stage);

class CommitTrace {
 public:
  static constexpr size_t kMaxSegmentName = 40;
  // A ring of 2^18 records (48 bytes each) holds a 15 s pgbench round at a
  // few thousand flushes a second.
  static constexpr size_t kDefaultCapacity = size_t{1} << 18;

  // `capacity` >= 1 records.
  explicit CommitTrace(size_t capacity = kDefaultCapacity, Clock& clock = DefaultClock());
  CommitTrace(const CommitTrace&) = delete;
  CommitTrace& operator=(const CommitTrace&) = delete;

  // Records `stage` at `segment`/`offset`, timed now.
  void Record(TraceStage stage, absl::string_view segment, uint64_t offset)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The records in the file format, oldest first.
  std::string Text() const ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces the file `path` with Text() (sys::WriteFileAtomically in its
  // directory); that function's error as it is.
  absl::Status Dump(sys::SysCalls& sys, const std::string& path) const;

  // Records taken since construction, and how many of them the ring has
  // overwritten.
  uint64_t recorded() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t dropped() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    int64_t nanos = 0;
    uint64_t offset = 0;
    TraceStage stage = TraceStage::kFeed;
    uint8_t segment_length = 0;
    char segment[kMaxSegmentName];
  };

  Clock& clock_;
  mutable absl::Mutex mu_;
  std::vector<Entry> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
};

// Dumps `trace` to `path` at a daemon's exit and logs the outcome: how many
// records, how many the ring dropped, or why the file could not be written.
void DumpCommitTrace(sys::SysCalls& sys, const CommitTrace& trace, const std::string& path);

}  // namespace walship

#endif  // WALSHIP_COMMON_COMMIT_TRACE_H_
