// append_format.h: the append format (append_source.h) as the agent plugs it
// in: --format=append, the agent's default, and its one flag,
// --segment-pattern.
#ifndef WALSHIP_AGENT_APPEND_FORMAT_H_
#define WALSHIP_AGENT_APPEND_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "agent/format_options.h"
#include "agent/wal_format.h"
#include "common/flags.h"

namespace walship::agent {

// The append format's options (its flags' values).
struct AppendFormatOptions final : FormatOptions {
  // Regular expression (ECMAScript) a segment's name matches in full; group
  // 1, if any, is its sequence number (AppendSourceOptions::
  // segment_pattern). Empty: the names of the directory's one shape.
  std::string segment_pattern;

  void RegisterFlags(FlagSet& flags) override;
  // A pattern that does not compile; a pattern while another format runs.
  absl::Status Validate(bool selected) const override;
};

// Adds the append format ("append") to `registry`.
void RegisterAppendFormat(WalFormatRegistry& registry);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_APPEND_FORMAT_H_
