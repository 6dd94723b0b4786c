// segment_writer.h: lays shipped WAL out on the replica's disk, durably.
//
// Layout in the destination directory:
//   NAME          a complete segment: every byte present, fdatasync'ed, and its
//                 CRC32C equal to the agent's checkpoint.
//   NAME.partial  a segment still being received: it holds the bytes the
//                 durable records prove (state_store.h), never "its length".
//                 A live segment starts as a spare zero-filled to the
//                 segment size (spare_segment.h, NoteCaughtUp), so that its
//                 fdatasyncs commit no size change; during catch-up segments
//                 grow from empty (disk_format.md section 8). A segment that
//                 completes short of a pre-sized file is cut to its length
//                 before its checksum line and rename.
//   walship.spare the next live segment's file, zero-filled in advance.
//   walship.state the durable position (state_store.h).
//   walship.sums  one line "NAME LENGTH CRC32C" per complete segment, appended
//                 and fdatasync'ed before the rename that publishes it; the
//                 restore helper verifies segments against it.
//
// Writes come from the receiver thread: BeginSegment for each SEGMENT frame,
// WriteData for each DATA frame. WriteData moves the payload socket -> pipe
// -> file with splice(2) (or read/pwrite for the copy transport), then
// re-reads what landed in the file (common/file_crc.h) and checks it against the
// frame's CRC32C. A mismatch truncates the file back, so nothing of a corrupt
// frame stays on disk. A frame that overlaps bytes already on disk (a resend
// after reconnect) is compared byte for byte: a difference is divergence
// (kFailedPrecondition) and nothing is overwritten.
//
// Durability comes from the flusher thread: Flush() fdatasyncs every written
// byte, then publishes segments whose checkpoint has arrived and whose bytes
// are all flushed with the checkpoint's CRC32C (publisher.h: checksum line,
// rename NAME.partial to NAME), and fsyncs the directory once for those
// renames and for segment files created since the last Flush() (BeginSegment
// leaves that to it, so the receive path never waits for a journal commit).
// At a segment boundary the device flushes that do not depend on each other
// run at once on helper threads: the old segment's tail, bytes of younger
// segments and the checksum line first; then the directory fsync together
// with the bytes that arrived for the next segment meanwhile, so the point
// returned can already lie in it. Only the position Flush() returns is
// durable; the caller may acknowledge it once Flush() returns (see Flush()
// for which cycles record it themselves).
//
// Recovery (recovery.h) runs once, in Recover(), before anything is written.
//
// Threading: one receiver thread (BeginSegment, WriteData), one flusher at a
// time (Flush: callers on different threads serialize their calls, e.g. with
// a mutex), one control thread (AddCheckpoint), one thread dropping pages
// (DropPublishedPages); accessors from any thread. One mutex (mu_) guards the
// segments, checkpoints and durable point those threads share; no file I/O
// runs under it.
// The object is per session: after any error, discard it and Recover() a new
// one, which truncates anything past the durable position.
#ifndef WALSHIP_REPLICA_SEGMENT_WRITER_H_
#define WALSHIP_REPLICA_SEGMENT_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/commit_trace.h"
#include "common/file_crc.h"
#include "common/position.h"
#include "common/segment_patch.h"
#include "common/sys/pipe.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/net/data_conn.h"
#include "common/sys/unique_fd.h"
#include "common/transport.h"
#include "common/wire/frame.h"
#include "replica/publisher.h"
#include "replica/recovery.h"
#include "replica/spare_segment.h"
#include "replica/state_store.h"

