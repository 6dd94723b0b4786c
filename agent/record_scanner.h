// record_scanner.h: where a segment file's valid, shippable end is, told by
// its content rather than its size.
//
// The append source (append_source.h) ships a segment's bytes up to its size
// by default: the writer appends only whole, durable records. Some databases
// write their logs in place instead: etcd preallocates each .wal file to
// 64 MB and fills it from the front; RocksDB may reuse (recycle) an old log
// file and overwrite its old records. Their file size says nothing about the
// data. A format whose records can be framed and checked gives the append
// source a RecordScanner, and the source then ships each segment up to the
// end of its last complete, valid record:
//   * the open segment: bytes past its valid end are held back (never
//     refused, never shipped) until they become a valid record;
//   * a segment when it completes (a later segment appeared): its valid end
//     at that moment is its final length. The bytes past it (etcd's
//     preallocated zeros, RocksDB's recycled old records, a torn record left
//     by a crash) are not WAL and are never shipped, so a replica's copy of
//     such a segment is SHORTER than the source file: exactly its valid
//     records. Restoring means using these shorter files (the database's own
//     reader stops at the same place: end of file or the first invalid
//     record are the same to it).
// The scanner replaces the append format's preallocation refusal (holes and
// zero runs) for its format; that refusal stays for the generic format.
//
// A scanner may keep state between calls (a running checksum chain, the log
// number of a file): ScanEnd is called for one segment with `from` equal to
// the valid end it last returned for that segment, or 0 (the first look, or
// after the agent restarted); Forget drops what it keeps for a segment that
// left the directory or completed.
//
// A scanner may also delay a segment's completion (MayComplete): a database
// that rewrites a closed segment in place (MariaDB clears the binlog's
// in-use flag after it opened the next one) has its segment completed only
// once its bytes are final; the source shows no later segment until then.
//
// Thread-safety: a scanner is used by one source thread only.
#ifndef WALSHIP_AGENT_RECORD_SCANNER_H_
#define WALSHIP_AGENT_RECORD_SCANNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

// Why bytes past a segment's valid end are held back.
enum class HeldBack {
  kNone,           // the valid end is the file's size
  kPartialRecord,  // a record whose bytes are not all there yet
  kPreallocated,   // zeros past the data (etcd: a zero length word)
  kRecycled,       // records of an older log (RocksDB: another log number)
  kBadChecksum,    // a record whose length fits but whose CRC does not
};

// "none", "partial_record", "preallocated", "recycled", "bad_checksum": the
// `reason` label of the held-back metrics.
absl::string_view HeldBackName(HeldBack reason);

// What a scan found.
struct ContentEnd {
  // The end of the last complete, valid record (a byte offset in the
  // segment): bytes [0, valid_end) may be shipped.
  uint64_t valid_end = 0;
  // Why [valid_end, size) is not shipped (kNone when valid_end == size).
  HeldBack held = HeldBack::kNone;
  // For logs: what is at valid_end ("record at 4096: CRC 0x... != 0x...").
  std::string detail;
};

// Reads a segment file through a window of `window` bytes so that a scan of
// many small records costs few preads. Bytes past `size` do not exist.
class SegmentBytes {
 public:
  SegmentBytes(sys::SysCalls& sys, int fd, uint64_t size, size_t window = 1 << 20)
      : sys_(sys), fd_(fd), size_(size), window_(window) {}

  // The bytes [offset, offset + n) of the file, or fewer when the file's
  // `size` comes first (none at or past it). Valid until the next call.
  // Errors: the pread's (kOutOfRange when the file shrank below `size`).
  absl::StatusOr<absl::string_view> Read(uint64_t offset, size_t n);
  uint64_t size() const { return size_; }

 private:
  sys::SysCalls& sys_;
  const int fd_;
  const uint64_t size_;
  const size_t window_;
  std::string buf_;
  uint64_t buf_at_ = 0;
};

// The first `n` bytes of segment `name` (fewer when the file is shorter), or
// the error reading it.
using HeadReader =
    std::function<absl::StatusOr<std::string>(const std::string& name, size_t n)>;

class RecordScanner {
 public:
  virtual ~RecordScanner() = default;

  // The valid end of segment `name` (see the file comment): `bytes` reads
  // the file up to its size, `from` is a valid end this scanner returned
  // for `name` before (records start there) or 0. The result's valid_end
  // is >= `from`. An error only when the file cannot be read.
  virtual absl::StatusOr<ContentEnd> ScanEnd(const std::string& name, SegmentBytes& bytes,
                                             uint64_t from) = 0;
  // The segment left the directory or completed: drop its state.
  virtual void Forget(const std::string& name) { (void)name; }
  // Segment `name` (read through `bytes`) has later segments `later` (in
  // order; `head` reads their first bytes): true when it may be completed
  // now, false to keep it open (and the later ones hidden) for now. Called
  // on each look until it says true. By default: true.
  virtual absl::StatusOr<bool> MayComplete(const std::string& name, SegmentBytes& bytes,
                                           const std::vector<std::string>& later,
                                           const HeadReader& head) {
    (void)name;
    (void)bytes;
    (void)later;
    (void)head;
    return true;
  }
};

// Makes a scanner for one source (each source owns its own).
using RecordScannerMaker = std::function<std::unique_ptr<RecordScanner>()>;

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_RECORD_SCANNER_H_
