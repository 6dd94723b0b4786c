// -----------------------------------------------------------------------------
// File: common/pgwal/wal_scan.h
// -----------------------------------------------------------------------------
//
// Finding the end of valid WAL: the rule PostgreSQL 15's crash recovery
// applies (src/backend/access/transam/xlogreader.c, XLogDecodeNextRecord,
// ValidXLogRecordHeader, ValidXLogRecord, XLogReaderValidatePageHeader and
// XLogFindNextRecord), reimplemented here. PostgreSQL replays records one
// after another and stops at the first one it cannot read; everything before
// that point is the WAL it keeps, everything after is ignored and will be
// overwritten. ScanWal() walks the same way and reports where it stopped.
//
// Records. Every record starts at a MAXALIGN (8-byte) boundary with a 24-byte
// header (XLogRecord, little-endian):
//
//   offset size field
//        0    4 xl_tot_len  length of the whole record, header included
//        4    4 xl_xid      transaction id
//        8    8 xl_prev     LSN of the previous record
//       16    1 xl_info     flags; the high nibble is rmgr-specific
//       17    1 xl_rmid     resource manager
//       18    2 (padding, zero)
//       20    4 xl_crc      CRC-32C (see below)
//
// followed by xl_tot_len - 24 bytes of block references and data (not
// decoded here). A record that does not fit on its page continues on the
// next pages right after their headers; those pages carry
// XLP_FIRST_IS_CONTRECORD and xlp_rem_len = the bytes of the record still to
// come. Even the 24-byte header may be split between two pages (only its
// first 8 bytes are guaranteed to be on the first page). The record after a
// record ending at byte E starts at MAXALIGN(E), or after the next page's
// header if that is a page boundary.
//
// The rule. Starting at `start`, a record at LSN R is valid, and the scan
// moves past it, iff all of the following hold:
//   1. Every page the record touches passes ValidatePage() (wal_page.h) with
//      its own LSN as the expected address; and the first page of every
//      segment entered also passes it, even when reading starts later in
//      that segment (PostgreSQL checks the long header of each segment).
//      Page timelines never decrease from one page to the next.
//   2. R is not right after the header of a page that has
//      XLP_FIRST_IS_CONTRECORD set ("contrecord is requested").
//   3. 24 <= xl_tot_len <= kMaxRecordLength (1 GiB; PostgreSQL 15's backend
//      cannot allocate more, so longer lengths are garbage).
//   4. xl_rmid is a valid resource manager id of PostgreSQL 15: a built-in
//      one (0..kMaxBuiltinRmgrId = 21) or a custom one (128..255). Custom
//      rmgrs are accepted because PostgreSQL 15 reads them (an extension may
//      register one); rejecting them would cut valid WAL short.
//   5. xl_prev == the LSN of the previous record read by this scan. For the
//      first record of the scan, where the previous record is unknown, only
//      xl_prev < R is required (PostgreSQL's "randAccess" check).
//   6. Each continuation page has XLP_FIRST_IS_CONTRECORD and
//      xlp_rem_len == xl_tot_len - bytes of the record already read (and
//      xlp_rem_len != 0).
//   7. xl_crc == CRC-32C of bytes [24, xl_tot_len) of the reassembled
//      record followed by bytes [0, 20) of its header (PostgreSQL's
//      INIT_CRC32C / COMP_CRC32C / FIN_CRC32C, i.e. the standard CRC-32C of
//      that byte sequence).
//   8. The record's last byte is below `limit`, and every byte of it could
//      be read (WalBytes returned it).
// Checks 3-5 are made as soon as the header is complete (possibly only on
// the next page), before reading the rest of the record; check 2 and 3's
// lower bound apply to xl_tot_len alone while the header is split.
//
// Special cases, as in PostgreSQL:
//   * After an XLOG_SWITCH record (xl_rmid 0, xl_info & 0xF0 == 0x40) the
//     rest of the segment is unused: the next record is at the start of the
//     next segment, and `end` moves there.
//   * If a continuation page carries XLP_FIRST_IS_OVERWRITE_CONTRECORD, the
//     record being reassembled was abandoned by a crash and its continuation
//     overwritten after recovery: it is skipped (not counted, xl_prev not
//     advanced) and reading restarts at that page
//     (ScanResult::overwritten_records counts these).
//
// What the result means. `end` is PostgreSQL's EndRecPtr of the last valid
// record: the LSN where the next record would start, i.e. the record's end
// rounded up to MAXALIGN (at a page boundary when the padding reaches it),
// or the next segment start after XLOG_SWITCH. This is what a server that
// wrote this WAL reports as its insert/flush position once the record is
// flushed (pg_current_wal_flush_lsn()), and what pg_waldump prints in
// "invalid record length at X" when it hits the end. If no record is valid,
// `end` is `start`. The exact end of the last record (without padding) is
// `last_record_end`.
//
// What counts as "the end" (ScanStop below) is informational: PostgreSQL's
// crash recovery treats every one of them as the end of WAL. A caller that
// knows more (e.g. that WAL up to some LSN was acknowledged as flushed) may
// treat an early kInvalidRecord or kChecksumMismatch as corruption.
//
// Thread-safety: ScanWal() and FindEndOfValidWal() keep no state between
// calls and may run concurrently on different WalBytes objects; see each
// WalBytes implementation for sharing one.

