// replica.h: walship-replica, assembled.
//
// Run() subscribes to the agent and keeps the destination directory an exact,
// durable copy of the agent's WAL stream until Stop() is called or a fatal
// error occurs. It runs one Session (session.h) after another: each recovers
// the durable position from the directory, handshakes over gRPC
// (control_client.h: bytes received before a stop and never recorded are
// kept only if the agent's prefix check accepts them), connects the data
// socket, and receives, flushes and acknowledges until it fails.
// Transient failures (network, agent restart, a corrupt frame, a failed
// fdatasync) end the session; the next one starts after a backoff from the
// durable position (a session that reached the data socket resets the
// backoff). A refusal the agent proves (REASON_DIVERGENT) is the only
// one that cuts bytes received before a stop and never recorded; any other
// keeps them. Run() holds DEST/walship.lock (dest_lock.h) throughout.
// Failures an operator must resolve (another stream, divergent history, a gap
// behind the agent's retention) stop Run() with kFailedPrecondition.
//
// Several agents (options.agent a comma list, agent_list.h): each session
// tries the agent an AgentRotation names; an agent whose node is not a
// primary (REASON_NOT_PRIMARY), serves an older timeline than this replica
// holds (REASON_OLDER_TIMELINE) or cannot be reached makes the next session
// try the next agent, and the backoff grows only once every agent was tried.
// A change of an agent's answer is logged once (repeats at debug level) and
// counted in walship_replica_agent_refusals_total{agent,reason};
// walship_replica_agent_active{agent} names the agent of the live session.
// While a session runs, the leader watch asks the other agents every
// leader_check_interval whether one serves a newer timeline (a standby
// promoted while the session's agent stayed up) and then ends the session,
// so the next one finds the new primary's agent. Before each handshake it
// asks them too, and passes over an agent that is a primary while another
// serves a newer timeline (a stale old primary beside the new one).
// With --leader-etcd (common/leader_key.h) the HA manager's leader key decides
// too: before each handshake only the agent of the member it names is
// asked, and the leader watch ends a session once it names another. With
// --agent-tag as well, the agents are read again from the HA manager's
// member keys before each session (member_agents.h), so a node added to the
// cluster is followed without a restart.
//
// Thread-safety: Run() on one thread; Stop() from any thread (e.g. a signal
// watcher): it ends the current session, if any, with kCancelled.
#ifndef WALSHIP_REPLICA_REPLICA_H_
#define WALSHIP_REPLICA_REPLICA_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/sys/syscalls.h"
#include "replica/agent_list.h"
#include "common/leader_key.h"
#include "replica/replica_options.h"

namespace walship::replica {

class Session;

class Replica {
 public:
  // `metrics` (optional, not owned, must outlive the object) receives the
  // walship_replica_* series.
  Replica(sys::SysCalls& sys, ReplicaOptions options, MetricsRegistry* metrics = nullptr,
          Clock& clock = DefaultClock());
  ~Replica();

  absl::Status Run();
  void Stop();

  // True for statuses that end Run(): retrying cannot help.
  static bool IsFatal(const absl::Status& s);

 private:
  absl::Status RunOnce();
  // Counts why a session ended, for the metrics.
  void CountFailure(const absl::Status& s);
  // Several agents: logs and counts what the rotation decided after a
  // session ended with `s`; `wait` is the pause before the next one.
  void NoteAgentStep(const AgentRotation::Step& step, const absl::Status& s,
                     absl::Duration wait);
  // The leader watch (agent_list.h), on a thread of its own while `session`
  // (with `agent`, serving `timeline`) runs: every leader_check_interval
  // asks the other agents for their Status (`others`: empty when timelines
  // do not apply), and ends the session with Reason::kOlderTimeline once one
  // serves a newer timeline; with a leader key, also as WatchLeaderKey says.
  // Returns when `done` is notified or it ended the session.
  void WatchLeader(Session& session, std::vector<std::string> others, uint32_t timeline,
                   const std::string& agent, absl::Notification& done);
  // Before a handshake with `agent` (several agents): kUnavailable with
  // Reason::kOlderTimeline when `agent` is a primary but another agent
  // serves a newer timeline (a stale old primary beside the new one), so
  // that a replica still before the fork point never takes its tail. OK
  // when `agent` or the others do not answer their Status.
  absl::Status CheckNoNewerPrimary(const std::string& agent);
  // With --leader-etcd (common/leader_key.h), before a handshake with `agent`: OK
  // when the leader key names its member; otherwise kUnavailable with
  // Reason::kNotLeader. Logs the key's answer when it changed.
  absl::Status CheckLeaderKey(const std::string& agent);
  // The same during a session with `agent` (the leader watch): kUnavailable
  // with Reason::kNotLeader only when the key names another member; a
  // missing key or an unreadable etcd is logged (once) and the session
  // stays.
  absl::Status WatchLeaderKey(const std::string& agent);
  // leader_key_->Read(), and the walship_replica_leader_key_readable gauge.
  LeaderKey::Reading ReadLeaderKey();
  // With --agent-tag, before a session: the --agent entries and the agents
  // the member keys tag, into agent_entries_ and the rotation. An
  // unreadable etcd keeps the agents known; what changed is logged once.
  void RefreshAgents();
  // The member name --agent gives `agent`; empty when none.
  std::string MemberOf(const std::string& agent) const;
  // True when an --agent entry carries `member`.
  bool HasMember(const std::string& member) const;

  Clock& clock_;

  sys::SysCalls& sys_;
  const ReplicaOptions options_;
  // Which agent the next session tries; and the options each session gets
  // (options_ with `agent` set to that one agent). Run()'s thread only.
  AgentRotation rotation_;
  ReplicaOptions session_options_;
  std::string last_established_;
  // With --leader-etcd: the HA manager's leader key, and the agents with
  // their member names (the --agent entries, and with --agent-tag those of
  // the member keys under members_prefix_); null and empty otherwise.
  // agent_entries_ changes only between sessions, on Run()'s thread, while
  // no leader watch runs.
  std::unique_ptr<LeaderKey> leader_key_;
  std::vector<AgentEntry> configured_entries_;
  std::vector<AgentEntry> agent_entries_;
  std::string members_prefix_;
  // What the last RefreshAgents() found in the member keys, and what it
  // last logged ("unreadable" for any error etcd gave).
  std::string members_note_;
  std::string members_state_;
  MetricsRegistry own_metrics_;  // used when the caller passes none
  MetricsRegistry& metrics_;
  std::atomic<bool> stopping_{false};
  // Set when a session reached the data socket; resets the backoff.
  std::atomic<bool> established_{false};
  // Set when a session's writer failed a flush (SegmentWriter::Flush): the
  // next session recovers without a tail (Session reads and sets it).
  std::atomic<bool> after_failed_flush_{false};
  absl::Mutex mu_;
  Session* current_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_REPLICA_H_
