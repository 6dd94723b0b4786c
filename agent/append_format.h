// append_format.h: the append format (append_source.h) as the agent plugs it
// in: --format=append, the agent's default, and its one flag,
// --segment-pattern.
#ifndef WALSHIP_AGENT_APPEND_FORMAT_H_
#define WALSHIP_AGENT_APPEND_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "agent/format_options.h"
#include "agent/record_scanner.h"
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

// A format without flags of its own.
struct NoFormatOptions final : FormatOptions {
  void RegisterFlags(FlagSet& flags) override { (void)flags; }
  absl::Status Validate(bool selected) const override {
    (void)selected;
    return absl::OkStatus();
  }
};

// A format that follows a directory as the append format does, with a fixed
// segment pattern and a record scanner that tells each segment's valid end
// (record_scanner.h): etcd's and RocksDB's logs.
struct ScannedFormat {
  std::string name;
  std::string description;
  // The names of its segments (a SegmentPattern); other files are skipped.
  std::string segment_pattern;
  RecordScannerMaker scanner;
  // AppendSourceOptions::archive_subdir.
  std::string archive_subdir;
};
void RegisterScannedFormat(WalFormatRegistry& registry, ScannedFormat format);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_APPEND_FORMAT_H_
