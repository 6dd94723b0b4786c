// The binlog event scanner (agent/mysql/binlog.h) against binlogs written by
// the test builder, alone and under the append source in a binlog
// directory (index and state files beside the binlogs).
#include "agent/mysql/binlog.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "agent/append_source.h"
#include "agent/mysql/mysql_format.h"
#include "agent/segment_catalog.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/agent/mysql/binlog_builder.h"
#include "tests/fakes/catalog_wait.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent::mysql {
namespace {

using testing::BinlogBuilder;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

ContentEnd Scan(BinlogScanner& s, const std::string& bytes, uint64_t from = 0) {
  const std::string dir = walship::testing::FreshTempDir("binlog-scan");
  Write(dir + "/b.000001", bytes);
  sys::UniqueFd fd(open((dir + "/b.000001").c_str(), O_RDONLY | O_CLOEXEC));
  SegmentBytes sb(sys::DefaultSysCalls(), fd.get(), bytes.size(), 4096);
  auto end = s.ScanEnd("b.000001", sb, from);
  EXPECT_TRUE(end.ok()) << end.status();
  return end.ok() ? *end : ContentEnd{};
}

ContentEnd Scan(const std::string& bytes, uint64_t from = 0) {
  BinlogScanner s;
  return Scan(s, bytes, from);
}

TEST(BinlogTest, Crc32IsZlibs) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
}

TEST(BinlogTest, CompleteEventsAreValidToTheEnd) {
  BinlogBuilder b;
  for (int i = 0; i < 50; ++i) b.Event(static_cast<uint8_t>(2 + i % 30), 23 + i * 37);
  b.Event(19, 200000);  // larger than the scan window
  ContentEnd end = Scan(b.bytes());
  EXPECT_EQ(end.valid_end, b.bytes().size());
  EXPECT_EQ(end.held, HeldBack::kNone) << end.detail;
}

TEST(BinlogTest, NothingBeforeTheWholeFde) {
  BinlogBuilder b;
  const uint64_t fde_end = b.bytes().size();
  for (uint64_t cut : {uint64_t{0}, uint64_t{2}, uint64_t{4}, uint64_t{10}, fde_end - 1}) {
    ContentEnd end = Scan(b.bytes().substr(0, cut));
    EXPECT_EQ(end.valid_end, 0u) << cut;
    EXPECT_EQ(end.held, HeldBack::kPartialRecord) << cut;
  }
  EXPECT_EQ(Scan(b.bytes()).valid_end, fde_end);
}

TEST(BinlogTest, AHalfWrittenEventIsHeldBack) {
  BinlogBuilder b;
  b.Event(2, 300);
  const uint64_t before = b.bytes().size();
  b.Event(2, 5000);
  for (uint64_t cut : {before + 1, before + 18, before + 19, b.bytes().size() - 1}) {
    ContentEnd end = Scan(b.bytes().substr(0, cut));
    EXPECT_EQ(end.valid_end, before) << cut;
    EXPECT_EQ(end.held, HeldBack::kPartialRecord) << cut << " " << end.detail;
  }
}

TEST(BinlogTest, ABadChecksumStopsAtTheEventBefore) {
  BinlogBuilder b;
  b.Event(2, 300);
  const uint64_t before = b.bytes().size();
  b.Event(2, 400);
  b.Event(2, 500);
  std::string bytes = b.bytes();
  bytes[before + 100] ^= 0x40;
  ContentEnd end = Scan(bytes);
  EXPECT_EQ(end.valid_end, before);
  EXPECT_EQ(end.held, HeldBack::kBadChecksum) << end.detail;
}

TEST(BinlogTest, TheFdeChecksumHoldsWithTheInUseFlagEitherWay) {
  for (bool in_use : {true, false}) {
    BinlogBuilder b(true, 0, in_use);
    b.Event(2, 100);
    EXPECT_EQ(static_cast<uint8_t>(b.bytes()[kInUseFlagOffset]) & kInUseFlag,
              in_use ? kInUseFlag : 0);
    ContentEnd end = Scan(b.bytes());
    EXPECT_EQ(end.valid_end, b.bytes().size()) << end.detail;
  }
}

TEST(BinlogTest, WithoutChecksumsLogPosIsChecked) {
  BinlogBuilder b(/*checksums=*/false);
  b.Event(2, 300);
  const uint64_t before = b.bytes().size();
  b.Event(2, 400);
  EXPECT_EQ(Scan(b.bytes()).valid_end, b.bytes().size());
  std::string bytes = b.bytes();
  bytes[before + 13] ^= 0x01;  // log_pos
  ContentEnd end = Scan(bytes);
  EXPECT_EQ(end.valid_end, before);
  EXPECT_EQ(end.held, HeldBack::kBadChecksum);
}

TEST(BinlogTest, NotABinlogIsHeldBack) {
  ContentEnd end = Scan(std::string("\xfe\x62\x69\x6f") + std::string(100, 'x'));
  EXPECT_EQ(end.valid_end, 0u);
  EXPECT_EQ(end.held, HeldBack::kBadChecksum);
}

TEST(BinlogTest, ScanResumesFromTheLastValidEnd) {
  BinlogScanner s;
  BinlogBuilder b;
  b.Event(2, 300);
  const std::string first = b.bytes();
  ContentEnd e1 = Scan(s, first);
  b.Event(2, 700);
  ContentEnd e2 = Scan(s, b.bytes(), e1.valid_end);
  EXPECT_EQ(e2.valid_end, b.bytes().size());
  // A fresh scanner (an agent restart) asked to resume reads the FDE again.
  BinlogScanner fresh;
  EXPECT_EQ(Scan(fresh, b.bytes(), e1.valid_end).valid_end, b.bytes().size());
}

