#include "common/wire/frame.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/reason.h"
#include "common/wire/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walship::wire {
namespace {

using ::testing::HasSubstr;
using Header = std::array<uint8_t, kFrameHeaderSize>;

constexpr uint32_t kNoLimit = std::numeric_limits<uint32_t>::max();

Header Encode(const FrameHeader& h) {
  Header raw;
  EncodeFrameHeader(h, raw.data());
  return raw;
}

// A valid DATA header whose fields have distinct bytes, so a field written at
// the wrong offset or in the wrong byte order shows up.
FrameHeader SampleData() {
  FrameHeader h;
  h.type = FrameType::kData;
  h.segment_id = 0x0102030405060708ull;
  h.offset = 0x1112131415161718ull;
  h.payload_length = 0x00ABCDEF;
  h.payload_crc32c = 0xA1B2C3D4u;
  return h;
}

void PutLe(Header& raw, size_t offset, uint64_t v, size_t width) {
  for (size_t i = 0; i < width; ++i) {
    raw[offset + i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

// Recomputes the header checksum after a test edits a field, so the decoder
// gets past the checksum to the check under test.
void Reseal(Header& raw) {
  PutLe(raw, frame_layout::kHeaderCrcOffset,
        Crc32c(raw.data(), frame_layout::kHeaderCrcOffset), 4);
}

absl::Span<const uint8_t> Bytes(absl::string_view s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()),
                                   s.size());
}

void ExpectError(const absl::StatusOr<FrameHeader>& got,
                 absl::StatusCode code, absl::string_view substr) {
  ASSERT_FALSE(got.ok()) << "decoded unexpectedly";
  EXPECT_EQ(got.status().code(), code) << got.status();
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr(std::string(substr)))
      << got.status();
}

TEST(FrameTest, HeaderLayoutIsExact) {
  const Header raw = Encode(SampleData());
  const std::vector<uint8_t> want_prefix = {
      'W',  'S',  'H',  'P',                           // magic
      0x01,                                            // version
      0x03,                                            // type DATA
      0x00, 0x00,                                      // flags
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // segment_id
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // offset
      0xEF, 0xCD, 0xAB, 0x00,                          // payload_length
      0xD4, 0xC3, 0xB2, 0xA1,                          // payload_crc32c
      0x00, 0x00, 0x00, 0x00,                          // reserved
  };
  ASSERT_EQ(want_prefix.size(), frame_layout::kHeaderCrcOffset);
  EXPECT_EQ(std::vector<uint8_t>(raw.begin(), raw.begin() + 36), want_prefix);
  const uint32_t crc = Crc32c(want_prefix.data(), want_prefix.size());
  EXPECT_EQ(raw[36], crc & 0xFF);
  EXPECT_EQ(raw[37], (crc >> 8) & 0xFF);
  EXPECT_EQ(raw[38], (crc >> 16) & 0xFF);
  EXPECT_EQ(raw[39], crc >> 24);
  EXPECT_EQ(kFrameMagic, 0x50485357u);
}

TEST(FrameTest, RoundTripsEveryType) {
  FrameHeader hello;
  hello.type = FrameType::kHello;
  hello.segment_id = 0xFEEDFACECAFEBEEFull;
  hello.offset = 0;
  hello.payload_length = 32;
  hello.payload_crc32c = 0x12345678u;

  FrameHeader segment;
  segment.type = FrameType::kSegment;
  segment.segment_id = 1;
  segment.offset = 16 << 20;
  segment.payload_length = 24;
  segment.payload_crc32c = 0xFFFFFFFFu;

  FrameHeader data = SampleData();
  FrameHeader empty_data;
  empty_data.type = FrameType::kData;
  empty_data.segment_id = std::numeric_limits<uint64_t>::max();
  empty_data.offset = std::numeric_limits<uint64_t>::max();
  empty_data.payload_length = 0;
  empty_data.payload_crc32c = 0;

  FrameHeader max_data = SampleData();
  max_data.payload_length = kMaxPayloadLength;

  for (const FrameHeader& h : {hello, segment, data, empty_data, max_data}) {
    SCOPED_TRACE(FrameTypeName(h.type));
    const Header raw = Encode(h);
    absl::StatusOr<FrameHeader> got = DecodeFrameHeader(raw, kNoLimit);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, h);
  }
}

