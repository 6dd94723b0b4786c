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

// Reloads the configuration of the server behind `pg` and returns the
// synchronous_standby_names a session started after the reload sees.
// kDeadlineExceeded if the reload is not seen by `deadline` (polled every
// `poll`); the server's own error (e.g. permission denied for
// pg_reload_conf) otherwise.
absl::StatusOr<std::string> ReloadAndReadSyncNames(Clock& clock, agent::PgClient& pg,
                                                   absl::Time deadline, absl::Duration poll);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_GATE_CONFIG_H_
