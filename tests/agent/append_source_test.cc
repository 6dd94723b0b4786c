// AppendSource follows a directory with inotify and publishes what may be
// shipped; SegmentCatalog hands out snapshots and wakes waiters.
#include "agent/append_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "agent/segment_catalog.h"
#include "gtest/gtest.h"
#include "tests/fakes/log_capture.h"
#include "tests/fakes/catalog_wait.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

// Start()'s status for a fresh source over `dir` (the source is discarded).
absl::Status StartOver(const std::string& dir, const std::string& pattern = "") {
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.segment_pattern = pattern;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  return source.Start();
}

void Append(const std::string& path, size_t n, char c = 'x') {
  std::ofstream f(path, std::ios::binary | std::ios::app);
  f << std::string(n, c);
}

using ::walship::testing::WaitForCatalog;

TEST(AppendSourceTest, FollowsGrowthAndNewSegments) {
  std::string dir = testing::FreshTempDir("follow");
  Append(dir + "/seg-001", 100);
  Append(dir + "/.hidden", 10);
  Append(dir + "/seg-000.tmp", 10);  // not a segment name
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  EXPECT_EQ(source.FormatName(), "append");
  EXPECT_FALSE(source.StreamId().empty());

  CatalogSnapshot s = catalog.Get();  // populated synchronously by Start
  ASSERT_EQ(s.segments->size(), 1u);
  EXPECT_EQ((*s.segments)[0].name, "seg-001");
  EXPECT_EQ((*s.segments)[0].shippable, 100u);
  EXPECT_FALSE((*s.segments)[0].complete);

  Append(dir + "/seg-001", 50);
  s = WaitForCatalog(catalog, [](const CatalogSnapshot& c) {
    return !c.segments->empty() && (*c.segments)[0].shippable == 150;
  });
  EXPECT_EQ((*s.segments)[0].shippable, 150u);

  Append(dir + "/seg-002", 7);
  // (The file may be seen empty first, between its creation and the write.)
  s = WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return c.End().offset == 7; });
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_FALSE((*s.segments)[1].complete);
  EXPECT_EQ(s.End(), (Position{"seg-002", 7}));
  EXPECT_EQ(s.BytesAfter(Position{"seg-001", 100}), 57u);
  EXPECT_TRUE(s.source_status.ok());
  source.Stop();
}

