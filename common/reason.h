// reason.h: a typed reason on an absl::Status, for callers that must tell
// refusals apart without matching message text.
//
// The status code says what the caller does next (STYLE.md); the reason says
// which of several causes with the same code this is, where the caller's
// action differs between them. The replica, for one, may cut bytes it never
// recorded only when the agent has proven them different from the source
// (kDivergent), never for a gap or a source that is not ready, although all
// three stop a handshake.
//
// The reason travels as a payload of the Status (so it survives copies and
// the early-return macros) and, between agent and replica, in the gRPC status
// details and in SessionError (common/rpc_status.h).
//
// Example:
//   return WithReason(absl::FailedPreconditionError("gap: ..."), Reason::kGap);
//   ...
//   if (ReasonOf(s) == Reason::kDivergent) CutUnrecordedTail();
#ifndef WALSHIP_COMMON_REASON_H_
#define WALSHIP_COMMON_REASON_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace walship {

// Values match walship.v1.Reason (proto/walship.proto).
enum class Reason : int {
  kUnspecified = 0,
  // The replica holds bytes that provably differ from the source's: a
  // checksum of bytes both hold differs, or it holds more of a complete
  // segment than the source, or a position the source's history excludes.
  kDivergent = 1,
  // A segment between the replica's position and what the source offers is
  // missing (removed, recycled, never seen): shipping would skip it.
  kGap = 2,
  // The replica's directory belongs to another stream.
  kWrongStream = 3,
  // The source is a PostgreSQL in recovery (a standby): retry later.
  kNotPrimary = 4,
  // The source has nothing to compare with yet (no segments, first scan not
  // done, a segment not visible yet): retry later.
  kNotReady = 5,
  // The replica holds more of an open segment than the source shows now:
  // not provably different (the source may not have caught up since a
  // restart); retry later, keep the bytes.
  kSourceBehind = 6,
  // The source failed (a file changed under the agent, an unreadable
  // directory): the agent cannot vouch for its bytes until an operator acts.
  kSourceFailed = 7,
  // A complete segment the replica holds differs from the source's (length
  // or checksum).
  kDamagedCopy = 8,
  // The segment being shipped left the source's directory while later ones
  // stayed (a PostgreSQL promotion renames the old timeline's last segment
  // to .partial; or it was removed): the session ends, the replica
  // reconnects and the handshake decides (the new timeline, or a gap).
  kSourceChanged = 9,
  // Bytes in transit failed their checksum (a frame's header or payload):
  // nothing of them was kept; the replica reconnects and they come again.
  kChecksum = 10,
  // The replica holds a later timeline than the source serves: the source's
  // node was superseded (a stale or demoted primary); its WAL past the fork
  // point is not in the replica's history. Retry, elsewhere first.
  kOlderTimeline = 11,
  // The agent and the replica disagree on TLS on the data socket (one has
  // --data-tls=on, the other off, or is too old to know it); an operator
  // must align them (kFailedPrecondition).
  kDataTlsMismatch = 12,
  // The source rewrites segments in place and the replica does not apply
  // Checkpoint patches: it would keep copies differing from the source's.
  kPatchUnsupported = 13,
  // The HA manager's leader key (etcd) does not name this agent's node, or
  // could not be read before a handshake: the replica's own refusal, or the
  // agent's (a refused handshake, an ended session). Retry, elsewhere first.
  kNotLeader = 14,
};

// `s` with `reason` attached (replacing any earlier one). OK stays OK.
absl::Status WithReason(absl::Status s, Reason reason);
// The reason attached to `s`, or kUnspecified.
Reason ReasonOf(const absl::Status& s);
// Short lower-case name ("divergent", "gap", ...), for logs and metric
// labels; "unspecified" for kUnspecified.
absl::string_view ReasonName(Reason reason);
// The Reason with this numeric value, or kUnspecified when out of range.
Reason ReasonFromInt(int value);

}  // namespace walship

#endif  // WALSHIP_COMMON_REASON_H_
