#include "common/wire/compress.h"

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/reason.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walship::wire {
namespace {

using ::testing::HasSubstr;

// WAL-like bytes: repeated records with a counter and some noise, so both
// codecs shrink them but not to nothing.
std::vector<uint8_t> WalLike(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (i % 64 < 48) ? static_cast<uint8_t>("walship record "[i % 15])
                         : static_cast<uint8_t>(rng() & 0x0F);
  }
  return v;
}

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

FrameHeader DataHeaderOf(absl::Span<const uint8_t> raw) {
  return FrameHeader{FrameType::kData, 5, 8192, static_cast<uint32_t>(raw.size()),
                     Crc32c(raw.data(), raw.size())};
}

absl::Span<const uint8_t> SpanOf(absl::string_view s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Encodes `h` and decodes it again, as the replica does before it reads the
// payload.
FrameHeader OverTheWire(const FrameHeader& h, uint32_t limit = kMaxPayloadLength) {
  std::array<uint8_t, kFrameHeaderSize> raw;
  EncodeFrameHeader(h, raw.data());
  absl::StatusOr<FrameHeader> got = DecodeFrameHeader(raw, limit);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : FrameHeader{};
}

class CodecTest : public ::testing::TestWithParam<Codec> {};

INSTANTIATE_TEST_SUITE_P(BothCodecs, CodecTest, ::testing::Values(Codec::kZstd, Codec::kLz4),
                         [](const auto& info) { return std::string(CodecName(info.param)); });

TEST_P(CodecTest, RoundTripsEveryLevelThroughTheWire) {
  const LevelRange levels = LevelsOf(GetParam());
  const std::vector<uint8_t> raw = WalLike(300 << 10, 1);
  for (int level : {levels.min, levels.default_level, levels.max}) {
    SCOPED_TRACE(level);
    auto c = Compressor::Create(GetParam(), level);
    ASSERT_TRUE(c.ok()) << c.status();
    FrameHeader h = DataHeaderOf(raw);
    std::vector<uint8_t> scratch;
    absl::string_view payload = BuildCompressedFrame(**c, raw, &h, &scratch);
    ASSERT_EQ(h.type, FrameType::kCompressedData);
    EXPECT_EQ(h.codec, GetParam());
    EXPECT_EQ(h.raw_length, raw.size());
    EXPECT_EQ(h.payload_length, payload.size());
    EXPECT_LT(payload.size(), raw.size() / 2);
    EXPECT_EQ(h.payload_crc32c, Crc32c(raw.data(), raw.size()));  // of the uncompressed bytes
    const FrameHeader got = OverTheWire(h);
    EXPECT_EQ(got, h);

    auto d = Decompressor::Create(GetParam());
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<uint8_t> out;
    ASSERT_TRUE(DecompressPayload(**d, got, SpanOf(payload), &out).ok());
    EXPECT_EQ(out, raw);
  }
}

TEST_P(CodecTest, IncompressibleBytesStayPlainData) {
  auto c = Compressor::Create(GetParam(), LevelsOf(GetParam()).default_level);
  ASSERT_TRUE(c.ok());
  const std::vector<uint8_t> raw = Random(64 << 10, 2);
  FrameHeader h = DataHeaderOf(raw);
  const FrameHeader before = h;
  std::vector<uint8_t> scratch;
  absl::string_view payload = BuildCompressedFrame(**c, raw, &h, &scratch);
  EXPECT_EQ(h, before);
  EXPECT_EQ(payload.data(), reinterpret_cast<const char*>(raw.data()));
  EXPECT_EQ(payload.size(), raw.size());
}

// Builds a valid ZDATA frame of WAL-like bytes: its header and payload.
struct Built {
  FrameHeader h;
  std::string payload;
  std::vector<uint8_t> raw;
};
Built BuildOne(Codec codec) {
  Built b;
  b.raw = WalLike(100 << 10, 3);
  auto c = Compressor::Create(codec, LevelsOf(codec).default_level);
  EXPECT_TRUE(c.ok());
  b.h = DataHeaderOf(b.raw);
  std::vector<uint8_t> scratch;
  b.payload = std::string(BuildCompressedFrame(**c, b.raw, &b.h, &scratch));
  EXPECT_EQ(b.h.type, FrameType::kCompressedData);
  return b;
}

void ExpectChecksumError(const absl::Status& s, absl::string_view what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kChecksum) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(what)) << s;
}

