// replica_options.h: walship-replica configuration, filled from flags by main.cc.
#ifndef WALSHIP_REPLICA_REPLICA_OPTIONS_H_
#define WALSHIP_REPLICA_REPLICA_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/commit_trace.h"
#include "common/tls.h"
#include "common/transport.h"
#include "common/wire/frame.h"
#include "common/leader_key.h"

namespace walship::replica {

struct ReplicaOptions {
  // HOST:PORT of the agent's control service; or several, separated by
  // commas (agent_list.h: one beside each node of a cluster, the replica
  // follows the one whose node is the primary).
  std::string agent;
  // HOST:PORT for the data socket when it must differ from the agent's host
  // and announced data port (NAT, a proxy). Empty: agent host + data_port.
  std::string data_address;
  std::string dest;
  std::string name;
  Transport transport = Transport::kZeroCopy;
  size_t pipe_bytes = 1u << 20;
  // Drop a published segment's pages from the page cache (WriterOptions).
  bool drop_behind = true;
  // How often an idle flusher wakes (agent silence check, keepalive acks).
  // Arriving bytes wake it at once, so this adds no latency; a flush starts
  // as soon as the previous one ends when data keeps arriving.
  absl::Duration flush_interval = absl::Milliseconds(100);
  // Longest time walship.state trails the acknowledged position within a
  // segment (state_store.h); bytes past it are named by walship.progress.
  // Saving it costs a second device flush, kept off the acknowledgement
  // path: a background thread saves the newest durable point at most this
  // often (and the flusher at every segment boundary).
  absl::Duration record_interval = absl::Milliseconds(100);
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration io_timeout = absl::Seconds(30);
  // The scheduler slice the threads a synchronous commit waits on ask for
  // (common/sched_slice.h): the receiving and the flushing thread. Zero: the
  // kernel's default.
  absl::Duration sched_slice = absl::Microseconds(100);
  // Above zero: those threads run under SCHED_FIFO at this priority instead,
  // the receiving thread only while no backlog arrives (needs CAP_SYS_NICE
  // or RLIMIT_RTPRIO); zero: the normal policy.
  int64_t sched_fifo_priority = 0;
  // Retry backoff after a transient failure (doubles up to the maximum).
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // The session is dropped when the agent is silent this long.
  absl::Duration agent_silence_timeout = absl::Seconds(15);
  // With several agents: how often the other agents are asked (their Status)
  // whether one serves a newer timeline than the session's agent (the
  // leader watch, agent_list.h's NewerPrimary), and the longest wait for
  // each answer (there and before each handshake).
  absl::Duration leader_check_interval = absl::Seconds(1);
  // --leader-etcd, --leader-key, --leader-etcd-*: the HA manager's leader
  // key (common/leader_key.h); not asked unless leader.enabled(). Every
  // --agent entry must then carry its member name (NAME=HOST:PORT).
  LeaderKeyConfig leader;
  // --agent-tag: with the leader key, the agents are also taken from the
  // HA manager's member keys beside it, a member's agent being the value of
  // this tag (member_agents.h); `agent` may then be empty. Empty: only
  // `agent`.
  std::string agent_tag;
  // HOST:PORT of the Prometheus /metrics endpoint; empty disables it.
  std::string metrics_listen;
  // Mutual TLS to the agent's control port, or plaintext when tls.insecure
  // is set; Validate() insists on one. The files are read again at every
  // reconnect, so replacing them rotates the replica's certificate.
  TlsOptions tls;
  // --data-tls as given: "on", "off", or "" (on unless tls.insecure); see
  // common/net/data_tls_flag.h. Validate() checks it; data_tls_on() says.
  std::string data_tls;
  bool data_tls_on() const;
  // --trace-commits: where the per-commit path records its stages
  // (common/commit_trace.h); null: off, at no cost. Borrowed: it must
  // outlive the replica.
  CommitTrace* commit_trace = nullptr;
  // --compress, --compress-level: the compression asked for at handshake
  // (compressed_frames.h); level 0 is the codec's default.
  wire::Codec compression = wire::Codec::kNone;
  int compression_level = 0;

  absl::Status Validate() const;

 private:
  absl::Status ValidateLeaderKey() const;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_REPLICA_OPTIONS_H_