TEST(AppendSourceTest, ShrinkingSegmentFailsTheSource) {
  std::string dir = testing::FreshTempDir("shrink");
  Append(dir + "/seg-001", 1000);
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  ASSERT_EQ(truncate((dir + "/seg-001").c_str(), 10), 0);
  CatalogSnapshot s =
      WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kDataLoss) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, CompleteSegmentThatGrowsFailsTheSource) {
  std::string dir = testing::FreshTempDir("regrow");
  Append(dir + "/seg-001", 10);
  Append(dir + "/seg-002", 10);
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.rescan_interval = absl::Milliseconds(50);
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  Append(dir + "/seg-001", 10);
  CatalogSnapshot s =
      WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kDataLoss) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, MissingDirectoryIsAClearError) {
  absl::Status s = StartOver("/nonexistent/walship-test-dir");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST(AppendSourceTest, StreamIdIsStableAndDistinct) {
  std::string a = testing::FreshTempDir("id-a"), b = testing::FreshTempDir("id-b");
  auto ia = DeriveStreamId(sys::DefaultSysCalls(), a, "append");
  auto ia2 = DeriveStreamId(sys::DefaultSysCalls(), a, "append");
  auto ib = DeriveStreamId(sys::DefaultSysCalls(), b, "append");
  ASSERT_TRUE(ia.ok() && ia2.ok() && ib.ok());
  EXPECT_EQ(*ia, *ia2);
  EXPECT_NE(*ia, *ib);
}

// gethostname answers what a test says.
class HostSysCalls : public sys::RealSysCalls {
 public:
  explicit HostSysCalls(std::string host) : host_(std::move(host)) {}
  sys::SysResult Gethostname(char* name, size_t len) override {
    if (host_.size() >= len) return {-1, ENAMETOOLONG};
    std::memcpy(name, host_.c_str(), host_.size() + 1);
    return {0, 0};
  }

 private:
  const std::string host_;
};

TEST(AppendSourceTest, StreamIdNamesTheHost) {
  // Two primaries with the same directory at the same path (restored from
  // one image, so even device and inode may match) serve distinct streams.
  const std::string dir = testing::FreshTempDir("id-host");
  HostSysCalls a("db-a"), a_again("db-a"), b("db-b");
  auto ia = DeriveStreamId(a, dir, "append");
  auto ia2 = DeriveStreamId(a_again, dir, "append");
  auto ib = DeriveStreamId(b, dir, "append");
  ASSERT_TRUE(ia.ok() && ia2.ok() && ib.ok());
  EXPECT_EQ(*ia, *ia2);
  EXPECT_NE(*ia, *ib);
}

TEST(AppendSourceTest, StreamIdFollowsLinksToTheRealDirectory) {
  const std::string dir = testing::FreshTempDir("id-real");
  const std::string link = dir + "-link";
  ASSERT_EQ(symlink(dir.c_str(), link.c_str()), 0) << link;
  auto by_dir = DeriveStreamId(sys::DefaultSysCalls(), dir, "append");
  auto by_link = DeriveStreamId(sys::DefaultSysCalls(), link, "append");
  ASSERT_TRUE(by_dir.ok() && by_link.ok());
  EXPECT_EQ(*by_dir, *by_link);
  auto missing = DeriveStreamId(sys::DefaultSysCalls(), dir + "/gone", "append");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "realpath " + dir + "/gone"))
      << missing.status();
}

// As etcd makes a WAL file: `size` bytes preallocated with fallocate, then
// `data` written in place at offset 0.
void Preallocate(const std::string& path, off_t size, const std::string& data) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(fallocate(fd, 0, 0, size), 0) << path;
  if (!data.empty()) {
    ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  }
  close(fd);
}

// Allocates `size` bytes without changing the size, then sets the size at
// once: a reader sees the old size or the new one, nothing between.
void PreallocateInOneStep(const std::string& path, off_t size) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, size), 0) << path;
  ASSERT_EQ(ftruncate(fd, size), 0) << path;
  close(fd);
}

// The catalog's entry for `name`, or null.
const SegmentInfo* Entry(const CatalogSnapshot& s, const std::string& name) {
  int i = s.Find(name);
  return i < 0 ? nullptr : &(*s.segments)[i];
}

TEST(AppendSourceTest, PreallocatedSegmentIsRefused) {
  std::string dir = testing::FreshTempDir("prealloc");
  Append(dir + "/seg-001", 100);
  Preallocate(dir + "/seg-002", 4 << 20, std::string(3000, 'r'));
  testing::LogCapture logs;
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  absl::Status s = source.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("seg-002"), std::string::npos) << s;
  EXPECT_NE(s.message().find("looks preallocated"), std::string::npos) << s;
  EXPECT_NE(s.message().find("data ends at offset 3000"), std::string::npos) << s;
  const SegmentInfo* e = Entry(catalog.Get(), "seg-002");
  EXPECT_TRUE(e == nullptr || e->shippable == 0) << e->shippable;
}

