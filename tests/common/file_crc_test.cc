// Crc32cOfFileRange and its two-CRC variant agree with the in-memory CRC,
// and survive what pread(2) may answer (short reads, EINTR, errors, EOF).
#include "common/file_crc.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>

#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "tests/fakes/scripted_syscalls.h"
#include "tests/fakes/temp_dir.h"

namespace walship {
namespace {

TEST(FileCrcTest, MatchesInMemoryCrcForAnyRange) {
  std::string dir = testing::FreshTempDir("file_crc");
  std::mt19937 rng(7);
  std::string bytes((20 << 20) + 123, '\0');  // many buffers' worth
  for (auto& c : bytes) c = static_cast<char>(rng());
  std::ofstream(dir + "/f", std::ios::binary) << bytes;
  auto fd = sys::OpenFile(sys::DefaultSysCalls(), dir + "/f", O_RDONLY);
  ASSERT_TRUE(fd.ok());
  for (auto [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 0}, {0, 1}, {1, 4095}, {4095, 2}, {4096, 8 << 20}, {12345, (9 << 20) + 7},
           {0, bytes.size()}}) {
    uint32_t want = wire::Crc32c(bytes.data() + off, len);
    auto got = Crc32cOfFileRange(sys::DefaultSysCalls(), fd->get(), off, len, "f");
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, want) << off << "+" << len;
    uint32_t prefix = wire::Crc32c(bytes.data(), off);
    auto two = Crc32cOfFileRangeTwice(sys::DefaultSysCalls(), fd->get(), off, len, "f", 0,
                                      prefix);
    ASSERT_TRUE(two.ok());
    EXPECT_EQ(two->first, want);
    EXPECT_EQ(two->second, wire::Crc32c(bytes.data(), off + len));
  }
  // The reader, called for consecutive ranges and then another file.
  FileCrcReader reader(sys::DefaultSysCalls());
  uint32_t running = 0;
  for (uint64_t off = 0; off < bytes.size(); off += 1 << 20) {
    uint64_t len = std::min<uint64_t>(1 << 20, bytes.size() - off);
    auto got = reader.Twice(fd->get(), off, len, "f", 0, running);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->first, wire::Crc32c(bytes.data() + off, len));
    running = got->second;
  }
  EXPECT_EQ(running, wire::Crc32c(bytes.data(), bytes.size()));
  std::ofstream(dir + "/g", std::ios::binary) << "other";
  auto g = sys::OpenFile(sys::DefaultSysCalls(), dir + "/g", O_RDONLY);
  auto other = reader.Twice(g->get(), 0, 5, "g", 0, 0);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->first, wire::Crc32c("other", 5));
  EXPECT_EQ(reader.Twice(g->get(), 3, 5, "g", 0, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Crc32cOfFileRange(sys::DefaultSysCalls(), fd->get(), bytes.size() - 1, 2, "f")
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
}

// A 1 MiB file of 'x' in a fresh directory, opened read-only through `sys`.
sys::UniqueFd OpenMiBOfX(sys::SysCalls& sys, const std::string& dir_name) {
  std::string dir = testing::FreshTempDir(dir_name);
  std::ofstream(dir + "/f", std::ios::binary) << std::string(1 << 20, 'x');
  auto fd = sys::OpenFile(sys, dir + "/f", O_RDONLY);
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? std::move(*fd) : sys::UniqueFd();
}

// Scripted preads return Pattern(offset, rc): the CRC must be that of the
// pattern over the whole range whatever the kernel's pieces were.
TEST(FileCrcTest, ShortReadsAndEintrStillCoverTheRange) {
  sys::ScriptedSysCalls sys;
  sys::UniqueFd fd = OpenMiBOfX(sys, "file_crc_script");
  ASSERT_TRUE(fd.valid());
  sys.ScriptPread({{1, 0}, {-1, EINTR}, {4095, 0}, {-1, EINTR}, {100000, 0}, {4, 0}});
  const uint64_t off = 77, len = 1 + 4095 + 100000 + 4;
  auto got = Crc32cOfFileRange(sys, fd.get(), off, len, "f");
  ASSERT_TRUE(got.ok()) << got.status();
  const std::string want = sys::ScriptedSysCalls::Pattern(off, len);
  EXPECT_EQ(*got, wire::Crc32c(want.data(), want.size()));
}

TEST(FileCrcTest, ReadErrorAndShrunkFileNameTheFile) {
  sys::ScriptedSysCalls sys;
  sys::UniqueFd fd = OpenMiBOfX(sys, "file_crc_errors");
  ASSERT_TRUE(fd.valid());
  sys.ScriptPread({{4096, 0}, {-1, EIO}});
  FileCrcReader reader(sys);
  absl::Status io = reader.Twice(fd.get(), 0, 1 << 20, "seg-1", 0, 0).status();
  EXPECT_FALSE(io.ok());
  EXPECT_NE(io.message().find("seg-1"), std::string::npos) << io;
  EXPECT_NE(io.message().find("4096"), std::string::npos) << io;
  // EOF before the range's end (the file shrank after the size check).
  sys.ScriptPread({{1000, 0}, {0, 0}});
  absl::Status eof = Crc32cOfFileRange(sys, fd.get(), 0, 5000, "seg-2").status();
  EXPECT_EQ(eof.code(), absl::StatusCode::kOutOfRange) << eof;
  EXPECT_NE(eof.message().find("seg-2"), std::string::npos) << eof;
  // The reader works again after an error.
  auto ok = reader.Twice(fd.get(), 0, 3, "seg-1", 0, 0);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->first, wire::Crc32c("xxx", 3));
}

}  // namespace
}  // namespace walship
