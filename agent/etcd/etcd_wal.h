// etcd_wal.h: the record framing of etcd 3.4's write-ahead log (member/wal),
// and the scanner that finds where a .wal file's valid records end.
//
// Files. member/wal holds files named "%016x-%016x.wal" (sequence number,
// then the raft index of the first entry that may be in it, both lowercase
// hex); they sort in WAL order. etcd preallocates each new file to 64 MB
// (64,000,000 bytes) as "N.tmp", writes its first records, renames it to its
// .wal name and then writes records in place from the front. When a file is
// full it truncates it at the end of its last record ("cut") before the next
// one appears, so only the newest file carries preallocated zeros.
//
// Frame. Records follow each other from offset 0, each aligned to 8 bytes:
//
//   offset size field
//        0    8 length word, little-endian. Bits 0-55: n, the length of the
//              record's protobuf encoding. If bit 63 is set, bits 56-58 give
//              p, the zero bytes of padding after it (n + p is a multiple of
//              8); otherwise p = 0.
//        8    n walpb.Record (protobuf): type (1, varint), crc (2, varint,
//              uint32), data (3, bytes)
//    8 + n    p padding
//
// A zero length word ends the data of the file (etcd's reader moves on to
// the next file): the preallocated space. etcd refuses n >= 10 MiB - p.
//
// CRC chain. crc is CRC-32C (Castagnoli) running over the `data` of every
// record, across all files: record k's crc = CRC-32C(data_0 || ... ||
// data_k). Each file starts with a record of type crcType (4) and no data
// whose crc is the chain's value at the end of the previous file (0 for the
// first file); the reader continues the chain from it. A crcType record
// inside a file must carry the chain's current value.
//
// The link between files: when the scanner has seen the previous file to
// its end (the append source scans complete files in name order, and forgets
// each when it completes), a file's first crcType record must carry that
// file's final chain value; otherwise the file's valid end is 0
// (kBadChecksum): etcd would refuse the WAL there too.
//
// Valid end. EtcdRecordScanner walks a file from its first record and stops
// at the first frame that is not a complete, valid record; its start is the
// file's valid end, which is where etcd's own reader stops (and where etcd,
// restarting, zeroes the rest and writes on). Held back past it:
//   * kPreallocated: a zero length word (or only zero bytes left);
//   * kPartialRecord: a frame that ends past the file's size, or one that
//     fails to decode or check but holds an all-zero 512-byte sector chunk
//     (etcd's "torn write": the record is still being written);
//   * kBadChecksum: a frame whose protobuf does not decode, whose crc does
//     not match the chain, or whose length is out of range, with no zero
//     sector (the source may be corrupt; it is logged).
#ifndef WALSHIP_AGENT_ETCD_ETCD_WAL_H_
#define WALSHIP_AGENT_ETCD_ETCD_WAL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/record_scanner.h"

namespace walship::agent::etcd {

inline constexpr int64_t kMetadataType = 1;
inline constexpr int64_t kEntryType = 2;
inline constexpr int64_t kStateType = 3;
inline constexpr int64_t kCrcType = 4;
inline constexpr int64_t kSnapshotType = 5;
// etcd's maxWALEntrySizeLimit.
inline constexpr uint64_t kMaxRecordBytes = 10 << 20;
// etcd's torn-write check works on 512-byte sectors of the file.
inline constexpr uint64_t kSectorBytes = 512;
// The names of .wal files (not .tmp files, not the directory's other
// files), as a segment pattern (append_source.h).
inline constexpr char kSegmentPattern[] = "[0-9a-f]{16}-[0-9a-f]{16}\\.wal";

struct Record {
  int64_t type = 0;
  uint32_t crc = 0;
  std::string data;
};

// Decodes a walpb.Record from its protobuf encoding (unknown fields are
// skipped as protobuf does). nullopt when it does not decode.
std::optional<Record> DecodeRecord(absl::string_view proto);

class EtcdRecordScanner final : public RecordScanner {
 public:
  absl::StatusOr<ContentEnd> ScanEnd(const std::string& name, SegmentBytes& bytes,
                                     uint64_t from) override;
  // Also remembers where the chain ended in `name` when it is the newest
  // file forgotten so far (a completed file; see the file comment).
  void Forget(const std::string& name) override;

 private:
  // Where the last scan of a file stopped, and the CRC chain's value there.
  struct Chain {
    uint64_t offset = 0;
    uint32_t crc = 0;
  };
  std::map<std::string, Chain> chain_;
  // The newest file forgotten (completed) and the chain's value at its end.
  std::string last_name_;
  uint32_t last_crc_ = 0;
};

}  // namespace walship::agent::etcd

#endif  // WALSHIP_AGENT_ETCD_ETCD_WAL_H_