TEST(BinlogTest, NamesAndIndex) {
  EXPECT_EQ(BaseFromIndex("./mysql-bin.000001\n./mysql-bin.000002\n"), "mysql-bin");
  EXPECT_EQ(BaseFromIndex("/var/lib/mysql/bl.0000123\n"), "bl");
  EXPECT_EQ(BaseFromIndex(""), "");
  auto p = SegmentPattern::Compile(SegmentPatternFor("mysql-bin"));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->Matches("mysql-bin.000001"));
  EXPECT_FALSE(p->Matches("mysql-bin.index"));
  EXPECT_FALSE(p->Matches("mysql-bin.state"));
  EXPECT_FALSE(p->Matches("mysqlXbin.000001"));
  EXPECT_EQ(p->Successor("mysql-bin.000009"), "mysql-bin.000010");
  auto any = SegmentPattern::Compile(SegmentPatternFor(""));
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->Matches("mysql-bin.000001"));
  EXPECT_FALSE(any->Matches("mysql-bin.index"));
}

// MayComplete over files: `first` with later binlogs `later`.
bool MayComplete(const std::string& first, const std::vector<std::string>& later) {
  const std::string dir = walship::testing::FreshTempDir("binlog-complete");
  Write(dir + "/b.000001", first);
  std::vector<std::string> names;
  for (size_t i = 0; i < later.size(); ++i) {
    names.push_back("b.00000" + std::to_string(i + 2));
    Write(dir + "/" + names.back(), later[i]);
  }
  sys::UniqueFd fd(open((dir + "/b.000001").c_str(), O_RDONLY | O_CLOEXEC));
  SegmentBytes sb(sys::DefaultSysCalls(), fd.get(), first.size(), 4096);
  BinlogScanner s;
  auto may = s.MayComplete("b.000001", sb, names,
                           [&](const std::string& n, size_t len) -> absl::StatusOr<std::string> {
                             for (size_t i = 0; i < names.size(); ++i) {
                               if (names[i] == n) return later[i].substr(0, len);
                             }
                             return absl::NotFoundError(n);
                           });
  EXPECT_TRUE(may.ok()) << may.status();
  return may.ok() && *may;
}

TEST(BinlogTest, ABinlogCompletesOnceItsInUseFlagIsClear) {
  BinlogBuilder open_one(true, 0, /*in_use=*/true);
  BinlogBuilder closed(true, 0, /*in_use=*/false);
  BinlogBuilder rotated(true, /*created=*/0, true);
  BinlogBuilder restarted(true, /*created=*/1700000000, true);
  EXPECT_TRUE(MayComplete(closed.bytes(), {rotated.bytes()}));
  // Rotation: the server clears the flag right after creating the next one.
  EXPECT_FALSE(MayComplete(open_one.bytes(), {rotated.bytes()}));
  // The next binlog's FDE still being written.
  EXPECT_FALSE(MayComplete(open_one.bytes(), {restarted.bytes().substr(0, 30)}));
  // A server started after it: it crashed with this binlog in use.
  EXPECT_TRUE(MayComplete(open_one.bytes(), {restarted.bytes()}));
  EXPECT_TRUE(MayComplete(open_one.bytes(), {rotated.bytes(), restarted.bytes()}));
}

TEST(BinlogTest, TheSourceShowsNoLaterBinlogUntilTheFlagIsCleared) {
  const std::string dir = walship::testing::FreshTempDir("binlog-source");
  BinlogBuilder one(true, 1700000000, true);
  one.Event(2, 500);
  BinlogBuilder two(true, 0, true);
  two.Event(2, 300);
  Write(dir + "/mysql-bin.000001", one.bytes());
  Write(dir + "/mysql-bin.000002", two.bytes());
  Write(dir + "/mysql-bin.index", "./mysql-bin.000001\n./mysql-bin.000002\n");
  Write(dir + "/mysql-bin.state", "0-1-100\n");
  auto base = BinlogBase(sys::DefaultSysCalls(), dir, "");
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(*base, "mysql-bin");
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.segment_pattern = SegmentPatternFor(*base);
  o.format_name = "mysql-binlog";
  o.scanner = [] { return std::make_unique<BinlogScanner>(); };
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 1u);
  EXPECT_EQ((*s.segments)[0].name, "mysql-bin.000001");
  EXPECT_FALSE((*s.segments)[0].complete);
  EXPECT_EQ((*s.segments)[0].shippable, one.bytes().size());
  // The server closes it: one byte rewritten in place.
  std::string closed = one.bytes();
  closed[kInUseFlagOffset] = static_cast<char>(closed[kInUseFlagOffset] & ~kInUseFlag);
  {
    sys::UniqueFd fd(open((dir + "/mysql-bin.000001").c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_EQ(pwrite(fd.get(), &closed[kInUseFlagOffset], 1, kInUseFlagOffset), 1);
  }
  s = walship::testing::WaitForCatalog(catalog,
                                       [](const CatalogSnapshot& c) { return c.segments->size() == 2; });
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_EQ((*s.segments)[0].shippable, one.bytes().size());
  EXPECT_EQ((*s.segments)[1].shippable, two.bytes().size());
  source.Stop();
}

}  // namespace
}  // namespace walship::agent::mysql
