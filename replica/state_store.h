// state_store.h: the replica's durable position, persisted.
//
// The file `walship.state` in the destination directory records the stream
// the directory belongs to and the last durable position: every byte before
// it is fdatasync'ed in a segment file (complete segments under their own
// names, the current one as NAME.partial).
//
// The record is saved when the durable position enters a new segment or
// passes a published one (beside the directory fsync that cycle makes
// anyway), at the end of a session, and otherwise lazily, at most every
// record interval (the replica's --record-interval), off the
// acknowledgement path: between saves, acknowledged bytes of the current
// segment may lie past it. They are fdatasync'ed in NAME.partial, and
// `walship.progress` (ProgressFile, below) names how far they reach.
//
// Each save must still be cheap: the file holds two fixed slots and each save overwrites the slot that does
// NOT hold the newest record, then fdatasyncs (the file's size and blocks
// never change, so no journal commit is needed). A crash mid-save leaves
// that slot torn, and its CRC line rejects it; the other slot still holds the
// previous position, which was durable when written. Load takes the valid
// slot with the higher sequence number (and keeps the other as previous()).
// The file is created (first save, or
// upgrade of a version 2 file) by temp + fsync + rename + fsync dir, so it
// never exists half-made.
//
// Format version 3: exactly 8192 bytes, slot i at offset 4096 * i. A slot is
// a record padded with NUL bytes (an all-NUL slot is empty); a record is text,
// one key=value per line, in this order:
//   walship-replica-state 3
//   seq=<decimal; the newer of two valid slots has the larger>
//   stream=<stream id>
//   segment=<segment name, may be empty>
//   offset=<decimal byte offset within segment>
//   complete=<0|1: segment is complete (renamed) on disk>
//   prefix_crc=<8 hex digits: CRC32C of bytes [0, offset) of segment>
//   crc=<8 hex digits: CRC32C of all preceding bytes of the record>
// Version 2 (a single record without seq, first line
// "walship-replica-state 2") is still read.
//
// Each save opens the file, writes, fdatasyncs and closes it, so a watcher
// sees IN_CLOSE_WRITE only once the record is durable.
//
// Thread-safety: not thread-safe; one owner at a time (the replica
// serializes its savers with a mutex). Readers
// in other processes (the restore helper) may read while it saves: they see
// the torn slot as invalid and use the other.
#ifndef WALSHIP_REPLICA_STATE_STORE_H_
#define WALSHIP_REPLICA_STATE_STORE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/position.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::replica {

struct ReplicaState {
  std::string stream_id;
  Position durable;
  bool segment_complete = false;
  // CRC32C of bytes [0, durable.offset) of durable.segment: lets a restart
  // and the restore helper prove the durable bytes unchanged on disk.
  uint32_t prefix_crc32c = 0;

  friend bool operator==(const ReplicaState& a, const ReplicaState& b) {
    return a.stream_id == b.stream_id && a.durable == b.durable &&
           a.segment_complete == b.segment_complete && a.prefix_crc32c == b.prefix_crc32c;
  }
};

inline constexpr char kStateFileName[] = "walship.state";
// Checksums of complete segments (segment_writer.h): one line
// "NAME LENGTH CRC32C" (decimal length, 8 hex digits) per segment, appended.
inline constexpr char kSumsFileName[] = "walship.sums";

struct SegmentSum {
  uint64_t length = 0;
  uint32_t crc32c = 0;
};
// The walship.sums line for one segment, newline included.
std::string SegmentSumLine(const std::string& name, uint64_t length, uint32_t crc32c);
// Every segment's checksum recorded in `dir`'s walship.sums; the last line
// for a name wins, and lines that do not parse (a torn last line) are
// skipped. Empty when the file is missing.
std::map<std::string, SegmentSum> LoadSegmentSums(sys::SysCalls& sys, const std::string& dir);

// A complete segment this destination holds (a published file), as the
// replica presents it at handshake (walship.v1.HeldSegment).
struct HeldCopy {
  std::string name;
  // The file's size.
  uint64_t length = 0;
  // Its walship.sums line's CRC32C, or, when the line is missing
  // (`unrecorded`), the file's.
  uint32_t crc32c = 0;
  bool unrecorded = false;
};
// The newest `max` published segments of `dir`, oldest first.
absl::StatusOr<std::vector<HeldCopy>> ListHeldSegments(sys::SysCalls& sys,
                                                       const std::string& dir, size_t max);

