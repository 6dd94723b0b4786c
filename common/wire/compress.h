// -----------------------------------------------------------------------------
// File: common/wire/compress.h
// -----------------------------------------------------------------------------
//
// Compression of DATA payloads on the data socket (wire_format.md section 9):
// the ZDATA frame, built by the agent from segment bytes it has read into
// memory, and checked and expanded by the replica before a byte of it is
// written.
//
// Compression always uses the copy path: the agent preads the bytes,
// compresses them and writes header + compressed payload; the replica reads
// the compressed payload, decompresses it into a buffer, verifies the CRC32C
// of the uncompressed bytes and pwrites them. Neither sendfile(2) nor
// splice(2) is involved.
//
// Sending:
//
//   absl::StatusOr<std::unique_ptr<Compressor>> c = Compressor::Create(Codec::kZstd, 3);
//   FrameHeader h{FrameType::kData, handle, offset, len, Crc32c(raw, len)};
//   std::string_view payload = BuildCompressedFrame(**c, raw, &h, &scratch);
//   ... write EncodeFrameHeader(h), then `payload` (compressed, or `raw` as
//   plain DATA when it did not shrink) ...
//
// Receiving, after DecodeFrameHeader accepted a ZDATA header (which bounds
// raw_length by the payload limit: the decompression bomb guard):
//
//   ... read exactly h.payload_length bytes into `compressed` ...
//   absl::Status s = DecompressPayload(*decompressor, h, compressed, &raw);
//   if (!s.ok()) return s;   // kDataLoss, Reason::kChecksum; write nothing
//   ... `raw` holds h.raw_length bytes whose CRC32C is h.payload_crc32c ...
//
// Thread-safety: a Compressor or Decompressor keeps codec state between
// calls; one thread at a time each. The free functions are pure.

#ifndef WALSHIP_COMMON_WIRE_COMPRESS_H_
#define WALSHIP_COMMON_WIRE_COMPRESS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/wire/frame.h"

namespace walship::wire {

// Parses "none", "zstd" or "lz4"; kInvalidArgument otherwise.
absl::StatusOr<Codec> ParseCodec(absl::string_view text);

// Compression levels: zstd 1..19 (default 1: fast, and WAL compresses well
// even so), lz4 1..12 (1: LZ4's fast compressor, the default; 2..12: LZ4 HC
// at that level). `none` has only level 0.
struct LevelRange {
  int min;
  int max;
  int default_level;
};
LevelRange LevelsOf(Codec codec);
// kInvalidArgument, naming the range, when `level` is outside LevelsOf(codec).
absl::Status ValidateLevel(Codec codec, int level);

// True when this build can compress and decompress `codec` (kNone: true).
bool CodecAvailable(Codec codec);

class Compressor {
 public:
  // kInvalidArgument for kNone, an unavailable codec or a level outside its
  // range.
  static absl::StatusOr<std::unique_ptr<Compressor>> Create(Codec codec, int level);
  virtual ~Compressor() = default;

  Codec codec() const { return codec_; }
  int level() const { return level_; }

  // Compresses `in` (1..kMaxPayloadLength bytes) into `out`, resized to the
  // compressed size. kInternal if the codec fails (it does not on valid
  // input; the caller then sends plain DATA).
  virtual absl::Status Compress(absl::Span<const uint8_t> in, std::vector<uint8_t>* out) = 0;

 protected:
  Compressor(Codec codec, int level) : codec_(codec), level_(level) {}

 private:
  const Codec codec_;
  const int level_;
};

class Decompressor {
 public:
  // kInvalidArgument for kNone or an unavailable codec.
  static absl::StatusOr<std::unique_ptr<Decompressor>> Create(Codec codec);
  virtual ~Decompressor() = default;

  Codec codec() const { return codec_; }

  // Decompresses `in` into exactly out.size() bytes: it never writes past
  // `out`. kDataLoss when `in` is not valid compressed data, or expands to
  // more or fewer than out.size() bytes.
  virtual absl::Status Decompress(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) = 0;

 protected:
  explicit Decompressor(Codec codec) : codec_(codec) {}

 private:
  const Codec codec_;
};

// Agent side. `h` is the DATA header of the `raw` segment bytes (type kData,
// payload_length = raw.size(), payload_crc32c = CRC32C of raw). Compresses
// `raw` into `*scratch`; when that shrinks it, turns `h` into a ZDATA header
// (codec, raw_length, payload_length = compressed size; the CRC stays) and
// returns the compressed bytes. Otherwise (incompressible, or the codec
// failed) leaves `h` a DATA header and returns `raw`. The result points
// into `raw` or `*scratch`.
absl::string_view BuildCompressedFrame(Compressor& compressor, absl::Span<const uint8_t> raw,
                                       FrameHeader* h, std::vector<uint8_t>* scratch);

// Replica side. `h` is a ZDATA header DecodeFrameHeader accepted and
// `compressed` its h.payload_length payload bytes. Decompresses into `*raw`
// (resized to h.raw_length, which the decoder bounded) and verifies it with
// VerifyPayload (length and CRC32C of the uncompressed bytes). Every failure
// (a codec other than the decompressor's, bytes the codec rejects, a length
// other than declared, a CRC mismatch) is kDataLoss with Reason::kChecksum,
// naming the segment handle and offset; `*raw` must then not be used.
absl::Status DecompressPayload(Decompressor& decompressor, const FrameHeader& h,
                               absl::Span<const uint8_t> compressed, std::vector<uint8_t>* raw);

}  // namespace walship::wire

#endif  // WALSHIP_COMMON_WIRE_COMPRESS_H_
