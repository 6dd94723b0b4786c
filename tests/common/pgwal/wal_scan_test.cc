#include "common/pgwal/wal_scan.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sys/syscalls.h"
#include "common/wire/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/pgwal/wal_builder.h"

namespace walship::pg {
namespace {

using ::testing::HasSubstr;
using ::walship::pg::testing::MemoryWalBytes;
using ::walship::pg::testing::RecordSpec;
using ::walship::pg::testing::WalBuilder;
using ::walship::pg::testing::WalBuilderOptions;

constexpr uint64_t kSeg = uint64_t{1} << 20;
constexpr uint64_t kBlock = 8192;
constexpr uint64_t kSegNo = 3;
constexpr Lsn kStart = kSegNo * kSeg;  // 0/300000

WalBuilderOptions Opts() {
  WalBuilderOptions o;
  o.segment_size = kSeg;
  return o;
}

std::string FreshDir() {
  static int counter = 0;
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp",
                                 "/wal_scan_test_", getpid(), "_", ++counter);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// The scan tests run over both WalBytes implementations: the in-memory one
// and DirectoryWalBytes over the same segments written as files.
enum class Backend { kMemory, kDirectory };

class WalScanTest : public ::testing::TestWithParam<Backend> {
 protected:
  absl::StatusOr<ScanResult> Scan(const WalBuilder& b, Lsn start,
                                  Lsn limit = UINT64_MAX) {
    std::unique_ptr<WalBytes> wal;
    if (GetParam() == Backend::kMemory) {
      wal = std::make_unique<MemoryWalBytes>(b);
    } else {
      const std::string dir = FreshDir();
      absl::Status s = b.WriteTo(dir);
      if (!s.ok()) return s;
      wal = std::make_unique<DirectoryWalBytes>(sys::DefaultSysCalls(), dir,
                                                b.options().timeline, kSeg);
    }
    return ScanWal(*wal, start, b.expectations(), limit);
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, WalScanTest,
                         ::testing::Values(Backend::kMemory,
                                           Backend::kDirectory),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kMemory ? "Memory"
                                                                 : "Directory";
                         });

TEST(Crc32cTest, ChainsLikePostgresInitCompFin) {
  // PostgreSQL: INIT = 0xFFFFFFFF, COMP over the pieces, FIN ^= 0xFFFFFFFF;
  // the value is the standard CRC-32C of the concatenation, which
  // Crc32cExtend builds piece by piece.
  EXPECT_EQ(wire::Crc32c("123456789", 9), 0xE3069283u);
  const std::string a = "record body bytes";
  const std::string b = "header-20-bytes!!!!!";
  EXPECT_EQ(
      wire::Crc32c((a + b).data(), a.size() + b.size()),
      wire::Crc32cExtend(wire::Crc32c(a.data(), a.size()), b.data(), b.size()));
}

TEST_P(WalScanTest, FindsRecordsAndStopsAtTrailingZeros) {
  WalBuilder b(Opts(), kStart);
  const Lsn first = b.Append(100);
  EXPECT_EQ(first, kStart + 40);  // after the long page header
  b.Append(24);
  const Lsn last = b.Append(61);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 3u);
  EXPECT_EQ(r->last_record_start, last);
  EXPECT_EQ(r->last_record_end, last + 61);
  EXPECT_EQ(r->end, last + 64);  // MAXALIGNed, as PostgreSQL's EndRecPtr
  EXPECT_EQ(r->end, b.insert_lsn());
  EXPECT_EQ(r->stop, ScanStop::kZeroed) << r->stop_reason;
  EXPECT_EQ(r->stop_lsn, r->end);
  EXPECT_THAT(r->stop_reason, HasSubstr("zeroed record header at 0/3000E8"));

  // Starting at a record boundary gives the same end.
  r = Scan(b, first);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 3u);
  EXPECT_EQ(r->end, b.insert_lsn());
  ASSERT_EQ(*FindEndOfValidWal(*std::make_unique<MemoryWalBytes>(b), kStart,
                               b.expectations()),
            b.insert_lsn());
}

TEST_P(WalScanTest, NoWalAtAll) {
  WalBuilder b(Opts(), kStart);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 0u);
  EXPECT_EQ(r->end, kStart);
  EXPECT_EQ(r->stop, ScanStop::kNoData) << r->stop_reason;
  EXPECT_EQ(r->last_record_start, 0u);
}

