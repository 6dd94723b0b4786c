// agent_options.h: walship-agent configuration, filled from flags by main.cc.
//
// The core's options; each WAL format keeps its own in format_options
// (format_options.h, wal_format.h).
#ifndef WALSHIP_AGENT_AGENT_OPTIONS_H_
#define WALSHIP_AGENT_AGENT_OPTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/format_options.h"
#include "common/commit_trace.h"
#include "common/leader_key.h"
#include "common/tls.h"
#include "common/transport.h"

namespace walship::agent {

struct AgentOptions {
  std::string wal_dir;
  // The WAL format (--format): the name of a format in the agent's registry
  // (wal_format.h; KnownWalFormats() lists walship-agent's). The default is
  // the only format the core names.
  std::string format = "append";
  // Each format's own options (the values of its flags), by format name; a
  // format without an entry has its defaults. Read-only once set: copies of
  // AgentOptions share them. WalFormatRegistry::RegisterFlags fills it.
  std::map<std::string, std::shared_ptr<const FormatOptions>> format_options;
  // While nothing waits for acknowledgements (the source has not asked for
  // them at once: ReplicaLink::set_ack_pacing): the shortest pause between a
  // replica's acknowledgements of new positions (zero: each at once). A
  // source may pace its own reports of them by it too.
  absl::Duration ack_interval = absl::ZeroDuration();
  std::string stream_id;  // empty: derived from the WAL directory
  std::string listen = "127.0.0.1:0";
  std::string data_listen = "127.0.0.1:0";
  Transport transport = Transport::kZeroCopy;
  uint32_t max_payload = 1u << 20;
  absl::Duration heartbeat = absl::Seconds(1);
  // A replica behind the source whose durable position has not moved for
  // this long is reported stalled (status, walship_agent_replica_stalled).
  absl::Duration stall_timeout = absl::Seconds(10);
  absl::Duration token_ttl = absl::Seconds(30);
  absl::Duration io_timeout = absl::Seconds(30);
  // The scheduler slice the threads a synchronous commit waits on ask for
  // (common/sched_slice.h): the flush feed's and the control port's. Zero:
  // the kernel's default.
  absl::Duration sched_slice = absl::Microseconds(100);
  // Above zero: those threads run under SCHED_FIFO at this priority instead
  // (needs CAP_SYS_NICE or RLIMIT_RTPRIO); zero: the normal policy.
  int64_t sched_fifo_priority = 0;
  // Written (atomically) with the bound ports once listening, for scripts.
  std::string port_file;
  // Replica names allowed to handshake; empty allows every name. Others are
  // refused with kPermissionDenied before any byte is shipped.
  std::vector<std::string> allow_replicas;
  // Most payload bytes per second shipped to each replica (a token bucket in
  // its shipper thread); 0 is unlimited.
  uint64_t max_rate_bytes_per_sec = 0;
  // Whether replicas that ask for compressed DATA frames get them
  // (compression.h); false declines, and they are shipped plain DATA.
  bool allow_compression = true;
  // HOST:PORT of the Prometheus /metrics endpoint; empty disables it.
  std::string metrics_listen;
  // Mutual TLS on the control port, or plaintext when tls.insecure is set;
  // Validate() insists on one of the two. With TLS, a replica's name must be
  // one its client certificate carries (CN or DNS SAN).
  TlsOptions tls;
  // --data-tls as given: "on", "off", or "" (on unless tls.insecure); see
  // common/net/data_tls_flag.h. Validate() checks it; data_tls_on() says.
  std::string data_tls;
  bool data_tls_on() const;
  // --leader-etcd, --leader-key, --leader-etcd-*, --member: serve replicas
  // only while the HA manager's leader key names `member`, this node
  // (agent/leader_gate.h); not asked unless leader.enabled().
  LeaderKeyConfig leader;
  std::string member;
  // How often the leader key is read while serving (and each read's longest
  // wait for etcd).
  absl::Duration leader_check_interval = absl::Seconds(1);
  // --trace-commits: where the per-commit path records its stages
  // (common/commit_trace.h); null: off, at no cost. Borrowed: it must
  // outlive the agent.
  CommitTrace* commit_trace = nullptr;

  // kInvalidArgument naming the first bad field of the core's; the format
  // and its options are checked by WalFormatRegistry::Validate, which calls
  // this.
  absl::Status Validate() const;
  // Validate()'s part for the leader key and --member.
  absl::Status ValidateLeaderKey() const;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_AGENT_OPTIONS_H_