#ifndef WALSHIP_COMMON_PGWAL_WAL_SCAN_H_
#define WALSHIP_COMMON_PGWAL_WAL_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::pg {

// SizeOfXLogRecord and the offset of xl_crc in it.
inline constexpr size_t kRecordHeaderSize = 24;
inline constexpr size_t kRecordCrcOffset = 20;
static_assert(kRecordHeaderSize == 4 + 4 + 8 + 1 + 1 + 2 + 4);

// Byte offsets of the record header fields.
namespace record_layout {
inline constexpr size_t kTotLen = 0;  // u32
inline constexpr size_t kXid = 4;     // u32
inline constexpr size_t kPrev = 8;    // u64
inline constexpr size_t kInfo = 16;   // u8
inline constexpr size_t kRmid = 17;   // u8
inline constexpr size_t kCrc = 20;    // u32
}  // namespace record_layout

// Longest xl_tot_len accepted (see the rule, check 3).
inline constexpr uint32_t kMaxRecordLength = uint32_t{1} << 30;

// Resource manager ids of PostgreSQL 15 (src/include/access/rmgrlist.h has
// 22 built-ins, RM_XLOG_ID = 0 .. RM_LOGICALMSG_ID = 21; custom rmgrs use
// 128..255).
inline constexpr uint8_t kRmXlogId = 0;
inline constexpr uint8_t kMaxBuiltinRmgrId = 21;
inline constexpr uint8_t kMinCustomRmgrId = 128;

// xl_info values of RM_XLOG_ID records that matter here (pg_control.h);
// compare with xl_info & 0xF0 (XLR_INFO_MASK is the low nibble).
inline constexpr uint8_t kXlogSwitch = 0x40;
inline constexpr uint8_t kXlogOverwriteContrecord = 0xD0;

// WalBytes
//
// Random-access reader of one timeline's WAL by LSN.
class WalBytes {
 public:
  WalBytes() = default;
  WalBytes(const WalBytes&) = delete;
  WalBytes& operator=(const WalBytes&) = delete;
  virtual ~WalBytes();

  // Reads up to `n` bytes starting at LSN `lsn` into `buf` and returns how
  // many were read. Fewer than `n` (possibly 0) means the bytes after those
  // are not available (segment file missing or shorter than the segment
  // size); it is not an error. Errors are I/O failures only, with their
  // Status (e.g. kDataLoss for EIO, kPermissionDenied).
  virtual absl::StatusOr<size_t> ReadAt(Lsn lsn, uint8_t* buf, size_t n) = 0;
};

