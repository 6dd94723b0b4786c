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
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "replica/agent_list.h"
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
  bool json = false;
  bool watch = false;
  int64_t timeout_ms = 5000;
  int64_t interval_ms = 1000;
  int64_t count = 0;
  walship::TlsOptions tls;
};

// Parses the command line into *o; -1 to go on, otherwise the exit status
// (usage printed, or the problem on stderr).
int ParseOptions(int argc, char** argv, Options* o) {
  std::string agent;
  walship::FlagSet flags(
      "walship-status: shows an agent's replicas, their positions, lag and counters; given\n"
      "several agents (those beside an HA cluster's nodes), which of them serve.\n"
      "Usage: walship-status --agent=[NAME=]HOST:PORT[,...] [--json] [--watch "
      "[--interval-ms=N] [--count=N]]\n"
      "Exit status: 0 answered (every agent); 1 bad usage; 2 an agent did not answer (with\n"
      "--watch: in the last round).");
  flags.String("agent", &agent,
               "HOST:PORT of the agent's control port (required); several, separated by "
               "commas, each maybe NAME=HOST:PORT as the replica's --agent takes them.");
  flags.Bool("json", &o->json,
             "Print the Status message as JSON; with --watch one object per line: "
             "{\"time\", \"replicas_progress\", \"status\"}. With several agents: "
             "{\"agents\": [{\"agent\", \"member\", \"status\" or \"error\"}, ...], "
             "\"serving\": [addresses]} (with --watch, \"time\" and each agent's "
             "\"replicas_progress\" too).");
  flags.Int("timeout-ms", &o->timeout_ms, "Deadline for each call.");
  flags.Bool("watch", &o->watch,
             "Refresh every --interval-ms, adding each replica's throughput and, while it "
             "catches up, a progress bar with the catch-up rate and ETA.");
  flags.Int("interval-ms", &o->interval_ms, "Refresh interval of --watch.");
  flags.Int("count", &o->count,
            "With --watch, stop after this many refreshes; 0 runs until killed.");
  walship::RegisterTlsFlags(flags, &o->tls, /*client=*/true);
  auto args = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  std::string problem;
  if (!args.ok()) {
    problem = std::string(args.status().message());
  } else if (agent.empty()) {
    problem = "--agent is required";
  } else if (!args->empty()) {
    problem = "unexpected argument \"" + (*args)[0] + "\"";
  } else if (o->interval_ms < 1 || o->count < 0) {
    problem = "--interval-ms must be at least 1 and --count at least 0";
  } else if (absl::Status v = o->tls.Validate(); !v.ok()) {
    problem = std::string(v.message());
  } else if (auto entries = walship::replica::ParseAgentEntries(agent); !entries.ok()) {
    problem = std::string(entries.status().message());
  } else {
    o->agents = *std::move(entries);
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "walship-status: %s\n", problem.c_str());
    return 1;
  }
  return -1;
}

// One agent to ask.
struct Target {
  walship::replica::AgentEntry entry;
  std::unique_ptr<walship::v1::Control::Stub> stub;
};

// One agent's answer: its Status when roles.answered.
struct Answer {
  st::AgentAnswer roles;
  walship::v1::StatusResponse resp;
};

// Asks every target at once (one completion queue, each call with its own
// deadline) and returns their answers in the targets' order.
std::vector<Answer> AskAll(const std::vector<Target>& targets, walship::Clock& clock,
                           absl::Duration timeout) {
  struct Call {
    grpc::ClientContext ctx;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<walship::v1::StatusResponse>> rpc;
  };
  grpc::CompletionQueue cq;
  std::vector<Answer> out(targets.size());
  std::vector<std::unique_ptr<Call>> calls;
  for (size_t i = 0; i < targets.size(); ++i) {
    auto c = std::make_unique<Call>();
    c->ctx.set_deadline(absl::ToChronoTime(clock.Now() + timeout));
    c->rpc = targets[i].stub->AsyncStatus(&c->ctx, walship::v1::StatusRequest(), &cq);
    c->rpc->Finish(&out[i].resp, &c->status, reinterpret_cast<void*>(i));
    calls.push_back(std::move(c));
  }
  for (size_t done = 0; done < targets.size(); ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;  // never before Shutdown()
    const size_t i = reinterpret_cast<size_t>(tag);
    st::AgentAnswer& a = out[i].roles;
    a.answered = calls[i]->status.ok();
    a.error = calls[i]->status.error_message();
    a.not_serving = out[i].resp.source_error();
    a.timeline = out[i].resp.timeline();
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    out[i].roles.address = targets[i].entry.address;
    out[i].roles.member = targets[i].entry.member;
  }
  return out;
}

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

