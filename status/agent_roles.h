// agent_roles.h: what `walship-status --agent=A,B,...` says of several
// agents, such as the agents beside the nodes of an HA cluster: which of them
// answered, which serve (their source ships WAL: beside a PostgreSQL primary,
// the leader key's member), and on which timeline.
//
// Pure functions over the answers; the calls are walship-status's own
// (status_main.cc). Unit-tested in tests/status/agent_roles_test.cc.
#ifndef WALSHIP_STATUS_AGENT_ROLES_H_
#define WALSHIP_STATUS_AGENT_ROLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/leader_key.h"

namespace walship {
namespace status {

// One agent's answer to Status.
struct AgentAnswer {
  std::string address;  // HOST:PORT of its control port
  std::string member;   // the NAME of a NAME=HOST:PORT entry; empty when none
  bool answered = false;
  std::string error;        // why it did not answer (when !answered)
  std::string not_serving;  // its source_error: empty while its source serves
  uint32_t timeline = 0;    // PostgreSQL's timeline; 0 when none or not known
  bool serving() const { return answered && not_serving.empty(); }
};

// "db1 (db1:7400)", or the address alone when the entry names no member.
std::string AgentLabel(const AgentAnswer& a);

// One line for the agent:
//   "agent db1 (db1:7400): serving, timeline 3"
//   "agent db2 (db2:7400): not serving: PostgreSQL ... is in recovery, not a primary"
//   "agent db3 (db3:7400): DID NOT ANSWER: failed to connect to all addresses"
std::string AgentLine(const AgentAnswer& a);

// The line under all of them:
//   "serving: db1 (db1:7400), timeline 3 (1 of 3 agents; 1 did not answer)"
//   "NO AGENT SERVES (3 agents asked; 1 did not answer)"
//   "SEVERAL AGENTS SERVE: db1 (db1:7400) timeline 2, db2 (db2:7400) timeline 3"
// The last is worth an operator's look: two primaries, or a stale one not yet
// fenced (replicas never go back to an older timeline; see docs/postgresql.md).
std::string ServingSummary(const std::vector<AgentAnswer>& answers);

// With the HA manager's leader key read (--leader-etcd): empty when what
// the agents say agrees with it, otherwise the line that says how they
// disagree:
//   "THE LEADER KEY NAMES db2, BUT db1 (db1:7400) SERVES"
//   "THE LEADER KEY NAMES db2, WHOSE AGENT db2 (db2:7400) DOES NOT SERVE"
//   "THE LEADER KEY NAMES db2, AND NO AGENT ASKED IS db2'S"
// An agent that did not answer, or a key that is absent or unreadable, is
// no disagreement (the key's own line says so). Right after a failover the
// new leader's agent may need a poll to serve.
std::string LeaderDisagreement(const std::vector<AgentAnswer>& answers,
                               const LeaderView& leader);

}  // namespace status
}  // namespace walship

#endif  // WALSHIP_STATUS_AGENT_ROLES_H_