// DirectoryWalBytes
//
// WalBytes over the segment files of one timeline in a pg_wal directory: the
// byte at LSN x is byte x % segment_size of the file
// `dir`/SegmentName(timeline, x / segment_size, segment_size). A missing file
// reads as nothing there; a short file ends its data early (and nothing
// after it, in later segments, is read by the same call). Files are opened
// read-only with O_CLOEXEC through `sys`; the file of the most recently read
// segment stays open until another segment is read or the object is
// destroyed. Files are never written, locked or created.
//
// `sys` must outlive the object. Not thread-safe: one object per thread.
class DirectoryWalBytes : public WalBytes {
 public:
  DirectoryWalBytes(sys::SysCalls& sys, std::string dir, uint32_t timeline,
                    uint64_t segment_size);

  absl::StatusOr<size_t> ReadAt(Lsn lsn, uint8_t* buf, size_t n) override;

 private:
  // Makes fd_ the descriptor of segment `segno`, or leaves it invalid when
  // the file does not exist.
  absl::Status OpenSegment(uint64_t segno);

  sys::SysCalls& sys_;
  const std::string dir_;
  const uint32_t timeline_;
  const uint64_t segment_size_;
  bool have_segno_ = false;  // fd_ reflects open_segno_ (valid or missing)
  uint64_t open_segno_ = 0;
  sys::UniqueFd fd_;
};

// ScanStop
//
// Why a scan stopped. All of them are "the end of valid WAL" to PostgreSQL.
enum class ScanStop {
  kLimit,             // reached `limit`
  kNoData,            // WalBytes had no more bytes (file missing or short)
  kZeroed,            // zero page header or zero record header: never written
  kStalePage,         // page address of an older segment (recycled file)
  kInvalidPage,       // another page header problem (magic, flags, other
                      // cluster, timeline going backwards)
  kInvalidRecord,     // record header or continuation problem (length, rmid,
                      // xl_prev, contrecord flag/length)
  kChecksumMismatch,  // xl_crc does not match (torn or damaged record)
};

// Short lowercase name of `stop` ("limit", "no data", "zeroed", ...).
const char* ScanStopName(ScanStop stop);

// ScanResult
//
// Outcome of ScanWal(). LSNs of records are those of their first header
// byte.
struct ScanResult {
  Lsn end = 0;                // EndRecPtr of the last valid record, or start
  Lsn last_record_start = 0;  // 0 if no valid record
  Lsn last_record_end = 0;    // byte just past it, unpadded; 0 if none
  uint64_t records = 0;       // valid records read
  uint64_t overwritten_records = 0;  // abandoned records skipped
  ScanStop stop = ScanStop::kLimit;
  Lsn stop_lsn = 0;         // where the problem was found (a record or
                            // page address)
  std::string stop_reason;  // human-readable, for logs
};

// ScanWal()
//
// Walks records from `start` by the rule in the file comment and reports
// where and why it stopped.
//
// `start` is either the LSN of a record (a MAXALIGNed position past the page
// header), or a page boundary. At a page boundary (in particular at a
// segment start) a continuation of a record from before `start`, announced
// by XLP_FIRST_IS_CONTRECORD and xlp_rem_len, is skipped (over several
// pages if needed) and the scan begins with the first record after it, as
// PostgreSQL's XLogFindNextRecord does. `limit` bounds the scan: no record
// whose bytes reach `limit` is accepted and no page at or beyond it is
// entered (`end` may still exceed `limit` by the padding of the last record,
// or reach the next segment start after XLOG_SWITCH).
//
// Returns the result whenever the WAL could be read, whatever it contained.
// Errors: kInvalidArgument if `exp` is invalid (ValidateExpectations), if
// `start` is not a multiple of 8, or lies inside a page header; any error of
// `wal.ReadAt` unchanged.
absl::StatusOr<ScanResult> ScanWal(WalBytes& wal, Lsn start,
                                   const WalExpectations& exp,
                                   Lsn limit = UINT64_MAX);

// FindEndOfValidWal()
//
// ScanWal(wal, start, exp, limit)->end.
absl::StatusOr<Lsn> FindEndOfValidWal(WalBytes& wal, Lsn start,
                                      const WalExpectations& exp,
                                      Lsn limit = UINT64_MAX);

}  // namespace walship::pg

#endif  // WALSHIP_COMMON_PGWAL_WAL_SCAN_H_
