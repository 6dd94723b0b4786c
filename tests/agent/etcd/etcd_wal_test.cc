// The etcd record scanner against WAL files written by the test builder
// (framing of agent/etcd/etcd_wal.h), alone and under the append source.
#include "agent/etcd/etcd_wal.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "agent/append_source.h"
#include "agent/segment_catalog.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/agent/etcd/etcd_wal_builder.h"
#include "tests/fakes/catalog_wait.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent::etcd {
namespace {

using testing::Frame;
using testing::WalBuilder;

void WriteAt(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  if (!f.is_open()) {
    std::ofstream create(path, std::ios::binary);
    create.close();
    f.open(path, std::ios::binary | std::ios::in | std::ios::out);
  }
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file of `size` bytes (zeros past `bytes`), as etcd preallocates it.
void Preallocated(const std::string& path, const std::string& bytes, uint64_t size) {
  WriteAt(path, 0, bytes);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(size)), 0);
}

ContentEnd Scan(EtcdRecordScanner& s, const std::string& path, uint64_t from = 0) {
  auto fd = sys::UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  SegmentBytes bytes(sys::DefaultSysCalls(), fd.get(), static_cast<uint64_t>(size), 64);
  auto end = s.ScanEnd("f.wal", bytes, from);
  EXPECT_TRUE(end.ok()) << end.status();
  return end.ok() ? *end : ContentEnd{};
}

TEST(EtcdWalTest, FramesArePaddedToEightBytes) {
  for (size_t n : {0, 1, 5, 8, 13, 300}) {
    EXPECT_EQ(Frame(2, 7, std::string(n, 'x')).size() % 8, 0u) << n;
  }
  std::string f = Frame(2, 0x12345678, "hello");
  // type 1 byte+1, crc 1+5, data 1+1+5: 15 bytes, padded by 1.
  EXPECT_EQ(static_cast<uint8_t>(f[7]), 0x81);
  auto rec = DecodeRecord(f.substr(8, 15));
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->type, 2);
  EXPECT_EQ(rec->crc, 0x12345678u);
  EXPECT_EQ(rec->data, "hello");
  EXPECT_FALSE(DecodeRecord(f.substr(8, 12)).has_value());  // data cut short
}

TEST(EtcdWalTest, ValidEndStopsAtThePreallocatedZeros) {
  std::string dir = walship::testing::FreshTempDir("etcd-zeros");
  WalBuilder b;
  std::string data = b.StartFile();
  data += b.Add(1, "meta");
  data += b.Add(2, std::string(100, 'e'));
  Preallocated(dir + "/f.wal", data, 1 << 20);
  EtcdRecordScanner s;
  ContentEnd end = Scan(s, dir + "/f.wal");
  EXPECT_EQ(end.valid_end, data.size());
  EXPECT_EQ(end.held, HeldBack::kPreallocated);

  // More records written in place; the scan resumes where it stopped.
  std::string more = b.Add(2, "entry-2");
  more += b.Add(3, "state");
  WriteAt(dir + "/f.wal", data.size(), more);
  end = Scan(s, dir + "/f.wal", data.size());
  EXPECT_EQ(end.valid_end, data.size() + more.size());
  EXPECT_EQ(end.held, HeldBack::kPreallocated);
}

TEST(EtcdWalTest, AFileEndingAtItsLastRecordHoldsNothingBack) {
  std::string dir = walship::testing::FreshTempDir("etcd-exact");
  WalBuilder b(0xabcdef01);  // a later file: the chain starts from its crc record
  std::string data = b.StartFile();
  data += b.Add(1, "meta");
  data += b.Add(2, "e");
  WriteAt(dir + "/f.wal", 0, data);
  EtcdRecordScanner s;
  ContentEnd end = Scan(s, dir + "/f.wal");
  EXPECT_EQ(end.valid_end, data.size());
  EXPECT_EQ(end.held, HeldBack::kNone) << end.detail;
}

TEST(EtcdWalTest, ARecordStillBeingWrittenIsAPartialRecord) {
  std::string dir = walship::testing::FreshTempDir("etcd-partial");
  WalBuilder b;
  std::string head = b.StartFile();
  head += b.Add(1, "meta");
  std::string big = b.Add(2, std::string(2000, 'v'));
  // Its length word and first 600 bytes are written, the rest still zeros.
  Preallocated(dir + "/f.wal", head + big.substr(0, 608), 1 << 16);
  EtcdRecordScanner s;
  ContentEnd end = Scan(s, dir + "/f.wal");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kPartialRecord) << end.detail;
  // A file cut inside a record (no preallocation): partial too.
  WriteAt(dir + "/g.wal", 0, head + big.substr(0, 100));
  EtcdRecordScanner s2;
  end = Scan(s2, dir + "/g.wal");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kPartialRecord) << end.detail;
}

