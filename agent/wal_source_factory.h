// wal_source_factory.h: the WAL source for an agent's --format.
//
// The one place that names every format. Each format lives in its own files
// (append_source.h; postgres/, whose postgres_format.h plugs PostgreSQL in)
// and reaches the agent only through the WalSource interface (wal_source.h):
// a new format adds its folder and one branch here.
#ifndef WALSHIP_AGENT_WAL_SOURCE_FACTORY_H_
#define WALSHIP_AGENT_WAL_SOURCE_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "agent/agent_options.h"
#include "agent/segment_catalog.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

// A new, not yet started source for `options.format` ("append" or
// "postgres"), publishing into `catalog`; both `sys` and `catalog` must
// outlive it. kInvalidArgument for any other format (AgentOptions::Validate
// refuses it first).
absl::StatusOr<std::unique_ptr<WalSource>> MakeWalSource(sys::SysCalls& sys,
                                                         const AgentOptions& options,
                                                         SegmentCatalog& catalog,
                                                         Clock& clock = DefaultClock());

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_WAL_SOURCE_FACTORY_H_
