#include "agent/shipper.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/segment_patches.h"
#include "common/reason.h"
#include "common/file_crc.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "spdlog/spdlog.h"

namespace walship::agent {

Shipper::Shipper(sys::SysCalls& sys, SegmentCatalog& catalog, const StreamOrder& order,
                 SegmentChecksums& checksums, SegmentLocator segments, int data_fd,
                 Position start, uint32_t start_prefix_crc32c, ShipperOptions options,
                 ShipperEvents* events, Clock& clock)
    : clock_(clock),
      sys_(sys),
      catalog_(catalog),
      checksums_(checksums),
      segments_(std::move(segments)),
      fd_(data_fd),
      pos_(std::move(start)),
      options_(options),
      events_(events),
      order_(order),
      start_prefix_crc_(start_prefix_crc32c),
      crc_reader_(sys) {
  if (options_.conn == nullptr) {
    own_conn_ = net::MakePlainConn(sys, data_fd, options_.transport, options_.copy_buffer_bytes);
  }
  conn_ = options_.conn != nullptr ? options_.conn : own_conn_.get();
  if (options_.compression != wire::Codec::kNone) {
    auto sender = CompressedSender::Create(sys_, options_.compression, options_.compression_level);
    if (sender.ok()) {
      compressed_ = std::move(*sender);
    } else {  // the handshake validated it; plain DATA is always understood
      spdlog::error("compression: {}; sending uncompressed", sender.status().ToString());
    }
  }
}

absl::Status Shipper::EnterSegment(const std::string& name) {
  std::string path = segments_.Path(sys_, name);
  absl::StatusOr<sys::UniqueFd> opened = sys::OpenRegularFile(sys_, path);
  if (absl::IsFailedPrecondition(opened.status())) {
    // Replaced by a link or another kind of file since it was listed.
    return absl::AbortedError(absl::StrCat("segment ", name, " was replaced: ",
                                           opened.status().message()));
  }
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd file, std::move(opened));
  sys::FileFacts facts;
  if (sys::SysResult r = sys::DescribeFd(sys_, file.get(), &facts); !r.ok()) {
    return sys::ErrnoToStatus(r.err, absl::StrCat("statx ", path));
  }
  segment_dev_ = facts.dev;
  segment_ino_ = facts.ino;
  segment_file_ = std::move(file);
  sent_.clear();
  // Only the segment shipping starts in is entered past its start: its
  // prefix is the replica's, verified at handshake.
  has_prefix_ = pos_.offset > 0;
  if (has_prefix_) sent_.push_back(Piece{0, pos_.offset, start_prefix_crc_});
  std::string frame = wire::EncodeFrame(wire::FrameType::kSegment, ++handle_,
                                        pos_.offset, name);
  WALSHIP_RETURN_IF_ERROR(
      conn_->SendFully(frame.data(), frame.size(), /*more=*/false, options_.io));
  entered_ = true;
  return absl::OkStatus();
}

bool Shipper::ExtendsLastPiece(uint64_t at) const {
  // Pieces end at kPieceBytes boundaries; the verified prefix is never
  // extended (it may end anywhere).
  return !sent_.empty() && sent_.back().end == at && at % kPieceBytes != 0 &&
         !(sent_.size() == 1 && has_prefix_);
}

absl::Status Shipper::CheckSameFile(const std::string& path) const {
  // Bytes read from the open file belong to this segment only if its name
  // still points at it: PostgreSQL recycles a segment by renaming it before
  // overwriting it, so an unchanged name means unrecycled content.
  // Asked at every frame, so never for the file's times (file_util.h).
  sys::FileFacts by_name;
  sys::SysResult r = sys::DescribePath(sys_, path, &by_name);
  if (!r.ok() || by_name.ino != segment_ino_ || by_name.dev != segment_dev_) {
    return absl::AbortedError(absl::StrCat(
        "segment ", pos_.segment, " was recycled or replaced while being shipped (at offset ",
        pos_.offset, "); restarting the session"));
  }
  return absl::OkStatus();
}

