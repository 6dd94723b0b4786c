// replica_main.cc: the walship-replica daemon's main (see replica_main.h).
#include "replica/replica_main.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/daemon.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/sys/transfer.h"
#include "common/metrics.h"
#include "common/net.h"
#include "replica/agent_list.h"
#include "replica/replica.h"
#include "replica/restore.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

// `walship-replica restore --dest=DIR %f %p`: see replica/restore.h.
int RestoreMain(int argc, char** argv, walship::sys::SysCalls& sys) {
  std::string dest;
  walship::FlagSet flags(
      "walship-replica restore: a PostgreSQL restore_command serving verified WAL.\n"
      "Usage: walship-replica restore --dest=DIR WALFILE TARGET\n"
      "  restore_command = 'walship-replica restore --dest=DIR %f %p'\n"
      "Exit status: 0 served; 1 not available; 2 refused (failed verification).");
  flags.String("dest", &dest, "The replica's destination directory (required).");
  auto args = flags.Parse(argc, argv, 2);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!args.ok() || dest.empty() || args->size() != 2) {
    std::fprintf(stderr, "walship-replica restore: %s\n",
                 args.ok() ? "usage: walship-replica restore --dest=DIR WALFILE TARGET"
                           : std::string(args.status().message()).c_str());
    return walship::replica::kRestoreRefused;
  }
  std::string why;
  int rc = walship::replica::Restore(sys, dest, (*args)[0],
                                     (*args)[1], &why);
  // "Not available" is routine (PostgreSQL probes for history files and the
  // next segment all the time); only refusals are worth a line in its log.
  if (rc == walship::replica::kRestoreRefused) {
    std::fprintf(stderr, "walship-replica restore: ERROR: %s\n", why.c_str());
  }
  return rc;
}

}  // namespace