namespace walship::replica {

struct WriterOptions {
  Transport transport = Transport::kZeroCopy;
  size_t pipe_bytes = 1u << 20;
  size_t copy_buffer_bytes = 256u << 10;
  // Once a segment is published (durable, renamed), its pages may be
  // dropped from the page cache (DropPublishedPages): the replica never
  // reads them again. Advisory: a failure is logged, never fatal.
  bool drop_behind = true;
  // Called after each fdatasync of a segment file with its duration, on
  // whichever thread ran it (the flusher or a helper); the replica exports
  // the distribution. May be empty.
  std::function<void(absl::Duration)> on_data_sync;
  sys::TransferOptions io;
  // Live segments of a stream whose segment size is known (PostgreSQL: the
  // first page header) start as a spare file zero-filled to full size
  // (spare_segment.h, NoteCaughtUp()), so their fdatasyncs commit no size
  // change. Off: every segment grows from empty.
  bool presize_segments = true;
  // The stream's segment size when known in advance (tests); 0: learned
  // from the first page header of PostgreSQL WAL, unknown for other streams.
  uint64_t segment_size = 0;
  // Called on the spare's thread with the time each spare took to write
  // and sync. May be empty.
  std::function<void(absl::Duration)> on_spare_prepared;
  // Records each DATA frame's payload landing in its file and its checksum
  // matching (TraceStage::kSpliced, kVerified); null: off. Borrowed.
  CommitTrace* trace = nullptr;
};

struct WriterCounters {
  uint64_t bytes_zerocopy = 0;
  uint64_t bytes_copy = 0;
};

class SegmentWriter {
 public:
  SegmentWriter(sys::SysCalls& sys, std::string dest_dir, WriterOptions options,
                Clock& clock = DefaultClock());
  ~SegmentWriter();

  // Reconciles the directory with the persisted state (RecoverDirectory,
  // recovery.h) and returns the durable point to resume from: publishes a
  // NAME.partial the state is past (or calls complete) that matches its
  // walship.sums line (see Flush()), truncates the state's NAME.partial to
  // the durable offset and removes other .partial files (never
  // acknowledged). kDataLoss when bytes the state calls durable are missing
  // or no longer match its CRC. Before any other call, on the thread that
  // sets up the session.
  //
  // With Tail::kKeep, the bytes of the state's NAME.partial past its durable
  // offset are kept instead of truncated: bytes received before a stop and
  // never recorded (fdatasync'ed here, so they survive a later crash, but
  // not yet trusted). tail() then names the point they reach, with the
  // CRC32C of the whole prefix, for the caller to present to the agent.
  // They count only after ResolveTail(true), once the agent confirmed that
  // prefix; ResolveTail(false) truncates them. BeginSegment refuses until
  // one of the two was called.
  using Tail = TailPolicy;
  absl::StatusOr<DurablePoint> Recover(const std::optional<ReplicaState>& state,
                                       Tail keep = Tail::kTruncate);
  std::optional<DurablePoint> tail() const;
  // keep: the tail becomes the durable point (the caller records it before
  // acknowledging anything). !keep: the file is cut back to the durable
  // point. Either way tail() is empty afterwards. No-op without a tail.
  absl::Status ResolveTail(bool keep);

  // SEGMENT frame: subsequent DATA frames with `handle` belong to `name`,
  // starting at `start_offset`.
  absl::Status BeginSegment(const std::string& name, uint64_t handle,
                            uint64_t start_offset);
  // DATA frame whose header has been read and validated; reads exactly
  // h.payload_length bytes from `sock`, or, when `tls` is set, from that TLS
  // session over it (common/net/tls_conn.h: decrypted through one buffer
  // and pwritten, or spliced with kernel TLS; verified the same way).
  absl::Status WriteData(int sock, const wire::FrameHeader& h, net::DataConn* tls = nullptr);
  // ZDATA frame (segment_writer_bytes.cc): `bytes` are its h.raw_length
  // uncompressed bytes, already verified against h.payload_crc32c
  // (wire::DecompressPayload). The same stream rules as WriteData (gap,
  // overlapping resend compared byte for byte, nothing of a failed frame
  // left on disk); the new bytes are pwritten (the copy path).
  absl::Status WriteBytes(const wire::FrameHeader& h, absl::Span<const uint8_t> bytes);
  // Checkpoint from the agent: `name` is complete at `length` with `crc32c`
  // once `patches` (bytes the source rewrote in place after shipping them)
  // are written over it; see ApplyPatches in segment_writer_checkpoints.cc.
  void AddCheckpoint(const std::string& name, uint64_t length, uint32_t crc32c,
                     std::vector<SegmentPatch> patches = {});

