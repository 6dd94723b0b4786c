#include "common/pgwal/wal_names.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walship::pg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t k16MiB = uint64_t{16} << 20;
constexpr uint64_t k1MiB = uint64_t{1} << 20;

TEST(LsnTest, ParsesPostgresForm) {
  EXPECT_EQ(*ParseLsn("16/B374D848"), 0x16B374D848u);
  EXPECT_EQ(*ParseLsn("0/0"), 0u);
  EXPECT_EQ(*ParseLsn("0/3000060"), 0x3000060u);
  EXPECT_EQ(*ParseLsn("FFFFFFFF/FFFFFFFF"), UINT64_MAX);
  EXPECT_EQ(*ParseLsn("a/b"), 0xA0000000Bu);  // pg_lsn_in takes lowercase
  EXPECT_EQ(*ParseLsn("00000001/00000002"), 0x100000002u);
}

TEST(LsnTest, FormatsLikePostgres15) {
  EXPECT_EQ(FormatLsn(0x16B374D848u), "16/B374D848");
  EXPECT_EQ(FormatLsn(0x3000060u), "0/3000060");
  EXPECT_EQ(FormatLsn(0), "0/0");
  EXPECT_EQ(FormatLsn(UINT64_MAX), "FFFFFFFF/FFFFFFFF");
}

TEST(LsnTest, RoundTrips) {
  for (uint64_t v :
       {uint64_t{0}, uint64_t{1}, uint64_t{0x100000000}, uint64_t{0xFFFFFFFF},
        uint64_t{0x123456789ABCDEF0}, UINT64_MAX}) {
    EXPECT_EQ(*ParseLsn(FormatLsn(v)), v) << v;
  }
}

TEST(LsnTest, RejectsMalformed) {
  for (const char* bad : {"", "/", "1/", "/1", "16", "16-B374D848",
                          "123456789/0", "0/123456789", "0x1/2", " 1/2", "1/2 ",
                          "1//2", "1/2/3", "g/0", "-1/0", "+1/0", "1/+2"}) {
    absl::StatusOr<Lsn> r = ParseLsn(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseLsn("zz").status().message()),
              HasSubstr("\"zz\""));
}

TEST(SegmentSizeTest, PowersOfTwoFrom1MiBTo1GiB) {
  for (int shift = 20; shift <= 30; ++shift) {
    EXPECT_TRUE(IsValidSegmentSize(uint64_t{1} << shift)) << shift;
  }
  EXPECT_FALSE(IsValidSegmentSize(0));
  EXPECT_FALSE(IsValidSegmentSize(uint64_t{1} << 19));
  EXPECT_FALSE(IsValidSegmentSize(uint64_t{1} << 31));
  EXPECT_FALSE(IsValidSegmentSize(3 << 20));
  EXPECT_FALSE(IsValidSegmentSize(k16MiB + 1));
}

TEST(SegmentNameTest, ParsesWith16MiBSegments) {
  absl::StatusOr<SegmentId> id =
      ParseSegmentName("000000010000000A0000003F", k16MiB);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->timeline, 1u);
  EXPECT_EQ(id->segno, 0xAu * 256 + 0x3F);
  EXPECT_EQ(SegmentStartLsn(id->segno, k16MiB), *ParseLsn("A/3F000000"));

  id = ParseSegmentName("0000002A00000000000000FF", k16MiB);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->timeline, 42u);
  EXPECT_EQ(id->segno, 255u);
}

TEST(SegmentNameTest, ParsesWith1MiBSegments) {
  absl::StatusOr<SegmentId> id =
      ParseSegmentName("00000003000000020000ABC", k1MiB);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  id = ParseSegmentName("000000030000000200000ABC", k1MiB);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->timeline, 3u);
  EXPECT_EQ(id->segno, 2u * 4096 + 0xABC);
  EXPECT_EQ(SegmentStartLsn(id->segno, k1MiB), *ParseLsn("2/ABC00000"));
}

TEST(SegmentNameTest, RoundTrips) {
  for (uint64_t size : {k1MiB, k16MiB, uint64_t{1} << 30}) {
    for (uint64_t segno :
         {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256},
          uint64_t{4095}, uint64_t{4096}, uint64_t{123456789}}) {
      for (uint32_t tli : {1u, 2u, 0xFFFFFFFFu}) {
        const std::string name = SegmentName(tli, segno, size);
        EXPECT_EQ(name.size(), 24u);
        absl::StatusOr<SegmentId> id = ParseSegmentName(name, size);
        ASSERT_TRUE(id.ok()) << name << ": " << id.status();
        EXPECT_EQ(*id, (SegmentId{tli, segno})) << name;
      }
    }
  }
  EXPECT_EQ(SegmentName(1, 1, k16MiB), "000000010000000000000001");
  EXPECT_EQ(SegmentName(1, 256, k16MiB), "000000010000000100000000");
  EXPECT_EQ(SegmentName(1, 4096, k1MiB), "000000010000000100000000");
  EXPECT_EQ(SegmentName(0x1A, 4095, k1MiB), "0000001A0000000000000FFF");
}

void ExpectBadName(absl::string_view name, uint64_t size,
                   absl::string_view why) {
  absl::StatusOr<SegmentId> id = ParseSegmentName(name, size);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << name;
  EXPECT_THAT(std::string(id.status().message()), HasSubstr(why)) << name;
}

