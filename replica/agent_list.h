// agent_list.h: a replica with several agents, and the timeline fence.
//
// A replica may name several agents (--agent=HOST:PORT,HOST:PORT,...; each
// may carry its node's member name, NAME=HOST:PORT, see common/leader_key.h), one
// beside each node of a PostgreSQL cluster whose roles an HA manager
// changes. Only the agent whose node is the primary ships; the agent of a
// standby refuses handshakes with REASON_NOT_PRIMARY (UNAVAILABLE), and the
// agent of a superseded node (a stale or demoted primary) refuses a replica
// that holds a later timeline with REASON_OLDER_TIMELINE (UNAVAILABLE).
//
// AgentRotation decides which agent the next session tries. A session that
// reached the data socket makes its agent the leader: after it ends, the
// next session tries the leader again first (an agent restart or a network
// blip), unless it ended because that agent's node is no longer a primary
// or serves an older timeline. Any other session that fails moves on to the
// next agent in list order; once every agent has been tried without a
// session reaching the data socket, the round is complete and the caller
// backs off (doubling) before the next round. Between agents of one round
// it waits only the minimum backoff. With one agent every failure completes
// a round: exactly the single-agent behaviour.
//
// The timeline fence (CheckTimelineFence): a replica never takes WAL from an
// agent whose timeline is older than the newest timeline it holds durably.
// The agent refuses such a replica itself (REASON_OLDER_TIMELINE); the
// replica checks the timeline the handshake reports as well, so that an
// agent that failed to refuse is still not followed. Together with the
// agent's prefix check (a replica past the fork point of the agent's history
// is REASON_DIVERGENT) no stream mixes two histories.
//
// Thread-safety: the functions are pure; an AgentRotation belongs to the
// replica's run loop (one thread).
#ifndef WALSHIP_REPLICA_AGENT_LIST_H_
#define WALSHIP_REPLICA_AGENT_LIST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walship::replica {

// One entry of a --agent value.
struct AgentEntry {
  // HOST:PORT of the agent's control port.
  std::string address;
  // The HA manager's name of the agent's node (NAME=HOST:PORT), as its
  // leader key holds it (common/leader_key.h); empty when the entry names none.
  std::string member;

  bool operator==(const AgentEntry& o) const {
    return address == o.address && member == o.member;
  }
};

// The agents of a --agent value: [NAME=]HOST:PORT entries separated by
// commas (spaces around them ignored), in order. kInvalidArgument for an
// empty list, an empty entry or name, an address that is not HOST:PORT, or an
// address or a name given twice.
//
// Example: ParseAgentEntries("db1=db1:7000, db2=db2:7000")
//   -> {{"db1:7000", "db1"}, {"db2:7000", "db2"}}
absl::StatusOr<std::vector<AgentEntry>> ParseAgentEntries(absl::string_view text);

// The addresses of ParseAgentEntries(text), in order.
//
// Example: ParseAgentList("db1:7000, db2=db2:7000") -> {"db1:7000", "db2:7000"}
absl::StatusOr<std::vector<std::string>> ParseAgentList(absl::string_view text);

// The timeline of a PostgreSQL WAL file name: a segment name
// (TTTTTTTTXXXXXXXXYYYYYYYY, 24 upper-case hex digits) or a history file
// name (TTTTTTTT.history); 0 for any other name (no timeline: the append
// format, or no position yet).
uint32_t TimelineOfWalName(absl::string_view name);

// The fence: OK when an agent serving timeline `offered` (0: its format has
// none) may ship to a replica whose newest durable timeline is `held` (0:
// none); otherwise kUnavailable with Reason::kOlderTimeline, naming `agent`
// and both timelines (the replica tries its other agents).
absl::Status CheckTimelineFence(uint32_t offered, uint32_t held, absl::string_view agent);

// True for a session's end that says its agent cannot ship to this replica
// now whatever it retries (its node is not a primary, serves an older
// timeline, or is not the leader the HA manager's etcd names): the rotation
// moves on even from the leader.
bool AgentCannotServe(const absl::Status& s);

// What an agent's Status answer says about its source (the leader watch).
struct AgentView {
  std::string agent;
  // Its source serves (no source_error: for PostgreSQL, a primary).
  bool serving = false;
  // StatusResponse.timeline (0: none).
  uint32_t timeline = 0;
};

// The leader watch: while a session follows an agent serving timeline
// `current`, the first of the other agents' `views` that serves a newer
// timeline (a standby promoted while the session's agent stayed up, e.g.
// beside a crashed postmaster: its heartbeats go on, but it will never ship
// the new timeline); nullopt when there is none or `current` is 0 (no
// timelines). The session then ends with Reason::kOlderTimeline.
std::optional<AgentView> NewerPrimary(uint32_t current, const std::vector<AgentView>& views);

// See the top of this file.
class AgentRotation {
 public:
  // `agents` as ParseAgentList returns them, or none yet.
  explicit AgentRotation(std::vector<std::string> agents);

  // Replaces the list. The agent the next session tries stays the same
  // when the new list has it (else the first), each agent keeps its last
  // outcome, and a new round begins. False, and nothing changes, when
  // `agents` is the list already.
  bool SetAgents(std::vector<std::string> agents);

  // The agent the next session tries; empty when there is none.
  const std::string& current() const;
  // Its index in the list.
  size_t current_index() const { return current_; }
  size_t size() const { return agents_.size(); }
  const std::vector<std::string>& agents() const { return agents_; }

  // What OnSessionEnd decided.
  struct Step {
    // The agent the session used, and its index.
    std::string agent;
    size_t index = 0;
    // current() is another agent now.
    bool switched = false;
    // Every agent was tried since the last session that reached the data
    // socket: back off before the next round.
    bool round_complete = false;
    // The outcome differs from the last one this agent gave (or is its
    // first): worth a log line; repeats are not.
    bool outcome_changed = false;
    // A short name of the outcome: the reason's name, else the status code.
    std::string outcome;
  };
  // A session with current() ended with `s` (or failed to open);
  // `established`: it reached the data socket.
  Step OnSessionEnd(const absl::Status& s, bool established);

  // The agent of the last session that reached the data socket; empty
  // before any.
  const std::string& leader() const { return leader_; }

 private:
  std::vector<std::string> agents_;
  size_t current_ = 0;
  // Agents tried without a session reaching the data socket, this round.
  size_t tried_ = 0;
  std::string leader_;
  std::vector<std::string> last_outcome_;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_AGENT_LIST_H_
