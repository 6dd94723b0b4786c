// shipper.h: writes one replica's data socket.
//
// A Shipper follows the SegmentCatalog from a start position and writes
// frames (common/wire/wire_format.md) to the replica's data socket: a SEGMENT
// frame when it enters a segment, then DATA frames whose payload goes from
// the segment file to the socket with sendfile(2) (or pread/write with the
// copy transport). Everything shippable at the moment of sending is coalesced
// into frames of up to `max_payload` bytes, so a busy stream sends large
// frames and an idle one sends each append as soon as it is visible.
//
// When every byte of a complete segment has been sent, the Shipper reads the
// file once more and checks that it still holds exactly the bytes that were
// sent: it keeps the CRC32C of what it sent in pieces of kPieceBytes (and,
// when it started inside the segment, the prefix CRC the handshake verified),
// and compares each with the file. Only then does it report the checkpoint
// (name, length, CRC32C of the file) through ShipperEvents. A file written in
// place after its bytes went out (preallocated and filled, a flag rewritten on
// close) ends Run() with kFailedPrecondition (Reason::kSourceFailed) naming
// the file and the piece where it first differs: no checkpoint vouches for
// bytes the source no longer holds. Moving on to the next segment is checked
// by the StreamOrder: a segment missing between the two ends Run() with a gap
// (Reason::kGap), never skipped.
//
// Threading: Run() blocks on the calling thread until `stop` is set (then it
// returns OK within `idle_wait`), the socket fails (kUnavailable), or the
// source fails or is inconsistent with the replica's position
// (kFailedPrecondition, kDataLoss, kOutOfRange), or a segment was recycled
// or replaced under it (kAborted). To interrupt a blocked
// send, the owner shuts the socket down. The socket is borrowed.
//
// With `inline_sends`, while Run() waits the Shipper listens to the catalog
// (CatalogListener): a publication that only adds bytes to the segment it
// is in, at most kMaxInlineBytes of them and fewer than the socket can take
// at once (SysCalls::SendRoom), is sent on the publisher's thread, and
// Run()'s thread sleeps on; anything else (a new segment, a checkpoint, a
// backlog, a full socket) is left to Run()'s thread, as is the error of a
// failed inline send, which Run() returns. So the publisher never waits for
// a replica, and a replica that keeps up costs no thread switch per
// publication. One lock (`turn_`) gives the shipping state to one thread at
// a time.
//
// With `compression` (agreed at handshake, compression.h), every DATA frame
// takes the copy path through a CompressedSender: pread, compress, write a
// ZDATA frame (or plain DATA when the bytes do not shrink); the transport
// option then only names what an uncompressed session would use. The agent
// turns inline sends off for such a session (compressing is no work for a
// publisher's thread).
//
// Memory: one copy buffer for the copy transport or userspace TLS, and 16
// bytes per kPieceBytes of the segment being sent; with compression (or
// in-place bytes), a read buffer and a compression buffer of up to
// max_payload bytes each.
#ifndef WALSHIP_AGENT_SHIPPER_H_
#define WALSHIP_AGENT_SHIPPER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/compression.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/segment_locator.h"
#include "agent/stream_order.h"
#include "common/clock.h"
#include "common/commit_trace.h"
#include "common/file_crc.h"
#include "common/net/data_conn.h"
#include "common/position.h"
#include "common/segment_patch.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/transport.h"

namespace walship::agent {

struct ShipperOptions {
  Transport transport = Transport::kZeroCopy;
  uint32_t max_payload = 1u << 20;
  size_t copy_buffer_bytes = 256u << 10;
  absl::Duration idle_wait = absl::Milliseconds(200);
  sys::TransferOptions io;
  // Off when each send must be paced (a rate limit sleeps in OnSent).
  bool inline_sends = false;
  // Records each DATA frame sent (TraceStage::kSent); null: off. Borrowed.
  CommitTrace* trace = nullptr;
  // Compression agreed at handshake (compression.h); kNone: plain DATA.
  wire::Codec compression = wire::Codec::kNone;
  int compression_level = 0;
  // The data socket's TLS session (common/net/tls_conn.h), borrowed; null:
  // the plain socket `data_fd`, with `transport`.
  net::DataConn* conn = nullptr;
  // The source's WalSource::MutableBytes: bits that may have changed in
  // place since they were sent. The check at completion lets only these
  // differ, and the checkpoint carries their final values.
  std::vector<MutableBits> mutable_bytes;
};

class ShipperEvents {
 public:
  virtual ~ShipperEvents() = default;
  // All bytes of `segment` up to `length` have been written to the socket.
  virtual void OnCheckpoint(const std::string& segment, uint64_t length,
                            uint32_t crc32c) = 0;
  // The same, for a source that rewrites bytes in place: `patches` are the
  // final values of its mutable bytes (the replica writes them before it
  // checks `length` and `crc32c`). By default the patches are dropped: for
  // sinks that only count checkpoints; a sink that passes them on to a
  // replica must override it.
  virtual void OnCheckpointWithPatches(const std::string& segment, uint64_t length,
                                       uint32_t crc32c, const std::vector<SegmentPatch>& patches) {
    (void)patches;
    OnCheckpoint(segment, length, crc32c);
  }
  // `bytes` payload bytes were written; `sent` is the new send position.
  virtual void OnSent(const Position& sent, uint64_t bytes, bool zerocopy) = 0;
  // Before OnSent of a frame that went out compressed (ZDATA): its `raw`
  // segment bytes took `wire` bytes on the socket.
  virtual void OnCompressed(uint64_t raw, uint64_t wire) {}
};

class Shipper final : private CatalogListener {
 public:
  // The most an inline send moves; more is a backlog for Run()'s thread.
  static constexpr uint64_t kMaxInlineBytes = 256 << 10;

