#include "agent/leader_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/reason.h"
#include "common/sys/thread_name.h"
#include "spdlog/spdlog.h"

namespace walship::agent {

LeaderGate::LeaderGate(std::unique_ptr<LeaderKey> key, std::string member,
                       absl::Duration interval, MetricsRegistry& metrics,
                       std::function<void(const absl::Status&)> on_fenced)
    : key_(std::move(key)),
      member_(std::move(member)),
      interval_(interval),
      readable_(metrics.Gauge("walship_agent_leader_key_readable",
                              "With --leader-etcd: 1 when the last read of the leader key got "
                              "etcd's answer (the key or its absence), 0 when no endpoint "
                              "answered.")),
      named_(metrics.Gauge("walship_agent_leader_named",
                           "With --leader-etcd: 1 while the last read of the leader key named "
                           "this agent's --member (it admits replicas), 0 otherwise.")),
      on_fenced_(std::move(on_fenced)) {
  last_.error = "not read yet";
}

LeaderGate::~LeaderGate() { Stop(); }

void LeaderGate::Start() {
  Note(key_->Read(), "at start");
  thread_ = std::thread([this] {
    NameThisThread("ws-leader");
    {
      absl::MutexLock lock(&mu_);
      checked_ = last_;
    }
    CheckMember();
    Watch();
  });
}

void LeaderGate::CheckMember() {
  const std::string prefix = PatroniMembersPrefix(key_->key());
  absl::StatusOr<std::vector<LeaderKey::KeyValue>> kvs = key_->ReadPrefix(prefix);
  if (!kvs.ok()) return;  // the key's own reads say so
  std::vector<std::string> names;
  bool present = false;
  for (const LeaderKey::KeyValue& kv : *kvs) {
    const std::string name = MemberOfKey(kv.key, prefix);
    if (name.empty()) continue;
    names.push_back(name);
    present = present || name == member_;
  }
  const MemberSeen seen = names.empty() ? MemberSeen::kUnknown
                          : present     ? MemberSeen::kPresent
                                        : MemberSeen::kMissing;
  if (seen == member_seen_) return;
  if (seen == MemberSeen::kMissing) {
    spdlog::warn("--member={}: etcd has no member of that name under {} (it has {}): this "
                 "agent serves only while the leader key names {}; check that --member is "
                 "this node's name in the HA manager (Patroni's name:), or that its Patroni "
                 "runs",
                 member_, prefix, absl::StrJoin(names, ", "), member_);
  } else if (seen == MemberSeen::kPresent && member_seen_ == MemberSeen::kMissing) {
    spdlog::info("--member={}: etcd has that member under {} now", member_, prefix);
  }
  member_seen_ = seen;
}

void LeaderGate::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

absl::Status LeaderGate::Refusal(LeaderView view, bool with_error) const {
  if (view.state == LeaderView::State::kNamed && view.member == member_) {
    return absl::OkStatus();
  }
  // Health and status compare texts; etcd's errors vary from read to read.
  if (!with_error) view.error = "no endpoint answered";
  return WithReason(
      absl::UnavailableError(absl::StrCat(
          "this agent's node is member ", member_, " and ", DescribeLeaderView(view, key_->key()),
          ": it serves no replica", RefusalWaitsFor(view))),
      Reason::kNotLeader);
}

void LeaderGate::Note(const LeaderKey::Reading& r, absl::string_view when_view) {
  const std::string when(when_view);
  {
    absl::MutexLock lock(&mu_);
    last_ = r.view;
  }
  const bool readable = r.view.state != LeaderView::State::kUnreadable;
  const bool named = r.view.state == LeaderView::State::kNamed && r.view.member == member_;
  readable_.Set({}, readable ? 1 : 0);
  named_.Set({}, named ? 1 : 0);
  const std::string what = DescribeLeaderView(r.view, key_->key());
  if (!r.changed) {
    spdlog::debug("leader key ({}): {}", when, what);
  } else if (named) {
    spdlog::info("leader key ({}): {}: this agent's node, member {}, serves replicas", when,
                 what, member_);
  } else if (r.view.state == LeaderView::State::kNamed) {
    // A standby's agent sees this at every change of leader; a primary's
    // sessions end with a warning each (the gate's owner logs them).
    spdlog::info("leader key ({}): {}, not this agent's member {}: serving no replica", when,
                 what, member_);
  } else {
    spdlog::warn("leader key ({}): {}: admitting no new replica (member {}); sessions running "
                 "go on",
                 when, what, member_);
  }
}

absl::Status LeaderGate::Admit() {
  const LeaderKey::Reading r = key_->Read();
  Note(r, "handshake");
  return Refusal(r.view, /*with_error=*/true);
}

absl::Status LeaderGate::Serving() const {
  absl::MutexLock lock(&mu_);
  return Refusal(last_, /*with_error=*/false);
}

absl::Status LeaderGate::Fenced() const {
  absl::MutexLock lock(&mu_);
  if (!LeaderMovedAway(last_, member_)) return absl::OkStatus();
  return Refusal(last_, /*with_error=*/false);
}

void LeaderGate::Watch() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    const LeaderKey::Reading r = key_->Read();
    Note(r, "watch");
    if (absl::Status fenced = Fenced(); !fenced.ok()) on_fenced_(fenced);
    // A handshake's read may have seen the change first: compare with the
    // view of the last check, not with the last read.
    const bool changed = r.view.state != checked_.state || r.view.member != checked_.member;
    if (changed || member_seen_ == MemberSeen::kMissing) {
      checked_ = r.view;
      CheckMember();
    }
  }
}

absl::Status ServingReadiness(absl::Status readiness, const LeaderGate* gate) {
  if (!readiness.ok() || gate == nullptr) return readiness;
  return gate->Serving();
}

absl::Status SessionReadiness(absl::Status readiness, const LeaderGate* gate) {
  if (!readiness.ok() || gate == nullptr) return readiness;
  return gate->Fenced();
}

}  // namespace walship::agent