TEST(FrameTest, EncodeFrameRoundTripsHeaderAndPayload) {
  struct Case {
    FrameType type;
    uint64_t segment_id;
    uint64_t offset;
    std::string payload;
  };
  const std::vector<Case> cases = {
      {FrameType::kHello, 42, 0, std::string(16, '\x5A')},
      {FrameType::kHello, 43, 0, std::string(64, '\0')},
      {FrameType::kSegment, 7, 4096, "000000010000000000000001"},
      {FrameType::kSegment, 8, 0, "x"},
      {FrameType::kData, 7, 4096, "some WAL bytes"},
      {FrameType::kData, 7, 123, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(FrameTypeName(c.type));
    const std::string frame =
        EncodeFrame(c.type, c.segment_id, c.offset, c.payload);
    ASSERT_EQ(frame.size(), kFrameHeaderSize + c.payload.size());
    absl::StatusOr<FrameHeader> h = DecodeFrameHeader(Bytes(frame), kNoLimit);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->type, c.type);
    EXPECT_EQ(h->segment_id, c.segment_id);
    EXPECT_EQ(h->offset, c.offset);
    EXPECT_EQ(h->payload_length, c.payload.size());
    EXPECT_EQ(h->payload_crc32c, Crc32c(c.payload.data(), c.payload.size()));
    const absl::string_view payload =
        absl::string_view(frame).substr(kFrameHeaderSize);
    EXPECT_EQ(payload, c.payload);
    EXPECT_TRUE(VerifyPayload(*h, Bytes(payload)).ok());
  }
}

TEST(FrameTest, DecodesOnlyTheFirstFortyBytes) {
  const std::string frame = EncodeFrame(FrameType::kData, 1, 2, "payload");
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(Bytes(frame), kNoLimit);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->payload_length, 7u);
}

TEST(FrameTest, RejectsEveryTruncatedLength) {
  const Header raw = Encode(SampleData());
  for (size_t n = 0; n < kFrameHeaderSize; ++n) {
    SCOPED_TRACE(n);
    ExpectError(DecodeFrameHeader(absl::MakeConstSpan(raw.data(), n), kNoLimit),
                absl::StatusCode::kDataLoss, "truncated frame header");
  }
  ExpectError(DecodeFrameHeader({}, kNoLimit), absl::StatusCode::kDataLoss,
              "got 0 bytes, need 40");
}

TEST(FrameTest, RejectsBadMagic) {
  // What an HTTP client would send, padded to a header's length.
  std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  http.resize(kFrameHeaderSize, ' ');
  ExpectError(DecodeFrameHeader(Bytes(http), kNoLimit),
              absl::StatusCode::kDataLoss,
              "bad magic (not a walship data stream?)");
  ExpectError(DecodeFrameHeader(Bytes(http), kNoLimit),
              absl::StatusCode::kDataLoss, "got \"GET \"");

  // Magic wrong but the checksum resealed: still a magic error.
  Header raw = Encode(SampleData());
  raw[3] = 'Q';
  Reseal(raw);
  ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
              "bad magic");

  // Byte-swapped magic (a big-endian writer).
  raw = Encode(SampleData());
  PutLe(raw, 0, 0x57534850u, 4);
  Reseal(raw);
  ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
              "bad magic");
}

TEST(FrameTest, RejectsEveryCorruptedHeaderByte) {
  const Header good = Encode(SampleData());
  for (size_t i = 0; i < kFrameHeaderSize; ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      SCOPED_TRACE(testing::Message() << "byte " << i << " mask " << +mask);
      Header raw = good;
      raw[i] ^= mask;
      const absl::StatusOr<FrameHeader> got = DecodeFrameHeader(raw, kNoLimit);
      ExpectError(got, absl::StatusCode::kDataLoss,
                  i < 4 ? "bad magic" : "frame header checksum mismatch");
      // Counted and handled by its reason, not by its words.
      EXPECT_EQ(ReasonOf(got.status()), i < 4 ? Reason::kUnspecified : Reason::kChecksum);
    }
  }
}

TEST(FrameTest, ChecksumMismatchMessageNamesBothValues) {
  Header raw = Encode(SampleData());
  PutLe(raw, frame_layout::kHeaderCrcOffset, 0xDEADBEEFu, 4);
  ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
              "header_crc32c field is 0xdeadbeef");
}

TEST(FrameTest, RejectsUnsupportedVersion) {
  for (uint8_t version : {0, 2, 255}) {
    SCOPED_TRACE(+version);
    Header raw = Encode(SampleData());
    raw[frame_layout::kVersionOffset] = version;
    Reseal(raw);
    ExpectError(DecodeFrameHeader(raw, kNoLimit),
                absl::StatusCode::kFailedPrecondition,
                "unsupported protocol version " + std::to_string(version));
  }
}