absl::Status Shipper::SendData(uint64_t length) {
  if (compressed_ != nullptr) return SendBuffered(length);  // the copy path either way
  for (const MutableBits& b : options_.mutable_bytes) {
    if (b.offset >= pos_.offset && b.offset < pos_.offset + length) return SendBuffered(length);
  }
  const std::string context = segments_.Path(sys_, pos_.segment);
  // One pass: the frame's CRC, and the CRC of each piece it covers, kept for
  // the check at the segment's completion.
  uint32_t crc = 0;
  for (uint64_t at = pos_.offset; at < pos_.offset + length;) {
    const uint64_t end = std::min(pos_.offset + length, (at / kPieceBytes + 1) * kPieceBytes);
    const bool extends = ExtendsLastPiece(at);
    WALSHIP_ASSIGN_OR_RETURN(auto crcs,
                             crc_reader_.Twice(segment_file_.get(), at, end - at, context, crc,
                                               extends ? sent_.back().crc : 0));
    crc = crcs.first;
    NotePiece(at, end, crcs.second);
    at = end;
  }
  // (A change after this check makes the payload disagree with its CRC, and
  // the replica rejects it.)
  if (absl::Status same = CheckSameFile(context); !same.ok()) {
    sent_.clear();
    return same;
  }
  WALSHIP_RETURN_IF_ERROR(SendHeader(DataHeader(length, crc)));
  WALSHIP_RETURN_IF_ERROR(
      conn_->SendFile(segment_file_.get(), pos_.offset, length, options_.io));
  AfterSent(length, conn_->zerocopy());
  return absl::OkStatus();
}

absl::Status Shipper::SendBuffered(uint64_t length) {
  const std::string context = segments_.Path(sys_, pos_.segment);
  std::vector<uint8_t>& buf = buffered_;
  buf.resize(length);
  WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys_, segment_file_.get(), buf.data(), length,
                                          static_cast<off_t>(pos_.offset)));
  for (uint64_t at = pos_.offset; at < pos_.offset + length;) {
    const uint64_t end = std::min(pos_.offset + length, (at / kPieceBytes + 1) * kPieceBytes);
    const uint8_t* p = buf.data() + (at - pos_.offset);
    NotePiece(at, end, ExtendsLastPiece(at) ? wire::Crc32cExtend(sent_.back().crc, p, end - at)
                                            : wire::Crc32c(p, end - at));
    at = end;
  }
  if (absl::Status same = CheckSameFile(context); !same.ok()) {
    sent_.clear();
    return same;
  }
  const wire::FrameHeader h = DataHeader(length, wire::Crc32c(buf.data(), buf.size()));
  if (compressed_ != nullptr) {
    WALSHIP_ASSIGN_OR_RETURN(const uint32_t on_wire,
                             compressed_->SendBytes(*conn_, buf, h, options_.io));
    if (on_wire < length) events_->OnCompressed(length, on_wire);
  } else {
    WALSHIP_RETURN_IF_ERROR(SendHeader(h));
    WALSHIP_RETURN_IF_ERROR(
        conn_->SendFully(buf.data(), buf.size(), /*more=*/false, options_.io));
  }
  AfterSent(length, /*zerocopy=*/false);
  return absl::OkStatus();
}

void Shipper::NotePiece(uint64_t at, uint64_t end, uint32_t crc) {
  if (ExtendsLastPiece(at)) {
    sent_.back().end = end;
    sent_.back().crc = crc;
  } else {
    sent_.push_back(Piece{at, end, crc});
  }
}

wire::FrameHeader Shipper::DataHeader(uint64_t length, uint32_t crc) const {
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.segment_id = handle_;
  h.offset = pos_.offset;
  h.payload_length = static_cast<uint32_t>(length);
  h.payload_crc32c = crc;
  return h;
}

void Shipper::AfterSent(uint64_t length, bool zerocopy) {
  pos_.offset += length;
  if (options_.trace != nullptr) {
    options_.trace->Record(TraceStage::kSent, pos_.segment, pos_.offset);
  }
  events_->OnSent(pos_, length, zerocopy);
}