TEST_P(WalScanTest, RecordsAcrossPagesAndSegments) {
  WalBuilder b(Opts(), kStart);
  // Sizes from tiny to multi-page, crossing many page and two segment
  // boundaries.
  uint64_t n = 0;
  const uint32_t sizes[] = {24, 50, 333, 8000, 8192, 20000, 4096, 777, 65536};
  while (b.insert_lsn() < kStart + 2 * kSeg + 5000) {
    RecordSpec spec;
    spec.total_len = sizes[n % 9];
    spec.seed = static_cast<uint32_t>(n);
    b.Append(spec);
    ++n;
  }
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, n);
  EXPECT_EQ(r->last_record_start, b.last_record());
  EXPECT_EQ(r->last_record_end, b.last_record_end());
  EXPECT_EQ(r->end, b.insert_lsn());
  EXPECT_EQ(b.segments().size(), 3u);
}

TEST_P(WalScanTest, RecordHeaderSplitAcrossPages) {
  for (uint64_t left : {8, 16}) {
    WalBuilder b(Opts(), kStart);
    b.Append(100);
    b.PadTo(kStart + kBlock - left);
    const Lsn split = b.Append(300);  // header: `left` bytes, then the rest
    ASSERT_EQ(split, kStart + kBlock - left);
    b.Append(50);
    absl::StatusOr<ScanResult> r = Scan(b, kStart);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->records, 4u) << left;
    EXPECT_EQ(r->end, b.insert_lsn());

    // A bad xl_prev in the split header is found once the header is whole.
    b.At(split + 8)[0] ^= 0x08;  // xl_prev's low byte (on the first page)
    if (left == 8) {
      // xl_prev is on the second page here: damage it there instead.
      b.At(split + 8)[0] ^= 0x08;
      b.At(kStart + kBlock + 24)[0] ^= 0x08;
    }
    r = Scan(b, kStart);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->records, 2u) << left;
    EXPECT_EQ(r->stop, ScanStop::kInvalidRecord) << r->stop_reason;
    EXPECT_THAT(r->stop_reason, HasSubstr("incorrect prev-link"));
    EXPECT_EQ(r->end, split);
  }
}

TEST_P(WalScanTest, RecordEndingExactlyAtPageEnd) {
  WalBuilder b(Opts(), kStart);
  b.PadTo(kStart + kBlock);
  const Lsn next = b.Append(40);
  EXPECT_EQ(next, kStart + kBlock + 24);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->end, b.insert_lsn());

  // Without the second record the end is the page boundary itself.
  WalBuilder c(Opts(), kStart);
  c.PadTo(kStart + kBlock);
  r = Scan(c, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->end, kStart + kBlock);
  EXPECT_EQ(r->stop, ScanStop::kZeroed);
  EXPECT_THAT(r->stop_reason, HasSubstr("zeroed page (end of WAL)"));
}

TEST_P(WalScanTest, TornRecordFailsCrc) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const Lsn good = b.Append(200);
  const Lsn good_end = b.insert_lsn();
  const Lsn torn = b.Append(5000);
  b.Append(100);
  b.At(torn + 3000)[0] ^= 0x01;  // one bit of the payload
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->last_record_start, good);
  EXPECT_EQ(r->end, good_end);
  EXPECT_EQ(r->stop, ScanStop::kChecksumMismatch);
  EXPECT_EQ(r->stop_lsn, torn);
  EXPECT_THAT(r->stop_reason,
              HasSubstr("incorrect resource manager data checksum"));

  // The header bytes before xl_crc are covered too.
  WalBuilder c(Opts(), kStart);
  c.Append(100);
  const Lsn rec = c.Append(100);
  c.At(rec + 4)[0] ^= 0x80;  // xl_xid
  r = Scan(c, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->stop, ScanStop::kChecksumMismatch);

  // A record written with a wrong CRC.
  WalBuilder d(Opts(), kStart);
  d.Append(100);
  RecordSpec bad;
  bad.corrupt_crc = true;
  d.Append(bad);
  r = Scan(d, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->stop, ScanStop::kChecksumMismatch);
}

