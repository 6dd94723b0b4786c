#include "replica/gate_config.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace walship::replica {
namespace {

// One member of the list as PostgreSQL's scanner reads it: surrounding
// spaces dropped, a double-quoted name unquoted ("" inside is one quote).
std::string Member(absl::string_view raw) {
  absl::string_view m = absl::StripAsciiWhitespace(raw);
  if (m.size() >= 2 && m.front() == '"' && m.back() == '"') {
    std::string out;
    m = m.substr(1, m.size() - 2);
    for (size_t i = 0; i < m.size(); ++i) {
      out.push_back(m[i]);
      if (m[i] == '"' && i + 1 < m.size() && m[i + 1] == '"') ++i;
    }
    return out;
  }
  return std::string(m);
}

}  // namespace

bool SyncStandbyNamesInclude(absl::string_view value, absl::string_view name) {
  // "FIRST 2 (a, b)", "ANY 1 (a, b)" and "2 (a, b)" list their members in
  // parentheses; otherwise the whole value is the list.
  absl::string_view list = value;
  const size_t open = value.find('(');
  const size_t close = value.rfind(')');
  if (open != absl::string_view::npos && close != absl::string_view::npos && close > open) {
    list = value.substr(open + 1, close - open - 1);
  }
  for (absl::string_view raw : absl::StrSplit(list, ',')) {
    const std::string m = Member(raw);
    if (m == "*" || (!m.empty() && absl::EqualsIgnoreCase(m, name))) return true;
  }
  return false;
}

absl::StatusOr<std::string> ReloadAndReadSyncNames(Clock& clock, agent::PgClient& pg,
                                                   absl::Time deadline, absl::Duration poll) {
  auto before = pg.Query("SELECT pg_conf_load_time()::text, pg_reload_conf()");
  if (!before.ok()) return before.status();
  if (before->size() != 1 || (*before)[0].size() != 2 || (*before)[0][1] != "t") {
    return absl::InternalError("pg_reload_conf() did not signal the server");
  }
  const std::string loaded_before = (*before)[0][0];
  absl::Status last;
  while (true) {
    // A new session: the postmaster's settings, which change only once it
    // has read the file.
    pg.Disconnect();
    auto rows = pg.Query(absl::StrCat(
        "SELECT pg_conf_load_time() > '", loaded_before,
        "'::timestamptz, current_setting('synchronous_standby_names')"));
    if (rows.ok() && rows->size() == 1 && (*rows)[0].size() == 2) {
      if ((*rows)[0][0] == "t") return (*rows)[0][1];
      last = absl::OkStatus();
    } else if (!rows.ok()) {
      last = rows.status();
    }
    if (clock.Now() + poll >= deadline) break;
    clock.SleepFor(poll);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "the standby did not load its configuration again within the timeout (loaded at ",
      loaded_before, ")", last.ok() ? "" : ": ", last.ok() ? "" : last.ToString()));
}

}  // namespace walship::replica
