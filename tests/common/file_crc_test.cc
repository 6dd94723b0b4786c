// Crc32cOfFileRange and its two-CRC variant agree with the in-memory CRC.
#include "common/file_crc.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>

#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship {
namespace {

TEST(FileCrcTest, MatchesInMemoryCrcForAnyRange) {
  std::string dir = testing::FreshTempDir("file_crc");
  std::mt19937 rng(7);
  std::string bytes((20 << 20) + 123, '\0');  // spans several mapping windows
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
  // The reader keeps its mapping across calls and notices a different file.
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

}  // namespace
}  // namespace walship
