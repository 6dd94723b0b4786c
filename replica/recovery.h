// recovery.h: reconciles the destination directory with the durable record,
// once, before a session writes anything.
//
// RecoverDirectory() runs when a SegmentWriter starts (SegmentWriter::Recover
// calls it on the thread that sets up the session, before any frame is
// received). From the record (state_store.h) and the files present it
// decides the point the session resumes from, and leaves the directory so
// that it holds nothing past that point that anyone could trust:
//   - a NAME.partial whose NAME is published too is a leftover copy (a
//     rename undone and redone across crashes): removed;
//   - a NAME.partial the record is past (or calls complete) that matches
//     its walship.sums line is a publication whose rename a crash lost:
//     renamed, as Flush() would have (publisher.h). One that does not
//     match is kDataLoss;
//   - the record's NAME.partial is cut back to the recorded offset (or,
//     with TailPolicy::kKeep, its bytes past it are kept as the tail);
//   - other .partial files after the recorded segment were never
//     acknowledged (no byte of a segment is acknowledged before the record
//     names it): removed. Those before it that no line vouches for may
//     have been acknowledged: kept, with a warning.
// kDataLoss when bytes the record calls durable are missing or no longer
// have the CRC32C they had when acknowledged.
//
// Durable when it returns OK: the resumed segment's bytes up to the point
// (fdatasync'ed), its directory entry, every rename and removal above (one
// directory fsync). On error the directory may be half reconciled; running
// it again from the same record finishes the job.
//
// RecoverFromStore() picks the record: walship.progress when the file
// backs it, else the newest record, else (when the newest names bytes a
// crash kept from the disk) the one before it, which it saves again.
#ifndef WALSHIP_REPLICA_RECOVERY_H_
#define WALSHIP_REPLICA_RECOVERY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/position.h"
#include "common/sys/syscalls.h"
#include "replica/state_store.h"

namespace walship::replica {

// A point up to which the replica's bytes are durable.
struct DurablePoint {
  Position position;
  // `position.segment` is complete (renamed) on disk.
  bool complete = false;
  // CRC32C of bytes [0, position.offset) of that segment.
  uint32_t prefix_crc32c = 0;
};

// What becomes of the bytes of the record's NAME.partial past the recorded
// offset: received before a stop and never recorded. kTruncate cuts them
// off; kKeep keeps them (fdatasync'ed, so they survive a later crash, but
// not trusted until the agent confirms their prefix CRC).
enum class TailPolicy { kTruncate, kKeep };

struct RecoveredPoint {
  DurablePoint durable;
  // With TailPolicy::kKeep and bytes past the recorded offset: the point
  // they reach, with the CRC32C of the whole prefix. Empty otherwise.
  std::optional<DurablePoint> tail;
};

// Reconciles `dir` with `state` (empty: no record, lost or never written;
// the point is then the end of the newest published segment). See above.
// `segment_size`: the stream's fixed segment size when the caller knows it
// (0: taken from the partial's own first page header, PostgreSQL WAL only);
// it tells a pre-sized partial from a grown one (disk_format.md section 8).
absl::StatusOr<RecoveredPoint> RecoverDirectory(sys::SysCalls& sys, const std::string& dir,
                                                const std::optional<ReplicaState>& state,
                                                TailPolicy tail, uint64_t segment_size = 0);

// The segment size that the first page header of the open segment file
// `fd` names: PostgreSQL WAL whose name `name` is a segment name of that
// size, with a long page header at offset 0. 0 otherwise (unknown).
uint64_t PgSegmentSizeOf(sys::SysCalls& sys, int fd, const std::string& name);

// Where the bytes past `from` of the partial `fd`, `size` bytes long, end
// for a reader that offers or serves them (disk_format.md section 8): at
// its length when grown; at the end of its last non-zero byte (at least
// `from`) when pre-sized, i.e. when `size` is the stream's `segment_size`
// (0: unknown, so grown). `path` names the file in errors.
absl::StatusOr<uint64_t> PartialTailEnd(sys::SysCalls& sys, int fd, uint64_t from, uint64_t size,
                                        uint64_t segment_size, const std::string& path);

// Recovers from one candidate record (RecoverDirectory through a writer).
using RecoverFn =
    std::function<absl::StatusOr<DurablePoint>(const std::optional<ReplicaState>&)>;

// `recover(*state)` for the record `store` just loaded. First, when
// walship.progress names acknowledged bytes past it (ProgressPast), tries
// that point and, if the file backs it, saves it as the record. When the
// record's bytes are not on disk (kDataLoss) and the store holds an older
// record of the same stream, falls back to that one (the newest was saved
// alongside an fdatasync that a crash cut short, so it was never
// acknowledged) and saves it again as the newest. Updates *state to the
// record used.
absl::StatusOr<DurablePoint> RecoverFromStore(StateStore& store, const RecoverFn& recover,
                                              std::optional<ReplicaState>* state);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_RECOVERY_H_
