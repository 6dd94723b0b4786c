#include "agent/shipper.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/file_crc.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/wire/frame.h"

namespace walship::agent {

Shipper::Shipper(sys::SysCalls& sys, SegmentCatalog& catalog,
                 SegmentChecksums& checksums, std::string wal_dir, int data_fd,
                 Position start, ShipperOptions options, ShipperEvents* events)
    : sys_(sys),
      catalog_(catalog),
      checksums_(checksums),
      wal_dir_(std::move(wal_dir)),
      fd_(data_fd),
      pos_(std::move(start)),
      options_(options),
      events_(events),
      crc_reader_(sys) {
  if (options_.transport == Transport::kCopy) {
    copy_buffer_.resize(options_.copy_buffer_bytes);
  }
}

absl::Status Shipper::EnterSegment(const std::string& name) {
  std::string path = absl::StrCat(wal_dir_, "/", name);
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd file, sys::OpenFile(sys_, path, O_RDONLY));
  struct stat st;
  if (sys::SysResult r = sys_.Fstat(file.get(), &st); !r.ok()) {
    return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", path));
  }
  segment_dev_ = st.st_dev;
  segment_ino_ = st.st_ino;
  segment_file_ = std::move(file);
  segment_crc_ = 0;
  segment_crc_valid_ = pos_.offset == 0;
  std::string frame = wire::EncodeFrame(wire::FrameType::kSegment, ++handle_,
                                        pos_.offset, name);
  WALSHIP_RETURN_IF_ERROR(
      sys::SendFully(sys_, fd_, frame.data(), frame.size(), 0, options_.io));
  entered_ = true;
  return absl::OkStatus();
}

absl::Status Shipper::SendData(uint64_t length) {
  const std::string context = absl::StrCat(wal_dir_, "/", pos_.segment);
  // One pass: the frame's CRC and the segment's running CRC.
  WALSHIP_ASSIGN_OR_RETURN(
      auto crcs,
      crc_reader_.Twice(segment_file_.get(), pos_.offset, length, context, 0, segment_crc_));
  const uint32_t crc = crcs.first;
  // The bytes just checksummed belong to this segment only if the name still
  // points at the open file: PostgreSQL recycles a segment by renaming it
  // before overwriting it, so an unchanged name means unrecycled content.
  // (A change after this point makes the payload disagree with its CRC, and
  // the replica rejects it.)
  struct stat by_name;
  sys::SysResult r = sys_.Stat(context.c_str(), &by_name);
  if (!r.ok() || by_name.st_ino != segment_ino_ || by_name.st_dev != segment_dev_) {
    return absl::AbortedError(absl::StrCat(
        "segment ", pos_.segment, " was recycled or replaced while being shipped (at offset ",
        pos_.offset, "); restarting the session"));
  }
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.segment_id = handle_;
  h.offset = pos_.offset;
  h.payload_length = static_cast<uint32_t>(length);
  h.payload_crc32c = crc;
  uint8_t header[wire::kFrameHeaderSize];
  wire::EncodeFrameHeader(h, header);
  // MSG_MORE keeps the header in the same TCP segment as the payload.
  WALSHIP_RETURN_IF_ERROR(
      sys::SendFully(sys_, fd_, header, sizeof(header), MSG_MORE, options_.io));
  const bool zerocopy = options_.transport == Transport::kZeroCopy;
  if (zerocopy) {
    WALSHIP_RETURN_IF_ERROR(sys::SendFileFully(sys_, fd_, segment_file_.get(),
                                               pos_.offset, length, options_.io));
  } else {
    WALSHIP_RETURN_IF_ERROR(sys::CopyFileToSocket(
        sys_, fd_, segment_file_.get(), pos_.offset, length,
        absl::MakeSpan(copy_buffer_), options_.io));
  }
  pos_.offset += length;
  segment_crc_ = crcs.second;
  events_->OnSent(pos_, length, zerocopy);
  return absl::OkStatus();
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
      catalog_.WaitForChange(this, *wait_at, absl::Now() + options_.idle_wait);
    }
  }
  // Waits for a Pump still running (it touches nothing of this after its
  // Release()).
  if (options_.inline_sends) catalog_.RemoveListener(this);
  return result;
}

absl::StatusOr<std::optional<uint64_t>> Shipper::Step() {
  CatalogSnapshot snap = catalog_.Get();
  if (!snap.source_status.ok()) return snap.source_status;
  const auto& segs = *snap.segments;
  if (pos_.segment.empty()) {
    if (segs.empty()) return snap.version;
    pos_ = Position{segs.front().name, 0};
  }
  int i = snap.Find(pos_.segment);
  if (i < 0) {
    if (!segs.empty() && pos_.segment < segs.front().name) {
      return absl::FailedPreconditionError(absl::StrCat(
          "segment ", pos_.segment, " is no longer in the WAL directory (oldest is ",
          segs.front().name, "): the replica fell behind retention"));
    }
    if (segs.empty() || pos_.segment > segs.back().name) {
      // Not visible yet (e.g. the directory was emptied and is refilling):
      // keep waiting rather than guess.
      return snap.version;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "segment ", pos_.segment, " disappeared from the WAL directory"));
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
    uint32_t crc;
    if (segment_crc_valid_ && entered_) {
      crc = segment_crc_;
      checksums_.Put(seg.name, seg.shippable, crc);
    } else {
      WALSHIP_ASSIGN_OR_RETURN(crc, checksums_.Get(seg.name, seg.shippable));
    }
    events_->OnCheckpoint(seg.name, seg.shippable, crc);
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
  if (!room.ok() || static_cast<uint64_t>(room.rc) < n + wire::kFrameHeaderSize) {
    return absl::OkStatus();
  }
  WALSHIP_RETURN_IF_ERROR(SendData(n));
  // A complete segment with a successor still needs its checkpoint.
  *caught_up = !(seg.complete && static_cast<size_t>(i) + 1 < snap.segments->size());
  return absl::OkStatus();
}

}  // namespace walship::agent
