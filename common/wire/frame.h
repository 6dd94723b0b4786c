// -----------------------------------------------------------------------------
// File: common/wire/frame.h
// -----------------------------------------------------------------------------
//
// Encoding and decoding of the frames on walship's data socket. The format is
// specified normatively in common/wire/wire_format.md; this file implements
// the per-frame part of it (the 40-byte header and the payload checksum). The
// per-connection rules (HELLO first, DATA refers to the current SEGMENT and is
// contiguous, ...) belong to the agent's shipper and the replica's session and
// are also specified there.
//
// Receiving a frame is three steps, each of which must succeed before the next:
//
//   uint8_t raw[kFrameHeaderSize];
//   ... read exactly kFrameHeaderSize bytes into raw ...
//   absl::StatusOr<FrameHeader> h = DecodeFrameHeader(raw, my_limit);
//   if (!h.ok()) return h.status();          // close the connection
//   ... read exactly h->payload_length bytes (safe: it is <= my_limit) ...
//   absl::Status s = VerifyPayload(*h, payload);
//   if (!s.ok()) return s;                    // close; write nothing
//
// Sending:
//
//   FrameHeader h{FrameType::kData, segment_handle, offset, len,
//                 Crc32c(bytes, len)};
//   uint8_t raw[kFrameHeaderSize];
//   EncodeFrameHeader(h, raw);
//   ... write raw, then the len payload bytes ...
//
// ZDATA, a DATA frame whose payload is compressed (wire_format.md section 9),
// is decoded here like any frame; its payload is expanded and verified by
// compress.h's DecompressPayload instead of VerifyPayload.
//
// Thread-safety: every function here is pure and may be called concurrently.

#ifndef WALSHIP_COMMON_WIRE_FRAME_H_
#define WALSHIP_COMMON_WIRE_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace walship::wire {

// Size of every frame header on the wire, in bytes.
inline constexpr size_t kFrameHeaderSize = 40;

// Hard maximum of a frame's payload_length (16 MiB). A receiver may enforce a
// lower limit; no receiver accepts more.
inline constexpr uint32_t kMaxPayloadLength = 16u << 20;

// The magic number: the bytes 'W','S','H','P' read as a little-endian u32.
inline constexpr uint32_t kFrameMagic = 0x50485357u;

// The only protocol version this code speaks.
inline constexpr uint8_t kFrameVersion = 1;

// Payload size rules of HELLO (the data token) and SEGMENT (the file name).
inline constexpr uint32_t kMinHelloPayloadLength = 16;
inline constexpr uint32_t kMaxHelloPayloadLength = 64;
inline constexpr uint32_t kMinSegmentPayloadLength = 1;
inline constexpr uint32_t kMaxSegmentPayloadLength = 255;

// Byte offsets of the header fields. Every integer is little-endian.
namespace frame_layout {
inline constexpr size_t kMagicOffset = 0;           // u32
inline constexpr size_t kVersionOffset = 4;         // u8
inline constexpr size_t kTypeOffset = 5;            // u8
inline constexpr size_t kFlagsOffset = 6;           // u16
inline constexpr size_t kSegmentIdOffset = 8;       // u64
inline constexpr size_t kOffsetOffset = 16;         // u64
inline constexpr size_t kPayloadLengthOffset = 24;  // u32
inline constexpr size_t kPayloadCrcOffset = 28;     // u32
inline constexpr size_t kReservedOffset = 32;       // u32
inline constexpr size_t kHeaderCrcOffset = 36;      // u32, CRC32C of [0, 36)
}  // namespace frame_layout

static_assert(frame_layout::kVersionOffset == frame_layout::kMagicOffset + 4);
static_assert(frame_layout::kTypeOffset == frame_layout::kVersionOffset + 1);
static_assert(frame_layout::kFlagsOffset == frame_layout::kTypeOffset + 1);
static_assert(frame_layout::kSegmentIdOffset == frame_layout::kFlagsOffset + 2);
static_assert(frame_layout::kOffsetOffset ==
              frame_layout::kSegmentIdOffset + 8);
static_assert(frame_layout::kPayloadLengthOffset ==
              frame_layout::kOffsetOffset + 8);
static_assert(frame_layout::kPayloadCrcOffset ==
              frame_layout::kPayloadLengthOffset + 4);
static_assert(frame_layout::kReservedOffset ==
              frame_layout::kPayloadCrcOffset + 4);
static_assert(frame_layout::kHeaderCrcOffset ==
              frame_layout::kReservedOffset + 4);
static_assert(kFrameHeaderSize == frame_layout::kHeaderCrcOffset + 4,
              "the frame header is 40 bytes; changing it is a new version");

enum class FrameType : uint8_t {
  // replica -> agent, first frame of a connection. payload: the one-time
  // data token from the gRPC handshake (16..64 bytes); segment_id: the
  // session_id from the handshake; offset: 0.
  kHello = 1,
  // agent -> replica. payload: a segment file name (1..255 bytes, see
  // segment_name.h); segment_id: a new per-connection handle, strictly
  // increasing; offset: the byte offset within that segment where shipping
  // starts.
  kSegment = 2,
  // agent -> replica. payload: bytes of segment `segment_id` starting at byte
  // `offset` within that segment.
  kData = 3,
  // agent -> replica, only to a replica that agreed compression in the
  // handshake (wire_format.md section 9). Like DATA, but the payload is the
  // segment bytes [offset, offset + raw_length) compressed with `codec`;
  // payload_crc32c is the CRC32C of those uncompressed bytes. On the wire,
  // `flags` carries the codec and `reserved` the uncompressed length.
  kCompressedData = 4,
};