TEST_P(WalScanTest, ContinuationPageZeroed) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const Lsn good_end = b.insert_lsn();
  const Lsn spanning = b.Append(3 * kBlock);
  // The crash lost the record's last page.
  const Lsn lost = (b.last_record_end() / kBlock) * kBlock;
  b.ZeroRange(lost, lost + kBlock);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->end, good_end);
  EXPECT_EQ(r->stop, ScanStop::kZeroed);
  EXPECT_EQ(r->stop_lsn, spanning);
  EXPECT_THAT(
      r->stop_reason,
      HasSubstr(absl::StrCat("record at ", FormatLsn(spanning),
                             " is incomplete: WAL page at ", FormatLsn(lost),
                             ": zeroed page (end of WAL)")));
}

TEST_P(WalScanTest, ContinuationSegmentMissingOrShort) {
  WalBuilder b(Opts(), kStart);
  b.AppendUntil(kStart + kSeg - 3000, 1000);
  const Lsn good_end = b.insert_lsn();
  const Lsn spanning = b.Append(10000);  // into segment kSegNo + 1
  ASSERT_EQ(SegmentOfLsn(b.last_record_end(), kSeg), kSegNo + 1);
  b.DropSegment(kSegNo + 1);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, good_end);
  EXPECT_EQ(r->stop, ScanStop::kNoData);
  EXPECT_EQ(r->stop_lsn, spanning);

  // A partially written next segment: the record's tail is cut off.
  WalBuilder c(Opts(), kStart);
  c.AppendUntil(kStart + kSeg - 3000, 1000);
  const Lsn c_good_end = c.insert_lsn();
  c.Append(10000);
  c.TruncateSegment(kSegNo + 1, 1000);
  r = Scan(c, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, c_good_end);
  EXPECT_EQ(r->stop, ScanStop::kNoData) << r->stop_reason;
}

TEST_P(WalScanTest, RecycledNextSegment) {
  // An old segment (LSNs of segment 1) recycled as segment kSegNo + 1.
  WalBuilder old(Opts(), 1 * kSeg);
  old.AppendUntil(2 * kSeg, 900);

  WalBuilder b(Opts(), kStart);
  b.AppendUntil(kStart + kSeg - 3000, 1000);
  const Lsn good_end = b.insert_lsn();
  const Lsn spanning = b.Append(10000);
  b.ReplaceSegment(kSegNo + 1, old.segments().at(1));
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, good_end);
  EXPECT_EQ(r->stop, ScanStop::kStalePage);
  EXPECT_EQ(r->stop_lsn, spanning);
  EXPECT_THAT(r->stop_reason,
              HasSubstr("recycled or stale page: page address 0/100000, "
                        "expected 0/400000"));

  // WAL that ends exactly at the segment end: the recycled segment's first
  // page is the end.
  WalBuilder c(Opts(), kStart);
  c.AppendUntil(kStart + kSeg - kBlock, 1000);
  c.PadTo(kStart + kSeg);
  ASSERT_EQ(c.insert_lsn(), kStart + kSeg);
  c.ReplaceSegment(kSegNo + 1, old.segments().at(1));
  r = Scan(c, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, kStart + kSeg);
  EXPECT_EQ(r->stop, ScanStop::kStalePage);
  EXPECT_EQ(r->stop_lsn, kStart + kSeg);
}

TEST_P(WalScanTest, PrevLinkMismatch) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const Lsn second = b.Append(100);
  const Lsn end = b.insert_lsn();
  RecordSpec stale;
  stale.prev = b.previous_record();  // points one record too far back
  const Lsn bad = b.Append(stale);
  b.Append(100);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->last_record_start, second);
  EXPECT_EQ(r->end, end);
  EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);
  EXPECT_EQ(r->stop_lsn, bad);
  EXPECT_THAT(
      r->stop_reason,
      HasSubstr(absl::StrCat("record with incorrect prev-link ",
                             FormatLsn(kStart + 40), " at ", FormatLsn(bad))));
}

TEST_P(WalScanTest, FirstRecordOnlyNeedsPrevBelowIt) {
  // Reading starts at a record whose predecessor is not read: any xl_prev
  // below the record is accepted (here 0, "none"), one at or above it is
  // not.
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  RecordSpec no_prev;
  no_prev.prev = 0;
  const Lsn second = b.Append(no_prev);
  b.Append(100);
  absl::StatusOr<ScanResult> r = Scan(b, second);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->end, b.insert_lsn());
  // Read sequentially, the same record's xl_prev must be exact.
  r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);

  WalBuilder c(Opts(), kStart);
  c.Append(100);
  RecordSpec ahead;
  ahead.prev = kStart + kSeg;
  const Lsn bad = c.Append(ahead);
  r = Scan(c, bad);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 0u);
  EXPECT_EQ(r->end, bad);
  EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);
  EXPECT_THAT(r->stop_reason, HasSubstr("(expected below 0/300090)"));
}

