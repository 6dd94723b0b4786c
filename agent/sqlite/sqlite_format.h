// sqlite_format.h: --format=sqlite-wal, which refuses at start-up and says
// why and what works instead (sqlite_wal.h). It exists so that an operator
// who asks for SQLite gets that answer, never a silent stall.
#ifndef WALSHIP_AGENT_SQLITE_SQLITE_FORMAT_H_
#define WALSHIP_AGENT_SQLITE_SQLITE_FORMAT_H_

#include "agent/wal_format.h"

namespace walship::agent {

// Adds the refusing SQLite format ("sqlite-wal") to `registry`.
void RegisterSqliteFormat(WalFormatRegistry& registry);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SQLITE_SQLITE_FORMAT_H_
