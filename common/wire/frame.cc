// Frame header encoding and validation; the format is specified in
// wire_format.md beside this file.

#include "common/wire/frame.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/wire/crc32c.h"

namespace walship::wire {
namespace {

namespace fl = frame_layout;

void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

void StoreLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint16_t LoadLe16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

uint32_t LoadLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string Hex32(uint32_t v) {
  return absl::StrCat("0x", absl::Hex(v, absl::kZeroPad8));
}

// "SEGMENT frame (segment_id 7, offset 4096)": context for payload errors.
std::string Describe(const FrameHeader& h) {
  return absl::StrCat(FrameTypeName(h.type), " frame (segment_id ",
                      h.segment_id, ", offset ", h.offset, ")");
}

// DecodeFrameHeader step 5: `flags` and `reserved` are 0, except in ZDATA,
// where `flags` names a codec (and `reserved` is checked with the lengths).
absl::Status CheckFlagsAndReserved(bool zdata, uint16_t flags, uint32_t reserved) {
  if (zdata && flags != static_cast<uint16_t>(Codec::kZstd) &&
      flags != static_cast<uint16_t>(Codec::kLz4)) {
    return absl::DataLossError(absl::StrCat(
        "ZDATA frame names codec ", flags, " (known: 1 zstd, 2 lz4)"));
  }
  if (!zdata && flags != 0) {
    return absl::DataLossError(absl::StrCat(
        "non-zero frame flags 0x", absl::Hex(flags, absl::kZeroPad4),
        " (reserved, must be 0)"));
  }
  if (!zdata && reserved != 0) {
    return absl::DataLossError(absl::StrCat(
        "non-zero reserved frame header field ", Hex32(reserved),
        " (must be 0)"));
  }
  return absl::OkStatus();
}

// ZDATA's length rules (DecodeFrameHeader step 7): the uncompressed length
// is bounded before anyone sizes a buffer from it or decompresses.
absl::Status CheckCompressedLengths(const FrameHeader& h, uint32_t limit) {
  if (h.raw_length == 0 || h.raw_length > limit) {
    return absl::DataLossError(absl::StrCat("ZDATA uncompressed length ", h.raw_length,
                                            " outside [1, ", limit, "]"));
  }
  if (h.payload_length == 0 || h.payload_length >= h.raw_length) {
    return absl::DataLossError(absl::StrCat("ZDATA payload length ", h.payload_length,
                                            " outside [1, ", h.raw_length,
                                            ") (its uncompressed length; a frame that does not "
                                            "shrink is sent as DATA)"));
  }
  if (h.offset > std::numeric_limits<uint64_t>::max() - h.raw_length) {
    return absl::DataLossError(absl::StrCat("ZDATA offset ", h.offset,
                                            " + uncompressed length ", h.raw_length,
                                            " overflows 64 bits"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kSegment:
      return "SEGMENT";
    case FrameType::kData:
      return "DATA";
    case FrameType::kCompressedData:
      return "ZDATA";
  }
  return "UNKNOWN";
}

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kZstd:
      return "zstd";
    case Codec::kLz4:
      return "lz4";
  }
  return "unknown";
}

bool operator==(const FrameHeader& a, const FrameHeader& b) {
  return a.type == b.type && a.segment_id == b.segment_id &&
         a.offset == b.offset && a.payload_length == b.payload_length &&
         a.payload_crc32c == b.payload_crc32c && a.codec == b.codec &&
         a.raw_length == b.raw_length;
}

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
  StoreLe32(out + fl::kMagicOffset, kFrameMagic);
  out[fl::kVersionOffset] = kFrameVersion;
  out[fl::kTypeOffset] = static_cast<uint8_t>(h.type);
  StoreLe16(out + fl::kFlagsOffset, static_cast<uint16_t>(h.codec));
  StoreLe64(out + fl::kSegmentIdOffset, h.segment_id);
  StoreLe64(out + fl::kOffsetOffset, h.offset);
  StoreLe32(out + fl::kPayloadLengthOffset, h.payload_length);
  StoreLe32(out + fl::kPayloadCrcOffset, h.payload_crc32c);
  StoreLe32(out + fl::kReservedOffset, h.raw_length);
  StoreLe32(out + fl::kHeaderCrcOffset, Crc32c(out, fl::kHeaderCrcOffset));
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> bytes,
                                              uint32_t max_payload_length) {
  if (bytes.size() < kFrameHeaderSize) {
    return absl::DataLossError(absl::StrCat("truncated frame header: got ",
                                            bytes.size(), " bytes, need ",
                                            kFrameHeaderSize));
  }
  const uint8_t* p = bytes.data();

  // 1. Magic: cheap, and the most useful message when something other than
  //    walship (an HTTP client, a port scanner) connects.
  const uint32_t magic = LoadLe32(p + fl::kMagicOffset);
  if (magic != kFrameMagic) {
    return absl::DataLossError(absl::StrCat(
        "bad magic (not a walship data stream?): got \"",
        absl::CHexEscape(absl::string_view(
            reinterpret_cast<const char*>(p + fl::kMagicOffset), 4)),
        "\" (", Hex32(magic), "), want \"WSHP\" (", Hex32(kFrameMagic), ")"));
  }

  // 2. Header checksum, before any other field is believed.
  const uint32_t stored_crc = LoadLe32(p + fl::kHeaderCrcOffset);
  const uint32_t computed_crc = Crc32c(p, fl::kHeaderCrcOffset);
  if (stored_crc != computed_crc) {
    return WithReason(absl::DataLossError(absl::StrCat(
                          "frame header checksum mismatch: header_crc32c field is ",
                          Hex32(stored_crc), ", CRC32C of header bytes [0, ",
                          fl::kHeaderCrcOffset, ") is ", Hex32(computed_crc))),
                      Reason::kChecksum);
  }

  // 3. Version: a well-formed header from a peer speaking another protocol.
  const uint8_t version = p[fl::kVersionOffset];
  if (version != kFrameVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("unsupported protocol version ", version,
                     " in frame header (this build speaks version ",
                     kFrameVersion, ")"));
  }