TEST(FrameTest, RejectsUnknownType) {
  for (uint8_t type : {0, 5, 127, 255}) {
    SCOPED_TRACE(+type);
    Header raw = Encode(SampleData());
    raw[frame_layout::kTypeOffset] = type;
    Reseal(raw);
    ExpectError(DecodeFrameHeader(raw, kNoLimit),
                absl::StatusCode::kUnimplemented,
                "unknown frame type " + std::to_string(type));
  }
}

// ZDATA: flags carry the codec and reserved the uncompressed length; the
// CRC is of the uncompressed bytes. Byte for byte, so the layout is pinned.
TEST(FrameTest, EncodesAndDecodesZdata) {
  FrameHeader h;
  h.type = FrameType::kCompressedData;
  h.segment_id = 7;
  h.offset = 4096;
  h.payload_length = 256;
  h.payload_crc32c = 0xA1B2C3D4u;
  h.codec = Codec::kLz4;
  h.raw_length = 0x10000;
  const Header raw = Encode(h);
  EXPECT_EQ(raw[frame_layout::kTypeOffset], 4);
  EXPECT_EQ(raw[frame_layout::kFlagsOffset], 2);
  EXPECT_EQ(raw[frame_layout::kFlagsOffset + 1], 0);
  EXPECT_EQ(raw[frame_layout::kReservedOffset + 2], 1);  // 0x10000 little-endian
  // wire_format.md section 9.5 shows this header; its checksum:
  EXPECT_EQ(raw[frame_layout::kHeaderCrcOffset], 0xa7);
  EXPECT_EQ(raw[frame_layout::kHeaderCrcOffset + 3], 0x36);
  absl::StatusOr<FrameHeader> got = DecodeFrameHeader(raw, kNoLimit);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, h);
  EXPECT_EQ(SegmentBytesOf(*got), 0x10000u);
  EXPECT_EQ(std::string(FrameTypeName(got->type)), "ZDATA");
}

TEST(FrameTest, RejectsBadZdataHeaders) {
  FrameHeader good;
  good.type = FrameType::kCompressedData;
  good.segment_id = 1;
  good.offset = 0;
  good.payload_length = 10;
  good.codec = Codec::kZstd;
  good.raw_length = 100;
  ASSERT_TRUE(DecodeFrameHeader(Encode(good), 100).ok());
  struct Case {
    const char* name;
    FrameHeader h;
    uint32_t limit;
    const char* message;
  };
  std::vector<Case> cases;
  FrameHeader h = good;
  h.codec = Codec::kNone;
  cases.push_back({"no codec", h, kNoLimit, "ZDATA frame names codec 0"});
  h = good;
  h.codec = static_cast<Codec>(3);
  cases.push_back({"unknown codec", h, kNoLimit, "ZDATA frame names codec 3"});
  h = good;
  h.raw_length = 0;
  cases.push_back({"empty", h, kNoLimit, "ZDATA uncompressed length 0 outside [1, "});
  h = good;
  cases.push_back({"over the limit", h, 99, "ZDATA uncompressed length 100 outside [1, 99]"});
  h = good;
  h.raw_length = kMaxPayloadLength + 1;
  cases.push_back({"over the hard limit", h, kNoLimit, "uncompressed length 16777217"});
  h = good;
  h.payload_length = 100;
  cases.push_back({"does not shrink", h, kNoLimit, "ZDATA payload length 100 outside [1, 100)"});
  h = good;
  h.payload_length = 0;
  cases.push_back({"no payload", h, kNoLimit, "ZDATA payload length 0 outside"});
  h = good;
  h.offset = std::numeric_limits<uint64_t>::max() - 99;
  cases.push_back({"overflow", h, kNoLimit, "overflows 64 bits"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectError(DecodeFrameHeader(Encode(c.h), c.limit), absl::StatusCode::kDataLoss,
                c.message);
  }
  // A DATA frame carrying ZDATA's fields is still refused.
  h = SampleData();
  h.codec = Codec::kZstd;
  ExpectError(DecodeFrameHeader(Encode(h), kNoLimit), absl::StatusCode::kDataLoss,
              "non-zero frame flags");
}

// VerifyPayload on a ZDATA header checks the uncompressed bytes.
TEST(FrameTest, VerifyPayloadOfZdataChecksUncompressedBytes) {
  const std::string raw(300, 'w');
  FrameHeader h{FrameType::kCompressedData, 1, 0, 20, Crc32c(raw.data(), raw.size()),
                Codec::kZstd, 300};
  EXPECT_TRUE(VerifyPayload(h, Bytes(raw)).ok());
  const absl::Status s = VerifyPayload(h, Bytes(absl::string_view(raw).substr(1)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("header uncompressed length says 300"));
}

TEST(FrameTest, RejectsNonZeroFlags) {
  for (uint16_t flags : {0x0001, 0x8000, 0xFFFF}) {
    SCOPED_TRACE(flags);
    Header raw = Encode(SampleData());
    PutLe(raw, frame_layout::kFlagsOffset, flags, 2);
    Reseal(raw);
    ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
                "non-zero frame flags");
  }
}

TEST(FrameTest, RejectsNonZeroReserved) {
  for (uint32_t reserved : {0x00000001u, 0x80000000u, 0xFFFFFFFFu}) {
    SCOPED_TRACE(reserved);
    Header raw = Encode(SampleData());
    PutLe(raw, frame_layout::kReservedOffset, reserved, 4);
    Reseal(raw);
    ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
                "non-zero reserved");
  }
}