TEST(SegmentNameTest, Rejections) {
  ExpectBadName("", k16MiB, "0 characters, expected 24");
  ExpectBadName("00000001000000000000001", k16MiB, "23 characters");
  ExpectBadName("0000000100000000000000010", k16MiB, "25 characters");
  ExpectBadName("000000010000000000000001.partial", k16MiB, "32 characters");
  ExpectBadName("00000001000000000000000a", k16MiB, "uppercase");
  ExpectBadName("0000000a0000000000000001", k16MiB, "uppercase");
  ExpectBadName("00000001000000000000000G", k16MiB, "uppercase");
  ExpectBadName("0000000100000000 0000001", k16MiB, "uppercase");
  ExpectBadName("000000000000000000000001", k16MiB, "timeline 0");
  // Y out of range: 16 MiB segments have 256 per X, 1 MiB ones 4096.
  ExpectBadName("000000010000000000000100", k16MiB, "out of range");
  ExpectBadName("0000000100000000FFFFFFFF", k16MiB, "out of range");
  ExpectBadName("000000010000000000001000", k1MiB, "out of range");
  EXPECT_TRUE(ParseSegmentName("0000000100000000000000FF", k16MiB).ok());
  EXPECT_TRUE(ParseSegmentName("000000010000000000000FFF", k1MiB).ok());
  ExpectBadName("000000010000000000000001", 3 << 20, "segment size");
  ExpectBadName("000000010000000000000001", 0, "segment size");
}

TEST(SegmentNameTest, SegmentOfLsn) {
  EXPECT_EQ(SegmentOfLsn(0, k16MiB), 0u);
  EXPECT_EQ(SegmentOfLsn(k16MiB - 1, k16MiB), 0u);
  EXPECT_EQ(SegmentOfLsn(k16MiB, k16MiB), 1u);
  EXPECT_EQ(SegmentOfLsn(*ParseLsn("16/B374D848"), k16MiB), 0x16u * 256 + 0xB3);
  EXPECT_EQ(SegmentOfLsn(*ParseLsn("0/3000060"), k1MiB), 0x30u);
  EXPECT_EQ(SegmentStartLsn(0x30, k1MiB), 0x3000000u);
}

TEST(HistoryNameTest, ParsesAndFormats) {
  uint32_t tli = 0;
  EXPECT_TRUE(ParseHistoryFileName("00000002.history", &tli));
  EXPECT_EQ(tli, 2u);
  EXPECT_TRUE(ParseHistoryFileName("FFFFFFFF.history", &tli));
  EXPECT_EQ(tli, 0xFFFFFFFFu);
  EXPECT_EQ(HistoryFileName(2), "00000002.history");
  EXPECT_EQ(HistoryFileName(0x1A), "0000001A.history");
  EXPECT_TRUE(ParseHistoryFileName(HistoryFileName(0xABCDEF), &tli));
  EXPECT_EQ(tli, 0xABCDEFu);
}

TEST(HistoryNameTest, Rejections) {
  uint32_t tli = 77;
  for (const char* bad :
       {"", "00000002", "00000002.histor", "00000002.history.tmp",
        "0000002.history", "000000002.history", "0000000a.history",
        "00000000.history", "0000000G.history", "00000002.HISTORY",
        "000000010000000000000001", "00000002.partial"}) {
    EXPECT_FALSE(ParseHistoryFileName(bad, &tli)) << bad;
  }
  EXPECT_EQ(tli, 77u);  // untouched
}

TEST(HistoryFileTest, ParsesServerOutput) {
  absl::StatusOr<std::vector<TimelineSwitch>> r = ParseHistoryFile(
      "1\t0/3000060\tno recovery target specified\n"
      "\n"
      "# a comment\n"
      "   # an indented comment\n"
      "2\t0/5000000\tbefore 2000-01-01 00:00:00+00\n"
      "5\t16/B374D848\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre(TimelineSwitch{1, 0x3000060},
                              TimelineSwitch{2, 0x5000000},
                              TimelineSwitch{5, 0x16B374D848}));
}

TEST(HistoryFileTest, EmptyAndCommentOnly) {
  EXPECT_TRUE(ParseHistoryFile("")->empty());
  EXPECT_TRUE(ParseHistoryFile("\n\n# nothing\n  \t\n")->empty());
}

TEST(HistoryFileTest, ToleratesSpacesAndCrLf) {
  absl::StatusOr<std::vector<TimelineSwitch>> r =
      ParseHistoryFile("  1 0/10 reason\r\n2\t0/20\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r,
              ElementsAre(TimelineSwitch{1, 0x10}, TimelineSwitch{2, 0x20}));
}

void ExpectBadHistory(absl::string_view content, absl::string_view why) {
  absl::StatusOr<std::vector<TimelineSwitch>> r = ParseHistoryFile(content);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << content;
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(why)) << content;
}

TEST(HistoryFileTest, RejectsMalformedLines) {
  ExpectBadHistory("bogus line\n", "expected a numeric timeline ID");
  ExpectBadHistory("1x\t0/10\n", "expected a numeric timeline ID");
  ExpectBadHistory("7\n", "switch point");
  ExpectBadHistory("7\t\treason only\n", "switch point");
  ExpectBadHistory("7\t0/10/3\tx\n", "switch point");
  ExpectBadHistory("0\t0/10\n", "timeline ID 0");
  ExpectBadHistory("99999999999\t0/10\n", "out of range");
  ExpectBadHistory("2\t0/10\tx\n1\t0/20\ty\n", "must increase (1 after 2)");
  ExpectBadHistory("2\t0/10\n2\t0/20\n", "must increase");
  ExpectBadHistory("1\t0/10\n# ok\nbad\n", "line 3");
}

}  // namespace
}  // namespace walship::pg
