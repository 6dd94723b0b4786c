// walship-status: prints an agent's Status (every replica's positions, lag
// and transfer counters) as a table or as JSON; with --watch, refreshes it and
// adds each replica's throughput and catch-up progress (status/status_watch.h).
// Given several agents (those beside an HA cluster's nodes), asks them all at
// once and says which serve (status/agent_roles.h).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/leader_key.h"
#include "common/status_macros.h"
#include "replica/agent_list.h"
#include "replica/member_agents.h"
#include "status/agent_roles.h"
#include "status/status_watch.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"
#include "google/protobuf/util/json_util.h"
#include "proto/walship.grpc.pb.h"

namespace {

namespace st = walship::status;

std::string Pos(const walship::v1::Position& p) {
  if (p.segment().empty()) return "-";
  return absl::StrFormat("%s@%d", p.segment(), p.offset());
}

uint64_t BytesSent(const walship::v1::ReplicaStatus& r) {
  return r.agent_counters().bytes_zerocopy() + r.agent_counters().bytes_copy();
}

std::string StatusJson(const walship::v1::StatusResponse& resp) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(resp, &out, opts);
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// `progress` is null outside --watch (no throughput column values).
void PrintTable(const walship::v1::StatusResponse& resp,
                const std::map<std::string, st::Progress>* progress) {
  std::printf("stream %s (%s%s), source end %s\n", resp.stream_id().c_str(),
              resp.source_format().c_str(),
              resp.timeline() != 0 ? absl::StrCat(", timeline ", resp.timeline()).c_str() : "",
              Pos(resp.source_end()).c_str());
  if (!resp.held_back_reason().empty() && resp.held_back_reason() != "none") {
    std::printf("source holds back %llu bytes of %s past its valid end %llu: %s\n",
                static_cast<unsigned long long>(resp.source_file_size() -
                                                resp.source_end().offset()),
                resp.source_end().segment().c_str(),
                static_cast<unsigned long long>(resp.source_end().offset()),
                resp.held_back_reason().c_str());
  }
  if (!resp.source_error().empty()) {
    std::printf("SOURCE NOT SERVING: %s\n", resp.source_error().c_str());
  }
  std::printf("%-16s %-32s %-9s %-9s %-11s %-28s %-28s %12s %9s %14s %14s %-19s", "REPLICA",
              "STATE", "CONNECTED", "TRANSPORT", "COMPRESSION", "SENT", "FLUSHED", "LAG_BYTES",
              "LAG_MS", "ZEROCOPY_BYTES", "COPY_BYTES", "DATA_TLS(AGT/REP)");
  if (progress) std::printf(" %12s", "THROUGHPUT");
  std::printf("  %s\n", "LAST_ERROR");
  for (const auto& r : resp.replicas()) {
    const std::string state =
        r.state_reason().empty() ? r.state() : r.state() + " (" + r.state_reason() + ")";
    // A compressing session ships on the copy path whatever its transport.
    const bool compressing = !r.compression().empty() && r.compression() != "none";
    std::printf("%-16s %-32s %-9s %-9s %-11s %-28s %-28s %12llu %9llu %14llu %14llu",
                r.name().c_str(), state.c_str(), r.connected() ? "yes" : "no",
                compressing ? "copy" : r.transport().c_str(),
                r.compression().empty() ? "none" : r.compression().c_str(), Pos(r.sent()).c_str(),
                Pos(r.flushed()).c_str(), static_cast<unsigned long long>(r.lag_bytes()),
                static_cast<unsigned long long>(r.lag_ms()),
                static_cast<unsigned long long>(r.agent_counters().bytes_zerocopy()),
                static_cast<unsigned long long>(r.agent_counters().bytes_copy()));
    // How the data socket moves bytes on each side: ktls, userspace, off.
    std::printf(" %-19s", (r.data_path().empty() ? std::string("-")
                                                  : r.data_path() + "/" + r.replica_data_path())
                              .c_str());
    const st::Progress* p = nullptr;
    if (progress) {
      auto it = progress->find(r.name());
      if (it != progress->end()) p = &it->second;
      std::printf(" %12s", p && p->have_rate ? st::FormatRate(p->bytes_per_sec).c_str() : "-");
    }
    std::printf("  %s\n", r.last_error().c_str());
    if (p && p->show_progress) {
      std::printf("  %s\n", st::ProgressLine(*p, r.lag_bytes()).c_str());
    }
  }
}

// The replicas_progress array's elements of `resp`'s replicas.
std::string ProgressJson(const walship::v1::StatusResponse& resp,
                         const std::map<std::string, st::Progress>& progress) {
  std::string rates;
  for (const auto& r : resp.replicas()) {
    auto it = progress.find(r.name());
    if (it == progress.end()) continue;
    const st::Progress& p = it->second;
    if (!rates.empty()) rates += ",";
    rates += absl::StrFormat(
        "{\"name\":%s,\"have_rate\":%s,\"bytes_per_sec\":%.0f,\"catchup_bytes_per_sec\":%.0f,"
        "\"moving\":%s,\"fraction_done\":%.4f,\"eta_seconds\":%s}",
        JsonString(r.name()), p.have_rate ? "true" : "false", p.bytes_per_sec,
        p.catchup_per_sec, p.moving ? "true" : "false", p.show_progress ? p.fraction_done : 0.0,
        p.eta ? absl::StrFormat("%.1f", absl::ToDoubleSeconds(*p.eta)) : "null");
  }
  return rates;
}

std::string TimeJson(absl::Time now) {
  return JsonString(absl::FormatTime(absl::RFC3339_sec, now, absl::UTCTimeZone()));
}

// One line: {"time": ..., "replicas_progress": [...], "status": {...}}.
void PrintJsonLine(const walship::v1::StatusResponse& resp, absl::Time now,
                   const std::map<std::string, st::Progress>& progress) {
  std::printf("{\"time\":%s,\"replicas_progress\":[%s],\"status\":%s}\n", TimeJson(now).c_str(),
              ProgressJson(resp, progress).c_str(), StatusJson(resp).c_str());
}

// The agents asked, and how.
struct Options {
  std::vector<walship::replica::AgentEntry> agents;
  walship::LeaderKeyConfig leader;
  std::string agent_tag;
  bool json = false;
  bool watch = false;
  int64_t timeout_ms = 5000;
  int64_t interval_ms = 1000;
  int64_t count = 0;
  walship::TlsOptions tls;
  // Several agents, or the leader key: a line for each agent and which serve.
  bool cluster() const { return agents.size() != 1 || leader.enabled(); }
};

void RegisterFlags(walship::FlagSet& flags, Options* o, std::string* agent) {
  flags.String("agent", agent,
               "HOST:PORT of the agent's control port (required unless --agent-tag); several, "
               "separated by commas, each maybe NAME=HOST:PORT as the replica's --agent takes "
               "them.");
  walship::RegisterLeaderKeyFlags(
      flags, &o->leader,
      "say which member the leader key names, and whether the agents agree with it.");
  flags.String("agent-tag", &o->agent_tag,
               "With --leader-etcd: ask the agents the HA manager's member keys name too, as "
               "walship-replica --agent-tag does (Patroni: tags: {walship_agent: HOST:PORT}).");
  flags.Bool("json", &o->json,
             "Print the Status message as JSON; with --watch one object per line: "
             "{\"time\", \"replicas_progress\", \"status\"}. With several agents or "
             "--leader-etcd: {\"agents\": [{\"agent\", \"member\", \"status\" or \"error\"}, "
             "...], \"serving\": [addresses], \"leader\": {...}} (with --watch, \"time\" and "
             "each agent's \"replicas_progress\" too).");
  flags.Int("timeout-ms", &o->timeout_ms, "Deadline for each call.");
  flags.Bool("watch", &o->watch,
             "Refresh every --interval-ms, adding each replica's throughput and, while it "
             "catches up, a progress bar with the catch-up rate and ETA.");
  flags.Int("interval-ms", &o->interval_ms, "Refresh interval of --watch.");
  flags.Int("count", &o->count,
            "With --watch, stop after this many refreshes; 0 runs until killed.");
  walship::RegisterTlsFlags(flags, &o->tls, /*client=*/true);
}

// Checks the command line, filling o->agents from `agent`: what is wrong
// with it, or empty when nothing.
std::string Problem(const absl::StatusOr<std::vector<std::string>>& args,
                    const std::string& agent, Options* o) {
  if (!args.ok()) return std::string(args.status().message());
  if (agent.empty() && o->agent_tag.empty()) return "--agent is required (or --agent-tag)";
  if (!o->agent_tag.empty() && !o->leader.enabled()) {
    return "--agent-tag reads the agents from the HA manager's member keys: it needs "
           "--leader-etcd and --leader-key";
  }
  if (!args->empty()) return "unexpected argument \"" + (*args)[0] + "\"";
  if (o->interval_ms < 1 || o->count < 0) {
    return "--interval-ms must be at least 1 and --count at least 0";
  }
  if (absl::Status v = o->tls.Validate(); !v.ok()) return std::string(v.message());
  if (absl::Status v = o->leader.Validate(); !v.ok()) return std::string(v.message());
  if (agent.empty()) return "";
  auto entries = walship::replica::ParseAgentEntries(agent);
  if (!entries.ok()) return std::string(entries.status().message());
  o->agents = *std::move(entries);
  return "";
}

// Parses the command line into *o; -1 to go on, otherwise the exit status
// (usage printed, or the problem on stderr).
int ParseOptions(int argc, char** argv, Options* o) {
  std::string agent;
  walship::FlagSet flags(
      "walship-status: shows an agent's replicas, their positions, lag and counters; given\n"
      "several agents (those beside an HA cluster's nodes), which of them serve.\n"
      "Usage: walship-status --agent=[NAME=]HOST:PORT[,...] [--json] [--watch "
      "[--interval-ms=N] [--count=N]]\n"
      "       walship-status --leader-etcd=HOST:PORT --leader-key=KEY --agent-tag=TAG ...\n"
      "Exit status: 0 answered (every agent, and etcd); 1 bad usage; 2 an agent or etcd did\n"
      "not answer, or there was no agent to ask (with --watch: in the last round).");
  RegisterFlags(flags, o, &agent);
  auto args = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  const std::string problem = Problem(args, agent, o);
  if (!problem.empty()) {
    std::fprintf(stderr, "walship-status: %s\n", problem.c_str());
    return 1;
  }
  return -1;
}

// One agent's answer: its Status when roles.answered.
struct Answer {
  st::AgentAnswer roles;
  walship::v1::StatusResponse resp;
};

// One round: the agents' answers, and with --leader-etcd what the leader key
// said and (with --agent-tag) what the member keys did.
struct Round {
  std::vector<Answer> answers;
  std::optional<walship::LeaderView> leader;
  std::vector<std::string> notes;  // what the member keys gave, and their problems
  // Every agent and etcd answered, and there was an agent to ask.
  bool complete() const {
    if (answers.empty()) return false;
    if (leader && leader->state == walship::LeaderView::State::kUnreadable) return false;
    for (const Answer& a : answers) {
      if (!a.roles.answered) return false;
    }
    return true;
  }
};

// Asks the agents, round after round: the --agent entries, then those the
// member keys name (read again each round). Keeps a channel per address.
class Asker {
 public:
  Asker(const Options& o, walship::sys::SysCalls& sys, walship::Clock& clock,
        std::unique_ptr<walship::LeaderKey> key)
      : o_(o), sys_(sys), clock_(clock), key_(std::move(key)) {}

