// walship-status: prints an agent's Status (every replica's positions, lag
// and transfer counters) as a table or as JSON; with --watch, refreshes it and
// adds each replica's throughput and catch-up progress (status/status_watch.h).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
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

// One line: {"time": ..., "replicas_progress": [...], "status": {...}}.
void PrintJsonLine(const walship::v1::StatusResponse& resp, absl::Time now,
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
  std::printf("{\"time\":%s,\"replicas_progress\":[%s],\"status\":%s}\n",
              JsonString(absl::FormatTime(absl::RFC3339_sec, now, absl::UTCTimeZone())).c_str(),
              rates.c_str(), StatusJson(resp).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string agent;
  bool json = false;
  bool watch = false;
  int64_t timeout_ms = 5000;
  int64_t interval_ms = 1000;
  int64_t count = 0;
  walship::TlsOptions tls;
  walship::FlagSet flags(
      "walship-status: shows an agent's replicas, their positions, lag and counters.\n"
      "Usage: walship-status --agent=HOST:PORT [--json] [--watch [--interval-ms=N] "
      "[--count=N]]\n"
      "Exit status: 0 answered; 1 bad usage; 2 the agent did not answer (with --watch:\n"
      "the last call).");
  flags.String("agent", &agent, "HOST:PORT of the agent's control port (required).");
  flags.Bool("json", &json,
             "Print the Status message as JSON; with --watch one object per line: "
             "{\"time\", \"replicas_progress\", \"status\"}.");
  flags.Int("timeout-ms", &timeout_ms, "Deadline for each call.");
  flags.Bool("watch", &watch,
             "Refresh every --interval-ms, adding each replica's throughput and, while it "
             "catches up, a progress bar with the catch-up rate and ETA.");
  flags.Int("interval-ms", &interval_ms, "Refresh interval of --watch.");
  flags.Int("count", &count, "With --watch, stop after this many refreshes; 0 runs until killed.");
  walship::RegisterTlsFlags(flags, &tls, /*client=*/true);
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
  } else if (interval_ms < 1 || count < 0) {
    problem = "--interval-ms must be at least 1 and --count at least 0";
  } else if (absl::Status v = tls.Validate(); !v.ok()) {
    problem = std::string(v.message());
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "walship-status: %s\n", problem.c_str());
    return 1;
  }
  // Warnings (a certificate about to expire, ...) go to stderr: stdout
  // carries only the status, which --json makes machine-read.
  if (absl::Status s = walship::InitLogging("walship-status", "info"); !s.ok()) {
    std::fprintf(stderr, "walship-status: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  walship::sys::SysCalls& sys = walship::sys::DefaultSysCalls();
  walship::Clock& clock = walship::DefaultClock();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      walship::MakeChannel(sys, clock, agent, tls);
  if (!channel.ok()) {
    std::fprintf(stderr, "walship-status: %s\n", std::string(channel.status().message()).c_str());
    return 1;
  }
  auto stub = walship::v1::Control::NewStub(*channel);

  auto call = [&](walship::v1::StatusResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(clock.Now() + absl::Milliseconds(timeout_ms)));
    grpc::Status s = stub->Status(&ctx, walship::v1::StatusRequest(), resp);
    if (!s.ok()) {
      std::fprintf(stderr, "walship-status: %s: %s\n", agent.c_str(),
                   s.error_message().c_str());
    }
    return s.ok();
  };

  if (!watch) {
    walship::v1::StatusResponse resp;
    if (!call(&resp)) return 2;
    if (json) {
      std::printf("%s\n", StatusJson(resp).c_str());
    } else {
      PrintTable(resp, nullptr);
    }
    return 0;
  }

  const bool clear_screen = !json && sys.Isatty(STDOUT_FILENO).ok();
  std::map<std::string, st::ReplicaTracker> trackers;
  bool last_ok = false;
  for (int64_t i = 0; count == 0 || i < count; ++i) {
    if (i > 0) clock.SleepFor(absl::Milliseconds(interval_ms));
    walship::v1::StatusResponse resp;
    last_ok = call(&resp);
    if (!last_ok) continue;
    absl::Time now = clock.Now();
    std::map<std::string, st::Progress> progress;
    for (const auto& r : resp.replicas()) {
      progress[r.name()] = trackers[r.name()].Update({now, BytesSent(r), r.lag_bytes()});
    }
    if (json) {
      PrintJsonLine(resp, now, progress);
    } else {
      if (clear_screen) std::fputs("\033[H\033[2J", stdout);
      std::printf("%s  (every %lld ms)\n",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S", now, absl::LocalTimeZone()).c_str(),
                  static_cast<long long>(interval_ms));
      PrintTable(resp, &progress);
      if (!clear_screen) std::printf("\n");
    }
    std::fflush(stdout);
  }
  return last_ok ? 0 : 2;
}
