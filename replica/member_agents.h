// member_agents.h: a replica's agents, from the HA manager's member keys.
//
// With --agent-tag=TAG (beside --leader-etcd and --leader-key), a replica
// learns its agents from etcd instead of, or besides, its --agent list.
// Patroni keeps each member's state as a JSON object under
// NAMESPACE/SCOPE/members/NAME (common/leader_key.h PatroniMembersPrefix),
// rewritten at every loop of that member's Patroni and gone with its lease;
// the object carries the tags of the member's configuration:
//
//   {"conn_url": "postgres://10.0.0.1:5432/postgres", "role": "primary",
//    "state": "running", ..., "tags": {"walship_agent": "10.0.0.1:7400"}}
//
// so a node's configuration `tags: {walship_agent: HOST:PORT}` names the
// agent beside it, as NAME=HOST:PORT on --agent would.
//
// Thread-safety: the functions are pure.
#ifndef WALSHIP_REPLICA_MEMBER_AGENTS_H_
#define WALSHIP_REPLICA_MEMBER_AGENTS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/leader_key.h"
#include "replica/agent_list.h"

namespace walship::replica {

// What the member keys say.
struct MemberAgents {
  // The agents of the members whose key carries the tag, in key order.
  std::vector<AgentEntry> agents;
  // Members whose key carries no tag `tag` (a node without an agent).
  std::vector<std::string> untagged;
  // One line for each key that gives no usable agent: not a JSON object, a
  // tag that is not a string or not HOST:PORT, an address another member
  // gave first.
  std::vector<std::string> problems;
};

// The agents `kvs` (the keys under `prefix`, as LeaderKey::ReadPrefix reads
// them) name with tag `tag`; a member's name is its key after `prefix`
// (keys deeper under it are not members and are skipped).
//
// Example: {"/service/main/members/db1",
//           "{\"role\":\"primary\",\"tags\":{\"walship_agent\":\"db1:7400\"}}"}
//   with prefix "/service/main/members/" and tag "walship_agent"
//   -> agents {{"db1:7400", "db1"}}
MemberAgents AgentsFromMembers(const std::vector<LeaderKey::KeyValue>& kvs,
                               absl::string_view prefix, absl::string_view tag);

// The --agent entries `configured`, then each of `discovered` whose member
// and address no entry before it names: what the operator wrote wins.
std::vector<AgentEntry> MergeAgents(const std::vector<AgentEntry>& configured,
                                    const std::vector<AgentEntry>& discovered);

// "db1=db1:7400, db2=db2:7400", for logs; "none" for no agent.
std::string DescribeAgents(const std::vector<AgentEntry>& agents);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_MEMBER_AGENTS_H_
