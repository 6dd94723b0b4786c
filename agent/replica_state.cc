#include "agent/replica_state.h"

#include "absl/strings/ascii.h"
#include "common/reason.h"

namespace walship::agent {
namespace {

// The session ended: stopped for errors an operator must look at,
// disconnected when the replica merely went away.
ReplicaCondition Ended(const absl::Status& failure) {
  ReplicaCondition c;
  switch (failure.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
      c.state = ReplicaState::kDisconnected;
      c.reason = failure.ok() ? "closed" : absl::AsciiStrToLower(
                                               absl::StatusCodeToString(failure.code()));
      return c;
    default:
      break;
  }
  c.state = ReplicaState::kStopped;
  const Reason reason = ReasonOf(failure);
  c.reason = reason != Reason::kUnspecified
                 ? std::string(ReasonName(reason))
                 : absl::AsciiStrToLower(absl::StatusCodeToString(failure.code()));
  return c;
}

}  // namespace

absl::string_view StateName(ReplicaState state) {
  switch (state) {
    case ReplicaState::kCaughtUp: return "caught_up";
    case ReplicaState::kStreaming: return "streaming";
    case ReplicaState::kStalled: return "stalled";
    case ReplicaState::kConnecting: return "connecting";
    case ReplicaState::kStopped: return "stopped";
    case ReplicaState::kDisconnected: return "disconnected";
  }
  return "disconnected";
}

bool NeedsAttention(ReplicaState state) {
  return state == ReplicaState::kStalled || state == ReplicaState::kStopped;
}

ReplicaCondition Classify(const ReplicaFacts& facts, const CatalogSnapshot& snap,
                          const absl::Status& readiness, absl::Time now,
                          absl::Duration stall_timeout) {
  ReplicaCondition c;
  const uint64_t lag = snap.BytesAfter(facts.flushed);
  if (facts.finished) {
    c = Ended(facts.failure);
    c.lag_bytes = lag;
    return c;
  }
  c.lag_bytes = lag;
  auto stalled = [&c](absl::string_view why) {
    c.state = ReplicaState::kStalled;
    c.reason = std::string(why);
    return c;
  };
  if (!snap.source_status.ok()) return stalled("source_failed");
  if (!readiness.ok()) {
    const Reason r = ReasonOf(readiness);
    return stalled(r == Reason::kUnspecified ? "not_ready" : ReasonName(r));
  }
  if (!facts.has_data_socket) {
    c.state = ReplicaState::kConnecting;
    return c;
  }
  const bool known = facts.flushed.segment.empty() || snap.Find(facts.flushed.segment) >= 0;
  const bool passed = snap.segments && !snap.segments->empty() &&
                      facts.flushed.segment < snap.segments->front().name;
  if (!known && !passed) return stalled("position_not_in_source");
  if (lag == 0) {
    c.state = ReplicaState::kCaughtUp;
    return c;
  }
  if (now - facts.progress_at >= stall_timeout) return stalled("no_progress");
  c.state = ReplicaState::kStreaming;
  return c;
}

}  // namespace walship::agent
