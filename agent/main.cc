// walship-agent: ships WAL segment files to subscribed replicas.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "agent/agent.h"
#include "agent/wal_format.h"
#include "agent/wal_source_factory.h"
#include "common/commit_trace.h"
#include "common/daemon.h"
#include "common/flags.h"
#include "common/leader_key.h"
#include "common/logging.h"
#include "common/net/data_tls_flag.h"
#include "common/sys/transfer.h"
#include "spdlog/spdlog.h"

namespace {

// Flag values that are converted (units, lists, enums) before they reach
// AgentOptions.
struct RawFlags {
  explicit RawFlags(const walship::agent::AgentOptions& o) : max_frame(o.max_payload) {}
  std::string transport = "zerocopy";
  std::string log_level = "info";
  uint64_t max_frame;
  std::string allow_replicas;
  std::string trace_commits;
};

// The flags that say where the WAL comes from and how it is read: the core's,
// and each format's own (WalFormatRegistry::RegisterFlags), in the order of
// `formats`.
void RegisterSourceFlags(walship::FlagSet& flags, const walship::agent::WalFormatRegistry& formats,
                         walship::agent::AgentOptions& o) {
  flags.String("wal-dir", &o.wal_dir, "Directory of WAL segment files to ship (required).");
  flags.String("format", &o.format, formats.FormatHelp("WAL source format."));
  formats.RegisterFlags(flags, o);
  flags.Milliseconds(
      "ack-interval-ms", &o.ack_interval,
      "While nothing waits for acknowledgements (--format=append, no flush feed, or a "
      "primary whose pg_stat_replication lists the feed as async), replicas acknowledge new durable "
      "positions at most this often, and the feed reports them to the primary at most "
      "this often (each message wakes a thread on both ends); 0: each at once. While "
      "the primary may wait for the agent (sync, quorum, potential), always at once.");
}

// The flags of the network side: listeners, frames, timeouts, replicas, TLS, logging.
void RegisterServingFlags(walship::FlagSet& flags, walship::agent::AgentOptions& o, RawFlags& r) {
  flags.String("stream-id", &o.stream_id,
               "Identity of the WAL stream reported to replicas. Default: derived from "
               "the host name and the WAL directory's path, device and inode.");
  flags.String("listen", &o.listen,
               "HOST:PORT of the gRPC control service; port 0 picks a free port (logged).");
  flags.String("data-listen", &o.data_listen,
               "HOST:PORT of the data socket; port 0 picks a free port (logged).");
  flags.String("transport", &r.transport,
               "zerocopy: sendfile(2) from the page cache; copy: pread/write through one "
               "buffer, for kernels or filesystems where sendfile misbehaves.");
  flags.Uint("max-frame-bytes", &r.max_frame,
             "Largest DATA frame payload; appends are coalesced up to this size.");
  flags.Milliseconds("heartbeat-ms", &o.heartbeat, "Heartbeat interval on each control stream.");
  flags.Milliseconds(
      "stall-timeout-ms", &o.stall_timeout,
      "A replica behind the source whose durable position has not moved for this long "
      "is reported stalled (walship-status, walship_agent_replica_stalled).");
  flags.Milliseconds("io-timeout-ms", &o.io_timeout,
                     "Longest wait for a replica's socket to take bytes before its session is "
                     "dropped (other replicas are unaffected).");
  flags.Microseconds(
      "sched-slice-us", &o.sched_slice,
      "Scheduler slice in microseconds asked for by the threads a synchronous commit waits on (the "
      "flush feed's, the control port's): on busy CPUs they run sooner once woken "
      "(Linux 6.12 and later; 100 to 100000). 0: the kernel's default.");
  flags.Int("sched-fifo-priority", &o.sched_fifo_priority,
            "Run those threads under the real-time policy SCHED_FIFO at this priority (1 to 99; "
            "needs CAP_SYS_NICE or RLIMIT_RTPRIO) instead: once woken, they run before every "
            "normal thread. 0: the normal policy with the slice.");
  flags.String("port-file", &o.port_file,
               "If set, write 'control=HOST:PORT' and 'data=HOST:PORT' lines to this file "
               "once listening.");
  flags.String("allow-replicas", &r.allow_replicas,
               "Comma-separated replica names allowed to subscribe; empty allows all. "
               "Others are refused at handshake with PERMISSION_DENIED.");
  flags.Uint("max-rate", &o.max_rate_bytes_per_sec,
             "Most payload bytes per second shipped to each replica; 0 is unlimited. "
             "Counts segment bytes, before any compression.");
  flags.Bool("allow-compression", &o.allow_compression,
             "Compress DATA frames for replicas that ask (walship-replica --compress=zstd|lz4): "
             "pread, compress, write, i.e. the copy path instead of sendfile for them. false: "
             "decline (logged on both sides), and those replicas get plain frames.");
  flags.String("metrics-listen", &o.metrics_listen,
               "HOST:PORT serving Prometheus metrics at /metrics; empty disables it; "
               "port 0 picks a free port (logged).");
  walship::RegisterLeaderKeyFlags(
      flags, &o.leader,
      "serve replicas only while its --leader-key names this node's --member: read before "
      "each handshake and every second; once it names another member, every session ends.");
  flags.String("member", &o.member,
               "With --leader-etcd: this node's member name, as the HA manager names it "
               "(Patroni: the node's name).");
  walship::RegisterTlsFlags(flags, &o.tls, /*client=*/false);
  walship::net::RegisterDataTlsFlag(flags, &o.data_tls);
  flags.String("log-level", &r.log_level, "trace, debug, info, warn or error.");
  flags.String("trace-commits", &r.trace_commits,
               "FILE: a benchmarking aid. Records when each flush passes the agent's stages "
               "(the flush feed announcing it, its frame sent, a replica's acknowledgement, "
               "the status update to PostgreSQL) on CLOCK_MONOTONIC, in a ring of the newest "
               "262144 records, written to FILE at exit. Empty: off, at no cost.");
}

// Converts the raw values into `o` and validates it with every format's
// options; false (logged) on a bad value.
bool ApplyRawFlags(const RawFlags& r, const walship::agent::WalFormatRegistry& formats,
                   walship::agent::AgentOptions& o) {
  auto t = walship::ParseTransport(r.transport);
  if (!t.ok()) {
    spdlog::error("--transport: {}", std::string(t.status().message()));
    return false;
  }
  o.transport = *t;
  for (absl::string_view name : absl::StrSplit(r.allow_replicas, ',', absl::SkipWhitespace())) {
    o.allow_replicas.emplace_back(absl::StripAsciiWhitespace(name));
  }
  o.max_payload = static_cast<uint32_t>(std::min<uint64_t>(r.max_frame, UINT32_MAX));
  if (absl::Status s = formats.Validate(o); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return false;
  }
  return true;
}

// The shutdown signal, from the thread that waits for it.
struct ShutdownSignal {
  std::atomic<int> number{0};
  absl::Notification received;
};

const char* SignalName(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace

int main(int argc, char** argv) {
  const walship::agent::WalFormatRegistry& formats = walship::agent::KnownWalFormats();
  walship::agent::AgentOptions o;
  RawFlags r(o);
  walship::FlagSet flags(
      "walship-agent: ships WAL segment files to walship-replica subscribers.\n"
      "Usage: walship-agent --wal-dir=DIR [--listen=HOST:PORT] "
      "[--data-listen=HOST:PORT] [flags]");
  RegisterSourceFlags(flags, formats, o);
  RegisterServingFlags(flags, o, r);

  walship::sys::SysCalls& sys = walship::sys::DefaultSysCalls();
  flags.EnableConfigFile(sys);
  if (std::optional<int> exit_status = flags.ParseOrExitStatus(argc, argv, "walship-agent", 2)) {
    return *exit_status;
  }
  if (absl::Status s = walship::InitLogging("walship-agent", r.log_level); !s.ok()) {
    std::fprintf(stderr, "walship-agent: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!ApplyRawFlags(r, formats, o)) return 2;

  walship::PrepareDaemonRuntime();
  const sigset_t signals = walship::PrepareDaemonSignals(sys);

  std::unique_ptr<walship::CommitTrace> trace;
  if (!r.trace_commits.empty()) {
    trace = std::make_unique<walship::CommitTrace>();
    o.commit_trace = trace.get();
  }
  walship::agent::Agent agent(sys, o, walship::DefaultClock(), formats);
  // Signals are taken from here on, also while Start() waits for the
  // database. The waiting thread is detached (it may still sit in sigwait
  // when main returns), so its state is never freed; main returns only after
  // a signal or a failed start, and exits right after.
  auto* shutdown = new ShutdownSignal();
  std::thread([&sys, &agent, shutdown, signals] {
    shutdown->number = walship::WaitForShutdownSignal(sys, signals);
    agent.CancelStart();
    shutdown->received.Notify();
  }).detach();
  if (absl::Status s = agent.Start(); !s.ok()) {
    if (shutdown->received.HasBeenNotified()) {
      spdlog::info("received {} while starting: stopped", SignalName(shutdown->number));
      return 0;
    }
    spdlog::error("cannot start: {}", s.ToString());
    return 1;
  }
  shutdown->received.WaitForNotification();
  spdlog::info("received {}, shutting down", SignalName(shutdown->number));
  agent.Shutdown();
  if (trace != nullptr) walship::DumpCommitTrace(sys, *trace, r.trace_commits);
  spdlog::info("stopped");
  return 0;
}