TEST(AppendSourceTest, SegmentPreallocatedAfterItsBeginningWasPublishedIsRefused) {
  std::string dir = testing::FreshTempDir("prealloc-late");
  Append(dir + "/seg-001", 100);
  testing::LogCapture logs;
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  // The writer appends, then extends the open segment by preallocation (to
  // go on writing in place). The size changes in one step: fallocate
  // without KEEP_SIZE may raise it chunk by chunk on ext4, and a scan that
  // sees it end on a block boundary reads an ordinary short run of zeros
  // there, indistinguishable from written data (such writers are not
  // supported; what this test pins is that the preallocated file is
  // refused and nothing past the written data is published).
  Append(dir + "/seg-001", 200, 'y');
  PreallocateInOneStep(dir + "/seg-001", 4 << 20);
  CatalogSnapshot s =
      WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kFailedPrecondition) << s.source_status;
  EXPECT_NE(s.source_status.message().find("seg-001"), std::string::npos);
  EXPECT_NE(s.source_status.message().find("data ends at offset 300"), std::string::npos)
      << s.source_status;
  // Publications only grow: the last one is the most ever published.
  ASSERT_NE(Entry(s, "seg-001"), nullptr);
  EXPECT_LE(Entry(s, "seg-001")->shippable, 300u);
  EXPECT_TRUE(logs.Logged("WAL source failed", "looks preallocated"));
  source.Stop();
}

TEST(AppendSourceTest, SparseSegmentIsRefused) {
  std::string dir = testing::FreshTempDir("sparse");
  Append(dir + "/seg-001", 5000);
  ASSERT_EQ(truncate((dir + "/seg-001").c_str(), 1 << 20), 0);
  absl::Status s = StartOver(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("data ends at offset 5000"), std::string::npos) << s;
}

TEST(AppendSourceTest, CompleteSegmentEndingInZerosIsRefused) {
  // Zeros written out (no holes): only the trailing run tells.
  std::string dir = testing::FreshTempDir("zeros");
  Append(dir + "/seg-001", 1000);
  Append(dir + "/seg-001", 256 << 10, '\0');
  Append(dir + "/seg-002", 10);
  absl::Status s = StartOver(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("data ends at offset 1000"), std::string::npos) << s;
}

TEST(AppendSourceTest, ShortRunsOfZerosAreData) {
  std::string dir = testing::FreshTempDir("few-zeros");
  Append(dir + "/seg-001", 1000);
  Append(dir + "/seg-001", 1000, '\0');
  Append(dir + "/seg-002", 10);
  Append(dir + "/seg-002", 1000, '\0');
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_EQ((*s.segments)[0].shippable, 2000u);
  EXPECT_EQ((*s.segments)[1].shippable, 1010u);
  source.Stop();
}

TEST(AppendSourceTest, SymlinksAreNotFollowed) {
  std::string dir = testing::FreshTempDir("symlink");
  std::string outside = testing::FreshTempDir("symlink-outside");
  Append(outside + "/hostname", 20);
  Append(dir + "/seg-001", 100);
  ASSERT_EQ(symlink((outside + "/hostname").c_str(), (dir + "/seg-002").c_str()), 0);
  testing::LogCapture logs;
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.rescan_interval = absl::Milliseconds(50);
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 1u);
  EXPECT_EQ((*s.segments)[0].name, "seg-001");
  EXPECT_FALSE((*s.segments)[0].complete);
  EXPECT_TRUE(logs.Logged("seg-002", "symbolic link"));
  // A link made later is skipped too; the real segment after it is followed.
  ASSERT_EQ(symlink((outside + "/hostname").c_str(), (dir + "/seg-003").c_str()), 0);
  Append(dir + "/seg-004", 7);
  s = WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return c.Find("seg-004") >= 0; });
  EXPECT_EQ(s.Find("seg-002"), -1);
  EXPECT_EQ(s.Find("seg-003"), -1);
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_TRUE(logs.Logged("seg-003", "symbolic link"));
  EXPECT_TRUE(s.source_status.ok()) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, NamesOfSeveralShapesAreRefusedWithoutAPattern) {
  std::string dir = testing::FreshTempDir("shapes");
  Append(dir + "/mysql-bin.000001", 100);
  Append(dir + "/mysql-bin.000002", 100);
  Append(dir + "/mysql-bin.index", 40);
  absl::Status s = StartOver(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("mysql-bin.NNNNNN (2 files"), std::string::npos) << s;
  EXPECT_NE(s.message().find("mysql-bin.index (1 file"), std::string::npos) << s;
  EXPECT_NE(s.message().find("segment pattern"), std::string::npos) << s;
}