absl::Status Shipper::SendHeader(const wire::FrameHeader& h) {
  uint8_t header[wire::kFrameHeaderSize];
  wire::EncodeFrameHeader(h, header);
  // MSG_MORE keeps the header in the same TCP segment as the payload.
  return conn_->SendFully(header, sizeof(header), /*more=*/true, options_.io);
}

absl::StatusOr<uint32_t> Shipper::VerifySent(uint64_t length) {
  const std::string path = segments_.Path(sys_, pos_.segment);
  // Before reading: a write after this shows in the modification time, so
  // the checksum cache never vouches for later contents.
  struct stat before;
  if (sys::SysResult r = sys_.Fstat(segment_file_.get(), &before); !r.ok()) {
    return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", path));
  }
  uint32_t whole = 0;
  uint64_t covered = 0;
  for (const Piece& p : sent_) {
    if (p.begin != covered) break;  // never: pieces are contiguous from 0
    WALSHIP_ASSIGN_OR_RETURN(
        auto crcs,
        crc_reader_.Twice(segment_file_.get(), p.begin, p.end - p.begin, path, 0, whole));
    WALSHIP_ASSIGN_OR_RETURN(
        bool same, MatchesButMutable(sys_, segment_file_.get(), p.begin, p.end - p.begin,
                                     crcs.first, p.crc, options_.mutable_bytes));
    if (!same) {
      return WithReason(
          absl::FailedPreconditionError(absl::StrFormat(
              "segment %s changed after its bytes were shipped: bytes [%d, %d) of %s no "
              "longer hold what was sent (the first difference is at or after offset %d); "
              "a file written in place (preallocated, or rewritten when closed) cannot be "
              "followed as an append-only segment. Not vouching for it",
              pos_.segment, p.begin, p.end, path, p.begin)),
          Reason::kSourceFailed);
    }
    whole = crcs.second;
    covered = p.end;
  }
  if (covered != length) {
    return absl::InternalError(absl::StrCat("shipper: sent ", covered, " bytes of ",
                                            pos_.segment, ", expected ", length));
  }
  WALSHIP_RETURN_IF_ERROR(CheckSameFile(path));
  checksums_.Put(pos_.segment, length, whole, before);
  return whole;
}

absl::Status Shipper::Run(const std::atomic<bool>& stop) {
  if (options_.inline_sends) catalog_.AddListener(this);
  absl::Status result;
  while (!stop.load()) {
    std::optional<uint64_t> wait_at;
    {
      absl::MutexLock lock(&turn_);
      if (!pump_status_.ok()) {
        result = pump_status_;
        break;
      }
      absl::StatusOr<std::optional<uint64_t>> step = Step();
      if (!step.ok()) {
        result = step.status();
        break;
      }
      wait_at = *step;
    }
    if (wait_at.has_value()) {
      catalog_.WaitForChange(this, *wait_at, clock_.Now() + options_.idle_wait);
    }
  }
  // Waits for a Pump still running (it touches nothing of this after its
  // Release()).
  if (options_.inline_sends) catalog_.RemoveListener(this);
  return result;
}

