// replica_main.cc: the walship-replica daemon's main (see replica_main.h).
#include "replica/replica_main.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/commit_trace.h"
#include "common/daemon.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/sys/transfer.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/sys/grpc_polling.h"
#include "common/wire/compress.h"
#include "common/net/data_tls_flag.h"
#include "absl/strings/str_cat.h"
#include "replica/agent_list.h"
#include "common/leader_key.h"
#include "replica/replica.h"
#include "replica/fetch.h"
#include "replica/gate.h"
#include "replica/restore.h"
#include "replica/serve.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

// `walship-replica restore --dest=DIR %f %p` (replica/restore.h) or
// `walship-replica restore --from=HOST:PORT[,...] %f %p` (replica/fetch.h).
int RestoreMain(int argc, char** argv, walship::sys::SysCalls& sys) {
  std::string dest, from;
  int64_t timeout_ms = 60000;
  TlsOptions tls;
  walship::FlagSet flags(
      "walship-replica restore: a PostgreSQL restore_command serving verified WAL.\n"
      "Usage: walship-replica restore --dest=DIR WALFILE TARGET\n"
      "       walship-replica restore --from=HOST:PORT[,HOST:PORT] (--insecure | --tls-*) "
      "WALFILE TARGET\n"
      "  restore_command = 'walship-replica restore --dest=DIR %f %p'\n"
      "Exit status: 0 served; 1 not available; 2 refused (failed verification).");
  flags.String("dest", &dest, "The replica's destination directory, on this host.");
  flags.String("from", &from,
               "HOST:PORT of replicas' --serve-listen, comma-separated: fetched over the "
               "network and verified, asking each in turn.");
  flags.Int("timeout-ms", &timeout_ms, "With --from: bound on the whole fetch.");
  RegisterTlsFlags(flags, &tls, /*client=*/true);
  auto args = flags.Parse(argc, argv, 2);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  absl::Status usage = args.ok() ? absl::OkStatus() : args.status();
  if (usage.ok() && (dest.empty() == from.empty() || args->size() != 2)) {
    usage = absl::InvalidArgumentError(
        "usage: walship-replica restore (--dest=DIR | --from=HOST:PORT,...) WALFILE TARGET");
  }
  if (usage.ok() && !from.empty()) usage = tls.Validate();
  if (!usage.ok()) {
    std::fprintf(stderr, "walship-replica restore: %s\n", std::string(usage.message()).c_str());
    return walship::replica::kRestoreRefused;
  }
  std::string why;
  int rc = dest.empty()
               ? RestoreFrom(sys, DefaultClock(), absl::StrSplit(from, ',', absl::SkipEmpty()), tls,
                             (*args)[0], (*args)[1], absl::Milliseconds(timeout_ms), &why)
               : Restore(sys, dest, (*args)[0], (*args)[1], &why);
  // "Not available" is routine (PostgreSQL probes for history files and the
  // next segment all the time); only refusals are worth a line in its log.
  if (rc == walship::replica::kRestoreRefused) {
    std::fprintf(stderr, "walship-replica restore: ERROR: %s\n", why.c_str());
  }
  return rc;
}

