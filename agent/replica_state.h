// replica_state.h: what a replica is doing, in words an operator and an alert
// can act on.
//
// A replica that is connected but cannot advance must never look healthy. Its
// state is derived, at the moment it is asked for (Status, /metrics, the
// health check), from facts the session keeps (ReplicaSession::Facts) and the
// source's condition:
//   caught_up     the session is live and the replica has flushed everything
//                 the source shows;
//   streaming     behind, and its durable position moved within the stall
//                 timeout;
//   stalled       the session is live but the replica cannot advance, with
//                 the reason: source_failed (the source stopped vouching for
//                 its bytes), not_primary / not_ready (Readiness), no_progress
//                 (behind and nothing flushed for the stall timeout),
//                 position_not_in_source (its position names a segment the
//                 source does not show: vanished, or sorting after newer data);
//   connecting    handshaken, its data socket not yet presented;
//   stopped       the session ended with an error an operator must look at;
//                 the reason is the error's (gap, divergent, source_failed,
//                 damaged_copy, ...) or its code;
//   disconnected  the session ended without such an error (the replica went
//                 away, was replaced by its next session, lost its network).
// Lag in bytes is always counted against the source's end, from the
// replica's durable position, whatever the state.
//
// Thread-safety: pure functions.
#ifndef WALSHIP_AGENT_REPLICA_STATE_H_
#define WALSHIP_AGENT_REPLICA_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/segment_catalog.h"
#include "common/position.h"

namespace walship::agent {

enum class ReplicaState { kCaughtUp, kStreaming, kStalled, kConnecting, kStopped, kDisconnected };

// "caught_up", "streaming", ...
absl::string_view StateName(ReplicaState state);

// What a session knows of its replica (ReplicaSession::Facts()).
struct ReplicaFacts {
  bool finished = false;
  bool has_data_socket = false;
  // Why the session ended; OK while it runs.
  absl::Status failure;
  Position flushed;
  // When `flushed` last moved (or the session began).
  absl::Time progress_at;
};

struct ReplicaCondition {
  ReplicaState state = ReplicaState::kDisconnected;
  // Empty for caught_up and streaming.
  std::string reason;
  uint64_t lag_bytes = 0;
};

// `readiness` is the source's WalSource::Readiness(); the catalog's own
// source_status says whether the source failed.
ReplicaCondition Classify(const ReplicaFacts& facts, const CatalogSnapshot& snap,
                          const absl::Status& readiness, absl::Time now,
                          absl::Duration stall_timeout);

// True for the states an alert should fire on (stalled, stopped).
bool NeedsAttention(ReplicaState state);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_REPLICA_STATE_H_
