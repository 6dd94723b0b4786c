#include "common/pgwal/wal_page.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/pgwal/wal_builder.h"

namespace walship::pg {
namespace {

using ::testing::HasSubstr;
using ::walship::pg::testing::WalBuilder;
using ::walship::pg::testing::WalBuilderOptions;

constexpr uint64_t kSeg = uint64_t{1} << 20;
constexpr uint64_t kSysId = 7123456789012345678u;

WalExpectations Exp() {
  WalExpectations exp;
  exp.system_id = kSysId;
  exp.segment_size = kSeg;
  return exp;
}

// A segment of real-looking WAL starting at segment 5: first page long,
// later pages short.
std::vector<uint8_t> BuiltSegment(uint64_t segno = 5) {
  WalBuilderOptions opts;
  opts.system_id = kSysId;
  opts.segment_size = kSeg;
  WalBuilder b(opts, segno * kSeg);
  b.AppendUntil(segno * kSeg + 3 * 8192 + 100, 700);
  return b.segments().at(segno);
}

absl::Span<const uint8_t> PageOf(const std::vector<uint8_t>& seg, int page) {
  return absl::MakeConstSpan(seg.data() + page * 8192, 8192);
}

void ExpectProblem(absl::Span<const uint8_t> page, Lsn addr,
                   const WalExpectations& exp, PageProblem want,
                   absl::string_view message) {
  PageProblem got = PageProblem::kNone;
  absl::Status s = ValidatePage(page, addr, exp, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(got, want) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(message)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("WAL page at " + FormatLsn(addr) + ": "));
}

TEST(WalPageTest, HeaderSizesMatchPostgres) {
  EXPECT_EQ(kShortPageHeaderSize, 24u);
  EXPECT_EQ(kLongPageHeaderSize, 40u);
  EXPECT_EQ(PageHeaderSize(0), 24u);
  EXPECT_EQ(PageHeaderSize(kXlpLongHeader | kXlpFirstIsContRecord), 40u);
  EXPECT_EQ(MaxAlign(0), 0u);
  EXPECT_EQ(MaxAlign(1), 8u);
  EXPECT_EQ(MaxAlign(24), 24u);
  EXPECT_EQ(MaxAlign(25), 32u);
  EXPECT_EQ(kXlpAllFlags, kXlpFirstIsContRecord | kXlpLongHeader |
                              kXlpBkpRemovable |
                              kXlpFirstIsOverwriteContRecord);
}

TEST(WalPageTest, DecodesBuiltLongAndShortHeaders) {
  const std::vector<uint8_t> seg = BuiltSegment();
  absl::StatusOr<PageHeader> h = DecodePageHeader(PageOf(seg, 0));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->magic, 0xD110);
  EXPECT_EQ(h->info, kXlpLongHeader);
  EXPECT_EQ(h->timeline, 1u);
  EXPECT_EQ(h->pageaddr, 5 * kSeg);
  EXPECT_EQ(h->rem_len, 0u);
  EXPECT_TRUE(h->is_long);
  EXPECT_EQ(h->system_id, kSysId);
  EXPECT_EQ(h->seg_size, kSeg);
  EXPECT_EQ(h->block_size, 8192u);
  EXPECT_EQ(h->size(), 40u);

  h = DecodePageHeader(PageOf(seg, 1));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_FALSE(h->is_long);
  EXPECT_EQ(h->pageaddr, 5 * kSeg + 8192);
  EXPECT_EQ(h->size(), 24u);
  // 700-byte records leave a continuation at the top of page 1.
  EXPECT_TRUE(h->info & kXlpFirstIsContRecord);
  EXPECT_GT(h->rem_len, 0u);
  EXPECT_EQ(h->system_id, 0u);
}

TEST(WalPageTest, EncodeDecodeRoundTrip) {
  PageHeader in{};
  in.magic = 0xD110;
  in.info = kXlpLongHeader | kXlpFirstIsContRecord;
  in.timeline = 7;
  in.pageaddr = 0x1234500000;
  in.rem_len = 12345;
  in.system_id = 42;
  in.seg_size = kSeg;
  in.block_size = 8192;
  uint8_t buf[40];
  EncodePageHeader(in, absl::MakeSpan(buf));
  absl::StatusOr<PageHeader> out = DecodePageHeader(buf);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->info, in.info);
  EXPECT_EQ(out->timeline, 7u);
  EXPECT_EQ(out->pageaddr, in.pageaddr);
  EXPECT_EQ(out->rem_len, 12345u);
  EXPECT_EQ(out->system_id, 42u);
  EXPECT_EQ(buf[20], 0);  // padding
}