// `walship-replica gate ...`: see replica/gate.h.
int GateMain(int argc, char** argv, walship::sys::SysCalls& sys) {
  GateOptions o;
  std::string from, log_level = "info";
  int64_t timeout_ms = absl::ToInt64Milliseconds(o.timeout);
  FlagSet flags(
      "walship-replica gate: before a standby is promoted (Patroni's pre_promote), make it\n"
      "replay every byte the walship replicas hold durably, fetching what it lacks.\n"
      "Usage: walship-replica gate --from=HOST:PORT[,...] --pg-data=PGDATA "
      "--pg-conninfo=CONNINFO\n"
      "       [--timeout-ms=30000] [--allow-without-replicas] [--synchronous-name=walship]\n"
      "       (--insecure | --tls-*)\n"
      "Exit status: 0 replayed (promote); 1 bad usage; 2 not reached within the timeout\n"
      "(or a replica's copy failed verification); 3 no replica reachable.");
  flags.String("from", &from, "HOST:PORT of every replica's --serve-listen, comma-separated.");
  flags.String("pg-data", &o.pg_data, "The standby's data directory (WAL goes to its pg_wal).");
  flags.String("pg-conninfo", &o.pg_conninfo, "libpq connection string to the standby.");
  flags.Int("timeout-ms", &timeout_ms, "Bound on the whole gate: asking, fetching, replaying.");
  flags.Bool("allow-without-replicas", &o.allow_without_replicas,
             "Exit 0 (promote) with a warning when no replica answers: availability over "
             "zero loss. Default: exit 3, no promotion.");
  flags.String("synchronous-name", &o.synchronous_name,
               "After reloading the standby's configuration, refuse (exit 2) unless its "
               "synchronous_standby_names names this (the agents' feed name, e.g. walship).");
  RegisterTlsFlags(flags, &o.tls, /*client=*/true);
  flags.String("log-level", &log_level, "trace, debug, info, warn or error.");
  if (std::optional<int> exit_status =
          flags.ParseOrExitStatus(argc - 1, argv + 1, "walship-replica gate", kGateUsage)) {
    return *exit_status;
  }
  if (absl::Status s = InitLogging("walship-gate", log_level); !s.ok()) {
    std::fprintf(stderr, "walship-replica gate: %s\n", std::string(s.message()).c_str());
    return kGateUsage;
  }
  o.from = absl::StrSplit(from, ',', absl::SkipEmpty());
  o.timeout = absl::Milliseconds(timeout_ms);
  if (absl::Status s = o.Validate(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kGateUsage;
  }
  return RunGate(sys, DefaultClock(), o);
}

// Warns about a plaintext control channel, or checks that a TLS channel to
// each agent can be set up (certificate files readable and valid), and that
// the leader key's etcd TLS and password files can be read; false (logged)
// if one cannot.
bool CheckControlChannels(sys::SysCalls& sys, const replica::ReplicaOptions& o) {
  if (o.tls.insecure) {
    spdlog::warn("--insecure: the gRPC control channel to {} is plaintext and the agent is "
                 "not authenticated",
                 o.agent);
  } else if (!o.agent.empty()) {
    const std::vector<std::string> agents = *ParseAgentList(o.agent);  // Validate() parsed it
    for (const std::string& agent : agents) {
      if (auto channel = MakeChannel(sys, DefaultClock(), agent, o.tls); !channel.ok()) {
        spdlog::error("{}", std::string(channel.status().message()));
        return false;
      }
    }
  }
  if (o.leader.enabled()) {
    // Its TLS and password files are read here (the channels connect only
    // when asked).
    if (auto k = LeaderKey::Make(sys, DefaultClock(), o.leader, o.leader_check_interval);
        !k.ok()) {
      spdlog::error("{}", std::string(k.status().message()));
      return false;
    }
  }
  return true;
}

// The replica's listeners besides its session: metrics and WAL serving.
struct Servers {
  std::unique_ptr<MetricsServer> metrics;
  std::unique_ptr<WalServer> wal;
};

// Starts what `o` and `serve_listen` ask for; false (logged) if one cannot listen.
bool StartServers(sys::SysCalls& sys, const replica::ReplicaOptions& o,
                  const std::string& serve_listen, MetricsRegistry& metrics, Servers& servers) {
  if (!o.metrics_listen.empty()) {
    auto hp = ParseHostPort(o.metrics_listen);
    servers.metrics = std::make_unique<MetricsServer>(metrics);
    if (absl::Status s = servers.metrics->Start(hp->host, hp->port); !s.ok()) {
      spdlog::error("cannot serve metrics: {}", s.ToString());
      return false;
    }
    hp->port = servers.metrics->port();
    spdlog::info("metrics on http://{}/metrics", hp->ToString());
  }
  if (!serve_listen.empty()) {
    servers.wal = std::make_unique<WalServer>(sys, o.dest, &metrics);
    if (absl::Status s = servers.wal->Start(serve_listen, o.tls); !s.ok()) {
      spdlog::error("cannot serve WAL: {}", s.ToString());
      return false;
    }
    auto hp = ParseHostPort(serve_listen);
    if (hp.ok()) hp->port = servers.wal->port();
    spdlog::info("serving WAL from {} on {}", o.dest, hp.ok() ? hp->ToString() : serve_listen);
  }
  return true;
}

}  // namespace

namespace {
// After the flags: runs the replica until a signal or a fatal error; its
// exit status.
int RunReplica(sys::SysCalls& sys, ReplicaOptions& o, const std::string& serve_listen,
               const std::string& trace_commits);
}  // namespace