TEST_P(CodecTest, CorruptCompressedBytesAreAChecksumError) {
  const Built b = BuildOne(GetParam());
  auto d = Decompressor::Create(GetParam());
  ASSERT_TRUE(d.ok());
  // Every kind of damage: a flipped bit anywhere in the compressed bytes is
  // rejected by the codec or by the CRC32C of what it produced.
  for (size_t i = 0; i < b.payload.size(); i += std::max<size_t>(1, b.payload.size() / 97)) {
    SCOPED_TRACE(i);
    std::string bad = b.payload;
    bad[i] ^= 0x10;
    std::vector<uint8_t> out;
    ExpectChecksumError(DecompressPayload(**d, b.h, SpanOf(bad), &out), "corrupt ZDATA frame");
  }
  // Truncated compressed bytes.
  std::vector<uint8_t> out;
  FrameHeader shorter = b.h;
  shorter.payload_length -= 1;
  ExpectChecksumError(
      DecompressPayload(**d, shorter, SpanOf(absl::string_view(b.payload).substr(1)), &out),
      "corrupt ZDATA frame");
}

TEST_P(CodecTest, WrongDeclaredLengthIsAChecksumError) {
  const Built b = BuildOne(GetParam());
  auto d = Decompressor::Create(GetParam());
  ASSERT_TRUE(d.ok());
  for (int64_t delta : {-1, 1, -1000, 4096}) {
    SCOPED_TRACE(delta);
    FrameHeader h = b.h;
    h.raw_length = static_cast<uint32_t>(static_cast<int64_t>(h.raw_length) + delta);
    std::vector<uint8_t> out;
    ExpectChecksumError(DecompressPayload(**d, h, SpanOf(b.payload), &out), "corrupt ZDATA frame");
  }
}

TEST_P(CodecTest, WrongUncompressedCrcIsAChecksumError) {
  const Built b = BuildOne(GetParam());
  auto d = Decompressor::Create(GetParam());
  ASSERT_TRUE(d.ok());
  FrameHeader h = b.h;
  h.payload_crc32c ^= 1;
  std::vector<uint8_t> out;
  ExpectChecksumError(DecompressPayload(**d, h, SpanOf(b.payload), &out), "checksum mismatch");
}

TEST(CompressTest, CodecOtherThanAgreedIsAChecksumError) {
  const Built b = BuildOne(Codec::kZstd);
  auto d = Decompressor::Create(Codec::kLz4);
  ASSERT_TRUE(d.ok());
  std::vector<uint8_t> out;
  ExpectChecksumError(DecompressPayload(**d, b.h, SpanOf(b.payload), &out),
                      "codec zstd, but the handshake agreed lz4");
}

// The decompression bomb: a small payload that claims (or expands to) far
// more than the limit never gets a buffer that large. The header decoder
// refuses a declared length over the limit before any payload is read, and
// the decompressor never writes past the declared length.
TEST(CompressTest, DeclaredLengthIsBoundedBeforeDecompressing) {
  FrameHeader h{FrameType::kCompressedData, 1, 0, 100, 0, Codec::kZstd, 1u << 20};
  std::array<uint8_t, kFrameHeaderSize> raw;
  EncodeFrameHeader(h, raw.data());
  absl::StatusOr<FrameHeader> got = DecodeFrameHeader(raw, 1u << 19);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("ZDATA uncompressed length 1048576 outside [1, 524288]"));

  // 4 MiB of zeros compress to a few hundred bytes; declared as 64 KiB they
  // are refused without writing past 64 KiB.
  const std::vector<uint8_t> zeros(4u << 20, 0);
  for (Codec codec : {Codec::kZstd, Codec::kLz4}) {
    SCOPED_TRACE(CodecName(codec));
    auto c = Compressor::Create(codec, 1);
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> bomb;
    ASSERT_TRUE((*c)->Compress(zeros, &bomb).ok());
    FrameHeader small{FrameType::kCompressedData, 1, 0, static_cast<uint32_t>(bomb.size()),
                      Crc32c(zeros.data(), 64 << 10), codec, 64 << 10};
    auto d = Decompressor::Create(codec);
    ASSERT_TRUE(d.ok());
    std::vector<uint8_t> out;
    absl::Status s = DecompressPayload(
        **d, small,
        absl::MakeConstSpan(bomb.data(), bomb.size()), &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_LE(out.size(), 64u << 10);
  }
}

TEST(CompressTest, ParsesCodecsAndValidatesLevels) {
  EXPECT_EQ(*ParseCodec("zstd"), Codec::kZstd);
  EXPECT_EQ(*ParseCodec("lz4"), Codec::kLz4);
  EXPECT_EQ(*ParseCodec("none"), Codec::kNone);
  EXPECT_EQ(ParseCodec("gzip").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateLevel(Codec::kZstd, 19).ok());
  EXPECT_EQ(ValidateLevel(Codec::kZstd, 20).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLevel(Codec::kZstd, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLevel(Codec::kLz4, 13).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateLevel(Codec::kNone, 0).ok());
  EXPECT_EQ(Compressor::Create(Codec::kNone, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Compressor::Create(Codec::kZstd, 42).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decompressor::Create(Codec::kNone).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walship::wire