// The codec of a ZDATA frame (its `flags` field) and of the handshake's
// Compression enum (proto/walship.proto), with the same numbers.
enum class Codec : uint8_t {
  kNone = 0,  // plain DATA frames; never in a ZDATA frame
  kZstd = 1,
  kLz4 = 2,
};

// "none", "zstd", "lz4", or "unknown". Static storage duration.
const char* CodecName(Codec codec);

// Returns "HELLO", "SEGMENT", "DATA", "ZDATA", or "UNKNOWN" for any other
// value.
// The returned string has static storage duration.
const char* FrameTypeName(FrameType type);

// The decoded meaning of a frame header. The constant fields (magic, version,
// flags, reserved) and the header checksum are not represented: the encoder
// writes them and the decoder checks them.
struct FrameHeader {
  FrameType type = FrameType::kData;
  // HELLO: session id. SEGMENT, DATA: per-connection segment handle.
  uint64_t segment_id = 0;
  // Byte offset within segment `segment_id` (0 for HELLO).
  uint64_t offset = 0;
  // Number of payload bytes following the header.
  uint32_t payload_length = 0;
  // CRC32C (crc32c.h) of those payload bytes; for ZDATA, of the
  // uncompressed bytes (the segment's bytes, as for DATA).
  uint32_t payload_crc32c = 0;
  // ZDATA only (0 otherwise): the codec (wire field `flags`) and the
  // number of uncompressed bytes (wire field `reserved`), 1..the payload
  // limit, and more than payload_length.
  Codec codec = Codec::kNone;
  uint32_t raw_length = 0;
};

// The number of segment bytes a DATA or ZDATA frame carries: payload_length
// for DATA, raw_length for ZDATA.
inline uint32_t SegmentBytesOf(const FrameHeader& h) {
  return h.type == FrameType::kCompressedData ? h.raw_length : h.payload_length;
}

bool operator==(const FrameHeader& a, const FrameHeader& b);
inline bool operator!=(const FrameHeader& a, const FrameHeader& b) {
  return !(a == b);
}

// Writes the 40-byte wire form of `h` to `out`: magic, version 1, flags
// (h.codec; 0 except in ZDATA), reserved (h.raw_length; 0 except in ZDATA),
// and the header checksum computed over bytes [0, 36). Does not
// validate `h`: a header that breaks a rule (e.g. a HELLO with a 3-byte
// payload) is encoded as given and rejected by DecodeFrameHeader.
void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);

// Decodes and validates the header in the first kFrameHeaderSize bytes of
// `bytes` (any further bytes are ignored). Nothing in the header is trusted
// until this returns OK. Checks, in this order:
//
//   fewer than 40 bytes          kDataLoss           "truncated frame header"
//   magic != "WSHP"              kDataLoss           "bad magic (...)"
//   header checksum mismatch     kDataLoss
//   version != 1                 kFailedPrecondition "unsupported protocol
//                                                     version N"
//   type not HELLO/SEGMENT/DATA/ZDATA
//                                kUnimplemented
//   flags != 0, reserved != 0    kDataLoss (HELLO, SEGMENT, DATA)
//   ZDATA: flags not a codec (1 zstd, 2 lz4)
//                                kDataLoss
//   payload_length > min(max_payload_length, kMaxPayloadLength)
//                                kDataLoss           "payload length N exceeds
//                                                     limit M"
//   HELLO: payload 16..64 bytes and offset 0; SEGMENT: payload 1..255 bytes;
//   DATA: offset + payload_length does not overflow 64 bits;
//   ZDATA: raw_length 1..min(max_payload_length, kMaxPayloadLength) (the
//   bound on what decompression may produce, checked before any buffer is
//   sized from it), payload_length 1..raw_length - 1, offset + raw_length
//   does not overflow 64 bits
//                                kDataLoss
//
// Every message names the field and the values seen. On error the connection
// must be closed; see wire_format.md.
absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> bytes,
                                              uint32_t max_payload_length);

// Checks that `payload` is the payload `h` describes: its size equals
// h.payload_length and its CRC32C equals h.payload_crc32c. For ZDATA,
// `payload` is the uncompressed bytes (compress.h's DecompressPayload calls
// this): their size must equal h.raw_length. Returns kDataLoss
// otherwise (the message names the frame type, segment_id and offset). A
// payload must not be used, written or acknowledged before this returns OK.
absl::Status VerifyPayload(const FrameHeader& h,
                           absl::Span<const uint8_t> payload);

// Returns the complete frame (header followed by payload) of the given type
// carrying `payload`, with payload_length and both checksums filled in. Meant
// for small frames (HELLO, SEGMENT) and tests; DATA is normally sent as a
// header followed by zero-copy file bytes. Precondition: payload.size() <=
// kMaxPayloadLength. Like EncodeFrameHeader, applies no per-type rules.
std::string EncodeFrame(FrameType type, uint64_t segment_id, uint64_t offset,
                        absl::string_view payload);

}  // namespace walship::wire

#endif  // WALSHIP_COMMON_WIRE_FRAME_H_