TEST_P(WalScanTest, StartAtSegmentBeginningWithContinuation) {
  WalBuilder b(Opts(), kStart);
  b.AppendUntil(kStart + kSeg - 2000, 1000);
  b.Append(30000);  // spans into the next segment, over several pages
  ASSERT_GT(b.last_record_end(), kStart + kSeg + 2 * kBlock);
  const Lsn after = b.insert_lsn();
  const Lsn first = b.Append(100);
  EXPECT_EQ(first, after);
  b.Append(200);
  // The earlier segment is gone (already archived, say).
  b.DropSegment(kSegNo);
  absl::StatusOr<ScanResult> r = Scan(b, kStart + kSeg);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->end, b.insert_lsn());
  EXPECT_EQ(r->stop, ScanStop::kZeroed);

  // A continuation ending exactly at a page end.
  WalBuilder c(Opts(), kStart);
  c.AppendUntil(kStart + kSeg - 2000, 1000);
  const Lsn from = c.insert_lsn();
  c.Append(static_cast<uint32_t>(kStart + kSeg + kBlock - from - 40));
  ASSERT_EQ(c.insert_lsn(), kStart + kSeg + kBlock);
  c.Append(64);
  c.DropSegment(kSegNo);
  r = Scan(c, kStart + kSeg);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->last_record_start, kStart + kSeg + kBlock + 24);
  EXPECT_EQ(r->end, c.insert_lsn());

  // With nothing after the continuation the end stays at the start.
  WalBuilder d(Opts(), kStart);
  d.AppendUntil(kStart + kSeg - 2000, 1000);
  d.Append(30000);
  d.DropSegment(kSegNo);
  r = Scan(d, kStart + kSeg);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 0u);
  EXPECT_EQ(r->end, kStart + kSeg);
}

TEST_P(WalScanTest, StartMidSegmentChecksTheSegmentsFirstPage) {
  WalBuilder b(Opts(), kStart);
  b.AppendUntil(kStart + 3 * kBlock, 500);
  const Lsn rec = b.Append(100);
  b.Append(100);
  // Sanity: fine as built.
  absl::StatusOr<ScanResult> r = Scan(b, rec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  // Another cluster's system id in the segment's long header.
  b.At(kStart + 24)[0] ^= 0xFF;
  r = Scan(b, rec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 0u);
  EXPECT_EQ(r->end, rec);
  EXPECT_EQ(r->stop, ScanStop::kInvalidPage);
  EXPECT_EQ(r->stop_lsn, kStart);
  EXPECT_THAT(r->stop_reason, HasSubstr("belongs to another cluster"));
}

TEST_P(WalScanTest, Limit) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const Lsn second = b.Append(100);
  const Lsn second_end = b.last_record_end();
  b.Append(20000);
  b.Append(100);
  // Limit exactly at a record's (aligned) end.
  absl::StatusOr<ScanResult> r = Scan(b, kStart, b.insert_lsn());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 4u);
  EXPECT_EQ(r->stop, ScanStop::kLimit);
  EXPECT_EQ(r->end, b.insert_lsn());
  // Limit at the unpadded end still admits the record.
  r = Scan(b, kStart, second_end);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->last_record_start, second);
  EXPECT_EQ(r->stop, ScanStop::kLimit);
  // Limit inside the multi-page record: it is not accepted.
  r = Scan(b, kStart, second_end + 2 * kBlock);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->stop, ScanStop::kLimit) << r->stop_reason;
  EXPECT_EQ(r->end, MaxAlign(second_end));
  // Limit at or before the start.
  r = Scan(b, kStart, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 0u);
  EXPECT_EQ(r->end, kStart);
  EXPECT_EQ(r->stop, ScanStop::kLimit);
}