TEST(FrameTest, RejectsOversizedPayloadLength) {
  FrameHeader h = SampleData();
  h.payload_length = kMaxPayloadLength;
  EXPECT_TRUE(DecodeFrameHeader(Encode(h), kNoLimit).ok());
  EXPECT_TRUE(DecodeFrameHeader(Encode(h), kMaxPayloadLength).ok());

  // The hard maximum applies whatever the caller's limit.
  h.payload_length = kMaxPayloadLength + 1;
  ExpectError(DecodeFrameHeader(Encode(h), kNoLimit),
              absl::StatusCode::kDataLoss,
              "payload length 16777217 exceeds limit 16777216");
  h.payload_length = std::numeric_limits<uint32_t>::max();
  ExpectError(DecodeFrameHeader(Encode(h), kNoLimit),
              absl::StatusCode::kDataLoss,
              "payload length 4294967295 exceeds limit 16777216");

  // A receiver's lower limit.
  h.payload_length = 1000;
  EXPECT_TRUE(DecodeFrameHeader(Encode(h), 1000).ok());
  h.payload_length = 1001;
  ExpectError(DecodeFrameHeader(Encode(h), 1000), absl::StatusCode::kDataLoss,
              "payload length 1001 exceeds limit 1000");
  h.payload_length = 1;
  ExpectError(DecodeFrameHeader(Encode(h), 0), absl::StatusCode::kDataLoss,
              "payload length 1 exceeds limit 0");
}

TEST(FrameTest, ChecksOrderMagicThenChecksumThenVersionThenType) {
  // Bad checksum beats bad version and bad type.
  Header raw = Encode(SampleData());
  raw[frame_layout::kVersionOffset] = 9;
  raw[frame_layout::kTypeOffset] = 9;
  ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
              "checksum mismatch");
  // Sealed: bad version beats bad type.
  Reseal(raw);
  ExpectError(DecodeFrameHeader(raw, kNoLimit),
              absl::StatusCode::kFailedPrecondition,
              "unsupported protocol version 9");
  // Bad type beats bad flags and an oversized length.
  raw = Encode(SampleData());
  raw[frame_layout::kTypeOffset] = 9;
  PutLe(raw, frame_layout::kFlagsOffset, 1, 2);
  PutLe(raw, frame_layout::kPayloadLengthOffset, 0xFFFFFFFFu, 4);
  Reseal(raw);
  ExpectError(DecodeFrameHeader(raw, kNoLimit),
              absl::StatusCode::kUnimplemented, "unknown frame type 9");
  // Bad flags beat an oversized length.
  raw[frame_layout::kTypeOffset] = 3;
  Reseal(raw);
  ExpectError(DecodeFrameHeader(raw, kNoLimit), absl::StatusCode::kDataLoss,
              "non-zero frame flags");
  // The length limit comes before the per-type rules.
  FrameHeader hello;
  hello.type = FrameType::kHello;
  hello.payload_length = 100;
  ExpectError(DecodeFrameHeader(Encode(hello), 50), absl::StatusCode::kDataLoss,
              "payload length 100 exceeds limit 50");
}

TEST(FrameTest, HelloPayloadAndOffsetRules) {
  FrameHeader h;
  h.type = FrameType::kHello;
  h.segment_id = 99;
  for (uint32_t len : {16u, 17u, 63u, 64u}) {
    h.payload_length = len;
    EXPECT_TRUE(DecodeFrameHeader(Encode(h), kNoLimit).ok()) << len;
  }
  for (uint32_t len : {0u, 1u, 15u, 65u, 4096u}) {
    SCOPED_TRACE(len);
    h.payload_length = len;
    ExpectError(DecodeFrameHeader(Encode(h), kNoLimit),
                absl::StatusCode::kDataLoss,
                "HELLO payload length " + std::to_string(len) +
                    " outside [16, 64]");
  }
  h.payload_length = 16;
  h.offset = 1;
  ExpectError(DecodeFrameHeader(Encode(h), kNoLimit),
              absl::StatusCode::kDataLoss, "HELLO offset 1 must be 0");
}

