#include "agent/sqlite/sqlite_format.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/append_format.h"
#include "agent/sqlite/sqlite_wal.h"
#include "common/sys/file_util.h"

namespace walship::agent {
namespace {

// A source that never starts: Start() says why (see sqlite_wal.h).
class SqliteRefusal final : public WalSource {
 public:
  SqliteRefusal(sys::SysCalls& sys, std::string wal_dir)
      : sys_(sys), wal_dir_(std::move(wal_dir)) {}

  absl::Status Start() override {
    std::vector<std::string> wals;
    auto names = sys::ListDirectory(sys_, wal_dir_, "WAL directory");
    if (names.ok()) {
      for (const std::string& n : *names) {
        if (absl::EndsWith(n, "-wal")) wals.push_back(n);
      }
    }
    absl::Status s = absl::FailedPreconditionError(absl::StrCat(
        "--format=sqlite-wal: walship does not ship SQLite databases",
        wals.empty() ? "" : absl::StrCat(" (", wal_dir_, " holds ", absl::StrJoin(wals, ", "), ")"),
        ": ", sqlite::WhyNotSqliteWal()));
    return s;  // the agent logs it ("cannot start: ...") and exits non-zero
  }
  void Stop() override {}
  std::string StreamId() const override { return "sqlite-wal"; }
  std::string FormatName() const override { return "sqlite-wal"; }
  std::string wal_dir() const override { return wal_dir_; }

 private:
  sys::SysCalls& sys_;
  const std::string wal_dir_;
};

}  // namespace

void RegisterSqliteFormat(WalFormatRegistry& registry) {
  registry.Add(MakeWalFormat<NoFormatOptions>(
      "sqlite-wal",
      "not supported: refuses at start-up and says why (SQLite rewrites its -wal file from "
      "offset 0 after each checkpoint) and what works instead (sqlite3 .backup).",
      [](const SourceContext& c,
         const NoFormatOptions&) -> absl::StatusOr<std::unique_ptr<WalSource>> {
        return std::make_unique<SqliteRefusal>(c.sys, c.agent.wal_dir);
      }));
}

}  // namespace walship::agent
