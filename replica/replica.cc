#include "replica/replica.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/thread_name.h"
#include "common/tls.h"
#include "proto/walship.grpc.pb.h"
#include "replica/dest_lock.h"
#include "replica/member_agents.h"
#include "common/leader_key.h"
#include "replica/session.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

// Asks agents for their Status (the leader watch, and the check before a
// handshake): one channel per agent, kept for the probe's lifetime.
class AgentProbe {
 public:
  AgentProbe(sys::SysCalls& sys, Clock& clock, const std::vector<std::string>& agents,
             const TlsOptions& tls) {
    for (const std::string& a : agents) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(sys, clock, a, tls);
      if (!channel.ok()) {
        spdlog::warn("cannot ask agent {} for its status: {}", a, channel.status().ToString());
        continue;
      }
      stubs_.emplace_back(a, walship::v1::Control::NewStub(*channel));
    }
  }

  // What each agent that answers within `deadline` says about its source.
  std::vector<AgentView> Ask(Clock& clock, absl::Duration deadline) {
    std::vector<AgentView> views;
    for (auto& [name, stub] : stubs_) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(clock.Now() + deadline));
      walship::v1::StatusRequest req;
      walship::v1::StatusResponse resp;
      // An agent that does not answer is no leader to go to.
      if (!stub->Status(&ctx, req, &resp).ok()) continue;
      views.push_back(AgentView{name, resp.source_error().empty(), resp.timeline()});
    }
    return views;
  }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<walship::v1::Control::Stub>>> stubs_;
};

std::vector<std::string> AgentsOf(const ReplicaOptions& o) {
  if (o.agent.empty()) return {};  // --agent-tag: from etcd, before each session
  absl::StatusOr<std::vector<std::string>> list = ParseAgentList(o.agent);
  if (list.ok()) return *std::move(list);
  return {o.agent};  // Validate() refuses it; each session then says why
}

}  // namespace

