#include "replica/compressed_frames.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

std::string Label(wire::Codec codec, int level) {
  if (codec == wire::Codec::kNone) return "none";
  return absl::StrCat(wire::CodecName(codec), ":", level);
}

}  // namespace

CompressedFrames::CompressedFrames(const ReplicaOptions& asked,
                                   const walship::v1::HandshakeResponse& answer,
                                   MetricsRegistry& metrics)
    : bytes_(metrics.Counter("walship_replica_compression_bytes_total", "")) {
  const auto agreed = static_cast<wire::Codec>(answer.compression());
  const char* asked_name = wire::CodecName(asked.compression);
  MetricsRegistry::Family info = metrics.Gauge("walship_replica_compression", "");
  info.Clear();
  if (asked.compression == wire::Codec::kNone) {
    info.Set({{"asked", "none"}, {"agreed", "none"}}, 1);
    return;
  }
  absl::StatusOr<std::unique_ptr<wire::Decompressor>> d =
      agreed == asked.compression ? wire::Decompressor::Create(agreed)
                                  : absl::InvalidArgumentError("not agreed");
  if (!d.ok()) {
    // A fallback, not a refusal: shipping goes on uncompressed.
    const std::string why = answer.compression_declined().empty()
                                ? std::string("the agent does not offer compression (an older "
                                              "agent?)")
                                : answer.compression_declined();
    spdlog::warn("--compress={}: the agent declined ({}); receiving uncompressed frames",
                 asked_name, why);
    info.Set({{"asked", asked_name}, {"agreed", "none"}}, 1);
    return;
  }
  decompressor_ = std::move(*d);
  spdlog::info("compression {} agreed: the data socket uses the copy path (read, decompress, "
               "verify, pwrite)",
               Label(agreed, answer.compression_level()));
  info.Set({{"asked", asked_name}, {"agreed", asked_name}}, 1);
}

absl::Status CompressedFrames::Receive(net::DataConn& conn, const wire::FrameHeader& h,
                                       const sys::TransferOptions& io, SegmentWriter& writer) {
  if (decompressor_ == nullptr) {
    return absl::DataLossError(absl::StrCat(
        "ZDATA frame (", wire::CodecName(h.codec), ", segment_id ", h.segment_id, ", offset ",
        h.offset, ") but no compression was agreed at handshake"));
  }
  compressed_.resize(h.payload_length);  // bounded by DecodeFrameHeader
  WALSHIP_RETURN_IF_ERROR(conn.ReadFully(compressed_.data(), compressed_.size(), io));
  WALSHIP_RETURN_IF_ERROR(wire::DecompressPayload(*decompressor_, h, compressed_, &raw_));
  WALSHIP_RETURN_IF_ERROR(writer.WriteBytes(h, raw_));
  raw_bytes_ += h.raw_length;
  wire_bytes_ += h.payload_length;
  bytes_.Add({{"bytes", "uncompressed"}}, h.raw_length);
  bytes_.Add({{"bytes", "wire"}}, h.payload_length);
  return absl::OkStatus();
}

}  // namespace walship::replica
