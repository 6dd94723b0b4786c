// -----------------------------------------------------------------------------
// File: common/pgwal/wal_names.h
// -----------------------------------------------------------------------------
//
// PostgreSQL (15) WAL addresses and file names: LSNs ("16/B374D848"), segment
// file names ("000000010000000A0000003F"), timeline history file names
// ("00000002.history") and the content of history files. These are the
// conventions of PostgreSQL's src/include/access/xlog_internal.h and
// src/backend/access/transam/timeline.c, reimplemented here.
//
// Vocabulary:
//   * An LSN (PostgreSQL's XLogRecPtr) is a byte position in the single,
//     ever-growing WAL address space shared by all timelines.
//   * WAL is stored in segments of `segment_size` bytes (a power of two
//     between 1 MiB and 1 GiB, chosen at initdb). Segment number `segno`
//     holds the LSNs [segno * segment_size, (segno + 1) * segment_size).
//   * A segment file is named TTTTTTTTXXXXXXXXYYYYYYYY (24 uppercase hex
//     digits): T the timeline, and segno == X * (2^32 / segment_size) + Y
//     with Y < 2^32 / segment_size. The name therefore depends on the
//     segment size: with 16 MiB segments Y is at most 0xFF, with 1 MiB
//     segments at most 0xFFF.
//
// Every function taking a `segment_size` requires IsValidSegmentSize() to
// hold; the parsers return kInvalidArgument otherwise, the other functions
// have unspecified results.
//
// Thread-safety: every function here is pure and may be called concurrently.
//
// Example:
//
//   absl::StatusOr<SegmentId> id =
//       ParseSegmentName("000000010000000A0000003F", 16 << 20);
//   // id->timeline == 1, id->segno == 0xA * 256 + 0x3F
//   Lsn start = SegmentStartLsn(id->segno, 16 << 20);  // "A/3F000000"

#ifndef WALSHIP_COMMON_PGWAL_WAL_NAMES_H_
#define WALSHIP_COMMON_PGWAL_WAL_NAMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walship::pg {

// A WAL position (PostgreSQL's XLogRecPtr). 0 is PostgreSQL's
// InvalidXLogRecPtr and never the address of a record.
using Lsn = uint64_t;

// Smallest and largest segment sizes PostgreSQL accepts (WalSegMinSize,
// WalSegMaxSize).
inline constexpr uint64_t kMinSegmentSize = uint64_t{1} << 20;
inline constexpr uint64_t kMaxSegmentSize = uint64_t{1} << 30;

// Length of a segment file name.
inline constexpr size_t kSegmentNameLength = 24;

// IsValidSegmentSize()
//
// True iff `size` is a power of two in [kMinSegmentSize, kMaxSegmentSize]
// (PostgreSQL's IsValidWalSegSize).
bool IsValidSegmentSize(uint64_t size);

// ParseLsn()
//
// Parses PostgreSQL's text form of an LSN, "H/L": one to eight hex digits,
// a '/', one to eight hex digits, nothing else (no spaces, no sign, no
// "0x"). Hex digits of either case are accepted, as pg_lsn_in does. The
// value is (H << 32) | L. Returns kInvalidArgument otherwise, quoting the
// input.
absl::StatusOr<Lsn> ParseLsn(absl::string_view text);

// FormatLsn()
//
// The form PostgreSQL 15 prints: "%X/%X" of the high and low 32 bits,
// uppercase, without zero padding ("0/3000060", "16/B374D848").
// ParseLsn(FormatLsn(x)) == x for every x.
std::string FormatLsn(Lsn lsn);

// SegmentId
//
// What a segment file name says: the timeline it belongs to and the segment
// number (see the file comment).
struct SegmentId {
  uint32_t timeline;
  uint64_t segno;

  friend bool operator==(const SegmentId& a, const SegmentId& b) {
    return a.timeline == b.timeline && a.segno == b.segno;
  }
};

// ParseSegmentName()
//
// Parses a segment file name for a cluster with `segment_size`-byte
// segments. The name must be exactly 24 characters of [0-9A-F] (PostgreSQL
// writes uppercase only, so lowercase is rejected), the timeline must not be
// 0, and Y must be below 2^32 / segment_size. No suffix is allowed
// (".partial", ".history" and ".backup" names are not segment names).
// Returns kInvalidArgument with a message naming the broken rule otherwise,
// also when `segment_size` is not valid.
absl::StatusOr<SegmentId> ParseSegmentName(absl::string_view name,
                                           uint64_t segment_size);

// SegmentName()
//
// The file name of segment `segno` on `timeline`, PostgreSQL's XLogFileName.
// ParseSegmentName(SegmentName(t, s, z), z) == {t, s} for t != 0 and any s
// whose X part fits in 32 bits.
std::string SegmentName(uint32_t timeline, uint64_t segno,
                        uint64_t segment_size);

// SegmentStartLsn()
//
// The LSN of the first byte of segment `segno`.
Lsn SegmentStartLsn(uint64_t segno, uint64_t segment_size);

// SegmentOfLsn()
//
// The number of the segment holding the byte at `lsn` (PostgreSQL's
// XLByteToSeg). An LSN exactly at a segment boundary belongs to the later
// segment.
uint64_t SegmentOfLsn(Lsn lsn, uint64_t segment_size);

// ParseHistoryFileName()
//
// True iff `name` is a timeline history file name: eight uppercase hex
// digits followed by ".history", naming a timeline other than 0. Then stores
// the timeline in `*timeline` (which must not be null); otherwise leaves it
// untouched.
bool ParseHistoryFileName(absl::string_view name, uint32_t* timeline);

// HistoryFileName()
//
// "%08X.history", PostgreSQL's TLHistoryFileName.
std::string HistoryFileName(uint32_t timeline);

// TimelineSwitch
//
// One line of a timeline history file: WAL of `parent_timeline` is valid up
// to (not including) `switch_lsn`, where the next timeline forked off.
struct TimelineSwitch {
  uint32_t parent_timeline;
  Lsn switch_lsn;

  friend bool operator==(const TimelineSwitch& a, const TimelineSwitch& b) {
    return a.parent_timeline == b.parent_timeline &&
           a.switch_lsn == b.switch_lsn;
  }
};

// ParseHistoryFile()
//
// Parses the content of a timeline history file, e.g.
//
//   1\t0/3000060\tno recovery target specified
//   2\t0/5000000\tbefore 2000-01-01 00:00:00+00
//
// one TimelineSwitch per data line, in file order. Rules (those of
// PostgreSQL's readTimeLineHistory):
//   * Lines are separated by '\n' (a trailing '\r' is whitespace). Blank
//     lines and lines whose first non-whitespace character is '#' are
//     ignored.
//   * A data line is: optional leading whitespace, a decimal timeline ID
//     (1..4294967295), whitespace, an LSN in ParseLsn form, and then
//     optionally whitespace and free text (the reason), which is ignored.
//   * Timeline IDs must strictly increase from line to line.
// An empty file (or only comments) yields an empty vector. Any violation
// returns kDataLoss naming the 1-based line number: the file is the
// server's own record of history and a malformed one is corrupt, not bad
// user input.
absl::StatusOr<std::vector<TimelineSwitch>> ParseHistoryFile(
    absl::string_view content);

}  // namespace walship::pg

#endif  // WALSHIP_COMMON_PGWAL_WAL_NAMES_H_
