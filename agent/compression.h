// compression.h: the agent's side of compression on the data socket
// (common/wire/wire_format.md section 9).
//
// At handshake, NegotiateCompression answers what a replica asked for
// (HandshakeRequest.compression): the agent agrees to a codec it can run at
// a valid level, unless it was started with --allow-compression=false; it
// declines otherwise, saying why in HandshakeResponse.compression_declined.
// Declining is not a refusal: the session goes ahead with plain DATA frames
// and the replica logs a warning (a replica that keeps shipping beats one
// that stops over an optimisation).
//
// While shipping, the Shipper hands each DATA frame of a compressing session
// to a CompressedSender: it compresses the frame's bytes (read once into a
// buffer), and writes a ZDATA header and the compressed payload (or
// a plain DATA header and the bytes themselves when they do not shrink).
// This is the copy path: sendfile(2) cannot compress.
//
// Thread-safety: NegotiateCompression is pure. A CompressedSender belongs to
// one Shipper and is used by whichever thread holds its turn.
#ifndef WALSHIP_AGENT_COMPRESSION_H_
#define WALSHIP_AGENT_COMPRESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net/data_conn.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/wire/compress.h"
#include "common/wire/frame.h"
#include "proto/walship.pb.h"

namespace walship::agent {

// What a session's data socket carries: codec kNone (plain DATA), or the
// codec and level agreed at handshake.
struct CompressionChoice {
  wire::Codec codec = wire::Codec::kNone;
  int level = 0;
  // Why the agent declined what the replica asked for; empty otherwise.
  std::string declined;
};

// The agent's answer to `req` (see the top of this file). `allow` is
// AgentOptions::allow_compression.
CompressionChoice NegotiateCompression(const walship::v1::HandshakeRequest& req, bool allow);

// Fills HandshakeResponse's compression fields from `choice`.
void SetCompression(const CompressionChoice& choice, walship::v1::HandshakeResponse* resp);

// "none", or "zstd:1", "lz4:1" ...: for logs and status.
std::string CompressionLabel(wire::Codec codec, int level);

// Sends DATA frames of one segment file as ZDATA (see the top of this file).
class CompressedSender {
 public:
  // kInvalidArgument for kNone or a level outside the codec's range.
  static absl::StatusOr<std::unique_ptr<CompressedSender>> Create(sys::SysCalls& sys,
                                                                  wire::Codec codec, int level);

  // Sends the frame `h` describes (a DATA header: segment handle, offset,
  // payload_length = the number of bytes, payload_crc32c = their CRC32C as
  // the caller computed it from `file`) with the bytes
  // [h.offset, h.offset + h.payload_length) of `file`, on `conn` (a plain
  // socket or a TLS session: compression always takes the copy path).
  // Returns the payload bytes written to the socket (compressed, or
  // h.payload_length when the frame went out as DATA). If the file changed
  // since the CRC was computed, the replica rejects the frame, as for plain
  // DATA. Errors: PreadFully's and SendFully's.
  absl::StatusOr<uint32_t> Send(net::DataConn& conn, int file, wire::FrameHeader h,
                                const sys::TransferOptions& io);
  // The same for bytes the caller already read: `raw` are the frame's
  // h.payload_length bytes (the Shipper reads each once, for the pieces'
  // CRCs and for this).
  absl::StatusOr<uint32_t> SendBytes(net::DataConn& conn, absl::Span<const uint8_t> raw,
                                     wire::FrameHeader h, const sys::TransferOptions& io);

  wire::Codec codec() const { return compressor_->codec(); }

 private:
  CompressedSender(sys::SysCalls& sys, std::unique_ptr<wire::Compressor> compressor)
      : sys_(sys), compressor_(std::move(compressor)) {}

  sys::SysCalls& sys_;
  const std::unique_ptr<wire::Compressor> compressor_;
  std::vector<uint8_t> raw_;
  std::vector<uint8_t> compressed_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_COMPRESSION_H_
