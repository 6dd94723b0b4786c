// The RocksDB record scanner against logs written by the test builder
// (framing of agent/rocksdb/rocksdb_log.h), alone and under the append
// source in a database directory.
#include "agent/rocksdb/rocksdb_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "agent/append_source.h"
#include "agent/segment_catalog.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/agent/rocksdb/rocksdb_log_builder.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent::rocksdb {
namespace {

using testing::LogBuilder;

void Write(const std::string& path, const std::string& bytes, bool append = false) {
  std::ofstream f(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

ContentEnd Scan(const std::string& path, const std::string& name, uint64_t from = 0) {
  auto fd = sys::UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  SegmentBytes bytes(sys::DefaultSysCalls(), fd.get(), static_cast<uint64_t>(size), 4096);
  RocksdbRecordScanner s;
  auto end = s.ScanEnd(name, bytes, from);
  EXPECT_TRUE(end.ok()) << end.status();
  return end.ok() ? *end : ContentEnd{};
}

TEST(RocksdbLogTest, MaskIsRocksDbs) {
  EXPECT_EQ(UnmaskCrc(MaskCrc(0x12345678)), 0x12345678u);
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  EXPECT_EQ(LogNumber("000123.log"), 123u);
  EXPECT_FALSE(LogNumber("MANIFEST-000004").has_value());
  EXPECT_FALSE(LogNumber("12a.log").has_value());
}

TEST(RocksdbLogTest, RecordsAcrossBlocksAreValidToTheLastOne) {
  std::string dir = walship::testing::FreshTempDir("rocks-blocks");
  LogBuilder b;
  std::string data;
  for (int i = 0; i < 20; ++i) data += b.Add(std::string(5000 + i * 7, 'a' + i % 26));
  data += b.Add(std::string(70000, 'z'));  // FIRST, MIDDLE, LAST
  Write(dir + "/000005.log", data);
  ContentEnd end = Scan(dir + "/000005.log", "000005.log");
  EXPECT_EQ(end.valid_end, data.size());
  EXPECT_EQ(end.held, HeldBack::kNone) << end.detail;
}

TEST(RocksdbLogTest, AFragmentedRecordIsShippedOnlyWhole) {
  std::string dir = walship::testing::FreshTempDir("rocks-frag");
  LogBuilder b;
  std::string head = b.Add("small");
  std::string big = b.Add(std::string(50000, 'x'));
  // The FIRST fragment and half the LAST one are written.
  Write(dir + "/000007.log", head + big.substr(0, big.size() - 1000));
  ContentEnd end = Scan(dir + "/000007.log", "000007.log");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kPartialRecord) << end.detail;
  // Only the FIRST fragment: still held back.
  Write(dir + "/000008.log", head + big.substr(0, 32768 - head.size()));
  end = Scan(dir + "/000008.log", "000008.log");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kPartialRecord) << end.detail;
}

TEST(RocksdbLogTest, ARecycledFilesOldRecordsAreHeldBack) {
  std::string dir = walship::testing::FreshTempDir("rocks-recycled");
  LogBuilder old_log(true, 4);
  std::string old_data;
  for (int i = 0; i < 10; ++i) old_data += old_log.Add(std::string(900, 'o'));
  LogBuilder now(true, 9);  // log 4 renamed to 000009.log and overwritten
  std::string fresh = now.Add(std::string(300, 'n'));
  fresh += now.Add(std::string(1200, 'm'));
  ASSERT_LT(fresh.size(), old_data.size());
  std::string file = old_data;
  file.replace(0, fresh.size(), fresh);
  Write(dir + "/000009.log", file);
  ContentEnd end = Scan(dir + "/000009.log", "000009.log");
  // The next header in the old data is mid-record: it may fail its CRC
  // rather than show log 4; either way nothing past the new records.
  EXPECT_EQ(end.valid_end, fresh.size());
  EXPECT_NE(end.held, HeldBack::kNone);
  // Old records starting exactly where the new ones end: recycled.
  LogBuilder o2(true, 4);
  std::string a = o2.Add(std::string(100, 'o'));
  std::string b2 = o2.Add(std::string(100, 'p'));
  LogBuilder n2(true, 9);
  std::string c = n2.Add(std::string(100, 'q'));
  ASSERT_EQ(a.size(), c.size());
  Write(dir + "/000010.log", c + b2);
  end = Scan(dir + "/000010.log", "000010.log");
  EXPECT_EQ(end.valid_end, 0u);  // log 10's records name log 9
  Write(dir + "/000009.log", c + b2);
  end = Scan(dir + "/000009.log", "000009.log");
  EXPECT_EQ(end.valid_end, c.size());
  EXPECT_EQ(end.held, HeldBack::kRecycled) << end.detail;
}

TEST(RocksdbLogTest, ABadCrcEndsTheValidData) {
  std::string dir = walship::testing::FreshTempDir("rocks-crc");
  LogBuilder b;
  std::string head = b.Add("first");
  std::string rec = b.Add("second");
  rec[rec.size() - 1] ^= 1;
  Write(dir + "/000003.log", head + rec + b.Add("third"));
  ContentEnd end = Scan(dir + "/000003.log", "000003.log");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kBadChecksum) << end.detail;
}

