#include "agent/agent_options.h"

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "common/net/data_tls_flag.h"
#include "common/sched_slice.h"
#include "common/status_macros.h"
#include "common/wire/frame.h"

namespace walship::agent {

bool AgentOptions::data_tls_on() const {
  absl::StatusOr<bool> on = net::ResolveDataTls(data_tls, tls);
  return on.ok() && *on;
}

absl::Status AgentOptions::Validate() const {
  if (wal_dir.empty()) return absl::InvalidArgumentError("--wal-dir is required");
  if (ack_interval < absl::ZeroDuration() || ack_interval > absl::Seconds(1)) {
    // Past the keepalives (1 s) on both paths the interval would mean nothing.
    return absl::InvalidArgumentError("--ack-interval-ms must be 0 to 1000");
  }
  if (absl::Status s = tls.Validate(); !s.ok()) return s;
  if (auto d = net::ResolveDataTls(data_tls, tls); !d.ok()) return d.status();
  if (auto hp = ParseHostPort(listen); !hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", hp.status().message()));
  }
  if (auto hp = ParseHostPort(data_listen); !hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-listen: ", hp.status().message()));
  }
  if (max_payload < 4096 || max_payload > wire::kMaxPayloadLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-frame-bytes must be in [4096, ", wire::kMaxPayloadLength, "]"));
  }
  if (!metrics_listen.empty()) {
    if (auto hp = ParseHostPort(metrics_listen); !hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-listen: ", hp.status().message()));
    }
  }
  for (const std::string& name : allow_replicas) {
    if (name.empty()) {
      return absl::InvalidArgumentError("--allow-replicas: empty replica name");
    }
  }
  if (max_rate_bytes_per_sec != 0 && max_rate_bytes_per_sec < 4096) {
    return absl::InvalidArgumentError(
        "--max-rate must be 0 (unlimited) or at least 4096 bytes per second");
  }
  if (stall_timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError("--stall-timeout-ms must be at least 100");
  }
  WALSHIP_RETURN_IF_ERROR(ValidateSchedSlice(sched_slice, "sched-slice-us"));
  WALSHIP_RETURN_IF_ERROR(ValidateSchedFifoPriority(sched_fifo_priority, "sched-fifo-priority"));
  if (heartbeat < absl::Milliseconds(10)) {
    return absl::InvalidArgumentError("--heartbeat-ms must be at least 10");
  }
  return ValidateLeaderKey();
}

absl::Status AgentOptions::ValidateLeaderKey() const {
  WALSHIP_RETURN_IF_ERROR(leader.Validate());
  if (!leader.enabled()) {
    if (member.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError("--member needs --leader-etcd and --leader-key");
  }
  if (member.empty()) {
    return absl::InvalidArgumentError(
        "--leader-etcd needs --member, this node's member name as the HA manager names it "
        "(Patroni: its name)");
  }
  if (leader_check_interval < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError("the leader key's check interval must be at least 100 ms");
  }
  return absl::OkStatus();
}

}  // namespace walship::agent