TEST(AppendSourceTest, AFileOfAnotherShapeFailsTheSourceWithoutAPattern) {
  std::string dir = testing::FreshTempDir("new-shape");
  Append(dir + "/000004.log", 100);
  testing::LogCapture logs;
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  Append(dir + "/000005.log", 10);
  WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return c.segments->size() == 2; });
  Append(dir + "/LOG", 10);  // RocksDB's info log
  CatalogSnapshot s =
      WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kFailedPrecondition) << s.source_status;
  EXPECT_NE(s.source_status.message().find("LOG (1 file"), std::string::npos)
      << s.source_status;
  EXPECT_NE(s.source_status.message().find("NNNNNN.log (2 files"), std::string::npos)
      << s.source_status;
  EXPECT_EQ(s.Find("LOG"), -1);
  EXPECT_TRUE(logs.Logged("WAL source failed", "LOG"));
  source.Stop();
}

// Counts the source's looks for holes.
class CountingSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult Lseek(int fd, off_t off, int whence) override {
    if (whence == SEEK_HOLE) hole_seeks_++;
    return sys::RealSysCalls::Lseek(fd, off, whence);
  }
  int hole_seeks() const { return hole_seeks_.load(); }

 private:
  std::atomic<int> hole_seeks_{0};
};

// 1000 bytes of data, then 100 KiB of zeros: the end of a preallocated file,
// or a writer in the middle of a record whose last bytes are zeros.
std::string DataThenZeros() { return std::string(1000, 'd') + std::string(100 << 10, '\0'); }

TEST(AppendSourceTest, OpenSegmentEndingInZerosIsHeldUntilDataFollows) {
  std::string dir = testing::FreshTempDir("zero-tail");
  Append(dir + "/seg-001", 500);
  testing::WriteFile(dir + "/seg-002", DataThenZeros());
  CountingSysCalls sys;
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.rescan_interval = absl::Milliseconds(20);
  o.zero_tail_grace = absl::Hours(1);  // held, not refused, while the test looks
  AppendSource source(sys, o, catalog);
  ASSERT_TRUE(source.Start().ok());
  const int looks = sys.hole_seeks();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (sys.hole_seeks() < looks + 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(sys.hole_seeks(), looks + 3) << "the source did not look at the zeros again";
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 1u);  // seg-002 held back; seg-001 complete
  EXPECT_TRUE((*s.segments)[0].complete);
  EXPECT_TRUE(s.source_status.ok()) << s.source_status;
  // The record ends: the zeros were data after all.
  Append(dir + "/seg-002", 10);
  s = WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return c.Find("seg-002") >= 0; });
  ASSERT_GE(s.Find("seg-002"), 0);
  EXPECT_EQ(Entry(s, "seg-002")->shippable, DataThenZeros().size() + 10);
  EXPECT_TRUE(s.source_status.ok()) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, OpenSegmentStillEndingInZerosAfterTheGraceIsRefused) {
  std::string dir = testing::FreshTempDir("zero-tail-refused");
  testing::WriteFile(dir + "/seg-001", DataThenZeros());
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.rescan_interval = absl::Milliseconds(20);
  o.zero_tail_grace = absl::ZeroDuration();  // refused at the second look
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());  // the first look holds it back
  CatalogSnapshot s =
      WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kFailedPrecondition) << s.source_status;
  EXPECT_NE(s.source_status.message().find("data ends at offset 1000"), std::string::npos)
      << s.source_status;
  EXPECT_EQ(s.Find("seg-001"), -1);
  source.Stop();
}

TEST(AppendSourceTest, ZerosAtTheEndOfTheOpenSegmentAreRefusedWhenItCompletes) {
  std::string dir = testing::FreshTempDir("zero-tail-complete");
  testing::WriteFile(dir + "/seg-001", DataThenZeros());
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.zero_tail_grace = absl::Hours(1);
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  Append(dir + "/seg-002", 10);
  CatalogSnapshot s =
      WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return !c.source_status.ok(); });
  EXPECT_EQ(s.source_status.code(), absl::StatusCode::kFailedPrecondition) << s.source_status;
  EXPECT_NE(s.source_status.message().find("seg-001"), std::string::npos) << s.source_status;
  EXPECT_EQ(s.Find("seg-001"), -1);
  source.Stop();
}