namespace {
// How the threads a synchronous commit waits on are scheduled
// (common/sched_slice.h).
void RegisterSchedFlags(FlagSet& flags, replica::ReplicaOptions& o) {
  flags.Microseconds(
      "sched-slice-us", &o.sched_slice,
      "Scheduler slice in microseconds asked for by the threads a synchronous commit waits on (the "
      "receiving and the flushing thread): on busy CPUs they run sooner once woken "
      "(Linux 6.12 and later; 100 to 100000). 0: the kernel's default.");
  flags.Int("sched-fifo-priority", &o.sched_fifo_priority,
            "Run those threads under the real-time policy SCHED_FIFO at this priority (1 to 99; "
            "needs CAP_SYS_NICE or RLIMIT_RTPRIO) instead, the receiving thread only while no "
            "backlog arrives. 0: the normal policy with the slice.");
}

void RegisterLeaderFlags(FlagSet& flags, replica::ReplicaOptions& o) {
  RegisterLeaderKeyFlags(
      flags, &o.leader,
      "follow only the agent of the member its --leader-key names, asked before each handshake "
      "and every second during a session. Every --agent entry then carries its member name: "
      "NAME=HOST:PORT. Empty: the agents' own answers decide.");
  flags.String("agent-tag", &o.agent_tag,
               "With --leader-etcd: take the agents from the HA manager's member keys too "
               "(Patroni: the keys under the --leader-key's directory's members/), a member's "
               "agent being the HOST:PORT of this tag in its configuration's tags (e.g. "
               "walship_agent; Patroni: tags: {walship_agent: HOST:PORT}). Read before each "
               "session; --agent entries win over a member key naming the same member or "
               "address, and --agent may then be left out. Empty: only --agent.");
}
}  // namespace

