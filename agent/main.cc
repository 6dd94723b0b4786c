// walship-agent: ships WAL segment files to subscribed replicas.
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "agent/agent.h"
#include "common/daemon.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/sys/transfer.h"
#include "spdlog/spdlog.h"

namespace {

// Flag values that are converted (units, lists, enums) before they reach
// AgentOptions.
struct RawFlags {
  explicit RawFlags(const walship::agent::AgentOptions& o)
      : max_frame(o.max_payload),
        pg_feed_query_ms(absl::ToInt64Milliseconds(o.pg_feed_query_interval)),
        pg_query_ms(absl::ToInt64Milliseconds(o.pg_query_interval)),
        ack_interval_ms(absl::ToInt64Milliseconds(o.ack_interval)) {}
  std::string transport = "zerocopy";
  std::string log_level = "info";
  uint64_t max_frame;
  int64_t heartbeat_ms = 1000, io_timeout_ms = 30000, stall_timeout_ms = 10000;
  int64_t pg_feed_query_ms;
  int64_t pg_query_ms;
  int64_t ack_interval_ms;
  std::string allow_replicas;
};

// The flags that say where the WAL comes from and how it is read.
void RegisterSourceFlags(walship::FlagSet& flags, walship::agent::AgentOptions& o, RawFlags& r) {
  flags.String("wal-dir", &o.wal_dir, "Directory of WAL segment files to ship (required).");
  flags.String("format", &o.format,
               "WAL source format. append: segment files sort by name in WAL order and "
               "grow only by appends; a segment is complete once a later one exists. "
               "postgres: --wal-dir is PGDATA/pg_wal; ships only WAL the primary has "
               "flushed, page headers validated, timeline history files included.");
  flags.String("segment-pattern", &o.segment_pattern,
               "append: regular expression (ECMAScript, matched against the whole name) "
               "that only segment files' names match, e.g. 'mysql-bin\\.([0-9]{6})'; other "
               "files are skipped. A capturing group is the sequence number: consecutive "
               "segments must have consecutive numbers. Default: every file, if all names "
               "have one shape (digits aside); names of several shapes stop the agent.");
  flags.String("pg-conninfo", &o.pg_conninfo,
               "postgres: libpq connection string of the primary, e.g. 'host=/run/postgresql "
               "port=5432 user=postgres dbname=postgres'.");
  flags.String("pg-data", &o.pg_data,
               "postgres: the primary's data directory (PGDATA), checked at start against the "
               "cluster's data_directory (the role needs pg_read_all_settings) and --wal-dir "
               "against its pg_wal. Only with it does the crash rule run: once the postmaster "
               "named in PGDATA/postmaster.pid (verified as the parent of the agent's backend, "
               "so the agent must share its PID namespace and OS user) has exited, the agent "
               "ships the valid WAL past the last flush position, as crash recovery replays "
               "it. Empty: after a crash the agent waits for PostgreSQL to come back.");
  flags.String("pg-slot", &o.pg_slot,
               "postgres: physical replication slot the agent creates and advances to the "
               "oldest position every replica has flushed, so unshipped WAL is kept; empty "
               "disables it.");
  flags.String("state-dir", &o.state_dir,
               "postgres with a slot (required then): the agent's state directory (created "
               "if missing). Its file 'replicas' records every replica's last acknowledged "
               "position, so that the slot keeps the WAL of a replica that is down across an "
               "agent restart. Delete it (agent stopped) to forget every replica, or take a "
               "replica out of --allow-replicas to forget that one.");
  flags.Uint("max-retained-bytes", &o.max_retained_bytes,
             "postgres: most WAL the slot may hold back for lagging replicas; past it the "
             "agent releases WAL and logs which replicas are at risk (alert at 80%).");
  flags.Bool("pg-feed", &o.pg_feed,
             "postgres: open one replication connection (a walsender) that pushes each new "
             "flush position the moment PostgreSQL flushes, and carries the replicas' "
             "positions back to pg_stat_replication (and synchronous_standby_names). Needs "
             "the REPLICATION attribute and a pg_hba.conf replication line; without them "
             "the agent logs why and follows the flush position by query.");
  flags.String("pg-feed-name", &o.pg_feed_name,
               "postgres: application_name of the feed's connection, as pg_stat_replication "
               "and synchronous_standby_names see it.");
  flags.Int("pg-feed-query-interval-ms", &r.pg_feed_query_ms,
            "postgres: while the feed is live, the longest pause between the flush-position "
            "queries kept as a safety net.");
  flags.Int("pg-query-interval-ms", &r.pg_query_ms,
            "postgres, without a live feed: the shortest pause between flush-position "
            "queries while PostgreSQL writes WAL (1 to 1000). Longer: fewer, larger "
            "frames and replica flush cycles, so less CPU beside the primary, and up to "
            "that much more lag.");
  flags.Int("ack-interval-ms", &r.ack_interval_ms,
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
  flags.Int("heartbeat-ms", &r.heartbeat_ms, "Heartbeat interval on each control stream.");
  flags.Int("stall-timeout-ms", &r.stall_timeout_ms,
            "A replica behind the source whose durable position has not moved for this long "
            "is reported stalled (walship-status, walship_agent_replica_stalled).");
  flags.Int("io-timeout-ms", &r.io_timeout_ms,
            "Longest wait for a replica's socket to take bytes before its session is "
            "dropped (other replicas are unaffected).");
  flags.String("port-file", &o.port_file,
               "If set, write 'control=HOST:PORT' and 'data=HOST:PORT' lines to this file "
               "once listening.");
  flags.String("allow-replicas", &r.allow_replicas,
               "Comma-separated replica names allowed to subscribe; empty allows all. "
               "Others are refused at handshake with PERMISSION_DENIED.");
  flags.Uint("max-rate", &o.max_rate_bytes_per_sec,
             "Most payload bytes per second shipped to each replica; 0 is unlimited.");
  flags.String("metrics-listen", &o.metrics_listen,
               "HOST:PORT serving Prometheus metrics at /metrics; empty disables it; "
               "port 0 picks a free port (logged).");
  walship::RegisterTlsFlags(flags, &o.tls, /*client=*/false);
  flags.String("log-level", &r.log_level, "trace, debug, info, warn or error.");
}

// Converts the raw values into `o`; false (logged) on a bad value.
bool ApplyRawFlags(const RawFlags& r, walship::agent::AgentOptions& o) {
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
  o.heartbeat = absl::Milliseconds(r.heartbeat_ms);
  o.stall_timeout = absl::Milliseconds(r.stall_timeout_ms);
  o.pg_feed_query_interval = absl::Milliseconds(r.pg_feed_query_ms);
  o.pg_query_interval = absl::Milliseconds(r.pg_query_ms);
  o.ack_interval = absl::Milliseconds(r.ack_interval_ms);
  o.io_timeout = absl::Milliseconds(r.io_timeout_ms);
  if (absl::Status s = o.Validate(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  walship::agent::AgentOptions o;
  RawFlags r(o);
  walship::FlagSet flags(
      "walship-agent: ships WAL segment files to walship-replica subscribers.\n"
      "Usage: walship-agent --wal-dir=DIR [--listen=HOST:PORT] "
      "[--data-listen=HOST:PORT] [flags]");
  RegisterSourceFlags(flags, o, r);
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
  if (!ApplyRawFlags(r, o)) return 2;

  walship::PrepareDaemonRuntime();
  const sigset_t signals = walship::PrepareDaemonSignals(sys);

  walship::agent::Agent agent(sys, o);
  if (absl::Status s = agent.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s.ToString());
    return 1;
  }
  const int sig = walship::WaitForShutdownSignal(sys, signals);
  spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  agent.Shutdown();
  spdlog::info("stopped");
  return 0;
}