  // Granularity of the check at a segment's completion (see above).
  static constexpr uint64_t kPieceBytes = 64 << 10;

  // `start` is where the replica's copy ends; with start.offset > 0,
  // `start_prefix_crc32c` is the CRC32C of its bytes [0, start.offset), as
  // verified against the source at handshake. `order` proves each step to
  // the next segment. All references must outlive the Shipper.
  Shipper(sys::SysCalls& sys, SegmentCatalog& catalog, const StreamOrder& order,
          SegmentChecksums& checksums, SegmentLocator segments, int data_fd, Position start,
          uint32_t start_prefix_crc32c, ShipperOptions options, ShipperEvents* events,
          Clock& clock = DefaultClock());

  absl::Status Run(const std::atomic<bool>& stop);

 private:
  // One pass of Run() with turn_ held: the catalog version to wait at when
  // there is nothing to do, or nullopt to go round again at once.
  absl::StatusOr<std::optional<uint64_t>> Step() ABSL_EXCLUSIVE_LOCKS_REQUIRED(turn_);
  bool Claim() override;
  void Pump(const CatalogSnapshot& snap) override;
  // Pump's send; *caught_up when nothing is left to do at `snap`.
  absl::Status PumpLocked(const CatalogSnapshot& snap, bool* caught_up)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(turn_);
  absl::Status EnterSegment(const std::string& name);
  absl::Status SendData(uint64_t length);
  absl::Status SendHeader(const wire::FrameHeader& h);
  // SendData's steps: records the CRC32C `crc` of the piece of the segment
  // that ends at `end` (a frame's bytes from `at` on extend the last piece
  // or begin a new one); the DATA header of the next `length` bytes; after
  // they went out, moves the position and reports them.
  void NotePiece(uint64_t at, uint64_t end, uint32_t crc);
  wire::FrameHeader DataHeader(uint64_t length, uint32_t crc) const;
  void AfterSent(uint64_t length, bool zerocopy);
  // SendData for a compressing session, and for a frame that covers a byte
  // the source may rewrite in place (ShipperOptions::mutable_bytes): the
  // payload is read once into memory, checksummed and compressed or sent
  // from there, so that its CRC32C is that of the bytes sent even when the
  // database rewrites the byte meanwhile (sendfile would send the new value
  // under the old CRC, and the replica would reject the frame).
  absl::Status SendBuffered(uint64_t length);
  // The segment's name still points at the file being sent (kAborted if not).
  absl::Status CheckSameFile(const std::string& path) const;
  // After the last byte of the current segment went out: the file holds
  // exactly what was sent; returns its CRC32C for the checkpoint.
  absl::StatusOr<uint32_t> VerifySent(uint64_t length);
  // True when bytes sent from `at` on belong to the last piece recorded.
  bool ExtendsLastPiece(uint64_t at) const;

  Clock& clock_;

  sys::SysCalls& sys_;
  SegmentCatalog& catalog_;
  // Held by whichever thread is shipping: Run()'s, or a publisher's
  // between Claim() and the end of Pump(). The members below are its.
  absl::Mutex turn_;
  // The first failure of an inline send; Run() returns it.
  absl::Status pump_status_ ABSL_GUARDED_BY(turn_);
  SegmentChecksums& checksums_;
  const SegmentLocator segments_;
  const int fd_;
  Position pos_;
  const ShipperOptions options_;
  ShipperEvents* const events_;
  uint64_t handle_ = 0;
  bool entered_ = false;
  const StreamOrder& order_;
  const uint32_t start_prefix_crc_;
  // What was sent of the current segment: CRC32C of [begin, end) for each
  // piece, in order from 0 (the first may be the verified prefix).
  struct Piece {
    uint64_t begin;
    uint64_t end;
    uint32_t crc;
  };
  std::vector<Piece> sent_;
  // sent_[0] is the prefix verified at handshake.
  bool has_prefix_ = false;
  sys::UniqueFd segment_file_;
  // The open file's identity, to compare with what its name points at.
  uint64_t segment_dev_ = 0;
  uint64_t segment_ino_ = 0;
  // How bytes reach the socket: options_.conn, or a plain one of our own.
  std::unique_ptr<net::DataConn> own_conn_;
  net::DataConn* conn_;
  FileCrcReader crc_reader_;
  // Set when the session compresses (ShipperOptions::compression).
  std::unique_ptr<CompressedSender> compressed_;
  // SendBuffered's payload, kept between frames.
  std::vector<uint8_t> buffered_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SHIPPER_H_
