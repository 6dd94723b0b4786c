// The CRC32C arithmetic across in-place patches (common/segment_patch.h),
// checked against CRC32C computed over the patched bytes.
#include "common/segment_patch.h"

#include <random>
#include <string>

#include "common/wire/crc32c.h"
#include "gtest/gtest.h"

namespace walship {
namespace {

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

uint32_t Crc(const std::string& s) { return wire::Crc32c(s.data(), s.size()); }

TEST(SegmentPatchTest, PatchedCrcEqualsTheCrcOfThePatchedBytes) {
  for (size_t len : {1u, 23u, 4096u, 70000u}) {
    for (uint64_t off : {uint64_t{0}, uint64_t{21}, uint64_t{len / 2}, uint64_t{len - 1}}) {
      if (off >= len) continue;
      std::string data = Random(len, static_cast<uint32_t>(len + off));
      const size_t n = std::min<size_t>(3, len - off);
      std::string before = data.substr(off, n);
      std::string after = Random(n, 7);
      std::string patched = data;
      patched.replace(off, n, after);
      EXPECT_EQ(PatchedCrc32c(Crc(data), len, off, before, after), Crc(patched))
          << len << " " << off;
    }
  }
}

TEST(SegmentPatchTest, AlternativesCoverEveryFlipOfTheDeclaredBits) {
  std::string data = Random(5000, 3);
  const std::vector<MutableBits> bits = {{21, 0x01}, {100, 0x06}};
  auto byte_at = [&](uint64_t o) { return static_cast<uint8_t>(data[o]); };
  std::vector<uint32_t> alts = MaskedCrcAlternatives(Crc(data), data.size(), bits, byte_at);
  ASSERT_EQ(alts.size(), 8u);
  EXPECT_EQ(alts[0], Crc(data));
  for (int m21 : {0, 1}) {
    for (int m100 : {0, 2, 4, 6}) {
      std::string v = data;
      v[21] ^= static_cast<char>(m21);
      v[100] ^= static_cast<char>(m100);
      EXPECT_NE(std::find(alts.begin(), alts.end(), Crc(v)), alts.end()) << m21 << " " << m100;
    }
  }
  std::string other = data;
  other[22] ^= 1;
  EXPECT_EQ(std::find(alts.begin(), alts.end(), Crc(other)), alts.end());
  // Bits past the length are not varied.
  EXPECT_EQ(MaskedCrcAlternatives(Crc(data.substr(0, 21)), 21, bits, byte_at).size(), 1u);
}

TEST(SegmentPatchTest, OnlyDeclaredBitsMayChange) {
  const std::vector<MutableBits> bits = {{21, 0x01}};
  EXPECT_TRUE(PatchAllowed({21, std::string("\x08", 1)}, std::string("\x09", 1), bits));
  EXPECT_TRUE(PatchAllowed({21, std::string("\x09", 1)}, std::string("\x09", 1), bits));
  EXPECT_FALSE(PatchAllowed({21, std::string("\x0b", 1)}, std::string("\x09", 1), bits));
  EXPECT_FALSE(PatchAllowed({22, std::string("\x08", 1)}, std::string("\x09", 1), bits));
  EXPECT_FALSE(PatchAllowed({21, std::string("\x08\x00", 2)}, std::string("\x09", 1), bits));
}

}  // namespace
}  // namespace walship