  // kInvalidArgument when an agent's channel cannot be made (its TLS files).
  absl::StatusOr<Round> Next() {
    Round r;
    std::vector<walship::replica::AgentEntry> agents = o_.agents;
    if (key_ != nullptr) {
      r.leader = key_->Read().view;
      if (!o_.agent_tag.empty()) agents = FromMembers(&r);
    }
    std::vector<walship::v1::Control::Stub*> stubs;
    for (const walship::replica::AgentEntry& e : agents) {
      WALSHIP_ASSIGN_OR_RETURN(walship::v1::Control::Stub * stub, Stub(e.address));
      stubs.push_back(stub);
    }
    r.answers = AskAll(agents, stubs);
    return r;
  }

 private:
  // The --agent entries and those the member keys name; notes in r.
  std::vector<walship::replica::AgentEntry> FromMembers(Round* r) {
    const std::string prefix = walship::PatroniMembersPrefix(o_.leader.key);
    absl::StatusOr<std::vector<walship::LeaderKey::KeyValue>> kvs = key_->ReadPrefix(prefix);
    if (!kvs.ok()) {
      r->notes.push_back(absl::StrCat("member keys under ", prefix,
                                      " cannot be read: ", kvs.status().message()));
      return o_.agents;
    }
    walship::replica::MemberAgents m =
        walship::replica::AgentsFromMembers(*kvs, prefix, o_.agent_tag);
    r->notes.push_back(absl::StrCat("agents from the member keys under ", prefix, " (tag ",
                                    o_.agent_tag, "): ",
                                    walship::replica::DescribeAgents(m.agents)));
    if (!m.untagged.empty()) {
      r->notes.push_back(
          absl::StrCat("members without the tag: ", absl::StrJoin(m.untagged, ", ")));
    }
    for (const std::string& p : m.problems) r->notes.push_back(p);
    return walship::replica::MergeAgents(o_.agents, m.agents);
  }