absl::StatusOr<std::optional<uint64_t>> Shipper::Step() {
  CatalogSnapshot snap = catalog_.Get();
  if (!snap.source_status.ok()) return WithReason(snap.source_status, Reason::kSourceFailed);
  const auto& segs = *snap.segments;
  if (pos_.segment.empty()) {
    if (segs.empty()) return snap.version;
    pos_ = Position{segs.front().name, 0};
  }
  int i = snap.Find(pos_.segment);
  if (i < 0) {
    if (!segs.empty() && pos_.segment < segs.front().name) {
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
                            "gap: segment ", pos_.segment,
                            " is no longer in the WAL directory (oldest is ",
                            segs.front().name, "): the replica fell behind retention")),
                        Reason::kGap);
    }
    if (segs.empty() || pos_.segment > segs.back().name) {
      // Not visible yet (e.g. the directory was emptied and is refilling):
      // keep waiting rather than guess.
      return snap.version;
    }
    // Later segments are still there: it was renamed (a PostgreSQL
    // promotion makes the old timeline's last segment NAME.partial) or
    // removed. The handshake of the next session tells which: it continues
    // on the new timeline, or names the gap.
    return WithReason(absl::UnavailableError(absl::StrCat(
                          "segment ", pos_.segment, " left the WAL directory while it was "
                          "being shipped; the replica reconnects and the handshake decides")),
                      Reason::kSourceChanged);
  }
  const SegmentInfo& seg = segs[i];
  if (!entered_) WALSHIP_RETURN_IF_ERROR(EnterSegment(seg.name));
  if (pos_.offset > seg.shippable) {
    return absl::OutOfRangeError(absl::StrCat(
        "position ", pos_.ToString(), " is past the shippable end of ", seg.name,
        " (", seg.shippable, " bytes)"));
  }
  if (pos_.offset < seg.shippable) {
    uint64_t n = std::min<uint64_t>(seg.shippable - pos_.offset, options_.max_payload);
    WALSHIP_RETURN_IF_ERROR(SendData(n));
    return std::optional<uint64_t>();
  }
  if (seg.complete && static_cast<size_t>(i) + 1 < segs.size()) {
    WALSHIP_ASSIGN_OR_RETURN(uint32_t crc, VerifySent(seg.shippable));
    if (options_.mutable_bytes.empty()) {
      events_->OnCheckpoint(seg.name, seg.shippable, crc);
    } else {
      WALSHIP_ASSIGN_OR_RETURN(
          std::vector<SegmentPatch> patches,
          FinalPatches(sys_, segment_file_.get(), seg.shippable, options_.mutable_bytes));
      events_->OnCheckpointWithPatches(seg.name, seg.shippable, crc, patches);
    }
    WALSHIP_RETURN_IF_ERROR(order_.CheckNext(seg.name, segs[i + 1].name));
    pos_ = Position{segs[i + 1].name, 0};
    entered_ = false;
    segment_file_.reset();
    return std::optional<uint64_t>();
  }
  return snap.version;
}

bool Shipper::Claim() { return turn_.TryLock(); }

void Shipper::Pump(const CatalogSnapshot& snap) {
  bool caught_up = false;
  if (pump_status_.ok()) {
    absl::Status s = PumpLocked(snap, &caught_up);
    if (!s.ok()) {
      pump_status_ = s;  // Run()'s thread wakes (not caught up) and returns it
      caught_up = false;
    }
  }
  turn_.Unlock();
  catalog_.Release(this, snap.version, caught_up);
}

absl::Status Shipper::PumpLocked(const CatalogSnapshot& snap, bool* caught_up) {
  // Only the plain case: more bytes of the segment already entered, all of
  // them at once, without waiting for the socket.
  if (!snap.source_status.ok() || !entered_) return absl::OkStatus();
  const int i = snap.Find(pos_.segment);
  if (i < 0) return absl::OkStatus();
  const SegmentInfo& seg = (*snap.segments)[i];
  if (pos_.offset >= seg.shippable) return absl::OkStatus();
  const uint64_t n = seg.shippable - pos_.offset;
  if (n > kMaxInlineBytes || n > options_.max_payload) return absl::OkStatus();
  const sys::SysResult room = sys_.SendRoom(fd_);
  // TLS adds at most 22 bytes per 16 KiB record (and the header its own).
  const uint64_t tls = conn_->path() == net::DataPath::kPlain ? 0 : (n / 16384 + 2) * 64;
  if (!room.ok() || static_cast<uint64_t>(room.rc) < n + wire::kFrameHeaderSize + tls) {
    return absl::OkStatus();
  }
  WALSHIP_RETURN_IF_ERROR(SendData(n));
  // A complete segment with a successor still needs its checkpoint.
  *caught_up = !(seg.complete && static_cast<size_t>(i) + 1 < snap.segments->size());
  return absl::OkStatus();
}

}  // namespace walship::agent
