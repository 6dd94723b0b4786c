// SegmentWriter's frame bookkeeping shared by WriteData (socket bytes,
// segment_writer.cc) and WriteBytes (decompressed bytes from memory: the
// ZDATA frames of wire_format.md section 9).

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/wire/crc32c.h"
#include "replica/segment_writer.h"
#include "spdlog/spdlog.h"

namespace walship::replica {

absl::StatusOr<SegmentWriter::FrameTarget> SegmentWriter::TargetOf(const wire::FrameHeader& h) {
  FrameTarget t;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    if (h.segment_id != handle_ || handle_ == 0) {
      return absl::DataLossError(absl::StrCat(wire::FrameTypeName(h.type),
                                              " for segment handle ", h.segment_id,
                                              " but the current handle is ", handle_));
    }
    if (handle_complete_) {
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
          "divergent history: agent sends bytes past the end of complete segment ",
          last_begun_)), Reason::kDivergent);
    }
    const Segment& seg = open_.back();
    t = FrameTarget{seg.name, seg.fd, seg.written, seg.written_crc};
  }
  if (h.offset > t.written) {
    return absl::OutOfRangeError(absl::StrCat("gap in ", t.name, ": frame at offset ", h.offset,
                                            " but only ", t.written, " bytes written"));
  }
  return t;
}

absl::Status SegmentWriter::CommitLanded(const FrameTarget& t, uint64_t rest, uint32_t new_crc,
                                         bool zerocopy) {
  absl::Status s;
  uint64_t cut_to = 0;
  {
    absl::MutexLock lock(&mu_);
    Segment* seg = FindOpen(t.name);
    if (failed_.ok() && seg != nullptr) {
      seg->written = t.written + rest;
      seg->written_crc = new_crc;
      (zerocopy ? counters_.bytes_zerocopy : counters_.bytes_copy) += rest;
      return absl::OkStatus();
    }
    s = failed_.ok() ? absl::InternalError(absl::StrCat(t.name, " is no longer open")) : failed_;
    if (seg == nullptr) return s;
    cut_to = seg->flushed;
  }
  // A failed flush cut the file back while this frame was landing: its
  // bytes past the durable offset go as well.
  if (sys::SysResult r = sys_.Ftruncate(t.fd->get(), static_cast<off_t>(cut_to)); !r.ok()) {
    spdlog::error("{}: cutting back to {} failed: {}; the next session resumes from the "
                  "recorded position",
                  PathOf(t.name, true), cut_to, sys::ErrnoToStatus(r.err, "ftruncate").ToString());
  }
  return s;
}

absl::Status SegmentWriter::DiscardLanded(const FrameTarget& t, absl::Status why) {
  // Nothing of a failed or corrupt frame stays on disk.
  sys::SysResult r = sys_.Ftruncate(t.fd->get(), static_cast<off_t>(t.written));
  if (!r.ok()) {
    why = absl::DataLossError(absl::StrCat(
        why.message(), "; and removing the frame's bytes from ", PathOf(t.name, true),
        " failed: ", sys::ErrnoToStatus(r.err, "ftruncate").message()));
    CutBackAfterFailure(why);
  }
  return why;
}

absl::Status SegmentWriter::WriteBytes(const wire::FrameHeader& h,
                                       absl::Span<const uint8_t> bytes) {
  WALSHIP_ASSIGN_OR_RETURN(const FrameTarget t, TargetOf(h));
  // Bytes already on disk are compared, never overwritten.
  const uint64_t overlap = std::min<uint64_t>(bytes.size(), t.written - h.offset);
  if (overlap > 0) {
    std::vector<uint8_t> disk(overlap);
    WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys_, t.fd->get(), disk.data(), disk.size(),
                                            static_cast<off_t>(h.offset)));
    if (std::memcmp(disk.data(), bytes.data(), overlap) != 0) {
      const size_t at = static_cast<size_t>(
          std::mismatch(disk.begin(), disk.end(), bytes.begin()).first - disk.begin());
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
                            "divergent history: resent bytes of ", t.name,
                            " differ from the replica's at offset ", h.offset + at,
                            "; refusing to overwrite")),
                        Reason::kDivergent);
    }
  }
  const uint64_t rest = bytes.size() - overlap;
  if (rest == 0) return absl::OkStatus();
  // The bytes were verified before they got here; they are written from
  // this buffer, so there is nothing to re-read.
  const uint8_t* fresh = bytes.data() + overlap;
  if (absl::Status s = sys::PwriteFully(sys_, t.fd->get(), fresh, rest,
                                        static_cast<off_t>(t.written));
      !s.ok()) {
    return DiscardLanded(t, std::move(s));
  }
  if (options_.trace != nullptr) {
    options_.trace->Record(TraceStage::kSpliced, t.name, t.written + rest);
    options_.trace->Record(TraceStage::kVerified, t.name, t.written + rest);
  }
  return CommitLanded(t, rest, wire::Crc32cExtend(t.written_crc, fresh, rest),
                      /*zerocopy=*/false);
}

}  // namespace walship::replica