  // Persists a durable point (StateStore::Save); see Flush().
  using PersistFn = std::function<absl::Status(const DurablePoint&)>;

  // Makes every written byte durable and finalizes completed segments.
  //
  // With `persist`, a cycle that only adds bytes to the oldest open segment
  // (its entry durable, nothing to publish) syncs just that segment; bytes
  // of younger segments wait for the next cycle (HasUnflushedWork()). It
  // calls `persist` only when those bytes are the first past the recorded
  // segment (the durable point enters it): the record must name a segment
  // before any byte of it is acknowledged, because recovery keeps bytes
  // past the record only within the record's segment. That record is saved
  // on a helper thread WHILE the data's fdatasync runs, so it is briefly
  // ahead of the data; the caller acknowledges only after Flush() returns,
  // and a crash in between leaves a record whose bytes Recover() finds
  // missing or different, so the caller falls back to the previous record
  // (StateStore keeps it). If the data's fdatasync fails, `persist` is
  // called again with the previous durable point before the error is
  // returned.
  //
  // A cycle that ends with a directory fsync (a publication, a new entry)
  // saves its record the same way, beside that fsync, once every byte and
  // checksum line it covers is durable. A crash then can leave the record
  // past a segment whose rename was lost; Recover() finishes that
  // publication (the segment matches its checksum line) and the restore
  // helper serves it meanwhile. Other cycles call nothing: the caller
  // records the returned point when it sees fit (walship.progress at once,
  // walship.state lazily; state_store.h). Points are only ever persisted by
  // `persist` from this thread's cycle; the caller orders them against its
  // own saves.
  //
  // A failed cycle is never retried on the same writer: Linux reports a
  // writeback error once and may have dropped the dirty pages, so a second
  // fdatasync can succeed over lost bytes. The writer cuts every open
  // segment back to its last durable offset (what earlier cycles returned)
  // and fails every later Flush() and WriteData() with the same error; the
  // caller ends the session and starts over from the last durable point
  // (sync_failed()).
  absl::StatusOr<DurablePoint> Flush(const PersistFn& persist = nullptr);
  // True once a Flush() failed (see above). Any thread.
  bool sync_failed() const;

  // With drop_behind, drops the cached pages of segments that Flush()
  // published since the last call (Publisher::DropPublishedPages). One
  // thread at a time, any thread; the replica runs it on a thread of its
  // own, so that it never delays the flusher's next cycle.
  void DropPublishedPages();
  // True when DropPublishedPages() has segments to drop. Any thread.
  bool HasPagesToDrop() const;

  // The receiver found the socket empty (the stream is live, not catching
  // up). Once the segment size is known, a spare segment file is prepared
  // in the background, and the next segment begun at offset 0 takes it
  // instead of growing from an empty file (BeginSegment). Receiver thread.
  void NoteCaughtUp();
  // Waits up to `timeout` for the spare asked for by NoteCaughtUp() to be
  // ready; false if none was asked for or it is not ready by then. For
  // tests. Receiver thread.
  bool WaitForSpare(absl::Duration timeout);

  // True when a Flush() now would make more bytes durable or publish a
  // segment: the flusher runs again at once instead of waiting for a kick.
  bool HasUnflushedWork() const;

  Position written() const;
  WriterCounters counters() const;