TEST(NameShapeTest, EachDigitBecomesN) {
  EXPECT_EQ(NameShape("mysql-bin.000001"), "mysql-bin.NNNNNN");
  EXPECT_EQ(NameShape("mysql-bin.index"), "mysql-bin.index");
  EXPECT_EQ(NameShape("000005.log"), "NNNNNN.log");
  EXPECT_EQ(NameShape("LOG"), "LOG");
  EXPECT_EQ(NameShape("MANIFEST-000004"), "MANIFEST-NNNNNN");
  EXPECT_EQ(NameShape("0000000000000001-0000000000000000.wal"),
            "NNNNNNNNNNNNNNNN-NNNNNNNNNNNNNNNN.wal");
  // Numbers of another width do not sort in WAL order ("seg-10" before
  // "seg-9"): a replica positioned on seg-9 would never see seg-10.
  EXPECT_NE(NameShape("seg-9"), NameShape("seg-10"));
}

TEST(SegmentPatternTest, SuccessorIncrementsGroupOneAtTheSameWidth) {
  auto p = SegmentPattern::Compile(R"(mysql-bin\.([0-9]{6}))");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->has_sequence());
  EXPECT_EQ(p->Successor("mysql-bin.000001"), "mysql-bin.000002");
  EXPECT_EQ(p->Successor("mysql-bin.000009"), "mysql-bin.000010");
  EXPECT_EQ(p->Successor("mysql-bin.099999"), "mysql-bin.100000");
  EXPECT_EQ(p->Successor("mysql-bin.999999"), std::nullopt);  // overflows the width
  EXPECT_EQ(p->Successor("mysql-bin.index"), std::nullopt);   // not a segment
  auto wal = SegmentPattern::Compile(R"(([0-9]{16})-[0-9]{16}\.wal)");
  ASSERT_TRUE(wal.ok());
  EXPECT_EQ(wal->Successor("0000000000000009-0000000000000123.wal"),
            "0000000000000010-0000000000000123.wal");
  // Group 1 is the sequence number even when other digits follow it.
  auto rocks = SegmentPattern::Compile(R"(([0-9]+)\.log)");
  ASSERT_TRUE(rocks.ok());
  EXPECT_EQ(rocks->Successor("000129.log"), "000130.log");
}

TEST(SegmentPatternTest, NoSuccessorWithoutADecimalGroup) {
  auto p = SegmentPattern::Compile(R"(mysql-bin\.[0-9]{6})");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_sequence());
  EXPECT_TRUE(p->Matches("mysql-bin.000001"));
  EXPECT_FALSE(p->Matches("mysql-bin.000001.tmp"));  // a full match only
  EXPECT_FALSE(p->Matches("x-mysql-bin.000001"));
  EXPECT_EQ(p->Successor("mysql-bin.000001"), std::nullopt);
  auto hex = SegmentPattern::Compile(R"(seg-([0-9a-f]{4}))");
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(hex->Successor("seg-00a1"), std::nullopt);  // not decimal
  EXPECT_EQ(hex->Successor("seg-0001"), "seg-0002");
  // The successor must be a name the pattern matches.
  auto minutes = SegmentPattern::Compile(R"(log-([0-5][0-9]))");
  ASSERT_TRUE(minutes.ok());
  EXPECT_EQ(minutes->Successor("log-58"), "log-59");
  EXPECT_EQ(minutes->Successor("log-59"), std::nullopt);
}

