// wal_source_factory.h: the WAL formats built into walship-agent, and the
// source for an agent's --format.
//
// KnownWalFormats() is the one list of formats: each lives in its own files
// (append_format.h; postgres/postgres_format.h) and registers itself there
// (wal_format.h). A new format adds its folder and one line to the list in
// wal_source_factory.cc; the core never names it.
#ifndef WALSHIP_AGENT_WAL_SOURCE_FACTORY_H_
#define WALSHIP_AGENT_WAL_SOURCE_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "agent/agent_options.h"
#include "agent/segment_catalog.h"
#include "agent/wal_format.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

// Every format walship-agent knows, in the order of --help: the default
// ("append") first. Built on first use; lives for the process.
const WalFormatRegistry& KnownWalFormats();

// KnownWalFormats().MakeSource(...): a new, not yet started source for
// `options.format`, publishing into `catalog`; `sys`, `options`, `catalog`
// and `clock` must outlive it. kInvalidArgument for a format not known
// (WalFormatRegistry::Validate refuses it first).
absl::StatusOr<std::unique_ptr<WalSource>> MakeWalSource(sys::SysCalls& sys,
                                                         const AgentOptions& options,
                                                         SegmentCatalog& catalog,
                                                         Clock& clock = DefaultClock());

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_WAL_SOURCE_FACTORY_H_