TEST(RocksdbLogTest, ZerosAreHeldBackAsPreallocated) {
  std::string dir = walship::testing::FreshTempDir("rocks-zeros");
  LogBuilder b;
  std::string head = b.Add("first");
  Write(dir + "/000003.log", head + std::string(4096, '\0'));
  ContentEnd end = Scan(dir + "/000003.log", "000003.log");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kPreallocated) << end.detail;
}

TEST(RocksdbLogTest, ATrailerIsShippedWithTheRecordAfterIt) {
  std::string dir = walship::testing::FreshTempDir("rocks-trailer");
  LogBuilder b;
  // Fills the first block up to 3 bytes: the next record starts a new block.
  std::string first = b.Add(std::string(32768 - 7 - 3, 'f'));
  ASSERT_EQ(first.size(), 32765u);
  Write(dir + "/000003.log", first + std::string(3, '\0'));
  ContentEnd end = Scan(dir + "/000003.log", "000003.log");
  EXPECT_EQ(end.valid_end, first.size());
  std::string second = b.Add("second");
  ASSERT_EQ(second.size(), 3u + 7 + 6);  // the trailer, then the record
  Write(dir + "/000003.log", first + second);
  end = Scan(dir + "/000003.log", "000003.log", first.size());
  EXPECT_EQ(end.valid_end, first.size() + second.size());
  EXPECT_EQ(end.held, HeldBack::kNone) << end.detail;
}

TEST(RocksdbSourceTest, FollowsOnlyTheLogsOfADatabaseDirectory) {
  std::string dir = walship::testing::FreshTempDir("rocks-source");
  for (const char* other : {"CURRENT", "IDENTITY", "LOCK", "LOG", "LOG.old.1670000000",
                            "MANIFEST-000004", "OPTIONS-000007", "000006.sst"}) {
    Write(dir + "/" + other, "not a log");
  }
  LogBuilder b5;
  std::string five = b5.Add("batch one");
  Write(dir + "/000005.log", five);
  LogBuilder b8;
  std::string eight = b8.Add("batch two");
  Write(dir + "/000008.log", eight.substr(0, 10));  // being written
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.segment_pattern = kSegmentPattern;
  o.format_name = "rocksdb";
  o.scanner = [] { return std::make_unique<RocksdbRecordScanner>(); };
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_EQ((*s.segments)[0].name, "000005.log");
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_EQ((*s.segments)[0].shippable, five.size());
  EXPECT_EQ((*s.segments)[1].shippable, 0u);
  EXPECT_EQ(source.held_back().reason, HeldBack::kPartialRecord);

  Write(dir + "/000008.log", eight.substr(10), /*append=*/true);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (catalog.Get().segments->back().shippable != eight.size() && absl::Now() < deadline) {
    catalog.WaitForChange(catalog.Get().version, absl::Now() + absl::Milliseconds(100));
  }
  EXPECT_EQ(catalog.Get().segments->back().shippable, eight.size());
  EXPECT_EQ(source.held_back().reason, HeldBack::kNone);
}

TEST(RocksdbSourceTest, LogsMovedToTheArchiveStaySegments) {
  std::string dir = walship::testing::FreshTempDir("rocks-archive");
  ASSERT_EQ(mkdir((dir + "/archive").c_str(), 0755), 0);
  LogBuilder b4, b9, b12;
  std::string four = b4.Add("archived before the agent started");
  Write(dir + "/archive/000004.log", four);
  std::string nine = b9.Add("the open log");
  Write(dir + "/000009.log", nine);
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.segment_pattern = kSegmentPattern;
  o.format_name = "rocksdb";
  o.archive_subdir = "archive";
  o.scanner = [] { return std::make_unique<RocksdbRecordScanner>(); };
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_EQ((*s.segments)[0].name, "000004.log");
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_EQ((*s.segments)[0].shippable, four.size());
  EXPECT_EQ(source.Segments().Path(sys::DefaultSysCalls(), "000004.log"),
            dir + "/archive/000004.log");

  // The next log appears, then RocksDB moves the old one into the archive.
  std::string twelve = b12.Add("the next log");
  Write(dir + "/000012.log", twelve);
  ASSERT_EQ(rename((dir + "/000009.log").c_str(), (dir + "/archive/000009.log").c_str()), 0);
  // The new log may be listed before its records are scanned: wait for both.
  auto settled = [&] {
    CatalogSnapshot now = catalog.Get();
    return now.segments->size() == 3 && now.segments->back().shippable == twelve.size();
  };
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!settled() && absl::Now() < deadline) {
    catalog.WaitForChange(catalog.Get().version, absl::Now() + absl::Milliseconds(100));
  }
  s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 3u);
  EXPECT_EQ((*s.segments)[1].name, "000009.log");
  EXPECT_TRUE((*s.segments)[1].complete);
  EXPECT_EQ((*s.segments)[1].shippable, nine.size());
  EXPECT_EQ((*s.segments)[2].shippable, twelve.size());
  EXPECT_TRUE(s.source_status.ok()) << s.source_status;
  EXPECT_EQ(source.Segments().Path(sys::DefaultSysCalls(), "000012.log"),
            dir + "/000012.log");
}

}  // namespace
}  // namespace walship::agent::rocksdb