TEST(SegmentPatternTest, BadPatternIsInvalidArgument) {
  auto p = SegmentPattern::Compile("mysql-bin\\.[0-9{6}");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  EXPECT_NE(p.status().message().find("mysql-bin"), std::string::npos) << p.status();
  EXPECT_EQ(SegmentPattern::Compile("").status().code(), absl::StatusCode::kInvalidArgument);

  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = testing::FreshTempDir("bad-pattern");
  o.segment_pattern = "(unclosed";
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  EXPECT_EQ(source.Start().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source.Successor("anything"), std::nullopt);
}

TEST(AppendSourceTest, APatternSelectsTheSegments) {
  std::string dir = testing::FreshTempDir("pattern");
  Append(dir + "/mysql-bin.000001", 100);
  Append(dir + "/mysql-bin.000002", 50);
  Append(dir + "/mysql-bin.index", 40);
  testing::LogCapture logs;
  SegmentCatalog catalog;
  AppendSourceOptions o;
  o.wal_dir = dir;
  o.segment_pattern = R"(mysql-bin\.([0-9]{6}))";
  AppendSource source(sys::DefaultSysCalls(), o, catalog);
  ASSERT_TRUE(source.Start().ok());
  EXPECT_TRUE(logs.Logged("segment pattern", "mysql-bin.index (1)"));
  EXPECT_EQ(source.Successor("mysql-bin.000002"), "mysql-bin.000003");
  CatalogSnapshot s = catalog.Get();
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_EQ((*s.segments)[1].name, "mysql-bin.000002");
  EXPECT_FALSE((*s.segments)[1].complete);
  Append(dir + "/mysql-bin.state", 10);  // written at shutdown: not a segment
  Append(dir + "/mysql-bin.000002", 5);
  s = WaitForCatalog(catalog, [](const CatalogSnapshot& c) { return c.End().offset == 55; });
  ASSERT_EQ(s.segments->size(), 2u);
  EXPECT_FALSE((*s.segments)[1].complete);
  EXPECT_TRUE(s.source_status.ok()) << s.source_status;
  source.Stop();
}

TEST(AppendSourceTest, AMatchingNameThatCannotBeShippedFailsTheSource) {
  std::string dir = testing::FreshTempDir("pattern-unshippable");
  Append(dir + "/wal-1", 10);
  Append(dir + "/wal-2.tmp", 10);
  absl::Status s = StartOver(dir, R"(wal-[0-9]+.*)");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("wal-2.tmp"), std::string::npos) << s;
}

TEST(SegmentCatalogTest, WaitWakesOnPublishAndShutdown) {
  SegmentCatalog catalog;
  uint64_t v = catalog.Get().version;
  absl::Time start = absl::Now();
  EXPECT_TRUE(catalog.WaitForChange(v, absl::Now() + absl::Milliseconds(20)));
  catalog.Publish({SegmentInfo{"a", 1, false}});
  EXPECT_TRUE(catalog.WaitForChange(v, absl::Now() + absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  catalog.Shutdown();
  EXPECT_FALSE(catalog.WaitForChange(catalog.Get().version, absl::Now() + absl::Seconds(10)));
}

TEST(SegmentCatalogTest, ShippableSinceIsTheAgeOfTheOldestMissingByte) {
  SegmentCatalog catalog;
  EXPECT_FALSE(catalog.ShippableSince(Position{}).has_value());
  catalog.Publish({SegmentInfo{"a", 100, false}});
  absl::Time t1 = catalog.Get().published;
  absl::SleepFor(absl::Milliseconds(5));
  catalog.Publish({SegmentInfo{"a", 200, false}});
  absl::Time t2 = catalog.Get().published;
  ASSERT_LT(t1, t2);
  EXPECT_EQ(catalog.ShippableSince(Position{}), t1);
  EXPECT_EQ(catalog.ShippableSince(Position{"a", 99}), t1);
  EXPECT_EQ(catalog.ShippableSince(Position{"a", 100}), t2);  // byte 100 came later
  EXPECT_FALSE(catalog.ShippableSince(Position{"a", 200}).has_value());  // caught up
}

}  // namespace
}  // namespace walship::agent
