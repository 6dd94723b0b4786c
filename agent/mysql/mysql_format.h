// mysql_format.h: --format=mysql-binlog, MySQL/MariaDB binary logs
// (binlog.h) followed by the append source with the binlog event scanner.
//
// Segments: BASE.NNNNNN, BASE being the base name the index file
// (BASE.index) names, or --binlog-basename; the index, BASE.state and every
// other file are skipped. Without an index file or --binlog-basename, every
// name of the form NAME.NNNNNN is a segment (one server's binlogs only).
// Each binlog is shipped up to the end of its last complete event (CRC-32
// checked when the server writes checksums), and completes once the server
// has cleared its in-use flag (or a later server start shows it crashed);
// the flag's byte is declared mutable (WalSource::MutableBytes), so the
// replica's copy of a closed binlog is byte-identical to the source's.
#ifndef WALSHIP_AGENT_MYSQL_MYSQL_FORMAT_H_
#define WALSHIP_AGENT_MYSQL_MYSQL_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "agent/format_options.h"
#include "agent/wal_format.h"
#include "common/flags.h"

namespace walship::agent {

struct MysqlBinlogOptions final : FormatOptions {
  // The binlogs' base name (log-bin's value without directory), e.g.
  // "mysql-bin"; empty: from the index file.
  std::string binlog_basename;

  void RegisterFlags(FlagSet& flags) override;
  absl::Status Validate(bool selected) const override;
};

// Adds the MySQL/MariaDB binlog format ("mysql-binlog") to `registry`.
void RegisterMysqlBinlogFormat(WalFormatRegistry& registry);

// The base name of the binlogs in `dir`: `configured` if set, else the one
// its single *.index file names, else "" (any). kFailedPrecondition when
// the directory holds several index files naming different bases.
absl::StatusOr<std::string> BinlogBase(sys::SysCalls& sys, const std::string& dir,
                                       const std::string& configured);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_MYSQL_MYSQL_FORMAT_H_
