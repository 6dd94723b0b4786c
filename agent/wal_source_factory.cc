#include "agent/wal_source_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/append_source.h"
#include "agent/postgres/postgres_format.h"

namespace walship::agent {

absl::StatusOr<std::unique_ptr<WalSource>> MakeWalSource(sys::SysCalls& sys,
                                                         const AgentOptions& options,
                                                         SegmentCatalog& catalog,
                                                         Clock& clock) {
  if (options.format == "append") {
    AppendSourceOptions so;
    so.wal_dir = options.wal_dir;
    so.stream_id = options.stream_id;
    so.segment_pattern = options.segment_pattern;
    return std::make_unique<AppendSource>(sys, so, catalog, clock);
  }
  if (options.format == "postgres") {
    return std::make_unique<PostgresFormat>(sys, options, catalog, clock);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--format=", options.format, " is not supported (supported: append, postgres)"));
}

}  // namespace walship::agent
