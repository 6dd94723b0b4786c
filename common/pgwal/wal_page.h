// -----------------------------------------------------------------------------
// File: common/pgwal/wal_page.h
// -----------------------------------------------------------------------------
//
// The page format of PostgreSQL 15 WAL (XLOG_PAGE_MAGIC 0xD110), from
// src/include/access/xlog_internal.h, and the page-header checks PostgreSQL's
// XLogReaderValidatePageHeader applies.
//
// WAL is a sequence of pages of `block_size` bytes (XLOG_BLCKSZ, 8192 unless
// PostgreSQL was built otherwise). Every page starts with a header; all
// integers are little-endian (walship only supports little-endian servers):
//
//   offset size field
//        0    2 xlp_magic      0xD110 for PostgreSQL 15
//        2    2 xlp_info       XLP_* flag bits below
//        4    4 xlp_tli        timeline of the first record on the page
//        8    8 xlp_pageaddr   LSN of the page's first byte
//       16    4 xlp_rem_len    bytes of a record continued from the previous
//                              page still to come (0 if none)
//       20    4 (padding to MAXALIGN = 8)
//   -- the short header ends here: SizeOfXLogShortPHD = 24
//       24    8 xlp_sysid      system identifier (pg_control)
//       32    4 xlp_seg_size   segment size, a cross-check
//       36    4 xlp_xlog_blcksz block size, a cross-check
//   -- the long header ends here: SizeOfXLogLongPHD = 40
//
// The first page of every segment has the long header (XLP_LONG_HEADER);
// other pages normally have the short one. After the header come record
// bytes: first, if XLP_FIRST_IS_CONTRECORD is set, the xlp_rem_len bytes
// (capped at what fits on the page) of a record that started on an earlier
// page, unaligned; then records, each starting at a MAXALIGN (8-byte)
// boundary. See wal_scan.h for records.
//
// Thread-safety: every function here is pure and may be called concurrently.

#ifndef WALSHIP_COMMON_PGWAL_WAL_PAGE_H_
#define WALSHIP_COMMON_PGWAL_WAL_PAGE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/pgwal/wal_names.h"

namespace walship::pg {

// XLOG_PAGE_MAGIC of PostgreSQL 15. Other major versions use other values
// (14: 0xD10D, 16: 0xD113) and a different format may hide behind them.
inline constexpr uint16_t kPg15PageMagic = 0xD110;

// XLOG_BLCKSZ of a default build.
inline constexpr uint32_t kDefaultBlockSize = 8192;

// MAXALIGN of PostgreSQL on 64-bit platforms.
inline constexpr uint64_t kMaxAlign = 8;

// MaxAlign()
//
// Rounds `n` up to a multiple of kMaxAlign (PostgreSQL's MAXALIGN).
constexpr uint64_t MaxAlign(uint64_t n) {
  return (n + kMaxAlign - 1) & ~(kMaxAlign - 1);
}

// sizeof(XLogPageHeaderData) == 20, MAXALIGNed: SizeOfXLogShortPHD.
inline constexpr size_t kShortPageHeaderSize = 24;
// sizeof(XLogLongPageHeaderData) == 40: SizeOfXLogLongPHD.
inline constexpr size_t kLongPageHeaderSize = 40;
static_assert(kShortPageHeaderSize == MaxAlign(2 + 2 + 4 + 8 + 4));
static_assert(kLongPageHeaderSize ==
              MaxAlign(kShortPageHeaderSize + 8 + 4 + 4));

// xlp_info flags of PostgreSQL 15.
// The page begins with the continuation of a record from the previous page.
inline constexpr uint16_t kXlpFirstIsContRecord = 0x0001;
// The page has the long header.
inline constexpr uint16_t kXlpLongHeader = 0x0002;
// Backup blocks starting on this page are optional (unused since 9.5 but
// still a defined bit in 15).
inline constexpr uint16_t kXlpBkpRemovable = 0x0004;
// The page replaces the missing continuation of a record that was never
// completed (written after crash recovery stopped in the middle of a
// multi-page record; see CreateOverwriteContrecordRecord).
inline constexpr uint16_t kXlpFirstIsOverwriteContRecord = 0x0008;
// All bits defined in 15; any other bit set makes the page invalid.
inline constexpr uint16_t kXlpAllFlags = 0x000F;

// Byte offsets of the header fields.
namespace page_layout {
inline constexpr size_t kMagic = 0;       // u16
inline constexpr size_t kInfo = 2;        // u16
inline constexpr size_t kTimeline = 4;    // u32
inline constexpr size_t kPageAddr = 8;    // u64
inline constexpr size_t kRemLen = 16;     // u32
inline constexpr size_t kSystemId = 24;   // u64, long header only
inline constexpr size_t kSegSize = 32;    // u32, long header only
inline constexpr size_t kBlockSize = 36;  // u32, long header only
}  // namespace page_layout

// PageHeaderSize()
//
// The size of a page header with the given xlp_info: kLongPageHeaderSize if
// kXlpLongHeader is set, else kShortPageHeaderSize (XLogPageHeaderSize).
constexpr size_t PageHeaderSize(uint16_t info) {
  return (info & kXlpLongHeader) ? kLongPageHeaderSize : kShortPageHeaderSize;
}

// PageHeader
//
// A decoded page header. `system_id`, `seg_size` and `block_size` are only
// meaningful when `is_long`; they are 0 otherwise.
struct PageHeader {
  uint16_t magic;
  uint16_t info;
  uint32_t timeline;
  Lsn pageaddr;
  uint32_t rem_len;
  bool is_long;
  uint64_t system_id;
  uint32_t seg_size;
  uint32_t block_size;

