// rocksdb_log.h: the record framing of RocksDB's write-ahead log files
// (NNNNNN.log), and the scanner that finds where a log's valid records end.
//
// Files. A RocksDB WAL is a series of files named "%06u.log" by their file
// number, in the database directory (beside its *.sst, MANIFEST-*, CURRENT,
// IDENTITY, LOCK, LOG, LOG.old.* and OPTIONS-* files) or in the directory of
// the wal_dir option. Only the *.log files are segments. RocksDB deletes a
// log once its data is flushed to SST files (or moves it to archive/ with
// WAL_ttl_seconds / WAL_size_limit_MB); with recycle_log_file_num it renames
// an old log to a new number and overwrites it from the front.
//
// Blocks. A file is a sequence of 32 KiB (32768-byte) blocks. A physical
// record never crosses a block boundary; when fewer bytes than a header are
// left in a block, the writer fills them with zeros (the trailer) and starts
// the next record at the next block. Each physical record:
//
//   offset size field
//        0    4 crc: masked CRC-32C (little-endian) of bytes [6, H + n): the
//              type byte, the log number if present, and the payload.
//              masked = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32)
//        4    2 n, the payload length, little-endian
//        6    1 type
//        7    4 log number, little-endian (recyclable types 5-8 only): the
//              low 32 bits of the file's number
//        H    n payload (H = 7, or 11 for the recyclable types)
//
// Types: 1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST (a logical record is FULL alone,
// or FIRST MIDDLE* LAST); 5-8 the same with the recyclable header; 9
// SET_COMPRESSION (a record of its own). Type 0 with length 0 is a zeroed
// (preallocated) header.
//
// Valid end. RocksdbRecordScanner walks the blocks from the start and stops
// at the first physical record that is not complete and valid; the valid
// end is the end of the last complete logical record before it (a FULL,
// LAST or SET_COMPRESSION record), so that a fragmented record is shipped
// only whole. A block's trailer is shipped with the record that follows it.
// Held back past the valid end:
//   * kPreallocated: a zero header (type 0, length 0) where a record could
//     start, or only zero bytes left;
//   * kRecycled: a recyclable record whose log number is not the file's
//     (the old records of a recycled file);
//   * kPartialRecord: a header or payload that ends past the file's size,
//     or a fragmented record still missing its LAST fragment;
//   * kBadChecksum: a CRC that does not match, a record crossing its block,
//     an unknown type or a fragment out of order.
// RocksDB's own recovery (the default kPointInTimeRecovery) stops at the same
// place.
#ifndef WALSHIP_AGENT_ROCKSDB_ROCKSDB_LOG_H_
#define WALSHIP_AGENT_ROCKSDB_ROCKSDB_LOG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/record_scanner.h"

namespace walship::agent::rocksdb {

inline constexpr uint64_t kBlockSize = 32768;
inline constexpr uint64_t kHeaderSize = 7;
inline constexpr uint64_t kRecyclableHeaderSize = 11;
enum RecordType : uint8_t {
  kZeroType = 0,
  kFullType = 1,
  kFirstType = 2,
  kMiddleType = 3,
  kLastType = 4,
  kRecyclableFullType = 5,
  kRecyclableFirstType = 6,
  kRecyclableMiddleType = 7,
  kRecyclableLastType = 8,
  kSetCompressionType = 9,
};
// The names of log files, as a segment pattern (append_source.h). Six digits
// or more, as RocksDB writes them (names sort in WAL order up to 999999).
inline constexpr char kSegmentPattern[] = "[0-9]{6,}\\.log";

// RocksDB's crc32c::Mask and Unmask.
uint32_t MaskCrc(uint32_t crc);
uint32_t UnmaskCrc(uint32_t masked);

// The file number of a log named "NNNNNN.log", or nullopt.
std::optional<uint64_t> LogNumber(absl::string_view name);

class RocksdbRecordScanner final : public RecordScanner {
 public:
  // Stateless: every scan starts at `from`, a logical record boundary.
  absl::StatusOr<ContentEnd> ScanEnd(const std::string& name, SegmentBytes& bytes,
                                     uint64_t from) override;
};

}  // namespace walship::agent::rocksdb

#endif  // WALSHIP_AGENT_ROCKSDB_ROCKSDB_LOG_H_
