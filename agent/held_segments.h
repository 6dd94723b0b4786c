// held_segments.h: a replica's complete segments, checked against the source.
//
// At handshake a replica presents the complete segments it holds
// (HandshakeRequest.held_segments). Before its session ships anything, each
// one the source still shows as complete is compared with the source's:
// length, then CRC32C (SegmentChecksums, computed once per file and cached).
// The first that differs ends the session with kFailedPrecondition and
// Reason::kDamagedCopy, naming it; a copy made short or wrong on the replica's
// disk is found at its next connection instead of never. Segments the source
// no longer has, or shows still growing, cannot be checked and are skipped.
//
// A segment presented `unrecorded` (its walship.sums line was lost) that
// matches is reported through ShipperEvents::OnCheckpoint, so the replica can
// record its line again.
//
// Thread-safety: a function; safe from any thread.
#ifndef WALSHIP_AGENT_HELD_SEGMENTS_H_
#define WALSHIP_AGENT_HELD_SEGMENTS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/shipper.h"

namespace walship::agent {

struct HeldSegment {
  std::string name;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  bool unrecorded = false;
};

// Returns early (OK) once `stop` is set.
absl::Status CheckHeldSegments(const std::vector<HeldSegment>& held,
                               const CatalogSnapshot& snap, SegmentChecksums& checksums,
                               ShipperEvents* events, const std::atomic<bool>& stop);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_HELD_SEGMENTS_H_