  // 4. Type.
  const uint8_t raw_type = p[fl::kTypeOffset];
  if (raw_type != static_cast<uint8_t>(FrameType::kHello) &&
      raw_type != static_cast<uint8_t>(FrameType::kSegment) &&
      raw_type != static_cast<uint8_t>(FrameType::kData) &&
      raw_type != static_cast<uint8_t>(FrameType::kCompressedData)) {
    return absl::UnimplementedError(absl::StrCat(
        "unknown frame type ", raw_type,
        " (known: 1 HELLO, 2 SEGMENT, 3 DATA, 4 ZDATA)"));
  }

  // 5. Reserved bits (ZDATA: the codec and the uncompressed length).
  const bool zdata = raw_type == static_cast<uint8_t>(FrameType::kCompressedData);
  const uint16_t flags = LoadLe16(p + fl::kFlagsOffset);
  const uint32_t reserved = LoadLe32(p + fl::kReservedOffset);
  WALSHIP_RETURN_IF_ERROR(CheckFlagsAndReserved(zdata, flags, reserved));

  FrameHeader h;
  h.type = static_cast<FrameType>(raw_type);
  h.segment_id = LoadLe64(p + fl::kSegmentIdOffset);
  h.offset = LoadLe64(p + fl::kOffsetOffset);
  h.payload_length = LoadLe32(p + fl::kPayloadLengthOffset);
  h.payload_crc32c = LoadLe32(p + fl::kPayloadCrcOffset);
  if (zdata) {
    h.codec = static_cast<Codec>(flags);
    h.raw_length = reserved;
  }

  // 6. Length limit, before anyone allocates or reads the payload.
  const uint32_t limit = std::min(max_payload_length, kMaxPayloadLength);
  if (h.payload_length > limit) {
    return absl::DataLossError(absl::StrCat(
        "payload length ", h.payload_length, " exceeds limit ", limit, " in ",
        FrameTypeName(h.type), " frame header"));
  }

  // 7. Per-type rules.
  switch (h.type) {
    case FrameType::kHello:
      if (h.payload_length < kMinHelloPayloadLength ||
          h.payload_length > kMaxHelloPayloadLength) {
        return absl::DataLossError(absl::StrCat(
            "HELLO payload length ", h.payload_length, " outside [",
            kMinHelloPayloadLength, ", ", kMaxHelloPayloadLength,
            "] (the data token)"));
      }
      if (h.offset != 0) {
        return absl::DataLossError(
            absl::StrCat("HELLO offset ", h.offset, " must be 0"));
      }
      break;
    case FrameType::kSegment:
      if (h.payload_length < kMinSegmentPayloadLength ||
          h.payload_length > kMaxSegmentPayloadLength) {
        return absl::DataLossError(absl::StrCat(
            "SEGMENT payload length ", h.payload_length, " outside [",
            kMinSegmentPayloadLength, ", ", kMaxSegmentPayloadLength,
            "] (the segment name)"));
      }
      break;
    case FrameType::kData:
      if (h.offset > std::numeric_limits<uint64_t>::max() - h.payload_length) {
        return absl::DataLossError(absl::StrCat(
            "DATA offset ", h.offset, " + payload length ", h.payload_length,
            " overflows 64 bits"));
      }
      break;
    case FrameType::kCompressedData:
      WALSHIP_RETURN_IF_ERROR(CheckCompressedLengths(h, limit));
      break;
  }
  return h;
}

absl::Status VerifyPayload(const FrameHeader& h,
                           absl::Span<const uint8_t> payload) {
  const uint32_t want = SegmentBytesOf(h);
  if (payload.size() != want) {
    return absl::DataLossError(absl::StrCat(
        "payload of ", Describe(h), " is ", payload.size(), " bytes, header ",
        h.type == FrameType::kCompressedData ? "uncompressed length" : "payload_length",
        " says ", want));
  }
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  if (crc != h.payload_crc32c) {
    return WithReason(absl::DataLossError(absl::StrCat(
                          "payload checksum mismatch in ", Describe(h), ": header says ",
                          Hex32(h.payload_crc32c), ", CRC32C of the ", payload.size(),
                          " payload bytes is ", Hex32(crc))),
                      Reason::kChecksum);
  }
  return absl::OkStatus();
}

std::string EncodeFrame(FrameType type, uint64_t segment_id, uint64_t offset,
                        absl::string_view payload) {
  assert(payload.size() <= kMaxPayloadLength);
  FrameHeader h;
  h.type = type;
  h.segment_id = segment_id;
  h.offset = offset;
  h.payload_length = static_cast<uint32_t>(payload.size());
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  std::string frame(kFrameHeaderSize + payload.size(), '\0');
  EncodeFrameHeader(h, reinterpret_cast<uint8_t*>(frame.data()));
  std::copy(payload.begin(), payload.end(), frame.begin() + kFrameHeaderSize);
  return frame;
}

}  // namespace walship::wire
