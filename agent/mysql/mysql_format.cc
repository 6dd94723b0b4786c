#include "agent/mysql/mysql_format.h"

#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/append_source.h"
#include "agent/mysql/binlog.h"
#include "common/sys/file_util.h"
#include "spdlog/spdlog.h"

namespace walship::agent {

void MysqlBinlogOptions::RegisterFlags(FlagSet& flags) {
  flags.String("binlog-basename", &binlog_basename,
               "mysql-binlog: the binlogs' base name (the log-bin setting without its "
               "directory), e.g. 'mysql-bin': only BASE.NNNNNN files are segments. Default: "
               "the base name the directory's index file (BASE.index) names.");
}

absl::Status MysqlBinlogOptions::Validate(bool selected) const {
  if (binlog_basename.empty()) return absl::OkStatus();
  if (!selected) return OnlyForFormat("binlog-basename", "mysql-binlog");
  if (absl::StrContains(binlog_basename, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--binlog-basename=", binlog_basename, ": a base name, without a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BinlogBase(sys::SysCalls& sys, const std::string& dir,
                                       const std::string& configured) {
  if (!configured.empty()) return configured;
  absl::StatusOr<std::vector<std::string>> names = sys::ListDirectory(sys, dir, "WAL directory");
  if (!names.ok()) return names.status();
  std::set<std::string> bases;
  for (const std::string& n : *names) {
    if (!absl::EndsWith(n, ".index") || n[0] == '.') continue;
    absl::StatusOr<std::string> text = sys::ReadFileToString(sys, absl::StrCat(dir, "/", n));
    if (!text.ok()) continue;  // gone, or not readable: not an index to go by
    std::string base = mysql::BaseFromIndex(*text);
    if (base.empty()) base = n.substr(0, n.size() - 6);
    bases.insert(base);
  }
  if (bases.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the WAL directory ", dir, " holds index files of several binlog series (",
        absl::StrJoin(bases, ", "), "); give --binlog-basename"));
  }
  return bases.empty() ? std::string() : *bases.begin();
}

void RegisterMysqlBinlogFormat(WalFormatRegistry& registry) {
  registry.Add(MakeWalFormat<MysqlBinlogOptions>(
      "mysql-binlog",
      "MySQL/MariaDB binary logs (log-bin): only BASE.NNNNNN files are segments (BASE from "
      "the index file or --binlog-basename; the index and .state files are skipped); each "
      "is shipped up to the end of its last complete event (CRC-32 checked), and a closed "
      "binlog's in-use flag, which the server clears in place, reaches the replica with "
      "its completion, so its copy is byte-identical.",
      [](const SourceContext& c,
         const MysqlBinlogOptions& o) -> absl::StatusOr<std::unique_ptr<WalSource>> {
        absl::StatusOr<std::string> base = BinlogBase(c.sys, c.agent.wal_dir, o.binlog_basename);
        if (!base.ok()) return base.status();
        AppendSourceOptions so;
        so.wal_dir = c.agent.wal_dir;
        so.stream_id = c.agent.stream_id;
        so.segment_pattern = mysql::SegmentPatternFor(*base);
        so.format_name = "mysql-binlog";
        so.scanner = [] { return std::make_unique<mysql::BinlogScanner>(); };
        so.mutable_bytes = {MutableBits{mysql::kInUseFlagOffset, mysql::kInUseFlag}};
        if (base->empty()) {
          spdlog::warn("{}: no index file names the binlogs' base name; following every "
                       "file named NAME.NNNNNN (give --binlog-basename when the directory "
                       "holds several binlog series)",
                       c.agent.wal_dir);
        }
        return std::make_unique<AppendSource>(c.sys, so, c.catalog, c.clock);
      }));
}

}  // namespace walship::agent