TEST_P(WalScanTest, XlogSwitchJumpsToNextSegment) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const Lsn sw = b.AppendSwitch();
  EXPECT_EQ(b.insert_lsn(), kStart + kSeg);
  // Nothing after the switch yet: the end is the next segment start.
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->last_record_start, sw);
  EXPECT_EQ(r->last_record_end, sw + 24);
  EXPECT_EQ(r->end, kStart + kSeg);
  EXPECT_EQ(r->stop, ScanStop::kNoData);
  // Records continue in the next segment.
  const Lsn next = b.Append(100);
  EXPECT_EQ(next, kStart + kSeg + 40);
  r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 3u);
  EXPECT_EQ(r->end, b.insert_lsn());
}

TEST_P(WalScanTest, OverwrittenContinuationIsSkipped) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const Lsn before = b.Append(100);
  const Lsn aborted = b.Append(3 * kBlock);
  // The crash lost the record from its second page on; recovery wrote an
  // overwrite-contrecord record there, flagged on the page.
  const Lsn missing = (aborted / kBlock + 1) * kBlock;
  b.AbandonLastRecord(missing);
  RecordSpec overwrite;
  overwrite.total_len = 24 + 2 + 16;
  overwrite.rmid = kRmXlogId;
  overwrite.info = kXlogOverwriteContrecord;
  const Lsn ow = b.Append(overwrite);
  EXPECT_EQ(ow, missing + 24);
  b.Append(100);
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 4u);
  EXPECT_EQ(r->overwritten_records, 1u);
  EXPECT_EQ(r->end, b.insert_lsn());
  (void)before;

  // Without the flag the same bytes end the WAL at the aborted record.
  b.SetPageInfo(missing, 0, kXlpFirstIsOverwriteContRecord);
  r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);
  EXPECT_THAT(r->stop_reason, HasSubstr("there is no contrecord flag"));
}

TEST_P(WalScanTest, InvalidRecordHeaders) {
  struct Case {
    const char* name;
    RecordSpec spec;
    const char* why;
  };
  RecordSpec bad_rmid;
  bad_rmid.rmid = 22;  // first unused id after PostgreSQL 15's built-ins
  RecordSpec custom_rmid;
  custom_rmid.rmid = 200;
  for (const auto& [spec, ok, why] :
       {std::make_tuple(bad_rmid, false, "invalid resource manager ID 22"),
        std::make_tuple(custom_rmid, true, "")}) {
    WalBuilder b(Opts(), kStart);
    b.Append(100);
    b.Append(spec);
    absl::StatusOr<ScanResult> r = Scan(b, kStart);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->records, ok ? 2u : 1u) << why;
    if (!ok) {
      EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);
      EXPECT_THAT(r->stop_reason, HasSubstr(why));
    }
  }

  // xl_tot_len below the header size, and absurdly large.
  for (uint32_t len : {1u, 23u, (1u << 30) + 1, 0xFFFFFFFFu}) {
    WalBuilder b(Opts(), kStart);
    b.Append(100);
    const Lsn rec = b.Append(100);
    b.At(rec)[0] = static_cast<uint8_t>(len);
    b.At(rec)[1] = static_cast<uint8_t>(len >> 8);
    b.At(rec)[2] = static_cast<uint8_t>(len >> 16);
    b.At(rec)[3] = static_cast<uint8_t>(len >> 24);
    absl::StatusOr<ScanResult> r = Scan(b, kStart);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->records, 1u) << len;
    EXPECT_EQ(r->stop, ScanStop::kInvalidRecord) << len;
    EXPECT_THAT(r->stop_reason,
                HasSubstr(len < 24 ? "invalid record length" : "too long"));
  }
}

TEST_P(WalScanTest, ContinuationChecks) {
  // Wrong xlp_rem_len on the continuation page.
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  b.Append(3 * kBlock);
  b.At(kStart + kBlock + 16)[0] ^= 0x01;
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);
  EXPECT_THAT(r->stop_reason, HasSubstr("invalid contrecord length"));

  // A record may not start right after the header of a page announcing a
  // continuation.
  WalBuilder c(Opts(), kStart);
  c.PadTo(kStart + kBlock);
  c.Append(100);
  c.SetPageInfo(kStart + kBlock, kXlpFirstIsContRecord);
  r = Scan(c, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->stop, ScanStop::kInvalidRecord);
  EXPECT_THAT(r->stop_reason, HasSubstr("contrecord is requested by"));
}