TEST(WalPageTest, DecodeRejectsShortInput) {
  const std::vector<uint8_t> seg = BuiltSegment();
  EXPECT_EQ(
      DecodePageHeader(absl::MakeConstSpan(seg.data(), 23)).status().code(),
      absl::StatusCode::kDataLoss);
  // A long header needs 40 bytes; a short one 24.
  EXPECT_EQ(
      DecodePageHeader(absl::MakeConstSpan(seg.data(), 39)).status().code(),
      absl::StatusCode::kDataLoss);
  EXPECT_TRUE(
      DecodePageHeader(absl::MakeConstSpan(seg.data() + 8192, 24)).ok());
}

TEST(WalPageTest, GoodPagesValidate) {
  const std::vector<uint8_t> seg = BuiltSegment();
  for (int page = 0; page < 4; ++page) {
    PageProblem problem = PageProblem::kBadMagic;
    EXPECT_TRUE(
        ValidatePage(PageOf(seg, page), 5 * kSeg + page * 8192, Exp(), &problem)
            .ok())
        << page;
    EXPECT_EQ(problem, PageProblem::kNone);
  }
  // Only the header is needed.
  EXPECT_TRUE(
      ValidatePage(absl::MakeConstSpan(seg.data(), 40), 5 * kSeg, Exp()).ok());
  // System id 0 = unknown: not checked.
  WalExpectations any = Exp();
  any.system_id = 0;
  EXPECT_TRUE(ValidatePage(PageOf(seg, 0), 5 * kSeg, any).ok());
}

TEST(WalPageTest, RecycledPageHasOldAddress) {
  // Segment 2's bytes where segment 5 is expected: a recycled file.
  const std::vector<uint8_t> old = BuiltSegment(2);
  ExpectProblem(PageOf(old, 0), 5 * kSeg, Exp(), PageProblem::kStaleAddress,
                "recycled or stale page: page address 0/200000, expected "
                "0/500000");
  ExpectProblem(PageOf(old, 1), 5 * kSeg + 8192, Exp(),
                PageProblem::kStaleAddress,
                "recycled or stale page: page address 0/202000, expected "
                "0/502000");
}

TEST(WalPageTest, ZeroedPage) {
  const std::vector<uint8_t> zeros(8192, 0);
  EXPECT_TRUE(LooksZeroed(zeros));
  ExpectProblem(zeros, 5 * kSeg + 8192, Exp(), PageProblem::kZeroed,
                "zeroed page (end of WAL)");
  ExpectProblem(zeros, 5 * kSeg, Exp(), PageProblem::kZeroed,
                "zeroed page (end of WAL)");
  const std::vector<uint8_t> seg = BuiltSegment();
  EXPECT_FALSE(LooksZeroed(PageOf(seg, 0)));
  EXPECT_FALSE(LooksZeroed(absl::MakeConstSpan(zeros.data(), 23)));
  std::vector<uint8_t> almost(zeros);
  almost[23] = 1;  // padding byte set: not a never-written page
  EXPECT_FALSE(LooksZeroed(almost));
}

TEST(WalPageTest, WrongSystemId) {
  const std::vector<uint8_t> seg = BuiltSegment();
  WalExpectations exp = Exp();
  exp.system_id = 99;
  ExpectProblem(PageOf(seg, 0), 5 * kSeg, exp, PageProblem::kOtherSystem,
                "belongs to another cluster: system identifier "
                "7123456789012345678, expected 99");
  // Short headers carry no system id.
  EXPECT_TRUE(ValidatePage(PageOf(seg, 1), 5 * kSeg + 8192, exp).ok());
}