// Several agents as one JSON object on one line; `progress` (by agent) and
// `now` only with --watch.
void PrintAgentsJson(const std::vector<Answer>& answers,
                     const std::vector<std::map<std::string, st::Progress>>* progress,
                     absl::Time now) {
  std::vector<std::string> agents;
  std::vector<std::string> serving;
  for (size_t i = 0; i < answers.size(); ++i) {
    const st::AgentAnswer& a = answers[i].roles;
    std::string o = absl::StrCat("{\"agent\":", JsonString(a.address),
                                 ",\"member\":", JsonString(a.member));
    if (!a.answered) {
      absl::StrAppend(&o, ",\"error\":", JsonString(a.error), "}");
    } else {
      if (progress != nullptr) {
        absl::StrAppend(&o, ",\"replicas_progress\":[",
                        ProgressJson(answers[i].resp, (*progress)[i]), "]");
      }
      absl::StrAppend(&o, ",\"status\":", StatusJson(answers[i].resp), "}");
    }
    agents.push_back(std::move(o));
    if (a.serving()) serving.push_back(JsonString(a.address));
  }
  std::printf("{%s\"agents\":[%s],\"serving\":[%s]}\n",
              progress != nullptr ? absl::StrCat("\"time\":", TimeJson(now), ",").c_str() : "",
              absl::StrJoin(agents, ",").c_str(), absl::StrJoin(serving, ",").c_str());
}

// Several agents as tables: a line for each and its table, then which serve.
void PrintAgentsTables(const std::vector<Answer>& answers,
                       const std::vector<std::map<std::string, st::Progress>>* progress) {
  std::vector<st::AgentAnswer> roles;
  for (size_t i = 0; i < answers.size(); ++i) {
    roles.push_back(answers[i].roles);
    std::printf("%s\n", st::AgentLine(answers[i].roles).c_str());
    if (answers[i].roles.answered) {
      PrintTable(answers[i].resp, progress != nullptr ? &(*progress)[i] : nullptr);
    }
    std::printf("\n");
  }
  std::printf("%s\n", st::ServingSummary(roles).c_str());
}

// One round's output; `progress` and `now` only with --watch. True when
// every agent answered.
bool Print(const Options& o, const std::vector<Answer>& answers,
           const std::vector<std::map<std::string, st::Progress>>* progress, absl::Time now) {
  bool all = true;
  for (const Answer& a : answers) {
    if (a.roles.answered) continue;
    all = false;
    std::fprintf(stderr, "walship-status: %s: %s\n", a.roles.address.c_str(),
                 a.roles.error.c_str());
  }
  if (answers.size() > 1) {
    if (o.json) {
      PrintAgentsJson(answers, progress, now);
    } else {
      PrintAgentsTables(answers, progress);
    }
  } else if (answers[0].roles.answered) {
    if (o.json && progress != nullptr) {
      PrintJsonLine(answers[0].resp, now, (*progress)[0]);
    } else if (o.json) {
      std::printf("%s\n", StatusJson(answers[0].resp).c_str());
    } else {
      PrintTable(answers[0].resp, progress != nullptr ? &(*progress)[0] : nullptr);
    }
  }
  return all;
}

int Watch(const Options& o, const std::vector<Target>& targets, walship::sys::SysCalls& sys,
          walship::Clock& clock) {
  const bool clear_screen = !o.json && sys.Isatty(STDOUT_FILENO).ok();
  std::map<std::string, st::ReplicaTracker> trackers;
  bool last_ok = false;
  for (int64_t i = 0; o.count == 0 || i < o.count; ++i) {
    if (i > 0) clock.SleepFor(absl::Milliseconds(o.interval_ms));
    std::vector<Answer> answers = AskAll(targets, clock, absl::Milliseconds(o.timeout_ms));
    const absl::Time now = clock.Now();
    std::vector<std::map<std::string, st::Progress>> progress;
    for (const Answer& a : answers) progress.push_back(Track(a, now, &trackers));
    // One agent that did not answer prints nothing (as before: a gap in the
    // JSON lines); several print what they have.
    if (!o.json && (answers.size() > 1 || answers[0].roles.answered)) {
      if (clear_screen) std::fputs("\033[H\033[2J", stdout);
      std::printf("%s  (every %lld ms)\n",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S", now, absl::LocalTimeZone()).c_str(),
                  static_cast<long long>(o.interval_ms));
    }
    last_ok = Print(o, answers, &progress, now);
    if (!o.json && !clear_screen && (answers.size() > 1 || answers[0].roles.answered)) {
      std::printf("\n");
    }
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
  std::vector<Target> targets;
  for (const walship::replica::AgentEntry& e : o.agents) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        walship::MakeChannel(sys, clock, e.address, o.tls);
    if (!channel.ok()) {
      std::fprintf(stderr, "walship-status: %s\n",
                   std::string(channel.status().message()).c_str());
      return 1;
    }
    targets.push_back(Target{e, walship::v1::Control::NewStub(*channel)});
  }
  if (o.watch) return Watch(o, targets, sys, clock);
  std::vector<Answer> answers = AskAll(targets, clock, absl::Milliseconds(o.timeout_ms));
  return Print(o, answers, nullptr, absl::Time()) ? 0 : 2;
}