TEST(FrameTest, SegmentPayloadRules) {
  FrameHeader h;
  h.type = FrameType::kSegment;
  h.segment_id = 1;
  h.offset = 8192;
  for (uint32_t len : {1u, 24u, 255u}) {
    h.payload_length = len;
    EXPECT_TRUE(DecodeFrameHeader(Encode(h), kNoLimit).ok()) << len;
  }
  for (uint32_t len : {0u, 256u, 1u << 20}) {
    SCOPED_TRACE(len);
    h.payload_length = len;
    ExpectError(DecodeFrameHeader(Encode(h), kNoLimit),
                absl::StatusCode::kDataLoss,
                "SEGMENT payload length " + std::to_string(len) +
                    " outside [1, 255]");
  }
}

TEST(FrameTest, DataRules) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.payload_length = 0;
  h.offset = std::numeric_limits<uint64_t>::max();
  EXPECT_TRUE(DecodeFrameHeader(Encode(h), kNoLimit).ok());
  h.payload_length = 10;
  h.offset = std::numeric_limits<uint64_t>::max() - 10;
  EXPECT_TRUE(DecodeFrameHeader(Encode(h), kNoLimit).ok());
  h.offset += 1;
  ExpectError(DecodeFrameHeader(Encode(h), kNoLimit),
              absl::StatusCode::kDataLoss, "overflows 64 bits");
}

TEST(FrameTest, VerifyPayloadAcceptsMatchingPayload) {
  const std::string payload = "0123456789abcdef";
  FrameHeader h;
  h.type = FrameType::kData;
  h.payload_length = static_cast<uint32_t>(payload.size());
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  EXPECT_TRUE(VerifyPayload(h, Bytes(payload)).ok());

  FrameHeader empty;
  empty.type = FrameType::kData;
  EXPECT_TRUE(VerifyPayload(empty, {}).ok());
}

TEST(FrameTest, VerifyPayloadRejectsLengthMismatch) {
  const std::string payload = "0123456789abcdef";
  FrameHeader h;
  h.type = FrameType::kData;
  h.segment_id = 3;
  h.offset = 77;
  h.payload_length = static_cast<uint32_t>(payload.size());
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  const absl::Status shorter = VerifyPayload(h, Bytes(payload).subspan(0, 15));
  EXPECT_EQ(shorter.code(), absl::StatusCode::kDataLoss) << shorter;
  EXPECT_THAT(std::string(shorter.message()),
              HasSubstr("DATA frame (segment_id 3, offset 77) is 15 bytes, "
                        "header payload_length says 16"));
  const std::string longer = payload + "x";
  EXPECT_EQ(VerifyPayload(h, Bytes(longer)).code(),
            absl::StatusCode::kDataLoss);
}

TEST(FrameTest, VerifyPayloadRejectsEveryCorruptedByte) {
  const std::string good = EncodeFrame(FrameType::kSegment, 5, 0,
                                       "000000010000000000000002");
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(Bytes(good), kNoLimit);
  ASSERT_TRUE(h.ok()) << h.status();
  for (size_t i = kFrameHeaderSize; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x20;
    const absl::Status s =
        VerifyPayload(*h, Bytes(absl::string_view(bad).substr(kFrameHeaderSize)));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << i;
    EXPECT_EQ(ReasonOf(s), Reason::kChecksum) << i;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("payload checksum mismatch in SEGMENT frame"));
  }
  // A stale payload_crc32c in the header.
  FrameHeader stale = *h;
  stale.payload_crc32c ^= 1;
  EXPECT_EQ(VerifyPayload(stale,
                          Bytes(absl::string_view(good).substr(kFrameHeaderSize)))
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST(FrameTest, FrameTypeNames) {
  EXPECT_STREQ(FrameTypeName(FrameType::kHello), "HELLO");
  EXPECT_STREQ(FrameTypeName(FrameType::kSegment), "SEGMENT");
  EXPECT_STREQ(FrameTypeName(FrameType::kData), "DATA");
  EXPECT_STREQ(FrameTypeName(static_cast<FrameType>(0)), "UNKNOWN");
  EXPECT_STREQ(FrameTypeName(static_cast<FrameType>(200)), "UNKNOWN");
}

}  // namespace
}  // namespace walship::wire