 private:
  struct Segment {
    std::string name;
    std::shared_ptr<sys::UniqueFd> fd;
    uint64_t written = 0;
    uint64_t flushed = 0;
    // CRC32C of [0, written) and of [0, flushed), kept as bytes land so
    // neither the durable prefix nor a finished segment is read twice.
    uint32_t written_crc = 0;
    uint32_t flushed_crc = 0;
    // Its directory entry is known durable (a directory fsync since it was
    // created); no byte of it is acknowledged before.
    bool entry_durable = false;
  };
  // The agent's checkpoint: the segment is complete at `length` bytes with
  // CRC32C `crc32c` (the same two numbers as its walship.sums line).
  using Checkpoint = SegmentSum;
  // A segment file to fdatasync, and what it holds when the sync begins.
  struct Pending {
    std::shared_ptr<sys::UniqueFd> fd;
    std::string name;
    uint64_t written;
    uint32_t written_crc;
  };
  // A walship.sums line.
  struct Sum {
    std::string name;
    uint64_t length;
    uint32_t crc32c;
  };
  // A segment to publish: every byte durable, matching its checkpoint.
  struct Final {
    std::string name;
    uint64_t length;
    uint32_t crc32c;
    std::shared_ptr<sys::UniqueFd> fd;
  };

  // A Flush() cycle is two rounds, each planned under mu_, executed without
  // it (all file I/O) and committed under mu_ (see FlushCycle in the .cc).
  // The data round makes written bytes durable.
  struct DataRound {
    DurablePoint before;  // durable_ when the cycle began
    std::vector<Pending> pending;
    // Lines for segments that already match their checkpoint, appended
    // during the data's fdatasync.
    std::vector<Sum> early_sums;
    // The common cycle (see Flush()): the point its single sync reaches,
    // and whether its record is saved alongside (record_first).
    std::optional<DurablePoint> common;
    bool record_first = false;
  };
  // The publication round publishes finished segments and fsyncs the
  // directory, together with bytes of younger segments that arrived during
  // the data round.
  struct PublicationRound {
    std::vector<Final> finals;  // the oldest open segments, in order
    std::vector<Pending> late;
    // Segments open when planned: the directory fsync covers their entries.
    std::vector<std::string> snapshot;
    bool sync_dir = false;  // a directory fsync runs (renames or new entries)
    DurablePoint next;      // the point the cycle reaches
  };

  std::string PathOf(const std::string& name, bool partial) const;
  absl::Status EnsurePipe();
  // BeginSegment's parts (segment_writer_begin.cc): renames the spare to
  // `path` when the stream is live, returning whether it did; the segment
  // size the stream's first page header names (0: unknown).
  absl::StatusOr<bool> TakeSpare(const std::string& path, uint64_t start_offset);
  uint64_t LearnSegmentSize();
  // Runs `persist(target)` on the helper thread while this thread fdatasyncs
  // `fd`; returns the first error.
  absl::Status SyncOverlapped(int fd, const std::string& path, const PersistFn& persist,
                              const DurablePoint& target);
  absl::Status SyncFile(int fd, const std::string& path);

  // The segment a DATA frame lands in, as WriteData found it.
  struct FrameTarget {
    std::string name;
    std::shared_ptr<sys::UniqueFd> fd;
    uint64_t written = 0;
    uint32_t written_crc = 0;
  };
  // WriteData's parts: compares the `overlap` resent bytes at `off` with the
  // file, extending *crc over them; lands `rest` new bytes at t.written and
  // verifies the frame (`resent_crc`: CRC32C of its resent part).
  absl::Status CompareResent(int sock, net::DataConn* tls, const FrameTarget& t, uint64_t off,
                             uint64_t overlap, uint32_t* crc);
  absl::Status LandNew(int sock, net::DataConn* tls, const wire::FrameHeader& h,
                       const FrameTarget& t, uint64_t rest, uint32_t resent_crc);
  // segment_writer_bytes.cc: the frame's target after the handle, complete
  // segment and gap checks; after `rest` new bytes landed at t.written with
  // the segment's CRC32C now `new_crc`, counts them (or cuts them back if a
  // failed flush intervened); after a failure `why`, truncates the file back
  // to t.written and returns `why`.
  absl::StatusOr<FrameTarget> TargetOf(const wire::FrameHeader& h) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CommitLanded(const FrameTarget& t, uint64_t rest, uint32_t new_crc,
                            bool zerocopy) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DiscardLanded(const FrameTarget& t, absl::Status why);

