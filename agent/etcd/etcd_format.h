// etcd_format.h: --format=etcd, etcd 3.4's member/wal directory (etcd_wal.h)
// followed by the append source with the etcd record scanner: each .wal file
// is shipped up to the end of its last valid record, never its preallocated
// zeros; .tmp files are skipped.
#ifndef WALSHIP_AGENT_ETCD_ETCD_FORMAT_H_
#define WALSHIP_AGENT_ETCD_ETCD_FORMAT_H_

#include "agent/wal_format.h"

namespace walship::agent {

// Adds the etcd format ("etcd") to `registry`.
void RegisterEtcdFormat(WalFormatRegistry& registry);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_ETCD_ETCD_FORMAT_H_
