// leader_gate.h: an agent that serves only while the HA manager names its
// node as the leader.
//
// The agents alone say whether their node is a primary (WalSource::
// Readiness); a stale old primary started again is one, and would answer
// every replica that reaches it, also one configured without the leader key
// (common/leader_key.h). With --leader-etcd, --leader-key and --member (this
// node's member name, as the HA manager names it), the agent asks the key
// itself:
//   * before each handshake, a fresh read: the handshake goes on only when
//     the key names this member. Another member, no key, or no answer from
//     etcd refuses it with kUnavailable and Reason::kNotLeader, which a
//     replica takes as "try another agent, or later" (never as divergence).
//   * every `interval` (the watch, thread ws-leader): once the key names
//     another member, every live session ends with that status, and again
//     at each read while it does (a handshake that passed just before). A
//     missing key or an unreadable etcd keeps the sessions, as the replica's
//     own leader watch does: the node is still a primary whose WAL is
//     durable there, and ending them would only hold synchronous commits
//     back. Patroni demotes a leader that loses etcd.
// Each change in what the key says is logged once (repeats at debug); the
// gauges walship_agent_leader_key_readable and walship_agent_leader_named
// show the last read.
//
// --member must be the node's name as the HA manager writes it, or the key
// never names it and the agent never serves (under walship synchronous, no
// commit completes). The watch checks it against the member keys beside the
// leader key (Patroni: NAMESPACE/SCOPE/members/NAME, present while that
// node's Patroni runs): at start and at each change of the key, and at each
// read while the member is missing; a missing member is a warning naming
// the members etcd has, logged once per change.
//
// Thread-safety: Admit, Serving and Fenced from any thread; Start and Stop
// from the agent's controlling thread.
#ifndef WALSHIP_AGENT_LEADER_GATE_H_
#define WALSHIP_AGENT_LEADER_GATE_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/leader_key.h"
#include "common/metrics.h"

namespace walship::agent {

class LeaderGate {
 public:
  // `on_fenced` runs on the watch's thread at each read that finds the key
  // naming another member, with the status sessions end with.
  LeaderGate(std::unique_ptr<LeaderKey> key, std::string member, absl::Duration interval,
             MetricsRegistry& metrics, std::function<void(const absl::Status&)> on_fenced);
  ~LeaderGate();

  // Reads the key once (so Serving() answers from the start), then starts
  // the watch.
  void Start();
  void Stop();

  // Before a handshake: reads the key now; OK when it names this member,
  // otherwise kUnavailable with Reason::kNotLeader saying what it names.
  absl::Status Admit();
  // The same from the last read (health, status), without etcd's error
  // text (the watch logs it).
  absl::Status Serving() const;
  // From the last read: kUnavailable with Reason::kNotLeader only when it
  // names another member; OK otherwise.
  absl::Status Fenced() const;

 private:
  // Keeps `r` as the last read, logs a change (`when`: the handshake or the
  // watch), sets the gauges.
  void Note(const LeaderKey::Reading& r, absl::string_view when);
  // OK when `view` names this member; else kUnavailable, Reason::kNotLeader,
  // saying what it names (etcd's error only `with_error`).
  absl::Status Refusal(LeaderView view, bool with_error) const;
  void Watch();
  // The member check (above); the watch's thread only.
  void CheckMember();

  const std::unique_ptr<LeaderKey> key_;
  const std::string member_;
  const absl::Duration interval_;
  const MetricsRegistry::Family readable_;
  const MetricsRegistry::Family named_;
  const std::function<void(const absl::Status&)> on_fenced_;
  mutable absl::Mutex mu_;
  LeaderView last_ ABSL_GUARDED_BY(mu_);
  // What the last CheckMember() found: unknown before the first, or when
  // etcd holds no member keys (nothing to check against).
  enum class MemberSeen { kUnknown, kPresent, kMissing };
  MemberSeen member_seen_ = MemberSeen::kUnknown;
  // The view the last check followed.
  LeaderView checked_;
  absl::Notification stop_;
  std::thread thread_;
};

// Whether a new replica would be served: `readiness` (the source's), then
// the gate's Serving(); `gate` may be null (no --leader-etcd).
absl::Status ServingReadiness(absl::Status readiness, const LeaderGate* gate);

// Whether sessions may go on: `readiness`, then the gate's Fenced().
absl::Status SessionReadiness(absl::Status readiness, const LeaderGate* gate);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_LEADER_GATE_H_