TEST(WalPageTest, WrongSegmentAndBlockSize) {
  const std::vector<uint8_t> seg = BuiltSegment();
  WalExpectations exp = Exp();
  exp.segment_size = kSeg * 2;
  ExpectProblem(PageOf(seg, 0), 0, exp, PageProblem::kWrongSegmentSize,
                "segment size 1048576, expected 2097152");
  exp = Exp();
  exp.block_size = 16384;
  ExpectProblem(absl::MakeConstSpan(seg.data(), 16384), 5 * kSeg, exp,
                PageProblem::kWrongBlockSize,
                "block size 8192, expected 16384");
}

TEST(WalPageTest, BadMagic) {
  std::vector<uint8_t> seg = BuiltSegment();
  seg[8192] = 0x0D;  // 0xD10D: PostgreSQL 14's magic
  ExpectProblem(PageOf(seg, 1), 5 * kSeg + 8192, Exp(), PageProblem::kBadMagic,
                "invalid magic number D10D, expected D110");
  WalExpectations pg14 = Exp();
  pg14.magic = 0xD10D;
  EXPECT_TRUE(ValidatePage(PageOf(seg, 1), 5 * kSeg + 8192, pg14).ok());
}

TEST(WalPageTest, UnknownInfoBits) {
  std::vector<uint8_t> seg = BuiltSegment();
  seg[8192 + 2] |= 0x10;
  ExpectProblem(PageOf(seg, 1), 5 * kSeg + 8192, Exp(),
                PageProblem::kBadInfoBits, "invalid info bits");
  // All four defined bits are fine.
  seg = BuiltSegment();
  seg[8192 + 2] |= kXlpBkpRemovable | kXlpFirstIsOverwriteContRecord;
  EXPECT_TRUE(ValidatePage(PageOf(seg, 1), 5 * kSeg + 8192, Exp()).ok());
}

TEST(WalPageTest, SegmentStartNeedsLongHeader) {
  std::vector<uint8_t> seg = BuiltSegment();
  // Page 1 has a short header; present it as the first page of segment 6
  // with a matching address.
  std::vector<uint8_t> page(seg.begin() + 8192, seg.begin() + 16384);
  page[8] = 0;
  page[9] = 0;
  page[10] = 0x60;  // pageaddr 0x600000
  ExpectProblem(page, 6 * kSeg, Exp(), PageProblem::kMissingLongHeader,
                "without a long header");
}

TEST(WalPageTest, TruncatedHeader) {
  const std::vector<uint8_t> seg = BuiltSegment();
  ExpectProblem(absl::MakeConstSpan(seg.data(), 10), 5 * kSeg, Exp(),
                PageProblem::kTruncated, "truncated");
  ExpectProblem(absl::MakeConstSpan(seg.data(), 30), 5 * kSeg, Exp(),
                PageProblem::kTruncated, "truncated long WAL page header");
  ExpectProblem({}, 5 * kSeg, Exp(), PageProblem::kTruncated, "0 bytes");
}

TEST(WalPageTest, CallerErrorsAreInvalidArgument) {
  const std::vector<uint8_t> seg = BuiltSegment();
  PageProblem problem = PageProblem::kZeroed;
  EXPECT_EQ(
      ValidatePage(PageOf(seg, 0), 5 * kSeg + 100, Exp(), &problem).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(problem, PageProblem::kNone);
  WalExpectations exp = Exp();
  exp.segment_size = 12345;
  EXPECT_EQ(ValidatePage(PageOf(seg, 0), 5 * kSeg, exp).code(),
            absl::StatusCode::kInvalidArgument);
  exp = Exp();
  exp.block_size = 1000;
  EXPECT_EQ(ValidateExpectations(exp).code(),
            absl::StatusCode::kInvalidArgument);
  exp.block_size = 512;
  EXPECT_EQ(ValidateExpectations(exp).code(),
            absl::StatusCode::kInvalidArgument);
  exp.block_size = 65536;
  EXPECT_TRUE(ValidateExpectations(exp).ok());
}

}  // namespace
}  // namespace walship::pg
