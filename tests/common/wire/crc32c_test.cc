#include "common/wire/crc32c.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace walship::wire {
namespace {

using internal::Crc32cExtendHardware;
using internal::Crc32cExtendPortable;
using internal::HardwareCrc32cAvailable;

// The implementations under test, so every vector runs against each.
struct Impl {
  const char* name;
  uint32_t (*extend)(uint32_t, const void*, size_t);
};

std::vector<Impl> Implementations() {
  std::vector<Impl> impls = {
      {"dispatch", &Crc32cExtend},
      {"portable", &Crc32cExtendPortable},
  };
  if (HardwareCrc32cAvailable()) {
    impls.push_back({"hardware", &Crc32cExtendHardware});
  }
  return impls;
}

// Bit-at-a-time reference straight from the definition, independent of the
// tables and the instruction.
uint32_t ReferenceCrc32c(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
  }
  return ~crc;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32cTest, ReportsHardwareAvailability) {
  // Informational: which paths this machine exercises.
  std::printf("SSE4.2 CRC32C hardware path available: %s\n",
              HardwareCrc32cAvailable() ? "yes" : "no");
}

// RFC 3720 (iSCSI), appendix B.4 "CRC Examples".
TEST(Crc32cTest, Rfc3720Vectors) {
  uint8_t zeros[32];
  uint8_t ones[32];
  uint8_t ascending[32];
  uint8_t descending[32];
  std::memset(zeros, 0, sizeof(zeros));
  std::memset(ones, 0xFF, sizeof(ones));
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<uint8_t>(i);
    descending[i] = static_cast<uint8_t>(31 - i);
  }
  // An iSCSI read command PDU.
  const uint8_t iscsi_read[48] = {
      0x01, 0xC0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  for (const Impl& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.extend(0, zeros, 32), 0x8A9136AAu);
    EXPECT_EQ(impl.extend(0, ones, 32), 0x62A8AB43u);
    EXPECT_EQ(impl.extend(0, ascending, 32), 0x46DD794Eu);
    EXPECT_EQ(impl.extend(0, descending, 32), 0x113FDB5Cu);
    EXPECT_EQ(impl.extend(0, iscsi_read, 48), 0xD9963A56u);
    EXPECT_EQ(impl.extend(0, "123456789", 9), 0xE3069283u);
  }
  EXPECT_EQ(Crc32c(zeros, 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
}

TEST(Crc32cTest, EmptyInput) {
  for (const Impl& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.extend(0, nullptr, 0), 0u);
    EXPECT_EQ(impl.extend(0xDEADBEEFu, nullptr, 0), 0xDEADBEEFu);
  }
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

// Every length 0..100 at every start alignment 0..7 against the bitwise
// reference; covers all head/body/tail splits of both fast loops.
TEST(Crc32cTest, AllShortLengthsAndAlignmentsMatchReference) {
  const std::vector<uint8_t> buf = RandomBytes(100 + 16, 1);
  for (const Impl& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    for (size_t align = 0; align < 8; ++align) {
      for (size_t n = 0; n <= 100; ++n) {
        const uint8_t* p = buf.data() + align;
        ASSERT_EQ(impl.extend(0, p, n), ReferenceCrc32c(p, n))
            << "align " << align << " length " << n;
      }
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWholeAtEverySplit) {
  const std::vector<uint8_t> buf = RandomBytes(257, 2);
  const uint32_t whole = ReferenceCrc32c(buf.data(), buf.size());
  for (const Impl& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    for (size_t split = 0; split <= buf.size(); ++split) {
      const uint32_t a = impl.extend(0, buf.data(), split);
      ASSERT_EQ(impl.extend(a, buf.data() + split, buf.size() - split), whole)
          << "split " << split;
    }
  }
  // Mixing implementations across a split still agrees.
  const uint32_t a = Crc32cExtendPortable(0, buf.data(), 100);
  EXPECT_EQ(Crc32cExtend(a, buf.data() + 100, buf.size() - 100), whole);
}

TEST(Crc32cTest, LargeBuffersAgreeAcrossImplementations) {
  const size_t kSize = (8 << 20) + 13;  // 8 MiB and a ragged tail
  const std::vector<uint8_t> buf = RandomBytes(kSize, 3);
  const uint32_t portable = Crc32cExtendPortable(0, buf.data(), buf.size());
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), portable);
  if (HardwareCrc32cAvailable()) {
    EXPECT_EQ(Crc32cExtendHardware(0, buf.data(), buf.size()), portable);
    // Misaligned start, large length.
    EXPECT_EQ(Crc32cExtendHardware(0, buf.data() + 3, buf.size() - 3),
              Crc32cExtendPortable(0, buf.data() + 3, buf.size() - 3));
  }
  // Chunked extension in uneven pieces equals the whole.
  uint32_t crc = 0;
  size_t pos = 0;
  size_t step = 1;
  while (pos < buf.size()) {
    const size_t n = std::min(step, buf.size() - pos);
    crc = Crc32cExtend(crc, buf.data() + pos, n);
    pos += n;
    step = step * 3 + 1;
  }
  EXPECT_EQ(crc, portable);
  // A 1 MiB slice against the bitwise reference.
  EXPECT_EQ(Crc32cExtendPortable(0, buf.data() + 1, 1 << 20),
            ReferenceCrc32c(buf.data() + 1, 1 << 20));
}

TEST(Crc32cTest, RandomizedImplementationsAgree) {
  std::mt19937 rng(4);
  const std::vector<uint8_t> buf = RandomBytes(70000, 5);
  for (int i = 0; i < 2000; ++i) {
    const size_t start = rng() % 1000;
    const size_t n = rng() % (buf.size() - start);
    const uint32_t seed = static_cast<uint32_t>(rng());
    const uint32_t portable = Crc32cExtendPortable(seed, buf.data() + start, n);
    ASSERT_EQ(Crc32cExtend(seed, buf.data() + start, n), portable);
    if (HardwareCrc32cAvailable()) {
      ASSERT_EQ(Crc32cExtendHardware(seed, buf.data() + start, n), portable);
    }
  }
}

TEST(Crc32cTest, DetectsSingleBitFlips) {
  std::vector<uint8_t> buf = RandomBytes(64, 6);
  const uint32_t crc = Crc32c(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size() * 8; ++i) {
    buf[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
    ASSERT_NE(Crc32c(buf.data(), buf.size()), crc) << "bit " << i;
    buf[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
  }
}

TEST(Crc32cTest, CombineEqualsTheConcatenation) {
  std::mt19937 rng(6);
  const std::vector<uint8_t> buf = RandomBytes(200000, 7);
  for (int i = 0; i < 500; ++i) {
    const size_t a = rng() % 100000;
    const size_t b = i < 10 ? static_cast<size_t>(i) : rng() % 100000;
    const uint32_t whole = ReferenceCrc32c(buf.data(), a + b);
    const uint32_t crc_a = Crc32c(buf.data(), a);
    const uint32_t crc_b = Crc32c(buf.data() + a, b);
    ASSERT_EQ(Crc32cCombine(crc_a, crc_b, b), whole) << a << " + " << b;
  }
  // Combining with an empty prefix is the identity.
  EXPECT_EQ(Crc32cCombine(0, Crc32c(buf.data(), 5000), 5000), Crc32c(buf.data(), 5000));
}

}  // namespace
}  // namespace walship::wire
