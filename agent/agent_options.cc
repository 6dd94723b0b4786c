#include "agent/agent_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/append_source.h"
#include "common/net.h"
#include "common/wire/frame.h"

namespace walship::agent {

absl::Status AgentOptions::Validate() const {
  if (wal_dir.empty()) return absl::InvalidArgumentError("--wal-dir is required");
  if (format != "append" && format != "postgres") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format=", format, " is not supported (supported: append, postgres)"));
  }
  if (format == "postgres" && pg_conninfo.empty()) {
    return absl::InvalidArgumentError("--format=postgres needs --pg-conninfo");
  }
  if (format != "postgres" && !pg_conninfo.empty()) {
    return absl::InvalidArgumentError("--pg-conninfo is only for --format=postgres");
  }
  if (!segment_pattern.empty()) {
    if (format != "append") {
      return absl::InvalidArgumentError("--segment-pattern is only for --format=append");
    }
    if (auto p = SegmentPattern::Compile(segment_pattern); !p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--segment-pattern: ", p.status().message()));
    }
  }
  if (format != "postgres" && !pg_data.empty()) {
    return absl::InvalidArgumentError("--pg-data is only for --format=postgres");
  }
  if (format == "postgres" && !pg_slot.empty() && state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--format=postgres with a replication slot (--pg-slot) needs --state-dir: the agent "
        "records there the position of every replica it has seen, so that the slot keeps "
        "their WAL across its restarts (--pg-slot= runs without a slot)");
  }
  if (format != "postgres" && !state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--state-dir is only for --format=postgres (it records replica positions for the "
        "replication slot)");
  }
  if (pg_feed_name.empty() || pg_feed_name.size() > 63 ||
      !std::all_of(pg_feed_name.begin(), pg_feed_name.end(),
                   [](char c) { return c > ' ' && c < 127; })) {
    // PostgreSQL truncates application_name at 63 bytes and rewrites
    // non-ASCII: the name would not be the one an operator configured.
    return absl::InvalidArgumentError(
        "--pg-feed-name must be 1 to 63 printable ASCII characters without spaces");
  }
  if (pg_feed_query_interval < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("--pg-feed-query-interval-ms must be at least 1");
  }
  if (pg_query_interval < absl::Milliseconds(1) || pg_query_interval > absl::Seconds(1)) {
    return absl::InvalidArgumentError("--pg-query-interval-ms must be 1 to 1000");
  }
  if (ack_interval < absl::ZeroDuration() || ack_interval > absl::Seconds(1)) {
    // Past the keepalives (1 s) on both paths the interval would mean nothing.
    return absl::InvalidArgumentError("--ack-interval-ms must be 0 to 1000");
  }
  if (absl::Status s = tls.Validate(); !s.ok()) return s;
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
  if (heartbeat < absl::Milliseconds(10)) {
    return absl::InvalidArgumentError("--heartbeat-ms must be at least 10");
  }
  return absl::OkStatus();
}

}  // namespace walship::agent