TEST(EtcdWalTest, ARecordFailingTheChainIsABadChecksum) {
  std::string dir = walship::testing::FreshTempDir("etcd-crc");
  WalBuilder b;
  std::string head = b.StartFile();
  head += b.Add(1, "meta");
  std::string rec = b.Add(2, "payload");
  rec[rec.find("payload")] ^= 1;  // a data byte
  std::string after = b.Add(2, "later");
  WriteAt(dir + "/f.wal", 0, head + rec + after);
  EtcdRecordScanner s;
  ContentEnd end = Scan(s, dir + "/f.wal");
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kBadChecksum) << end.detail;
}

TEST(EtcdWalTest, AResumedScanChecksTheChainFromWhereItStopped) {
  std::string dir = walship::testing::FreshTempDir("etcd-resume");
  WalBuilder b;
  std::string head = b.StartFile();
  head += b.Add(1, "meta");
  WalBuilder other(0x1111);  // records of another chain
  Preallocated(dir + "/f.wal", head, 4096);
  EtcdRecordScanner s;
  ASSERT_EQ(Scan(s, dir + "/f.wal").valid_end, head.size());
  WriteAt(dir + "/f.wal", head.size(), other.Add(2, "x"));
  ContentEnd end = Scan(s, dir + "/f.wal", head.size());
  EXPECT_EQ(end.valid_end, head.size());
  EXPECT_EQ(end.held, HeldBack::kBadChecksum);
  // After Forget, a scan from `from` re-reads the file from its start.
  s.Forget("f.wal");
  WriteAt(dir + "/f.wal", head.size(), b.Add(2, "x"));
  end = Scan(s, dir + "/f.wal", head.size());
  EXPECT_GT(end.valid_end, head.size());
}

