// zstd and lz4 behind Compressor/Decompressor, and the ZDATA helpers; see
// compress.h and wire_format.md section 9.

#include "common/wire/compress.h"

#include <lz4.h>
#include <lz4hc.h>
#include <zstd.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "common/status_macros.h"

namespace walship::wire {
namespace {

class ZstdCompressor final : public Compressor {
 public:
  explicit ZstdCompressor(int level) : Compressor(Codec::kZstd, level), ctx_(ZSTD_createCCtx()) {}
  ~ZstdCompressor() override { ZSTD_freeCCtx(ctx_); }

  absl::Status Compress(absl::Span<const uint8_t> in, std::vector<uint8_t>* out) override {
    if (ctx_ == nullptr) return absl::InternalError("zstd: cannot allocate a context");
    out->resize(ZSTD_compressBound(in.size()));
    const size_t n =
        ZSTD_compressCCtx(ctx_, out->data(), out->size(), in.data(), in.size(), level());
    if (ZSTD_isError(n)) {
      return absl::InternalError(absl::StrCat("zstd compression: ", ZSTD_getErrorName(n)));
    }
    out->resize(n);
    return absl::OkStatus();
  }

 private:
  ZSTD_CCtx* const ctx_;
};

class Lz4Compressor final : public Compressor {
 public:
  explicit Lz4Compressor(int level)
      : Compressor(Codec::kLz4, level),
        state_(static_cast<size_t>(level == 1 ? LZ4_sizeofState() : LZ4_sizeofStateHC())) {}

  absl::Status Compress(absl::Span<const uint8_t> in, std::vector<uint8_t>* out) override {
    if (in.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
      return absl::InternalError(absl::StrCat("lz4: ", in.size(), " bytes is too much input"));
    }
    const int src_size = static_cast<int>(in.size());
    out->resize(static_cast<size_t>(LZ4_compressBound(src_size)));
    const char* src = reinterpret_cast<const char*>(in.data());
    char* dst = reinterpret_cast<char*>(out->data());
    const int cap = static_cast<int>(out->size());
    const int n = level() == 1
                      ? LZ4_compress_fast_extState(state_.data(), src, dst, src_size, cap, 1)
                      : LZ4_compress_HC_extStateHC(state_.data(), src, dst, src_size, cap,
                                                   level());
    if (n <= 0) return absl::InternalError("lz4 compression failed");
    out->resize(static_cast<size_t>(n));
    return absl::OkStatus();
  }

 private:
  // LZ4's state must be 8-byte aligned; a vector of uint64_t is.
  struct AlignedState {
    explicit AlignedState(size_t bytes) : words((bytes + 7) / 8) {}
    void* data() { return words.data(); }
    std::vector<uint64_t> words;
  };
  AlignedState state_;
};

class ZstdDecompressor final : public Decompressor {
 public:
  ZstdDecompressor() : Decompressor(Codec::kZstd), ctx_(ZSTD_createDCtx()) {}
  ~ZstdDecompressor() override { ZSTD_freeDCtx(ctx_); }

  absl::Status Decompress(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    if (ctx_ == nullptr) return absl::InternalError("zstd: cannot allocate a context");
    // Bounded by out.size(): zstd stops with an error rather than write
    // past the buffer, whatever the compressed bytes claim.
    const size_t n = ZSTD_decompressDCtx(ctx_, out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(n)) {
      return absl::DataLossError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
    }
    if (n != out.size()) {
      return absl::DataLossError(
          absl::StrCat("zstd: expanded to ", n, " bytes, frame declares ", out.size()));
    }
    return absl::OkStatus();
  }

 private:
  ZSTD_DCtx* const ctx_;
};

class Lz4Decompressor final : public Decompressor {
 public:
  Lz4Decompressor() : Decompressor(Codec::kLz4) {}

