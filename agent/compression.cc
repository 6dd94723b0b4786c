#include "agent/compression.h"

#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walship::agent {

CompressionChoice NegotiateCompression(const walship::v1::HandshakeRequest& req, bool allow) {
  CompressionChoice c;
  const auto asked = static_cast<wire::Codec>(req.compression());
  if (asked == wire::Codec::kNone) return c;
  const char* name = wire::CodecName(asked);
  if (!allow) {
    c.declined = absl::StrCat("this agent runs with --allow-compression=false; ", name,
                              " was asked for");
    return c;
  }
  if (req.compression() != walship::v1::COMPRESSION_ZSTD &&
      req.compression() != walship::v1::COMPRESSION_LZ4) {
    c.declined = absl::StrCat("this agent does not know compression ", req.compression());
    return c;
  }
  if (!wire::CodecAvailable(asked)) {
    c.declined = absl::StrCat("this agent was built without ", name);
    return c;
  }
  const int level = req.compression_level() == 0 ? wire::LevelsOf(asked).default_level
                                                 : req.compression_level();
  if (absl::Status s = wire::ValidateLevel(asked, level); !s.ok()) {
    c.declined = std::string(s.message());
    return c;
  }
  c.codec = asked;
  c.level = level;
  return c;
}

void SetCompression(const CompressionChoice& choice, walship::v1::HandshakeResponse* resp) {
  resp->set_compression(static_cast<walship::v1::Compression>(choice.codec));
  resp->set_compression_level(choice.level);
  resp->set_compression_declined(choice.declined);
}

std::string CompressionLabel(wire::Codec codec, int level) {
  if (codec == wire::Codec::kNone) return "none";
  return absl::StrCat(wire::CodecName(codec), ":", level);
}

absl::StatusOr<std::unique_ptr<CompressedSender>> CompressedSender::Create(sys::SysCalls& sys,
                                                                           wire::Codec codec,
                                                                           int level) {
  WALSHIP_ASSIGN_OR_RETURN(std::unique_ptr<wire::Compressor> c,
                           wire::Compressor::Create(codec, level));
  return std::unique_ptr<CompressedSender>(new CompressedSender(sys, std::move(c)));
}

absl::StatusOr<uint32_t> CompressedSender::Send(net::DataConn& conn, int file,
                                                wire::FrameHeader h,
                                                const sys::TransferOptions& io) {
  raw_.resize(h.payload_length);
  WALSHIP_RETURN_IF_ERROR(
      sys::PreadFully(sys_, file, raw_.data(), raw_.size(), static_cast<off_t>(h.offset)));
  return SendBytes(conn, raw_, h, io);
}

absl::StatusOr<uint32_t> CompressedSender::SendBytes(net::DataConn& conn,
                                                     absl::Span<const uint8_t> raw,
                                                     wire::FrameHeader h,
                                                     const sys::TransferOptions& io) {
  const absl::string_view payload =
      wire::BuildCompressedFrame(*compressor_, raw, &h, &compressed_);
  uint8_t header[wire::kFrameHeaderSize];
  wire::EncodeFrameHeader(h, header);
  // MSG_MORE keeps the header in the same TCP segment as the payload.
  WALSHIP_RETURN_IF_ERROR(conn.SendFully(header, sizeof(header), /*more=*/true, io));
  WALSHIP_RETURN_IF_ERROR(conn.SendFully(payload.data(), payload.size(), /*more=*/false, io));
  return static_cast<uint32_t>(payload.size());
}

}  // namespace walship::agent
