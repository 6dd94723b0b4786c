// gate_config.h: the promotion gate's last step, the configuration the
// standby will be promoted with.
//
// An HA manager writes a node's configuration file and asks PostgreSQL to
// reload it, but not always at a moment PostgreSQL can: Patroni 3.0 writes
// postgresql.conf and skips the reload when the change arrives while its
// PostgreSQL is still starting (a replica being created). That node then
// runs on with the old synchronous_standby_names, and promoted, it
// acknowledges commits without waiting for walship: the zero-loss promise
// broken without a word. The gate therefore reloads the standby's
// configuration (pg_reload_conf()) before the promotion, waits until a new
// session sees it loaded (pg_conf_load_time() past the time before), and
// reads the synchronous_standby_names the primary will run with; given a
// name that must be synchronous (--synchronous-name), a value that does not
// name it (nor '*') refuses the promotion.
#ifndef WALSHIP_REPLICA_GATE_CONFIG_H_
#define WALSHIP_REPLICA_GATE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/postgres/pg_client.h"
#include "common/clock.h"

namespace walship::replica {

// Whether a synchronous_standby_names value lists `name` (or '*') among its
// standbys, as PostgreSQL compares them: case-insensitively, double quotes
// removed. Handles the three forms: a list, FIRST/ANY n (list), n (list).
bool SyncStandbyNamesInclude(absl::string_view value, absl::string_view name);

// What the standby runs with after ReloadAndReadSyncNames.
struct SyncNames {
  std::string value;      // current_setting('synchronous_standby_names')
  bool reloaded = false;  // a new session saw the configuration loaded again
  std::string why_not;    // when not reloaded: why (the reload refused, timed out)
};

// How long the reload may take to show before the gate goes on with the
// settings the standby runs with.
inline constexpr absl::Duration kReloadBound = absl::Seconds(5);

// Asks the server behind `pg` to reload its configuration (pg_reload_conf())
// and returns the synchronous_standby_names a session started afterwards
// sees: the value once pg_conf_load_time() has moved past the time before
// the reload, or, when it has not within kReloadBound (or `deadline`, if
// sooner; polled every `poll`) or the reload was refused (no privilege),
// the current value with `reloaded` false and the reason. An error only
// when the server cannot be queried at all.
absl::StatusOr<SyncNames> ReloadAndReadSyncNames(Clock& clock, agent::PgClient& pg,
                                                 absl::Time deadline, absl::Duration poll);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_GATE_CONFIG_H_