  absl::Status Decompress(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    constexpr size_t kIntMax = static_cast<size_t>(std::numeric_limits<int>::max());
    if (in.size() > kIntMax || out.size() > kIntMax) {
      return absl::DataLossError("lz4: frame too large");
    }
    // The "safe" decoder: never reads past `in` nor writes past `out`.
    const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data()),
                                      reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(in.size()), static_cast<int>(out.size()));
    if (n < 0) return absl::DataLossError("lz4: malformed compressed bytes");
    if (static_cast<size_t>(n) != out.size()) {
      return absl::DataLossError(
          absl::StrCat("lz4: expanded to ", n, " bytes, frame declares ", out.size()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<Codec> ParseCodec(absl::string_view text) {
  if (text == "none") return Codec::kNone;
  if (text == "zstd") return Codec::kZstd;
  if (text == "lz4") return Codec::kLz4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression \"", text, "\" (known: zstd, lz4, none)"));
}

LevelRange LevelsOf(Codec codec) {
  switch (codec) {
    case Codec::kZstd:
      return LevelRange{1, 19, 1};
    case Codec::kLz4:
      return LevelRange{1, 12, 1};
    case Codec::kNone:
      break;
  }
  return LevelRange{0, 0, 0};
}

absl::Status ValidateLevel(Codec codec, int level) {
  const LevelRange r = LevelsOf(codec);
  if (level < r.min || level > r.max) {
    return absl::InvalidArgumentError(absl::StrCat("compression level ", level, " for ",
                                                   CodecName(codec), " outside [", r.min, ", ",
                                                   r.max, "]"));
  }
  return absl::OkStatus();
}

bool CodecAvailable(Codec codec) {
  return codec == Codec::kNone || codec == Codec::kZstd || codec == Codec::kLz4;
}

absl::StatusOr<std::unique_ptr<Compressor>> Compressor::Create(Codec codec, int level) {
  if (codec == Codec::kNone || !CodecAvailable(codec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no compressor for codec ", CodecName(codec)));
  }
  WALSHIP_RETURN_IF_ERROR(ValidateLevel(codec, level));
  if (codec == Codec::kZstd) return std::unique_ptr<Compressor>(new ZstdCompressor(level));
  return std::unique_ptr<Compressor>(new Lz4Compressor(level));
}

absl::StatusOr<std::unique_ptr<Decompressor>> Decompressor::Create(Codec codec) {
  if (codec == Codec::kZstd) return std::unique_ptr<Decompressor>(new ZstdDecompressor());
  if (codec == Codec::kLz4) return std::unique_ptr<Decompressor>(new Lz4Decompressor());
  return absl::InvalidArgumentError(
      absl::StrCat("no decompressor for codec ", CodecName(codec)));
}

absl::string_view BuildCompressedFrame(Compressor& compressor, absl::Span<const uint8_t> raw,
                                       FrameHeader* h, std::vector<uint8_t>* scratch) {
  const absl::string_view plain(reinterpret_cast<const char*>(raw.data()), raw.size());
  if (raw.empty() || !compressor.Compress(raw, scratch).ok() || scratch->empty() ||
      scratch->size() >= raw.size()) {
    return plain;
  }
  h->type = FrameType::kCompressedData;
  h->codec = compressor.codec();
  h->raw_length = static_cast<uint32_t>(raw.size());
  h->payload_length = static_cast<uint32_t>(scratch->size());
  return absl::string_view(reinterpret_cast<const char*>(scratch->data()), scratch->size());
}

absl::Status DecompressPayload(Decompressor& decompressor, const FrameHeader& h,
                               absl::Span<const uint8_t> compressed, std::vector<uint8_t>* raw) {
  const std::string where =
      absl::StrCat("ZDATA frame (segment_id ", h.segment_id, ", offset ", h.offset, ", ",
                   h.payload_length, " bytes expanding to ", h.raw_length, ")");
  absl::Status s;
  if (h.type != FrameType::kCompressedData || h.codec != decompressor.codec()) {
    s = absl::DataLossError(absl::StrCat("codec ", CodecName(h.codec), ", but the handshake "
                                         "agreed ", CodecName(decompressor.codec())));
  } else if (compressed.size() != h.payload_length) {
    s = absl::DataLossError(absl::StrCat("payload is ", compressed.size(), " bytes"));
  } else {
    raw->resize(h.raw_length);  // bounded by DecodeFrameHeader
    s = decompressor.Decompress(compressed, absl::MakeSpan(*raw));
    if (s.ok()) s = VerifyPayload(h, absl::MakeConstSpan(*raw));
  }
  if (s.ok()) return s;
  return WithReason(absl::DataLossError(absl::StrCat("corrupt ", where, ": ", s.message())),
                    Reason::kChecksum);
}

}  // namespace walship::wire
