#include "agent/append_format.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "agent/append_source.h"

namespace walship::agent {

void AppendFormatOptions::RegisterFlags(FlagSet& flags) {
  flags.String("segment-pattern", &segment_pattern,
               "append: regular expression (ECMAScript, matched against the whole name) "
               "that only segment files' names match, e.g. 'mysql-bin\\.([0-9]{6})'; other "
               "files are skipped. A capturing group is the sequence number: consecutive "
               "segments must have consecutive numbers. Default: every file, if all names "
               "have one shape (digits aside); names of several shapes stop the agent.");
}

absl::Status AppendFormatOptions::Validate(bool selected) const {
  if (segment_pattern.empty()) return absl::OkStatus();
  if (!selected) return OnlyForFormat("segment-pattern", "append");
  if (auto p = SegmentPattern::Compile(segment_pattern); !p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--segment-pattern: ", p.status().message()));
  }
  return absl::OkStatus();
}

void RegisterAppendFormat(WalFormatRegistry& registry) {
  registry.Add(MakeWalFormat<AppendFormatOptions>(
      "append",
      "segment files sort by name in WAL order and grow only by appends; a segment is "
      "complete once a later one exists.",
      [](const SourceContext& c, const AppendFormatOptions& o)
          -> absl::StatusOr<std::unique_ptr<WalSource>> {
        AppendSourceOptions so;
        so.wal_dir = c.agent.wal_dir;
        so.stream_id = c.agent.stream_id;
        so.segment_pattern = o.segment_pattern;
        return std::make_unique<AppendSource>(c.sys, so, c.catalog, c.clock);
      }));
}

void RegisterScannedFormat(WalFormatRegistry& registry, ScannedFormat format) {
  registry.Add(MakeWalFormat<NoFormatOptions>(
      format.name, format.description,
      [format](const SourceContext& c,
               const NoFormatOptions&) -> absl::StatusOr<std::unique_ptr<WalSource>> {
        AppendSourceOptions so;
        so.wal_dir = c.agent.wal_dir;
        so.stream_id = c.agent.stream_id;
        so.segment_pattern = format.segment_pattern;
        so.format_name = format.name;
        so.scanner = format.scanner;
        so.archive_subdir = format.archive_subdir;
        return std::make_unique<AppendSource>(c.sys, so, c.catalog, c.clock);
      }));
}

}  // namespace walship::agent