int ReplicaMain(int argc, char** argv, sys::SysCalls& sys) {
  if (argc > 1 && std::string(argv[1]) == "restore") return RestoreMain(argc, argv, sys);
  replica::ReplicaOptions o;
  std::string transport = "zerocopy";
  std::string log_level = "info";
  uint64_t pipe_bytes = o.pipe_bytes;
  int64_t flush_interval_us = absl::ToInt64Microseconds(o.flush_interval);
  int64_t io_timeout_ms = absl::ToInt64Milliseconds(o.io_timeout);
  int64_t record_interval_ms = absl::ToInt64Milliseconds(o.record_interval);

  FlagSet flags(
      "walship-replica: subscribes to a walship-agent and keeps a durable, byte-exact\n"
      "copy of its WAL segments in --dest (complete segments under their own names,\n"
      "the one being received as NAME.partial).\n"
      "Usage: walship-replica --agent=HOST:PORT[,HOST:PORT...] --dest=DIR --name=NAME [flags]\n"
      "       walship-replica restore --dest=DIR %f %p   (PostgreSQL restore_command;\n"
      "       see walship-replica restore --help)\n"
      "Exit status: 0 after SIGTERM/SIGINT; 1 bad set-up; 3 an operator must act\n"
      "(another stream, divergent history, a gap behind the agent's retention).");
  flags.String("agent", &o.agent,
               "HOST:PORT of the agent's control (gRPC) port (required); or several, "
               "HOST:PORT,HOST:PORT,..., one beside each node of a PostgreSQL cluster: the "
               "replica follows the agent whose node is the primary, tries the next one while "
               "an agent answers not_primary or older_timeline, and never takes WAL of an "
               "older timeline than it holds.");
  flags.String("data-address", &o.data_address,
               "HOST:PORT of the agent's data socket, when it is not reachable at the "
               "agent's host and announced data port (NAT, proxies).");
  flags.String("dest", &o.dest, "Destination directory; created if missing (required).");
  flags.String("name", &o.name,
               "Replica name, [A-Za-z0-9._-]{1,64}, unique per agent (required).");
  flags.String("transport", &transport,
               "zerocopy: splice(2) socket -> pipe -> file; copy: read/pwrite through one "
               "buffer, for kernels or filesystems where splice misbehaves.");
  flags.Uint("pipe-bytes", &pipe_bytes, "Pipe capacity for the zerocopy transport.");
  flags.Bool("drop-behind", &o.drop_behind,
             "Drop each segment's pages from the page cache once it is published (durable "
             "and renamed); false keeps them cached, e.g. for a standby that replays them "
             "at once.");
  flags.Int("flush-interval-us", &flush_interval_us,
            "How often the idle flusher wakes; received bytes wake it at once.");
  flags.Int("record-interval-ms", &record_interval_ms,
            "Longest time walship.state trails the acknowledged position inside a "
            "segment; saved off the acknowledgement path (walship.progress names the "
            "bytes past it).");
  flags.Int("io-timeout-ms", &io_timeout_ms,
            "Longest wait inside a frame for the agent's bytes before reconnecting.");
  flags.String("metrics-listen", &o.metrics_listen,
               "HOST:PORT serving Prometheus metrics at /metrics; empty disables it; port 0 "
               "picks a free port (logged).");
  RegisterTlsFlags(flags, &o.tls, /*client=*/true);
  flags.String("log-level", &log_level, "trace, debug, info, warn or error.");

  flags.EnableConfigFile();
  if (std::optional<int> exit_status = flags.ParseOrExitStatus(argc, argv, "walship-replica", 1)) {
    return *exit_status;
  }
  if (absl::Status s = InitLogging("walship-replica", log_level); !s.ok()) {
    std::fprintf(stderr, "walship-replica: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto t = ParseTransport(transport);
  if (!t.ok()) {
    spdlog::error("--transport: {}", std::string(t.status().message()));
    return 1;
  }
  o.transport = *t;
  o.pipe_bytes = pipe_bytes;
  o.flush_interval = absl::Microseconds(flush_interval_us);
  o.io_timeout = absl::Milliseconds(io_timeout_ms);
  o.record_interval = absl::Milliseconds(record_interval_ms);
  if (absl::Status s = o.Validate(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 1;
  }
  if (o.tls.insecure) {
    spdlog::warn("--insecure: the gRPC control channel to {} is plaintext and the agent is "
                 "not authenticated",
                 o.agent);
  } else {
    const std::vector<std::string> agents = *ParseAgentList(o.agent);  // Validate() parsed it
    for (const std::string& agent : agents) {
      if (auto channel = MakeChannel(agent, o.tls); !channel.ok()) {
        spdlog::error("{}", std::string(channel.status().message()));
        return 1;
      }
    }
  }
  if (sys::SysResult r = sys.Mkdir(o.dest.c_str(), 0755); !r.ok() && r.err != EEXIST) {
    spdlog::error("cannot create --dest {}: {}", o.dest, std::strerror(r.err));
    return 1;
  }

  PrepareDaemonRuntime();
  const sigset_t signals = PrepareDaemonSignals();

  MetricsRegistry metrics;
  std::unique_ptr<MetricsServer> metrics_server;
  if (!o.metrics_listen.empty()) {
    auto hp = ParseHostPort(o.metrics_listen);
    metrics_server = std::make_unique<MetricsServer>(metrics);
    if (absl::Status s = metrics_server->Start(hp->host, hp->port); !s.ok()) {
      spdlog::error("cannot serve metrics: {}", s.ToString());
      return 1;
    }
    hp->port = metrics_server->port();
    spdlog::info("metrics on http://{}/metrics", hp->ToString());
  }
  replica::Replica replica(sys, o, &metrics);
  std::thread([&replica, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    replica.Stop();
  }).detach();
  spdlog::info("replica {} following {} into {} (transport {}, control {})", o.name, o.agent,
               o.dest, TransportName(o.transport),
               o.tls.insecure ? "plaintext" : "mutual TLS");
  absl::Status s = replica.Run();
  if (!s.ok()) {
    spdlog::error("stopped: {}", s.ToString());
    return replica::Replica::IsFatal(s) ? 3 : 1;
  }
  spdlog::info("stopped");
  return 0;
}

}  // namespace walship::replica