TEST_P(WalScanTest, TimelineMustNotGoBackwards) {
  WalBuilderOptions o = Opts();
  o.timeline = 2;
  WalBuilder b(o, kStart);
  b.AppendUntil(kStart + 2 * kBlock + 100, 300);
  // Page 2 claims timeline 1.
  b.At(kStart + 2 * kBlock + 4)[0] = 1;
  absl::StatusOr<ScanResult> r = Scan(b, kStart);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop, ScanStop::kInvalidPage);
  EXPECT_THAT(r->stop_reason,
              HasSubstr("out-of-sequence timeline ID 1 (after 2)"));
  EXPECT_LT(r->end, kStart + 2 * kBlock);
}

TEST_P(WalScanTest, BadArguments) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  EXPECT_EQ(Scan(b, kStart + 44).status().code(),
            absl::StatusCode::kInvalidArgument);  // not MAXALIGNed
  EXPECT_EQ(Scan(b, kStart + kBlock + 8).status().code(),
            absl::StatusCode::kInvalidArgument);  // inside a short header
  EXPECT_EQ(Scan(b, kStart + 32).status().code(),
            absl::StatusCode::kInvalidArgument);  // inside the long header
  MemoryWalBytes wal(b);
  WalExpectations exp = b.expectations();
  exp.segment_size = 1000;
  EXPECT_EQ(ScanWal(wal, kStart, exp).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ScanStopNameTest, Names) {
  EXPECT_STREQ(ScanStopName(ScanStop::kZeroed), "zeroed");
  EXPECT_STREQ(ScanStopName(ScanStop::kChecksumMismatch), "checksum mismatch");
}

// DirectoryWalBytes on its own.

class FaultyPread : public sys::RealSysCalls {
 public:
  sys::SysResult Pread(int fd, void* buf, size_t n, off_t off) override {
    ++calls;
    if (eintr_left > 0) {
      --eintr_left;
      return {-1, EINTR};
    }
    if (fail_with != 0) return {-1, fail_with};
    // Short reads: at most 1000 bytes at a time.
    return RealSysCalls::Pread(fd, buf, std::min<size_t>(n, 1000), off);
  }
  int eintr_left = 0;
  int fail_with = 0;
  int calls = 0;
};

TEST(DirectoryWalBytesTest, ReadsAcrossSegmentsWithShortReadsAndEintr) {
  WalBuilder b(Opts(), kStart);
  b.AppendUntil(kStart + kSeg + 5000, 1000);
  b.TruncateSegment(kSegNo + 1, 6000);
  const std::string dir = FreshDir();
  ASSERT_TRUE(b.WriteTo(dir).ok());
  FaultyPread sys;
  sys.eintr_left = 2;
  DirectoryWalBytes wal(sys, dir, 1, kSeg);
  std::vector<uint8_t> buf(10000);
  // 4000 bytes from segment kSegNo, then 6000 from the next one.
  absl::StatusOr<size_t> n =
      wal.ReadAt(kStart + kSeg - 4000, buf.data(), 10000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 10000u);
  EXPECT_EQ(0, memcmp(buf.data(), b.At(kStart + kSeg - 4000), 4000));
  EXPECT_EQ(0, memcmp(buf.data() + 4000, b.At(kStart + kSeg), 6000));
  // The short file ends the data.
  n = wal.ReadAt(kStart + kSeg + 5000, buf.data(), 2000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1000u);
  // A missing segment reads as nothing.
  n = wal.ReadAt(kStart + 5 * kSeg, buf.data(), 100);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  n = wal.ReadAt(kStart - 100, buf.data(), 200);  // before: missing too
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

TEST(DirectoryWalBytesTest, IoErrorsAreReported) {
  WalBuilder b(Opts(), kStart);
  b.Append(100);
  const std::string dir = FreshDir();
  ASSERT_TRUE(b.WriteTo(dir).ok());
  FaultyPread sys;
  sys.fail_with = EIO;
  DirectoryWalBytes wal(sys, dir, 1, kSeg);
  uint8_t buf[100];
  absl::StatusOr<size_t> n = wal.ReadAt(kStart, buf, sizeof(buf));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(n.status().message()),
              HasSubstr("000000010000000000000003"));
  // ScanWal passes the error on.
  EXPECT_EQ(ScanWal(wal, kStart, b.expectations()).status().code(),
            absl::StatusCode::kDataLoss);

  DirectoryWalBytes other_tli(sys::DefaultSysCalls(), dir, 2, kSeg);
  n = other_tli.ReadAt(kStart, buf, sizeof(buf));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);  // timeline 2 has no files here
}

}  // namespace
}  // namespace walship::pg
