// compressed_frames.h: the replica's side of compression on the data socket
// (common/wire/wire_format.md section 9).
//
// The replica asks for a codec in the handshake (--compress); the agent
// agrees or declines (HandshakeResponse.compression). A decline is a
// fallback, not a refusal: the session ships plain DATA frames, and the
// replica logs a warning naming the agent's reason at every handshake that
// declines, and exports walship_replica_compression{asked, agreed}, so an
// operator sees it without the replica ever stopping over it.
//
// With a codec agreed, ZDATA frames take the copy path: Receive() reads the
// compressed payload into a buffer, decompresses it into a second one
// (bounded by the header's declared length, which DecodeFrameHeader
// checked against the payload limit), verifies the CRC32C of the
// uncompressed bytes and hands them to SegmentWriter::WriteBytes, which
// pwrites them. A corrupt frame (bad compressed bytes, a wrong declared
// length, a wrong CRC) is kDataLoss with Reason::kChecksum and leaves
// nothing on disk. Plain DATA frames stay allowed in a compressing session
// (the agent sends bytes that do not shrink that way) and take the
// replica's --transport path as usual (splice with zerocopy). The
// destination holds plain segments either way.
//
// Thread-safety: Receive() from the session's receiver thread only; the
// counters from any thread.
#ifndef WALSHIP_REPLICA_COMPRESSED_FRAMES_H_
#define WALSHIP_REPLICA_COMPRESSED_FRAMES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "common/net/data_conn.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/wire/compress.h"
#include "common/wire/frame.h"
#include "proto/walship.pb.h"
#include "replica/replica_options.h"
#include "replica/segment_writer.h"

namespace walship::replica {

class CompressedFrames {
 public:
  // What `asked` (the options) got in `answer`; logs it (see above).
  CompressedFrames(const ReplicaOptions& asked, const walship::v1::HandshakeResponse& answer,
                   MetricsRegistry& metrics);

  // The codec agreed (kNone: plain DATA only).
  wire::Codec codec() const {
    return decompressor_ ? decompressor_->codec() : wire::Codec::kNone;
  }

  // A ZDATA frame whose header DecodeFrameHeader accepted: reads its
  // h.payload_length bytes from `conn` (the plain socket or its TLS
  // session), decompresses and verifies them and
  // writes them with `writer`. kDataLoss when no codec was agreed. Errors
  // of ReadFully (kUnavailable) and WriteBytes as they are.
  absl::Status Receive(net::DataConn& conn, const wire::FrameHeader& h,
                       const sys::TransferOptions& io, SegmentWriter& writer);

  // Segment bytes received in ZDATA frames, and the compressed bytes that
  // carried them.
  uint64_t raw_bytes() const { return raw_bytes_.load(); }
  uint64_t wire_bytes() const { return wire_bytes_.load(); }

 private:
  std::unique_ptr<wire::Decompressor> decompressor_;  // null: none agreed
  std::vector<uint8_t> compressed_;
  std::vector<uint8_t> raw_;
  std::atomic<uint64_t> raw_bytes_{0};
  std::atomic<uint64_t> wire_bytes_{0};
  MetricsRegistry::Family bytes_;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_COMPRESSED_FRAMES_H_