TEST(EtcdWalTest, ANewFileMustContinueThePreviousFilesChain) {
  std::string dir = walship::testing::FreshTempDir("etcd-link");
  WalBuilder b;
  std::string one = b.StartFile();
  one += b.Add(1, "meta");
  WriteAt(dir + "/a.wal", 0, one);
  EtcdRecordScanner s;
  auto scan = [&](const std::string& name) {
    auto fd = sys::UniqueFd(open((dir + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
    const off_t size = lseek(fd.get(), 0, SEEK_END);
    SegmentBytes bytes(sys::DefaultSysCalls(), fd.get(), static_cast<uint64_t>(size));
    auto end = s.ScanEnd(name, bytes, 0);
    EXPECT_TRUE(end.ok()) << end.status();
    return end.ok() ? *end : ContentEnd{};
  };
  ASSERT_EQ(scan("a.wal").valid_end, one.size());
  s.Forget("a.wal");  // complete
  WalBuilder right(b.crc());
  std::string two = right.StartFile();
  two += right.Add(2, "e");
  WriteAt(dir + "/b.wal", 0, two);
  EXPECT_EQ(scan("b.wal").valid_end, two.size());
  WalBuilder wrong(b.crc() ^ 1);
  std::string other = wrong.StartFile();
  other += wrong.Add(2, "e");
  WriteAt(dir + "/c.wal", 0, other);
  ContentEnd end = scan("c.wal");
  EXPECT_EQ(end.valid_end, 0u);
  EXPECT_EQ(end.held, HeldBack::kBadChecksum) << end.detail;
}

using ::walship::testing::WaitForCatalog;

AppendSourceOptions EtcdOptions(const std::string& dir) {
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.segment_pattern = kSegmentPattern;
  o.format_name = "etcd";
  o.scanner = [] { return std::make_unique<EtcdRecordScanner>(); };
  return o;
}

TEST(EtcdSourceTest, PreallocatedFilesAreShippedToTheirValidEnd) {
  std::string dir = walship::testing::FreshTempDir("etcd-source");
  const std::string first = dir + "/0000000000000000-0000000000000000.wal";
  WalBuilder b;
  std::string data = b.StartFile();
  data += b.Add(1, "meta");
  data += b.Add(5, "snap");
  Preallocated(first, data, 1 << 20);
  Preallocated(dir + "/0.tmp", "", 1 << 20);  // the next file, being prepared
  SegmentCatalog catalog;
  AppendSource source(sys::DefaultSysCalls(), EtcdOptions(dir), catalog);
  ASSERT_TRUE(source.Start().ok());
  EXPECT_EQ(source.FormatName(), "etcd");
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 1u);
  EXPECT_EQ((*s.segments)[0].shippable, data.size());
  EXPECT_FALSE((*s.segments)[0].complete);
  EXPECT_EQ(source.held_back().reason, HeldBack::kPreallocated);
  EXPECT_EQ(source.held_back().file_size, 1u << 20);

  // Records written in place (the size does not change).
  std::string more = b.Add(2, std::string(3000, 'e'));
  WriteAt(first, data.size(), more);
  data += more;
  s = WaitForCatalog(catalog, [&](const CatalogSnapshot& c) {
    return (*c.segments)[0].shippable == data.size();
  });
  EXPECT_EQ((*s.segments)[0].shippable, data.size());

  // A cut: the file is truncated at its last record, the next one appears.
  std::string tail = b.Add(2, "last entry");
  WriteAt(first, data.size(), tail);
  data += tail;
  ASSERT_EQ(truncate(first.c_str(), static_cast<off_t>(data.size())), 0);
  WalBuilder next(b.crc());
  std::string second = next.StartFile();
  second += next.Add(1, "meta");
  Preallocated(dir + "/0000000000000001-0000000000000005.wal", second, 1 << 20);
  s = WaitForCatalog(catalog, [&](const CatalogSnapshot& c) {
    return c.segments->size() == 2 && (*c.segments)[1].shippable == second.size();
  });
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_EQ((*s.segments)[0].shippable, data.size());
  EXPECT_EQ((*s.segments)[1].shippable, second.size());
  EXPECT_TRUE(s.source_status.ok()) << s.source_status;
}

TEST(EtcdSourceTest, ACompleteFileIsShippedToItsValidEndNotItsSize) {
  std::string dir = walship::testing::FreshTempDir("etcd-complete");
  WalBuilder b;
  std::string data = b.StartFile();
  data += b.Add(1, "meta");
  // Not truncated at its cut (an older etcd, or a crash): zeros follow.
  Preallocated(dir + "/0000000000000000-0000000000000000.wal", data, 1 << 20);
  WalBuilder next(b.crc());
  std::string second = next.StartFile();
  Preallocated(dir + "/0000000000000001-0000000000000001.wal", second, 1 << 20);
  SegmentCatalog catalog;
  AppendSource source(sys::DefaultSysCalls(), EtcdOptions(dir), catalog);
  ASSERT_TRUE(source.Start().ok());
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_EQ((*s.segments)[0].shippable, data.size());
}

TEST(EtcdSourceTest, ACompleteFileThatChangesSizeFailsTheSource) {
  std::string dir = walship::testing::FreshTempDir("etcd-changed");
  const std::string first = dir + "/0000000000000000-0000000000000000.wal";
  WalBuilder b;
  std::string data = b.StartFile();
  data += b.Add(1, "meta");
  WriteAt(first, 0, data);
  WalBuilder next(b.crc());
  Preallocated(dir + "/0000000000000001-0000000000000001.wal", next.StartFile(), 1 << 20);
  SegmentCatalog catalog;
  AppendSource source(sys::DefaultSysCalls(), EtcdOptions(dir), catalog);
  ASSERT_TRUE(source.Start().ok());
  ASSERT_TRUE((*catalog.Get().segments)[0].complete);
  WriteAt(first, data.size(), b.Add(2, "written after the next file appeared"));
  CatalogSnapshot s = WaitForCatalog(catalog, [](const CatalogSnapshot& c) {
    return !c.source_status.ok();
  });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kDataLoss) << s.source_status;
}

TEST(EtcdSourceTest, TheAppendFormatRefusesAnEtcdDirectory) {
  // Today's rule for the generic format, unchanged: zeros are refused.
  std::string dir = walship::testing::FreshTempDir("etcd-append");
  WalBuilder b;
  Preallocated(dir + "/0000000000000000-0000000000000000.wal", b.StartFile(), 1 << 20);
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  EXPECT_EQ(source.Start().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace walship::agent::etcd