  absl::StatusOr<DurablePoint> FlushCycle(const PersistFn& persist);
  DataRound PlanDataRound(bool persisting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ExecuteDataRound(const DataRound& round, const PersistFn& persist)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CommitDataRound(const DataRound& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PublicationRound> PlanPublicationRound(const DataRound& data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The point the cycle reaches once `round` is executed.
  DurablePoint PointReached(const PublicationRound& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checksum lines and renames of the finals; the directory fsync with the
  // late bytes and (with `persist`) the record of `round.next`.
  absl::Status ExecutePublicationRound(const DataRound& data, const PublicationRound& round,
                                       const PersistFn& persist) ABSL_LOCKS_EXCLUDED(mu_);
  DurablePoint CommitPublicationRound(const PublicationRound& round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acts on checkpoints for segments already published (see the .cc).
  absl::Status SettlePublished() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the patches of checkpointed segments whose bytes are all durable
  // (segment_writer_checkpoints.cc); ApplyPatch does one segment's, whose
  // durable CRC32C is `crc`, and returns its CRC32C once patched.
  absl::Status ApplyPatches() ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint32_t> ApplyPatch(const std::string& name, int fd, uint32_t crc,
                                      const Checkpoint& cp,
                                      const std::vector<SegmentPatch>& patches)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After a failed cycle: records `why` and cuts every open segment back to
  // its durable offset.
  void CutBackAfterFailure(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // The open segment named `name`, or null.
  Segment* FindOpen(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Flush() only (one caller at a time).
  HelperPool pool_;

  Clock& clock_;

  sys::SysCalls& sys_;
  const std::string dir_;
  const WriterOptions options_;
  std::optional<sys::Pipe> pipe_;  // receiver thread only
  // Pre-sized segments (NoteCaughtUp): receiver thread only.
  std::unique_ptr<SpareSegment> spare_;
  uint64_t segment_size_ = 0;
  std::string size_probed_;  // the segment LearnSegmentSize() last read
  bool caught_up_ = false;
  std::vector<char> buffer_;       // receiver thread only
  FileCrcReader crc_reader_;       // receiver thread only
  Publisher publisher_;            // Flush() (or one job it runs); dropping: see publisher.h

  mutable absl::Mutex mu_;
  std::deque<Segment> open_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Checkpoint> checkpoints_ ABSL_GUARDED_BY(mu_);
  // Checkpoints' patches not yet written, by segment.
  std::map<std::string, std::vector<SegmentPatch>> patches_ ABSL_GUARDED_BY(mu_);
  DurablePoint durable_ ABSL_GUARDED_BY(mu_);
  // Bytes past durable_ kept by Recover(kKeep), not yet resolved.
  std::optional<DurablePoint> tail_ ABSL_GUARDED_BY(mu_);
  uint64_t handle_ ABSL_GUARDED_BY(mu_) = 0;
  // The current handle refers to a segment already complete on disk.
  bool handle_complete_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_begun_ ABSL_GUARDED_BY(mu_);
  WriterCounters counters_ ABSL_GUARDED_BY(mu_);
  // A segment file was created since the last directory fsync.
  bool dir_sync_needed_ ABSL_GUARDED_BY(mu_) = false;
  // The error of the first failed Flush(); see Flush().
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

// RecoverFromStore (recovery.h) with `writer.Recover(candidate, tail)` as
// the recovery of each candidate record.
absl::StatusOr<DurablePoint> RecoverFromStore(StateStore& store, SegmentWriter& writer,
                                              std::optional<ReplicaState>* state,
                                              SegmentWriter::Tail tail =
                                                  SegmentWriter::Tail::kTruncate);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_SEGMENT_WRITER_H_
