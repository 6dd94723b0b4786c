#include "replica/gate_config.h"

#include <algorithm>
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

absl::StatusOr<SyncNames> ReloadAndReadSyncNames(Clock& clock, agent::PgClient& pg,
                                                 absl::Time deadline, absl::Duration poll) {
  SyncNames out;
  auto before = pg.Query("SELECT pg_conf_load_time()::text");
  if (!before.ok()) return before.status();
  if (before->size() != 1 || (*before)[0].size() != 1) {
    return absl::InternalError("unexpected answer to pg_conf_load_time()");
  }
  const std::string loaded_before = (*before)[0][0];
  auto signalled = pg.Query("SELECT pg_reload_conf()");
  if (!signalled.ok()) out.why_not = signalled.status().ToString();
  const absl::Time bound = std::min(deadline, clock.Now() + kReloadBound);
  while (true) {
    // A new session: the postmaster's settings, which change only once it
    // has read the file again.
    pg.Disconnect();
    auto rows = pg.Query(absl::StrCat(
        "SELECT pg_conf_load_time() > '", loaded_before,
        "'::timestamptz, current_setting('synchronous_standby_names')"));
    if (!rows.ok()) return rows.status();
    if (rows->size() != 1 || (*rows)[0].size() != 2) {
      return absl::InternalError("unexpected answer to the settings query");
    }
    out.value = (*rows)[0][1];
    out.reloaded = (*rows)[0][0] == "t";
    if (out.reloaded || !out.why_not.empty() || clock.Now() + poll >= bound) break;
    clock.SleepFor(poll);
  }
  if (!out.reloaded && out.why_not.empty()) {
    out.why_not = absl::StrCat("the server did not load its configuration again within ",
                               absl::FormatDuration(kReloadBound),
                               " (a file it cannot parse is left unapplied)");
  }
  return out;
}

}  // namespace walship::replica
