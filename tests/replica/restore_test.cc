// The restore_command helper serves only verified, durable WAL.
#include "replica/restore.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "replica/state_store.h"

namespace walship::replica {
namespace {

using testing::ReadFile;

void Sum(const std::string& dir, const std::string& name, const std::string& bytes) {
  char line[128];
  std::snprintf(line, sizeof(line), "%s %zu %08x\n", name.c_str(), bytes.size(),
                wire::Crc32c(bytes.data(), bytes.size()));
  std::ofstream(dir + "/walship.sums", std::ios::app) << line;
}

// A PostgreSQL 15 long page header for the first page of a 1 MiB segment.
std::string FirstPage(uint64_t pageaddr) {
  std::string p(8192, '\0');
  auto put = [&](size_t off, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[off + i] = static_cast<char>(v >> (8 * i));
  };
  put(0, 0xD110, 2);        // xlp_magic
  put(2, 0x0002, 2);        // xlp_info: XLP_LONG_HEADER
  put(4, 1, 4);             // xlp_tli
  put(8, pageaddr, 8);      // xlp_pageaddr
  put(16, 0, 4);            // xlp_rem_len
  put(24, 7151234567890ull, 8);  // xlp_sysid
  put(32, 1u << 20, 4);     // xlp_seg_size
  put(36, 8192, 4);         // xlp_xlog_blcksz
  for (size_t i = 40; i < p.size(); ++i) p[i] = static_cast<char>(i * 7);
  return p;
}

class RestoreTest : public ::testing::Test {
 protected:
  int Run(const std::string& name) {
    why_.clear();
    return Restore(sys::DefaultSysCalls(), dir_, name, target_, &why_);
  }
  void SetUp() override {
    dir_ = testing::FreshTempDir("dest");
    target_ = testing::FreshTempDir("pgwal") + "/RECOVERYXLOG";
  }
  std::string dir_, target_, why_;
};

TEST_F(RestoreTest, ServesVerifiedCompleteSegmentsAndHistoryFiles) {
  std::string seg = std::string(1 << 20, 'w');
  testing::WriteFile(dir_ + "/000000010000000000000003", seg);
  Sum(dir_, "000000010000000000000003", seg);
  EXPECT_EQ(Run("000000010000000000000003"), kRestoreServed) << why_;
  EXPECT_TRUE(ReadFile(target_) == seg);

  std::string history = "1\t0/3000060\tno recovery target specified\n";
  testing::WriteFile(dir_ + "/00000002.history", history);
  Sum(dir_, "00000002.history", history);
  EXPECT_EQ(Run("00000002.history"), kRestoreServed) << why_;
  EXPECT_EQ(ReadFile(target_), history);
}

TEST_F(RestoreTest, RefusesCorruptOrUnrecordedSegments) {
  std::string seg = std::string(4096, 'w');
  testing::WriteFile(dir_ + "/000000010000000000000003", seg);
  Sum(dir_, "000000010000000000000003", seg);
  seg[100] = 'X';
  testing::WriteFile(dir_ + "/000000010000000000000003", seg);
  EXPECT_EQ(Run("000000010000000000000003"), kRestoreRefused);
  EXPECT_NE(why_.find("CRC32C"), std::string::npos) << why_;
  EXPECT_NE(access(target_.c_str(), F_OK), 0);  // nothing handed to PostgreSQL

  testing::WriteFile(dir_ + "/000000010000000000000004", seg);  // no sums line
  EXPECT_EQ(Run("000000010000000000000004"), kRestoreRefused);
  testing::WriteFile(dir_ + "/000000010000000000000005", "short");
  Sum(dir_, "000000010000000000000005", "shorter!");
  EXPECT_EQ(Run("000000010000000000000005"), kRestoreRefused);
}

// The segment being received: its verified bytes, then the rest of the file
// unverified (PostgreSQL checks each record), zero-padded to the segment.
TEST_F(RestoreTest, ServesThePartialSegmentVerifiedThenItsTailPadded) {
  const std::string name = "000000010000000000000007";
  std::string page = FirstPage(7ull << 20);
  std::string on_disk = page + std::string(5000, 'u');  // written, partly durable
  testing::WriteFile(dir_ + "/" + name + ".partial", on_disk);
  const uint64_t durable = 8192 + 1000;
  StateStore store(sys::DefaultSysCalls(), dir_);
  ReplicaState st{"pg-1", Position{name, durable}, false,
                  wire::Crc32c(on_disk.data(), durable)};
  ASSERT_TRUE(store.Save(st).ok());
  EXPECT_EQ(Run(name), kRestoreServed) << why_;
  EXPECT_NE(why_.find("9192 verified bytes"), std::string::npos) << why_;
  EXPECT_NE(why_.find("4000 more past them unverified"), std::string::npos) << why_;
  std::string served = ReadFile(target_);
  ASSERT_EQ(served.size(), 1u << 20);
  EXPECT_TRUE(served.substr(0, on_disk.size()) == on_disk);
  EXPECT_EQ(served.find_first_not_of('\0', on_disk.size()), std::string::npos);

  // Durable bytes changed on disk: refused.
  on_disk[9000] = 'Z';
  testing::WriteFile(dir_ + "/" + name + ".partial", on_disk);
  EXPECT_EQ(Run(name), kRestoreRefused);
}

// A pre-sized NAME.partial (zero-filled to its segment size before the
// first byte arrived) is served the same: verified bytes, the rest of its
// data unverified, then the zeros as padding, not as data.
TEST_F(RestoreTest, ServesAPresizedPartialLikeAGrownOne) {
  const std::string name = "000000010000000000000007";
  const std::string data = FirstPage(7ull << 20) + std::string(5000, 'u');
  std::string on_disk = data;
  on_disk.resize(1 << 20, '\0');
  testing::WriteFile(dir_ + "/" + name + ".partial", on_disk);
  const uint64_t durable = 8192 + 1000;
  StateStore store(sys::DefaultSysCalls(), dir_);
  ASSERT_TRUE(store.Save(ReplicaState{"pg-1", Position{name, durable}, false,
                                      wire::Crc32c(on_disk.data(), durable)})
                  .ok());
  EXPECT_EQ(Run(name), kRestoreServed) << why_;
  EXPECT_NE(why_.find("9192 verified bytes"), std::string::npos) << why_;
  EXPECT_NE(why_.find("4000 more past them unverified"), std::string::npos) << why_;
  EXPECT_NE(why_.find(absl::StrCat("zero-padded by ", (1 << 20) - data.size())),
            std::string::npos) << why_;
  EXPECT_TRUE(ReadFile(target_) == on_disk);
  RestorePlan plan;
  std::string why;
  ASSERT_EQ(PlanRestore(sys::DefaultSysCalls(), dir_, name, &plan, &why), kRestoreServed);
  EXPECT_EQ(plan.size, data.size());
  EXPECT_EQ(plan.pad, (1u << 20) - data.size());

  // Nothing past the record: only the verified bytes, then padding.
  testing::WriteFile(dir_ + "/" + name + ".partial",
                     on_disk.substr(0, durable) + std::string((1 << 20) - durable, '\0'));
  ASSERT_EQ(PlanRestore(sys::DefaultSysCalls(), dir_, name, &plan, &why), kRestoreServed);
  EXPECT_EQ(plan.size, durable);
  EXPECT_EQ(plan.pad, (1u << 20) - durable);

  // Durable bytes changed on disk: refused, as for a grown file.
  on_disk[9000] = 'Z';
  testing::WriteFile(dir_ + "/" + name + ".partial", on_disk);
  EXPECT_EQ(Run(name), kRestoreRefused);
}

// Acknowledged bytes past the lazily saved record are served as far as
// walship.progress names them and the file still backs the claim.
TEST_F(RestoreTest, ServesAcknowledgedBytesPastTheRecordThatProgressVouchesFor) {
  const std::string name = "000000010000000000000007";
  std::string on_disk = FirstPage(7ull << 20) + std::string(5000, 'u');
  testing::WriteFile(dir_ + "/" + name + ".partial", on_disk);
  const uint64_t recorded = 8192 + 1000, acked = 8192 + 3000;
  StateStore store(sys::DefaultSysCalls(), dir_);
  ASSERT_TRUE(store.Save(ReplicaState{"pg-1", Position{name, recorded}, false,
                                      wire::Crc32c(on_disk.data(), recorded)})
                  .ok());
  ProgressFile progress(sys::DefaultSysCalls(), dir_);
  ASSERT_TRUE(progress.Write(ReplicaState{"pg-1", Position{name, acked}, false,
                                          wire::Crc32c(on_disk.data(), acked)})
                  .ok());
  EXPECT_EQ(Run(name), kRestoreServed) << why_;
  EXPECT_NE(why_.find("11192 verified bytes"), std::string::npos) << why_;
  std::string served = ReadFile(target_);
  ASSERT_EQ(served.size(), 1u << 20);
  EXPECT_TRUE(served.substr(0, on_disk.size()) == on_disk);
  EXPECT_EQ(served.find_first_not_of('\0', on_disk.size()), std::string::npos);

  // The bytes past the record changed (the claim outlived them): only the
  // recorded ones count as verified; the rest is served as the tail.
  on_disk[8192 + 2000] = 'Z';
  testing::WriteFile(dir_ + "/" + name + ".partial", on_disk);
  EXPECT_EQ(Run(name), kRestoreServed) << why_;
  EXPECT_NE(why_.find("9192 verified bytes"), std::string::npos) << why_;
  served = ReadFile(target_);
  EXPECT_TRUE(served.substr(0, on_disk.size()) == on_disk);
}

// A crash after the position record moved past a segment but before its
// rename reached the disk leaves it as NAME.partial until the replica's
// next start; it is served meanwhile if it matches its checksum line.
TEST_F(RestoreTest, ServesASegmentTheRecordIsPastUnderItsPartialName) {
  const std::string name = "000000010000000000000003";
  const std::string next = "000000010000000000000004";
  std::string seg(1 << 20, 'v');
  testing::WriteFile(dir_ + "/" + name + ".partial", seg);
  Sum(dir_, name, seg);
  StateStore store(sys::DefaultSysCalls(), dir_);
  ASSERT_TRUE(store.Save(ReplicaState{"pg-1", Position{next, 0}, false, 0}).ok());
  EXPECT_EQ(Run(name), kRestoreServed) << why_;
  EXPECT_TRUE(ReadFile(target_) == seg);
  // Not matching its line: refused.
  seg[7] = 'X';
  testing::WriteFile(dir_ + "/" + name + ".partial", seg);
  EXPECT_EQ(Run(name), kRestoreRefused) << why_;
  // The record not past it: only its durable bytes would count (none here).
  ASSERT_TRUE(store.Save(ReplicaState{"pg-1", Position{"000000010000000000000002", 10}, false,
                                      0}).ok());
  EXPECT_EQ(Run(name), kRestoreNotFound) << why_;
}

TEST_F(RestoreTest, UnknownAndHostileNamesAreNotFound) {
  EXPECT_EQ(Run("000000010000000000000009"), kRestoreNotFound);
  EXPECT_EQ(Run("../etc/passwd"), kRestoreNotFound);
  EXPECT_EQ(Run("/etc/passwd"), kRestoreNotFound);
  EXPECT_EQ(Run("walship.state"), kRestoreNotFound);
  EXPECT_EQ(Run("000000010000000000000009.partial"), kRestoreNotFound);
  EXPECT_NE(access(target_.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace walship::replica
