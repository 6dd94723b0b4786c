#include "replica/replica_options.h"

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "common/wire/compress.h"
#include "common/net/data_tls_flag.h"
#include "common/sched_slice.h"
#include "replica/agent_list.h"
#include "common/leader_key.h"
#include "common/status_macros.h"

namespace walship::replica {

bool ReplicaOptions::data_tls_on() const {
  absl::StatusOr<bool> on = net::ResolveDataTls(data_tls, tls);
  return on.ok() && *on;
}

absl::Status ReplicaOptions::Validate() const {
  if (agent.empty() && agent_tag.empty()) {
    return absl::InvalidArgumentError("--agent is required (or --agent-tag with --leader-etcd)");
  }
  if (!agent_tag.empty() && !leader.enabled()) {
    return absl::InvalidArgumentError(
        "--agent-tag reads the agents from the HA manager's member keys: it needs "
        "--leader-etcd and --leader-key");
  }
  if (absl::Status s = tls.Validate(); !s.ok()) return s;
  if (auto d = net::ResolveDataTls(data_tls, tls); !d.ok()) return d.status();
  size_t agents = 0;
  if (!agent.empty()) {
    absl::StatusOr<std::vector<std::string>> list = ParseAgentList(agent);
    if (!list.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--agent: ", list.status().message()));
    }
    agents = list->size();
  }
  if ((agents > 1 || !agent_tag.empty()) && !data_address.empty()) {
    return absl::InvalidArgumentError(
        "--data-address names one data socket; with several agents (--agent addresses or "
        "--agent-tag) each agent's own host and announced data port are used");
  }
  if (absl::Status s = ValidateLeaderKey(); !s.ok()) return s;
  if (absl::Status s = ValidateSchedSlice(sched_slice, "sched-slice-us"); !s.ok()) return s;
  if (absl::Status s = ValidateSchedFifoPriority(sched_fifo_priority, "sched-fifo-priority");
      !s.ok()) {
    return s;
  }
  if (!data_address.empty()) {
    if (auto hp = ParseHostPort(data_address); !hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data-address: ", hp.status().message()));
    }
  }
  if (!metrics_listen.empty()) {
    if (auto hp = ParseHostPort(metrics_listen); !hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-listen: ", hp.status().message()));
    }
  }
  if (dest.empty()) return absl::InvalidArgumentError("--dest is required");
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError("--name is required (1..64 characters)");
  }
  for (char c : name) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return absl::InvalidArgumentError("--name may use only [A-Za-z0-9._-]");
    }
  }
  if (record_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--record-interval-ms must be > 0");
  }
  if (pipe_bytes < 4096) return absl::InvalidArgumentError("--pipe-bytes must be >= 4096");
  if (compression == wire::Codec::kNone && compression_level != 0) {
    return absl::InvalidArgumentError("--compress-level needs --compress=zstd or lz4");
  }
  if (compression != wire::Codec::kNone && compression_level != 0) {
    if (absl::Status s = wire::ValidateLevel(compression, compression_level); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--compress-level: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaOptions::ValidateLeaderKey() const {
  WALSHIP_RETURN_IF_ERROR(leader.Validate());
  if (!leader.enabled() || agent.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<AgentEntry>> agents = ParseAgentEntries(agent);
  if (!agents.ok()) return agents.status();  // Validate() reports it
  for (const AgentEntry& a : *agents) {
    if (a.member.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--leader-etcd: agent ", a.address,
          " has no member name; give every --agent entry as NAME=HOST:PORT, NAME as the "
          "HA manager names that node"));
    }
  }
  return absl::OkStatus();
}

}  // namespace walship::replica