class StateStore {
 public:
  StateStore(sys::SysCalls& sys, std::string dir);

  // std::nullopt when there is no state file (a new destination).
  // kDataLoss when it exists but no slot holds a valid record.
  absl::StatusOr<std::optional<ReplicaState>> Load();
  // After Load(): the record before the newest (the other slot), if valid.
  // The replica falls back to it when the newest record's bytes did not
  // reach the disk (SegmentWriter::Flush's overlapped cycle).
  const std::optional<ReplicaState>& previous() const { return previous_; }

  // Durable when it returns OK. kInvalidArgument if the record would not
  // fit a slot.
  absl::Status Save(const ReplicaState& state);

  sys::SysCalls& sys() const { return sys_; }
  const std::string& dir() const { return dir_; }

  static constexpr size_t kSlotBytes = 4096;
  // One record (version 3) with sequence number `seq`.
  static std::string Encode(const ReplicaState& state, uint64_t seq);
  // One record of version 3 (its sequence number in *seq) or 2 (*seq = 0).
  static absl::StatusOr<ReplicaState> Decode(const std::string& record,
                                             uint64_t* seq = nullptr);
  // The newest valid record of a whole file's contents, and its slot (-1
  // for a version 2 file) and sequence number.
  struct Newest {
    ReplicaState state;
    int slot = -1;
    uint64_t seq = 0;
    std::optional<ReplicaState> previous;  // the other slot's valid record
  };
  static absl::StatusOr<Newest> DecodeFile(const std::string& contents);

 private:
  sys::SysCalls& sys_;
  const std::string dir_;
  // What the file on disk holds, once known (Load or Save): -1 when it must
  // be created (absent, version 2, or unknown).
  bool known_ = false;
  int newest_slot_ = -1;
  uint64_t seq_ = 0;
  std::optional<ReplicaState> previous_;
};

// walship.progress: the durable point of the replica's last flush cycle,
// rewritten by the flusher before every acknowledgement, after the data's
// fdatasync, WITHOUT an fdatasync of its own: one pwrite of a record in the
// format above (seq counts writes), NUL-padded to kBytes, in place.
//
// It is a claim, never proof. After a crash of the process it is exact (the
// page cache survives) and says how far the acknowledged bytes past
// walship.state reach; after a power loss it may be old, torn or missing.
// So a reader takes it only as a claim (ProgressPast()) and trusts it only
// where the segment file holds bytes [0, offset) whose CRC32C is the
// record's prefix_crc, the CRC computed when those bytes were received and
// verified: recovery (replica/recovery.h) checks that for the replica, the
// restore helper by extending the record's prefix CRC over the bytes past it.
// Each acknowledgement follows one write of it, so a watcher of its
// modifications (inotify IN_MODIFY) sees every acknowledgement.
//
// Thread-safety: Write() from one thread at a time; Load() from anywhere.
inline constexpr char kProgressFileName[] = "walship.progress";

class ProgressFile {
 public:
  ProgressFile(sys::SysCalls& sys, std::string dir);

  // Opens (creating) the file on first use. An error leaves the next call
  // to try again; the caller decides how loud to be (nothing depends on the
  // file but how much a restart after a crash can keep without asking the
  // agent).
  absl::Status Write(const ReplicaState& state);

  // The record in `dir`'s progress file; nullopt when absent or invalid.
  static std::optional<ReplicaState> Load(sys::SysCalls& sys, const std::string& dir);

  static constexpr size_t kBytes = 512;

 private:
  sys::SysCalls& sys_;
  const std::string path_;
  sys::UniqueFd fd_;
  uint64_t seq_ = 0;
  std::string buf_;
};

// The progress record of `dir` if it claims bytes past `record` (the loaded
// walship.state) in the same segment (not complete) of the same stream;
// nullopt otherwise (no valid file, another stream or segment, not past the
// record). The claim is not checked against the segment file: see above.
std::optional<ReplicaState> ProgressPast(sys::SysCalls& sys, const std::string& dir,
                                         const ReplicaState& record);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_STATE_STORE_H_