int ReplicaMain(int argc, char** argv, sys::SysCalls& sys) {
  // So that acknowledgements never wake the events' reader (grpc_polling.h).
  PollEachCallsOwnConnections();
  if (argc > 1 && std::string(argv[1]) == "restore") return RestoreMain(argc, argv, sys);
  if (argc > 1 && std::string(argv[1]) == "gate") return GateMain(argc, argv, sys);
  std::string serve_listen;
  replica::ReplicaOptions o;
  std::string transport = "zerocopy";
  std::string compress = "none";
  int64_t compress_level = 0;
  std::string log_level = "info";
  uint64_t pipe_bytes = o.pipe_bytes;

  FlagSet flags(
      "walship-replica: subscribes to a walship-agent and keeps a durable, byte-exact\n"
      "copy of its WAL segments in --dest (complete segments under their own names,\n"
      "the one being received as NAME.partial).\n"
      "Usage: walship-replica --agent=HOST:PORT[,HOST:PORT...] --dest=DIR --name=NAME [flags]\n"
      "       walship-replica restore --dest=DIR %f %p   (PostgreSQL restore_command;\n"
      "       see walship-replica restore --help)\n"
      "       walship-replica gate --from=HOST:PORT ...     (promotion gate; see\n"
      "       walship-replica gate --help)\n"
      "Exit status: 0 after SIGTERM/SIGINT; 1 bad set-up; 3 an operator must act\n"
      "(another stream, divergent history, a gap behind the agent's retention).");
  flags.String("agent", &o.agent,
               "HOST:PORT of the agent's control (gRPC) port (required unless --agent-tag); or "
               "several, "
               "HOST:PORT,HOST:PORT,..., one beside each node of a PostgreSQL cluster: the "
               "replica follows the agent whose node is the primary, tries the next one while "
               "an agent answers not_primary or older_timeline, and never takes WAL of an "
               "older timeline than it holds. An entry may name its node's member: "
               "NAME=HOST:PORT (needed with --leader-etcd).");
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
  flags.String("compress", &compress,
               "zstd, lz4 or none: ask the agent to compress DATA frames (for thin links). "
               "Compressed frames take the copy path on both sides (agent: pread, compress, "
               "write; replica: read, decompress, verify, pwrite), whatever --transport says; "
               "segments are stored uncompressed. An agent that declines is logged as a "
               "warning and shipping goes on uncompressed.");
  flags.Int("compress-level", &compress_level,
            "Compression level: zstd 1..19, lz4 1..12 (1: LZ4's fast mode; 2..12: LZ4 HC); "
            "0: the codec's default (zstd 1, lz4 1).");
  flags.Bool("drop-behind", &o.drop_behind,
             "Drop each segment's pages from the page cache once it is published (durable "
             "and renamed); false keeps them cached, e.g. for a standby that replays them "
             "at once.");
  flags.Microseconds("flush-interval-us", &o.flush_interval,
                     "How often the idle flusher wakes; received bytes wake it at once.");
  flags.Milliseconds("record-interval-ms", &o.record_interval,
                     "Longest time walship.state trails the acknowledged position inside a "
                     "segment; saved off the acknowledgement path (walship.progress names the "
                     "bytes past it).");
  flags.Milliseconds("io-timeout-ms", &o.io_timeout,
                     "Longest wait inside a frame for the agent's bytes before reconnecting.");
  RegisterSchedFlags(flags, o);
  RegisterLeaderFlags(flags, o);
  flags.String("metrics-listen", &o.metrics_listen,
               "HOST:PORT serving Prometheus metrics at /metrics; empty disables it; port 0 "
               "picks a free port (logged).");
  flags.String("serve-listen", &serve_listen,
               "HOST:PORT serving the WAL held in --dest to standbys on other hosts "
               "(walship-replica restore --from, walship-replica gate), with the same TLS "
               "flags as the control channel; empty disables it; port 0 picks one (logged).");
  RegisterTlsFlags(flags, &o.tls, /*client=*/true);
  net::RegisterDataTlsFlag(flags, &o.data_tls);
  flags.String("log-level", &log_level, "trace, debug, info, warn or error.");
  std::string trace_commits;
  flags.String("trace-commits", &trace_commits,
               "FILE: a benchmarking aid. Records when each flush passes the replica's stages "
               "(frame header read, payload spliced, checksum verified, fdatasync returned, "
               "acknowledgement sent) on CLOCK_MONOTONIC, in a ring of the newest 262144 "
               "records, written to FILE at exit. Empty: off, at no cost.");

  flags.EnableConfigFile(sys);
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
  auto codec = wire::ParseCodec(compress);
  if (!codec.ok()) {
    spdlog::error("--compress: {}", std::string(codec.status().message()));
    return 1;
  }
  o.compression = *codec;
  o.compression_level = static_cast<int>(std::clamp<int64_t>(compress_level, -1, 1000));
  o.pipe_bytes = pipe_bytes;
  if (absl::Status s = o.Validate(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 1;
  }
  if (!CheckControlChannels(sys, o)) return 1;
  if (sys::SysResult r = sys.Mkdir(o.dest.c_str(), 0755); !r.ok() && r.err != EEXIST) {
    spdlog::error("cannot create --dest {}: {}", o.dest, std::strerror(r.err));
    return 1;
  }

  return RunReplica(sys, o, serve_listen, trace_commits);
}

namespace {
int RunReplica(sys::SysCalls& sys, ReplicaOptions& o, const std::string& serve_listen,
               const std::string& trace_commits) {
  PrepareDaemonRuntime();
  const sigset_t signals = PrepareDaemonSignals(sys);

  std::unique_ptr<CommitTrace> trace;
  if (!trace_commits.empty()) {
    trace = std::make_unique<CommitTrace>();
    o.commit_trace = trace.get();
  }
  MetricsRegistry metrics;
  Servers servers;
  if (!StartServers(sys, o, serve_listen, metrics, servers)) return 1;
  replica::Replica replica(sys, o, &metrics);
  std::thread([&replica, &sys, signals] {
    const int sig = WaitForShutdownSignal(sys, signals);
    spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    replica.Stop();
  }).detach();
  spdlog::info("replica {} following {} into {} (transport {}, compression {}, control {})",
               o.name,
               o.agent_tag.empty()     ? o.agent
               : o.agent.empty()       ? absl::StrCat("the agents etcd's member keys tag ", o.agent_tag)
                                       : absl::StrCat(o.agent, " and the agents etcd's member keys tag ",
                                                      o.agent_tag),
               o.dest,
               o.compression == wire::Codec::kNone ? TransportName(o.transport) : "copy",
               wire::CodecName(o.compression), o.tls.insecure ? "plaintext" : "mutual TLS");
  net::LogDataTlsChoice(sys, "replica", o.data_tls_on(), o.tls);
  if (o.leader.enabled()) o.leader.LogStart("following only the leader etcd names");
  absl::Status s = replica.Run();
  if (trace != nullptr) DumpCommitTrace(sys, *trace, trace_commits);
  if (!s.ok()) {
    spdlog::error("stopped: {}", s.ToString());
    return replica::Replica::IsFatal(s) ? 3 : 1;
  }
  spdlog::info("stopped");
  return 0;
}
}  // namespace

}  // namespace walship::replica