  // Bytes the header occupies on the page (24 or 40).
  size_t size() const { return PageHeaderSize(info); }
};

// DecodePageHeader()
//
// Decodes the header at the start of `page_start` (which need not hold the
// whole page). Checks nothing but length: kDataLoss if fewer than
// kShortPageHeaderSize bytes are given, or fewer than kLongPageHeaderSize
// when xlp_info says the header is long.
absl::StatusOr<PageHeader> DecodePageHeader(
    absl::Span<const uint8_t> page_start);

// EncodePageHeader()
//
// Writes `h` in the format above into `out`, which must hold h.size() bytes:
// 24 bytes (padding zeroed), or 40 when `h.info` has kXlpLongHeader (then
// `is_long` is ignored and system_id, seg_size and block_size are written).
// The inverse of DecodePageHeader. For tools and tests that write WAL.
void EncodePageHeader(const PageHeader& h, absl::Span<uint8_t> out);

// WalExpectations
//
// What the pages of one cluster's WAL must say.
struct WalExpectations {
  // pg_control's system identifier (pg_control_system()). 0 means unknown:
  // the check is skipped, as PostgreSQL's reader skips it.
  uint64_t system_id = 0;
  // wal_segment_size; must satisfy IsValidSegmentSize().
  uint64_t segment_size = 0;
  // XLOG_BLCKSZ: a power of two from 1 KiB to 64 KiB, at most segment_size.
  uint32_t block_size = kDefaultBlockSize;
  // XLOG_PAGE_MAGIC.
  uint16_t magic = kPg15PageMagic;
};

// ValidateExpectations()
//
// OK if `exp` describes a possible cluster (see the field comments), else
// kInvalidArgument.
absl::Status ValidateExpectations(const WalExpectations& exp);

// PageProblem
//
// Why ValidatePage() rejected a page, for callers that treat some problems
// as the normal end of WAL (kZeroed: never written; kStaleAddress: a
// recycled segment not yet overwritten) and others as corruption.
enum class PageProblem {
  kNone = 0,
  kTruncated,          // fewer header bytes than needed were given
  kZeroed,             // the whole short header is zero
  kBadMagic,           // xlp_magic != expected magic
  kBadInfoBits,        // xlp_info has bits outside kXlpAllFlags
  kMissingLongHeader,  // first page of a segment without XLP_LONG_HEADER
  kOtherSystem,        // long header's system id differs
  kWrongSegmentSize,   // long header's segment size differs
  kWrongBlockSize,     // long header's block size differs
  kStaleAddress,       // xlp_pageaddr is not the page's own LSN
};

// LooksZeroed()
//
// True iff `page_start` holds at least kShortPageHeaderSize bytes and all of
// those are zero: a page that was never written (end of WAL), as opposed to a
// damaged one.
bool LooksZeroed(absl::Span<const uint8_t> page_start);

// ValidatePage()
//
// Checks the header at the start of `page_start` as the header of the page
// whose first byte is at LSN `expected_pageaddr` (a multiple of
// exp.block_size), in PostgreSQL's order:
//   1. enough bytes for the header                  (kTruncated)
//   2. not all-zero: "zeroed page (end of WAL)"     (kZeroed)
//   3. xlp_magic == exp.magic                       (kBadMagic)
//   4. no xlp_info bits outside kXlpAllFlags        (kBadInfoBits)
//   5. if the header is long: system id (unless exp.system_id is 0),
//      segment size and block size match exp:
//      "belongs to another cluster: system identifier A, expected B"
//                              (kOtherSystem, kWrongSegmentSize,
//                               kWrongBlockSize);
//      else, at a segment start, the long header is required
//                                                   (kMissingLongHeader)
//   6. xlp_pageaddr == expected_pageaddr: "recycled or stale page: page
//      address X, expected Y"                       (kStaleAddress)
// The timeline of the page and xlp_rem_len are not checked here (they depend
// on the preceding pages; see wal_scan.h).
//
// Returns OK, or kDataLoss whose message starts with "WAL page at <LSN>: ";
// kInvalidArgument if `expected_pageaddr` is not a multiple of
// exp.block_size or `exp` is invalid. When `problem` is not null it receives
// the classification (kNone on OK and on kInvalidArgument).
absl::Status ValidatePage(absl::Span<const uint8_t> page_start,
                          Lsn expected_pageaddr, const WalExpectations& exp,
                          PageProblem* problem = nullptr);

}  // namespace walship::pg

#endif  // WALSHIP_COMMON_PGWAL_WAL_PAGE_H_