Replica::Replica(sys::SysCalls& sys, ReplicaOptions options, MetricsRegistry* metrics, Clock& clock)
    : clock_(clock),
      sys_(sys),
      options_(std::move(options)),
      rotation_(AgentsOf(options_)),
      session_options_(options_),
      metrics_(metrics ? *metrics : own_metrics_) {
  // Declared up front so every series exists (at 0) from the first scrape.
  metrics_.Counter("walship_replica_sessions_total", "Sessions started (handshakes sent).");
  metrics_.Counter("walship_replica_data_sessions_total",
                   "Data sockets opened, by path (ktls = kernel TLS with splice, userspace = "
                   "TLS through a copy, off = plaintext).");
  metrics_.Counter("walship_replica_session_failures_total",
                   "Sessions that ended with an error, by status code.");
  metrics_.Counter("walship_replica_checksum_failures_total",
                   "Frames or segments whose CRC32C did not match; nothing of them was kept.");
  metrics_.Counter("walship_replica_divergences_total",
                   "Divergent history detected (the replica's bytes differ from the agent's).");
  metrics_.Counter("walship_replica_disk_full_total", "Sessions ended by a full disk.");
  metrics_.Counter("walship_replica_bytes_received_total", "Payload bytes written, by path.");
  metrics_.Counter("walship_replica_compression_bytes_total",
                   "Of the copy path's bytes, those received in compressed (ZDATA) frames: "
                   "bytes=uncompressed (written) and bytes=wire (what carried them).");
  metrics_.Gauge("walship_replica_compression",
                 "1 for the compression the replica asked for (--compress) and the one the "
                 "agent agreed to (none when it declined: the replica ships uncompressed).");
  metrics_.Counter("walship_replica_segments_completed_total",
                   "Segments verified, fdatasync'ed and renamed to their final name.");
  metrics_.Histogram("walship_replica_flush_seconds",
                     "Time to make received bytes durable before acknowledging them: "
                     "fdatasync, finalize (the position record only where a cycle enters "
                     "or publishes a segment).",
                     {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  // Fine buckets: the disk's own flush latency, against which the lag of
  // acknowledgements is judged (from 50 us to 1 s, 25 % apart).
  std::vector<double> sync_bounds;
  for (double b = 50e-6; b < 1.0; b *= 1.25) sync_bounds.push_back(b);
  metrics_.Histogram("walship_replica_data_fdatasync_seconds",
                     "Duration of each fdatasync of a segment file (the data's device flush).",
                     sync_bounds);
  std::vector<double> spare_bounds;
  for (double b = 1e-3; b < 30.0; b *= 1.5) spare_bounds.push_back(b);
  metrics_.Histogram("walship_replica_spare_prepare_seconds",
                     "Time to write, fdatasync and enter each zero-filled spare segment file "
                     "(a live segment's file, prepared in the background).",
                     spare_bounds);
  metrics_.Gauge("walship_replica_durable_offset_bytes",
                 "Byte offset of the durable position within its segment.");
  metrics_.Gauge("walship_replica_timeline",
                 "The newest timeline the replica holds or receives (PostgreSQL WAL names); "
                 "agents of older timelines are refused.");
  metrics_.Counter("walship_replica_agent_refusals_total",
                   "Sessions that did not reach an agent's data socket, by agent and reason "
                   "(not_primary, older_timeline, unavailable: not reachable, ...).");
  metrics_.Counter("walship_replica_agent_switches_total",
                   "Sessions established with another agent than the one before (a "
                   "failover or switchover, with several --agent addresses).");
  MetricsRegistry::Family active = metrics_.Gauge(
      "walship_replica_agent_active", "1 for the agent of the live session, 0 for the others.");
  for (const std::string& a : rotation_.agents()) active.Set({{"agent", a}}, 0);
  // Always exported: with --agent-tag a replica may know no agent at all,
  // and then has no agent_active series for an alert to sum.
  metrics_.Gauge("walship_replica_agents_known",
                 "Agents the replica may follow: its --agent entries and, with --agent-tag, "
                 "those the member keys in etcd name (0: it follows nobody).")
      .Set({}, static_cast<double>(rotation_.size()));
  if (options_.leader.enabled()) {
    absl::StatusOr<std::vector<AgentEntry>> entries = ParseAgentEntries(options_.agent);
    if (entries.ok()) configured_entries_ = *std::move(entries);  // Validate() parsed it
    agent_entries_ = configured_entries_;
    members_prefix_ = PatroniMembersPrefix(options_.leader.key);
    metrics_.Gauge("walship_replica_leader_key_readable",
                   "With --leader-etcd: 1 when the last read of the leader key got etcd's "
                   "answer (the key or its absence), 0 when no endpoint answered.");
    // The daemon's start checked the credential files; should one have gone
    // since, no agent is followed until it can be read again.
    absl::StatusOr<std::unique_ptr<LeaderKey>> key = LeaderKey::MakeAwaitingFiles(
        sys_, clock_, options_.leader, options_.leader_check_interval);
    if (key.ok()) {
      leader_key_ = *std::move(key);
    } else {  // never: Validate() parsed the endpoints
      spdlog::error("the leader key cannot be read: {}", key.status().ToString());
      leader_key_ = std::make_unique<LeaderKey>(clock_, std::vector<std::string>{},
                                                grpc::InsecureChannelCredentials(),
                                                options_.leader.key,
                                                options_.leader_check_interval);
    }
  }
}

std::string Replica::MemberOf(const std::string& agent) const {
  for (const AgentEntry& e : agent_entries_) {
    if (e.address == agent) return e.member;
  }
  return "";
}

bool Replica::HasMember(const std::string& member) const {
  return std::any_of(agent_entries_.begin(), agent_entries_.end(),
                     [&](const AgentEntry& e) { return e.member == member; });
}

LeaderKey::Reading Replica::ReadLeaderKey() {
  LeaderKey::Reading r = leader_key_->Read();
  metrics_.Gauge("walship_replica_leader_key_readable", "")
      .Set({}, r.view.state == LeaderView::State::kUnreadable ? 0 : 1);
  return r;
}

absl::Status Replica::CheckLeaderKey(const std::string& agent) {
  const LeaderKey::Reading r = ReadLeaderKey();
  const std::string what = DescribeLeaderView(r.view, leader_key_->key());
  if (!r.changed) {
    spdlog::debug("leader key: {}", what);
  } else {
    if (r.view.state == LeaderView::State::kNamed && !HasMember(r.view.member)) {
      spdlog::warn("leader key: {}, a member no --agent entry names{}: following no agent; "
                   "add it as {}=HOST:PORT{}",
                   what,
                   options_.agent_tag.empty()
                       ? ""
                       : absl::StrCat(" and whose key ", members_prefix_, r.view.member,
                                      " tags no agent"),
                   r.view.member,
                   options_.agent_tag.empty()
                       ? ""
                       : absl::StrCat(", or tag its Patroni configuration with ",
                                      options_.agent_tag, ": HOST:PORT"));
    } else if (r.view.state == LeaderView::State::kNamed) {
      spdlog::info("leader key: {}", what);
    } else {
      spdlog::warn("leader key: {}; following no agent until it names one", what);
    }
  }
  return CheckLeader(r.view, agent, MemberOf(agent), leader_key_->key());
}

absl::Status Replica::WatchLeaderKey(const std::string& agent) {
  const LeaderKey::Reading r = ReadLeaderKey();
  const std::string member = MemberOf(agent);
  const std::string what = DescribeLeaderView(r.view, leader_key_->key());
  if (LeaderMovedAway(r.view, member)) {
    return WithReason(absl::UnavailableError(absl::StrCat(what, ", not ", member,
                                                          ": leaving agent ", agent)),
                      Reason::kNotLeader);
  }
  if (r.changed && r.view.state == LeaderView::State::kNamed) {
    spdlog::info("leader watch: {}", what);
  } else if (r.changed) {
    spdlog::warn("leader watch: {}; staying with agent {} while it ships", what, agent);
  }
  return absl::OkStatus();
}

void Replica::RefreshAgents() {
  absl::StatusOr<std::vector<LeaderKey::KeyValue>> kvs = leader_key_->ReadPrefix(members_prefix_);
  std::string note;
  if (!kvs.ok()) {
    note = absl::StrCat("cannot read the member keys under ", members_prefix_, ": ",
                        kvs.status().message(), "; keeping the agents known (",
                        DescribeAgents(agent_entries_), ")");
  } else {
    const MemberAgents found = AgentsFromMembers(*kvs, members_prefix_, options_.agent_tag);
    std::vector<AgentEntry> merged = MergeAgents(configured_entries_, found.agents);
    std::vector<std::string> addresses;
    for (const AgentEntry& e : merged) addresses.push_back(e.address);
    rotation_.SetAgents(std::move(addresses));
    metrics_.Gauge("walship_replica_agents_known", "")
        .Set({}, static_cast<double>(rotation_.size()));
    for (const AgentEntry& e : merged) {
      if (std::find(agent_entries_.begin(), agent_entries_.end(), e) == agent_entries_.end()) {
        metrics_.Gauge("walship_replica_agent_active", "").Set({{"agent", e.address}}, 0);
      }
    }
    agent_entries_ = std::move(merged);
    note = absl::StrCat("agents: ", DescribeAgents(agent_entries_), " (member keys under ",
                        members_prefix_, ", tag ", options_.agent_tag, ")");
    if (!found.untagged.empty()) {
      absl::StrAppend(&note, "; members without the tag: ", absl::StrJoin(found.untagged, ", "));
    }
    for (const std::string& p : found.problems) absl::StrAppend(&note, "; ", p);
  }
  // etcd's error may read differently each time: an unreadable etcd is
  // logged when it becomes so.
  std::string state = kvs.ok() ? note : "unreadable";
  members_note_ = std::move(note);
  if (state == members_state_) return;
  members_state_ = std::move(state);
  if (!kvs.ok() || agent_entries_.empty()) {
    spdlog::warn("{}", members_note_);
  } else {
    spdlog::info("{}", members_note_);
  }
}

void Replica::NoteAgentStep(const AgentRotation::Step& step, const absl::Status& s,
                            absl::Duration wait) {
  if (!step.agent.empty()) {
    metrics_.Gauge("walship_replica_agent_active", "").Set({{"agent", step.agent}}, 0);
  }
  if (rotation_.size() <= 1) {
    spdlog::warn("session ended: {}; retrying in {}", s.ToString(), absl::FormatDuration(wait));
    return;
  }
  const std::string next = rotation_.current();
  if (step.outcome_changed) {
    spdlog::warn("agent {} ({} of {}): {}; trying {} next in {}{}", step.agent, step.index + 1,
                 rotation_.size(), s.ToString(), next, absl::FormatDuration(wait),
                 step.round_complete ? " (every agent tried: backing off)" : "");
  } else {
    spdlog::debug("agent {}: {} again; trying {} next in {}", step.agent, step.outcome, next,
                  absl::FormatDuration(wait));
  }
}

void Replica::CountFailure(const absl::Status& s) {
  metrics_.Counter("walship_replica_session_failures_total", "")
      .Add({{"code", absl::StatusCodeToString(s.code())}}, 1);
  const Reason reason = ReasonOf(s);
  if (reason == Reason::kChecksum) {
    metrics_.Counter("walship_replica_checksum_failures_total", "").Add({}, 1);
  }
  if (reason == Reason::kDivergent || reason == Reason::kDamagedCopy) {
    metrics_.Counter("walship_replica_divergences_total", "").Add({}, 1);
  }
  if (absl::IsResourceExhausted(s)) metrics_.Counter("walship_replica_disk_full_total", "").Add({}, 1);
}

Replica::~Replica() = default;

void Replica::WatchLeader(Session& session, std::vector<std::string> others, uint32_t timeline,
                          const std::string& agent, absl::Notification& done) {
  NameThisThread("ws-leader-watch");
  AgentProbe probe(sys_, clock_, others, options_.tls);
  while (!done.WaitForNotificationWithTimeout(options_.leader_check_interval)) {
    absl::Status why = leader_key_ != nullptr ? WatchLeaderKey(agent) : absl::OkStatus();
    std::optional<AgentView> v;
    if (why.ok() && !others.empty()) {
      v = NewerPrimary(timeline, probe.Ask(clock_, options_.leader_check_interval));
    }
    if (v.has_value()) {
      why = WithReason(
          absl::UnavailableError(absl::StrCat(
              "agent ", v->agent, " serves timeline ", v->timeline, ", newer than timeline ",
              timeline, " of agent ", agent,
              " (its node was superseded): leaving it for the new primary's agent")),
          Reason::kOlderTimeline);
    }
    if (!why.ok()) {
      spdlog::warn("leader watch: {}", std::string(why.message()));
      session.Fail(std::move(why));
      return;
    }
  }
}

absl::Status Replica::CheckNoNewerPrimary(const std::string& agent) {
  std::vector<std::string> others;
  for (const std::string& a : rotation_.agents()) {
    if (a != agent) others.push_back(a);
  }
  // Each answer within leader_check_interval: an agent on a host that is
  // gone costs at most that before the handshake.
  AgentProbe mine(sys_, clock_, {agent}, options_.tls);
  std::vector<AgentView> own = mine.Ask(clock_, options_.leader_check_interval);
  // An agent that does not answer Status will not answer the handshake
  // either; one that is not a primary says so there.
  if (own.empty() || !own[0].serving || own[0].timeline == 0) return absl::OkStatus();
  AgentProbe probe(sys_, clock_, others, options_.tls);
  std::optional<AgentView> v =
      NewerPrimary(own[0].timeline, probe.Ask(clock_, options_.leader_check_interval));
  if (!v.has_value()) return absl::OkStatus();
  return WithReason(
      absl::UnavailableError(absl::StrCat(
          "agent ", agent, " serves timeline ", own[0].timeline, ", older than timeline ",
          v->timeline, " of agent ", v->agent,
          ": its node was superseded (a stale or demoted primary); not asking it")),
      Reason::kOlderTimeline);
}

bool Replica::IsFatal(const absl::Status& s) {
  switch (ReasonOf(s)) {
    // Trouble on the agent's side that it may get over (its source failed,
    // is not a primary, is behind us): the replica holds nothing wrong and
    // keeps asking, loudly, every backoff.
    case Reason::kSourceFailed:
    case Reason::kNotPrimary:
    case Reason::kNotReady:
    case Reason::kSourceBehind:
    case Reason::kSourceChanged:
    case Reason::kOlderTimeline:
    case Reason::kNotLeader:
      return false;
    default:
      break;
  }
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:
      return false;
  }
}

void Replica::Stop() {
  stopping_.store(true);
  absl::MutexLock lock(&mu_);
  if (current_ != nullptr) current_->Fail(absl::CancelledError("stopping"));
}

absl::Status Replica::Run() {
  absl::StatusOr<DestLock> lock = DestLock::Acquire(sys_, options_.dest);
  if (!lock.ok()) {
    spdlog::error("{}", lock.status().ToString());
    return lock.status();
  }
  absl::Duration backoff = options_.min_backoff;
  while (!stopping_.load()) {
    absl::Time began = clock_.Now();
    absl::Status s = RunOnce();
    if (stopping_.load()) break;
    CountFailure(s);
    if (IsFatal(s)) {
      spdlog::error("stopping: {} -- an operator must resolve this; restarting will "
                    "not help until then",
                    s.ToString());
      return s;
    }
    const bool established = established_.exchange(false);
    if (!established && !rotation_.current().empty()) {
      metrics_.Counter("walship_replica_agent_refusals_total", "")
          .Add({{"agent", rotation_.current()},
                {"reason", ReasonOf(s) != Reason::kUnspecified
                               ? std::string(ReasonName(ReasonOf(s)))
                               : absl::AsciiStrToLower(absl::StatusCodeToString(s.code()))}},
               1);
    }
    const AgentRotation::Step step = rotation_.OnSessionEnd(s, established);
    // A session that got as far as shipping resets the backoff: an agent
    // restart is not a reason to wait longer each time.
    if (established || clock_.Now() - began > absl::Seconds(10)) {
      backoff = options_.min_backoff;
    }
    // Between agents of one round only the shortest pause; the backoff
    // grows once every agent was tried.
    const absl::Duration wait = step.round_complete ? backoff : options_.min_backoff;
    if (absl::IsResourceExhausted(s)) {
      // Disk full (or out of descriptors): everything durable stays, nothing
      // new is acknowledged, and the next session resumes from the durable
      // position once space returns.
      struct statvfs v;
      uint64_t free_bytes = sys_.Statvfs(options_.dest.c_str(), &v).ok()
                                ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize
                                : 0;
      spdlog::error("disk full in {}: {} bytes free; acknowledging nothing new; retrying in {} "
                    "({})",
                    options_.dest, free_bytes, absl::FormatDuration(wait), s.ToString());
      metrics_.Gauge("walship_replica_agent_active", "").Set({{"agent", step.agent}}, 0);
    } else {
      NoteAgentStep(step, s, wait);
    }
    absl::Time until = clock_.Now() + wait;
    while (!stopping_.load() && clock_.Now() < until) clock_.SleepFor(absl::Milliseconds(20));
    if (step.round_complete) backoff = std::min(backoff * 2, options_.max_backoff);
  }
  return absl::OkStatus();
}

absl::Status Replica::RunOnce() {
  if (!options_.agent_tag.empty()) RefreshAgents();
  if (rotation_.size() == 0) {
    return WithReason(
        absl::UnavailableError(absl::StrCat("no agent to follow: ", members_note_)),
        Reason::kNotLeader);
  }
  session_options_.agent = rotation_.current();
  // With a leader key: only the agent of the member it names.
  if (leader_key_ != nullptr) WALSHIP_RETURN_IF_ERROR(CheckLeaderKey(session_options_.agent));
  // Several agents: never a superseded node's, even one still a primary (a
  // stale old primary), while another serves a newer timeline.
  if (rotation_.size() > 1) WALSHIP_RETURN_IF_ERROR(CheckNoNewerPrimary(session_options_.agent));
  Session session(sys_, session_options_, metrics_, after_failed_flush_, clock_);
  WALSHIP_RETURN_IF_ERROR(session.Open());
  established_.store(true);
  metrics_.Gauge("walship_replica_agent_active", "").Set({{"agent", session_options_.agent}}, 1);
  // The list may have grown from one agent (--agent-tag): a switch counts
  // whatever the list's size was; a lone agent's first session is no news.
  if (session_options_.agent != last_established_) {
    if (!last_established_.empty()) {
      metrics_.Counter("walship_replica_agent_switches_total", "").Add({}, 1);
    }
    if (rotation_.size() > 1 || !last_established_.empty()) {
      spdlog::info("following agent {} ({} of {}){}", session_options_.agent,
                   rotation_.current_index() + 1, rotation_.size(),
                   last_established_.empty()
                       ? ""
                       : absl::StrCat(" instead of ", last_established_));
    }
    last_established_ = session_options_.agent;
  }
  {
    absl::MutexLock lock(&mu_);
    current_ = &session;
  }
  if (stopping_.load()) session.Fail(absl::CancelledError("stopping"));
  absl::Notification session_done;
  std::thread watch;
  const bool timelines = rotation_.size() > 1 && session.agent_timeline() != 0;
  if (timelines || leader_key_ != nullptr) {
    std::vector<std::string> others;
    for (const std::string& a : rotation_.agents()) {
      if (timelines && a != session_options_.agent) others.push_back(a);
    }
    watch = std::thread([this, &session, others = std::move(others), &session_done,
                         timeline = session.agent_timeline()]() mutable {
      WatchLeader(session, std::move(others), timeline, session_options_.agent, session_done);
    });
  }
  absl::Status result = session.Run();
  session_done.Notify();
  if (watch.joinable()) watch.join();
  {
    absl::MutexLock lock(&mu_);
    current_ = nullptr;
  }
  // A fatal error of the last flush outranks why the session ended.
  if (!session.last_flush().ok() && IsFatal(session.last_flush())) return session.last_flush();
  return result;
}

}  // namespace walship::replica
