// binlog.h: the event framing of MySQL/MariaDB binary logs (binlog format
// v4), and the scanner that finds where a binlog's complete events end.
//
// Files. A server with log-bin writes BASE.NNNNNN (six or more digits, one
// more per binlog), and BASE.index listing them one per line ("./BASE.000001").
// MariaDB also writes BASE.state at a clean shutdown (GTID state). Only the
// BASE.NNNNNN files are segments; a new one is opened at rotation
// (max_binlog_size, FLUSH BINARY LOGS) and at every server start.
//
// Layout (all integers little-endian):
//
//   offset size field
//        0    4 magic 0xfe 'b' 'i' 'n'
//        4      events, back to back, to the end of the file
//
// Each event: a 19-byte header, then its body.
//
//   offset size field
//        0    4 timestamp
//        4    1 type (15: FORMAT_DESCRIPTION_EVENT)
//        5    4 server_id
//        9    4 event_size: the whole event, header and checksum included
//       13    4 log_pos: the file offset of the event's end
//       17    2 flags (0x0001: LOG_EVENT_BINLOG_IN_USE_F)
//       19      body; with checksums on, its last 4 bytes are the CRC-32
//              (IEEE 802.3, as zlib's crc32) of every byte of the event
//              before them
//
// The first event (at offset 4) is the format description event (FDE). Its
// body: binlog_version (2), server_version (50, NUL padded), create_timestamp
// (4: non-zero only in the first binlog a server writes after it starts, 0
// in binlogs opened by a rotation), header_length (1), one post-header
// length per event type, then (servers since MySQL 5.6.1 / MariaDB 5.3) the
// checksum algorithm (1 byte: 0 off, 1 CRC32) and 4 checksum bytes. The
// algorithm the FDE names holds for every event of the file.
//
// The in-use flag. The server sets LOG_EVENT_BINLOG_IN_USE_F in the FDE's
// flags when it opens a binlog and clears it in place (one byte, file offset
// kInUseFlagOffset) when it closes the binlog: at rotation (after the next
// binlog exists) and at a clean shutdown. The FDE's own CRC is computed with
// the flag clear, so it holds either way. A binlog the server was writing
// when it crashed keeps the flag set forever; the server's next start opens
// a new binlog (its FDE has a non-zero create_timestamp) and recovers from
// the old one without changing it.
//
// Valid end. BinlogScanner walks the events from `from` (an event boundary)
// and stops at the first event that is not complete and valid; the valid
// end is the end of the last complete event before it (never inside an
// event; 0 until the magic and the whole FDE are there). Held back past it:
//   * kPartialRecord: a header or an event that ends past the file's size;
//   * kBadChecksum: a bad magic, an event_size below the header's size or
//     above kMaxEventSize, a CRC-32 that does not match, or (checksums off)
//     a log_pos that is not the event's end.
//
// Completion (MayComplete). A binlog with a later binlog is complete, and
// its bytes final, once its in-use flag is clear, or once a later binlog
// was written by a server that started after it (its FDE's create_timestamp
// is non-zero): the crashed server's binlog, complete as it left it. Until
// then the later binlogs are not shown (the server clears the flag right
// after creating the next binlog).
#ifndef WALSHIP_AGENT_MYSQL_BINLOG_H_
#define WALSHIP_AGENT_MYSQL_BINLOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/record_scanner.h"

namespace walship::agent::mysql {

inline constexpr char kMagic[] = "\xfe\x62\x69\x6e";
inline constexpr uint64_t kMagicSize = 4;
inline constexpr uint64_t kHeaderSize = 19;
inline constexpr uint8_t kFormatDescriptionEvent = 15;
inline constexpr uint16_t kInUseFlag = 0x0001;
// File offset of the FDE's flags' low byte, which holds the in-use flag.
inline constexpr uint64_t kInUseFlagOffset = kMagicSize + 17;
// Offset of the FDE's create_timestamp in the file.
inline constexpr uint64_t kCreatedOffset = kMagicSize + kHeaderSize + 2 + 50;
// A larger event_size is damage (the server's limit, max_allowed_packet,
// is at most 1 GiB; an event holds one packet's row data at most).
inline constexpr uint64_t kMaxEventSize = uint64_t{1} << 30;
inline constexpr uint64_t kChecksumSize = 4;

// The CRC-32 of binlog checksums (IEEE 802.3, reflected 0xEDB88320, initial
// value and final XOR 0xFFFFFFFF; "123456789" gives 0xCBF43926).
uint32_t Crc32(absl::string_view bytes);

// The checksum algorithm an FDE (the whole event) names: true for CRC32,
// false for none (also for servers too old to name one).
bool FdeChecksums(absl::string_view fde);

// BASE.NNNNNN as a segment pattern (group 1: the sequence number). `base`
// empty: any base name.
std::string SegmentPatternFor(absl::string_view base);

// The base name the index file's content names ("./mysql-bin.000001\n" ->
// "mysql-bin"), or "" when it names no binlog.
std::string BaseFromIndex(absl::string_view index);

class BinlogScanner final : public RecordScanner {
 public:
  absl::StatusOr<ContentEnd> ScanEnd(const std::string& name, SegmentBytes& bytes,
                                     uint64_t from) override;
  void Forget(const std::string& name) override { checksums_.erase(name); }
  absl::StatusOr<bool> MayComplete(const std::string& name, SegmentBytes& bytes,
                                   const std::vector<std::string>& later,
                                   const HeadReader& head) override;

 private:
  // The FDE at offset 4: ok with its end, or a ContentEnd saying why not.
  absl::StatusOr<ContentEnd> ScanFde(const std::string& name, SegmentBytes& bytes);

  // Whether each binlog's events carry a CRC-32, from its FDE.
  std::map<std::string, bool> checksums_;
};

}  // namespace walship::agent::mysql

#endif  // WALSHIP_AGENT_MYSQL_BINLOG_H_