  absl::StatusOr<walship::v1::Control::Stub*> Stub(const std::string& address) {
    auto it = stubs_.find(address);
    if (it != stubs_.end()) return it->second.get();
    WALSHIP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                             walship::MakeChannel(sys_, clock_, address, o_.tls));
    auto stub = walship::v1::Control::NewStub(channel);
    walship::v1::Control::Stub* raw = stub.get();
    stubs_[address] = std::move(stub);
    return raw;
  }

  // Asks every agent at once (one completion queue, each call with its own
  // deadline); their answers in the agents' order.
  std::vector<Answer> AskAll(const std::vector<walship::replica::AgentEntry>& agents,
                             const std::vector<walship::v1::Control::Stub*>& stubs) {
    struct Call {
      grpc::ClientContext ctx;
      grpc::Status status;
      std::unique_ptr<grpc::ClientAsyncResponseReader<walship::v1::StatusResponse>> rpc;
    };
    grpc::CompletionQueue cq;
    std::vector<Answer> out(agents.size());
    std::vector<std::unique_ptr<Call>> calls;
    for (size_t i = 0; i < agents.size(); ++i) {
      out[i].roles.address = agents[i].address;
      out[i].roles.member = agents[i].member;
      auto c = std::make_unique<Call>();
      c->ctx.set_deadline(absl::ToChronoTime(clock_.Now() + absl::Milliseconds(o_.timeout_ms)));
      c->rpc = stubs[i]->AsyncStatus(&c->ctx, walship::v1::StatusRequest(), &cq);
      c->rpc->Finish(&out[i].resp, &c->status, reinterpret_cast<void*>(i));
      calls.push_back(std::move(c));
    }
    void* tag = nullptr;
    bool ok = false;
    for (size_t done = 0; done < agents.size() && cq.Next(&tag, &ok); ++done) {
      const size_t i = reinterpret_cast<size_t>(tag);
      st::AgentAnswer& a = out[i].roles;
      a.answered = calls[i]->status.ok();
      a.error = calls[i]->status.error_message();
      a.not_serving = out[i].resp.source_error();
      a.timeline = out[i].resp.timeline();
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return out;
  }

  const Options& o_;
  walship::sys::SysCalls& sys_;
  walship::Clock& clock_;
  std::unique_ptr<walship::LeaderKey> key_;
  std::map<std::string, std::unique_ptr<walship::v1::Control::Stub>> stubs_;
};

// The replicas' progress of one agent's answer, by replica name; trackers
// by "ADDRESS/REPLICA".
std::map<std::string, st::Progress> Track(const Answer& a, absl::Time now,
                                          std::map<std::string, st::ReplicaTracker>* trackers) {
  std::map<std::string, st::Progress> progress;
  for (const auto& r : a.resp.replicas()) {
    progress[r.name()] = (*trackers)[a.roles.address + "/" + r.name()].Update(
        {now, BytesSent(r), r.lag_bytes()});
  }
  return progress;
}

std::vector<st::AgentAnswer> Roles(const Round& r) {
  std::vector<st::AgentAnswer> roles;
  for (const Answer& a : r.answers) roles.push_back(a.roles);
  return roles;
}

std::string LeaderJson(const Options& o, const Round& r) {
  if (!r.leader) return "";
  const char* state = r.leader->state == walship::LeaderView::State::kNamed    ? "named"
                      : r.leader->state == walship::LeaderView::State::kAbsent ? "absent"
                                                                                : "unreadable";
  return absl::StrCat(",\"leader\":{\"key\":", JsonString(o.leader.key), ",\"state\":\"", state,
                      "\",\"member\":", JsonString(r.leader->member),
                      ",\"error\":", JsonString(r.leader->error), ",\"disagreement\":",
                      JsonString(st::LeaderDisagreement(Roles(r), *r.leader)), "}");
}

// The cluster as one JSON object on one line; `progress` (by agent) and
// `now` only with --watch.
void PrintClusterJson(const Options& o, const Round& r,
                      const std::vector<std::map<std::string, st::Progress>>* progress,
                      absl::Time now) {
  std::vector<std::string> agents;
  std::vector<std::string> serving;
  for (size_t i = 0; i < r.answers.size(); ++i) {
    const st::AgentAnswer& a = r.answers[i].roles;
    std::string one = absl::StrCat("{\"agent\":", JsonString(a.address),
                                   ",\"member\":", JsonString(a.member));
    if (!a.answered) {
      absl::StrAppend(&one, ",\"error\":", JsonString(a.error), "}");
    } else {
      if (progress != nullptr) {
        absl::StrAppend(&one, ",\"replicas_progress\":[",
                        ProgressJson(r.answers[i].resp, (*progress)[i]), "]");
      }
      absl::StrAppend(&one, ",\"status\":", StatusJson(r.answers[i].resp), "}");
    }
    agents.push_back(std::move(one));
    if (a.serving()) serving.push_back(JsonString(a.address));
  }
  std::vector<std::string> notes;
  for (const std::string& n : r.notes) notes.push_back(JsonString(n));
  std::printf("{%s\"agents\":[%s],\"serving\":[%s],\"notes\":[%s]%s}\n",
              progress != nullptr ? absl::StrCat("\"time\":", TimeJson(now), ",").c_str() : "",
              absl::StrJoin(agents, ",").c_str(), absl::StrJoin(serving, ",").c_str(),
              absl::StrJoin(notes, ",").c_str(), LeaderJson(o, r).c_str());
}

// The cluster as tables: the notes, a line for each agent and its table,
// then which serve and what the leader key says.
void PrintClusterTables(const Options& o, const Round& r,
                        const std::vector<std::map<std::string, st::Progress>>* progress) {
  for (const std::string& n : r.notes) std::printf("%s\n", n.c_str());
  if (!r.notes.empty()) std::printf("\n");
  for (size_t i = 0; i < r.answers.size(); ++i) {
    std::printf("%s\n", st::AgentLine(r.answers[i].roles).c_str());
    if (r.answers[i].roles.answered) {
      PrintTable(r.answers[i].resp, progress != nullptr ? &(*progress)[i] : nullptr);
    }
    std::printf("\n");
  }
  std::printf("%s\n", st::ServingSummary(Roles(r)).c_str());
  if (r.leader) {
    std::printf("%s\n", walship::DescribeLeaderView(*r.leader, o.leader.key).c_str());
    const std::string disagreement = st::LeaderDisagreement(Roles(r), *r.leader);
    if (!disagreement.empty()) std::printf("%s\n", disagreement.c_str());
  }
}

// One round's output; `progress` and `now` only with --watch. True when
// every agent and etcd answered.
bool Print(const Options& o, const Round& r,
           const std::vector<std::map<std::string, st::Progress>>* progress, absl::Time now) {
  for (const Answer& a : r.answers) {
    if (a.roles.answered) continue;
    std::fprintf(stderr, "walship-status: %s: %s\n", a.roles.address.c_str(),
                 a.roles.error.c_str());
  }
  if (o.cluster()) {
    if (o.json) {
      PrintClusterJson(o, r, progress, now);
    } else {
      PrintClusterTables(o, r, progress);
    }
  } else if (r.answers[0].roles.answered) {
    if (o.json && progress != nullptr) {
      PrintJsonLine(r.answers[0].resp, now, (*progress)[0]);
    } else if (o.json) {
      std::printf("%s\n", StatusJson(r.answers[0].resp).c_str());
    } else {
      PrintTable(r.answers[0].resp, progress != nullptr ? &(*progress)[0] : nullptr);
    }
  }
  return r.complete();
}

int Watch(const Options& o, Asker& asker, walship::sys::SysCalls& sys, walship::Clock& clock) {
  const bool clear_screen = !o.json && sys.Isatty(STDOUT_FILENO).ok();
  std::map<std::string, st::ReplicaTracker> trackers;
  bool last_ok = false;
  for (int64_t i = 0; o.count == 0 || i < o.count; ++i) {
    if (i > 0) clock.SleepFor(absl::Milliseconds(o.interval_ms));
    absl::StatusOr<Round> r = asker.Next();
    if (!r.ok()) {
      std::fprintf(stderr, "walship-status: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    const absl::Time now = clock.Now();
    std::vector<std::map<std::string, st::Progress>> progress;
    for (const Answer& a : r->answers) progress.push_back(Track(a, now, &trackers));
    // One agent that did not answer prints nothing (a gap in the JSON
    // lines); a cluster prints what it has.
    const bool shown = o.cluster() || r->answers[0].roles.answered;
    if (!o.json && shown) {
      if (clear_screen) std::fputs("\033[H\033[2J", stdout);
      std::printf("%s  (every %lld ms)\n",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S", now, absl::LocalTimeZone()).c_str(),
                  static_cast<long long>(o.interval_ms));
    }
    last_ok = Print(o, *r, &progress, now);
    if (!o.json && !clear_screen && shown) std::printf("\n");
    std::fflush(stdout);
  }
  return last_ok ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = ParseOptions(argc, argv, &o); rc >= 0) return rc;
  // Warnings (a certificate about to expire, ...) go to stderr: stdout
  // carries only the status, which --json makes machine-read.
  if (absl::Status s = walship::InitLogging("walship-status", "info"); !s.ok()) {
    std::fprintf(stderr, "walship-status: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  walship::sys::SysCalls& sys = walship::sys::DefaultSysCalls();
  walship::Clock& clock = walship::DefaultClock();
  std::unique_ptr<walship::LeaderKey> key;
  if (o.leader.enabled()) {
    auto k = walship::LeaderKey::Make(sys, clock, o.leader, absl::Milliseconds(o.timeout_ms));
    if (!k.ok()) {
      std::fprintf(stderr, "walship-status: %s\n", std::string(k.status().message()).c_str());
      return 1;
    }
    key = *std::move(k);
  }
  Asker asker(o, sys, clock, std::move(key));
  if (o.watch) return Watch(o, asker, sys, clock);
  absl::StatusOr<Round> r = asker.Next();
  if (!r.ok()) {
    std::fprintf(stderr, "walship-status: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  return Print(o, *r, nullptr, absl::Time()) ? 0 : 2;
}
