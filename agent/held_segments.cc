#include "agent/held_segments.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/reason.h"
#include "common/status_macros.h"

namespace walship::agent {
namespace {

absl::Status Damaged(const std::string& what) {
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        what,
                        "; the replica's copy is damaged: move that file and its walship.sums "
                        "line aside (or rebuild the replica) before it serves recovery")),
                    Reason::kDamagedCopy);
}

}  // namespace

absl::Status CheckHeldSegments(const std::vector<HeldSegment>& held,
                               const CatalogSnapshot& snap, SegmentChecksums& checksums,
                               ShipperEvents* events, const std::atomic<bool>& stop) {
  for (const HeldSegment& h : held) {
    if (stop.load()) return absl::OkStatus();
    const int i = snap.Find(h.name);
    if (i < 0) continue;
    const SegmentInfo& seg = (*snap.segments)[i];
    if (!seg.complete) continue;
    if (h.length != seg.shippable) {
      return Damaged(absl::StrCat("complete segment ", h.name, " has ", h.length,
                                  " bytes on the replica but ", seg.shippable, " on the source"));
    }
    WALSHIP_ASSIGN_OR_RETURN(uint32_t crc, checksums.Get(h.name, h.length));
    if (crc != h.crc32c) {
      return Damaged(absl::StrFormat(
          "complete segment %s has CRC32C %08x on the replica (%s) but %08x on the source",
          h.name, h.crc32c, h.unrecorded ? "of the file" : "per its walship.sums line", crc));
    }
    if (h.unrecorded) events->OnCheckpoint(h.name, h.length, crc);
  }
  return absl::OkStatus();
}

}  // namespace walship::agent
