// -----------------------------------------------------------------------------
// File: tests/common/pgwal/wal_builder.h
// -----------------------------------------------------------------------------
//
// Test-only synthesis of PostgreSQL 15 WAL: pages with short and long
// headers, records with correct xl_prev and CRC-32C, records spanning pages
// and segments with XLP_FIRST_IS_CONTRECORD continuations, XLOG_SWITCH, and
// the "overwrite contrecord" page PostgreSQL writes after an abandoned
// record. It lays bytes out the way PostgreSQL's XLogInsert does (records at
// MAXALIGN boundaries, a header on every page, headers split across pages
// when they do not fit), independently of common/pgwal/wal_scan.cc, so the
// scanner's tests are not circular. Segments live in memory, zero-filled,
// and can be damaged, dropped, truncated or written to a directory.
//
// Record payloads are deterministic pseudo-random bytes; the scanner does not
// decode them.
//
// Not thread-safe.

#ifndef WALSHIP_TESTS_COMMON_PGWAL_WAL_BUILDER_H_
#define WALSHIP_TESTS_COMMON_PGWAL_WAL_BUILDER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/pgwal/wal_scan.h"

namespace walship::pg::testing {

struct WalBuilderOptions {
  uint64_t system_id = 7123456789012345678u;
  uint64_t segment_size = uint64_t{1} << 20;
  uint32_t block_size = 8192;
  uint32_t timeline = 1;
  uint16_t magic = kPg15PageMagic;
};

// RecordSpec
//
// One record to append.
struct RecordSpec {
  uint32_t total_len = 64;  // xl_tot_len, >= 24
  uint8_t rmid = 10;        // RM_HEAP_ID
  uint8_t info = 0;
  uint32_t xid = 1000;
  std::optional<Lsn> prev;   // xl_prev; default: the previous record
  bool corrupt_crc = false;  // store a wrong xl_crc
  uint32_t seed = 1;         // payload pattern
};

class WalBuilder {
 public:
  // Writes WAL from `start`: a segment start, or the position right after a
  // record (then `prev` is that record). `prev` 0 = no previous record.
  WalBuilder(const WalBuilderOptions& opts, Lsn start, Lsn prev = 0);

  // Appends a record at the insert position; returns its LSN. Pages are
  // given headers as they are entered.
  Lsn Append(const RecordSpec& spec);
  Lsn Append(uint32_t total_len) {
    RecordSpec spec;
    spec.total_len = total_len;
    return Append(spec);
  }

  // Appends an XLOG_SWITCH record; the insert position moves to the next
  // segment start. Returns the record's LSN.
  Lsn AppendSwitch();

  // Appends one record so that the insert position becomes `target`, which
  // must lie on the current page (or be its end) at least 24 bytes ahead
  // (MAXALIGNed). Returns the record's LSN.
  Lsn PadTo(Lsn target);

  // Appends records of `len` bytes until the insert position is at or past
  // `lsn`. Returns the number of records appended.
  int AppendUntil(Lsn lsn, uint32_t len);

  // Simulates a crash in the middle of the last record, which must span
  // pages, and the recovery after it: everything from the page boundary
  // `missing_page` (inside the last record) on is zeroed, the last record is
  // forgotten, and the next page header written (at `missing_page`) carries
  // XLP_FIRST_IS_OVERWRITE_CONTRECORD, like PostgreSQL's
  // CreateOverwriteContrecordRecord. Follow with Append() of the
  // overwrite-contrecord record.
  void AbandonLastRecord(Lsn missing_page);

  // Where the next record starts (PostgreSQL's EndRecPtr of the last record;
  // may be a page boundary).
  Lsn insert_lsn() const { return insert_; }
  // LSN of the last record appended (0 if none) and its unpadded end.
  Lsn last_record() const { return last_record_; }
  Lsn last_record_end() const { return last_record_end_; }
  // LSN of the record before the last one (0 if none).
  Lsn previous_record() const { return previous_record_; }

  const WalBuilderOptions& options() const { return opts_; }
  WalExpectations expectations() const;

  // Raw access. At() creates the (zero-filled) segment holding `lsn`.
  uint8_t* At(Lsn lsn);
  void ZeroRange(Lsn from, Lsn to);
  void DropSegment(uint64_t segno) { segments_.erase(segno); }
  // Shortens segment `segno` to `size` bytes (a partially written file).
  void TruncateSegment(uint64_t segno, uint64_t size);
  // Replaces segment `segno` with `bytes` (e.g. another builder's segment:
  // a recycled file).
  void ReplaceSegment(uint64_t segno, std::vector<uint8_t> bytes);
  // Sets or clears xlp_info bits of the page at `page` (a page boundary).
  void SetPageInfo(Lsn page, uint16_t set, uint16_t clear = 0);
  // Rewrites the CRC of the record at `rec` (after a deliberate edit), given
  // its total length. Only for records within one page.
  void FixCrc(Lsn rec);

  const std::map<uint64_t, std::vector<uint8_t>>& segments() const {
    return segments_;
  }

  // Writes every segment as `dir`/SegmentName(timeline, segno, size).
  absl::Status WriteTo(const std::string& dir) const;

 private:
  // Writes `n` record bytes at the insert position, entering pages as
  // needed; `remaining` is the number of bytes of the record not yet
  // written, including these.
  void WriteRecordBytes(const uint8_t* data, size_t n, uint64_t remaining);
  void WritePageHeader(Lsn page, uint32_t rem_len);

  WalBuilderOptions opts_;
  std::map<uint64_t, std::vector<uint8_t>> segments_;
  Lsn insert_;
  Lsn last_record_;
  Lsn last_record_end_ = 0;
  Lsn previous_record_ = 0;
  uint16_t next_page_extra_flags_ = 0;
};

// MemoryWalBytes
//
// WalBytes over a builder's segments (read at call time, so later edits to
// the builder are seen). A missing segment or the end of a truncated one
// ends the data.
class MemoryWalBytes : public WalBytes {
 public:
  explicit MemoryWalBytes(const WalBuilder& builder) : builder_(builder) {}
  absl::StatusOr<size_t> ReadAt(Lsn lsn, uint8_t* buf, size_t n) override;

 private:
  const WalBuilder& builder_;
};

// Computes xl_crc of a complete record, PostgreSQL's way, with
// walship::wire::Crc32c.
uint32_t RecordCrc(const uint8_t* record, uint32_t total_len);

}  // namespace walship::pg::testing

#endif  // WALSHIP_TESTS_COMMON_PGWAL_WAL_BUILDER_H_
