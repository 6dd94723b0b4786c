// rocksdb_format.h: --format=rocksdb, RocksDB's write-ahead log
// (rocksdb_log.h) followed by the append source with the RocksDB record
// scanner: only NNNNNN.log files are segments (a database directory with its
// SST, MANIFEST, CURRENT, LOG and OPTIONS files works as it is), each shipped
// up to the end of its last complete record, never a recycled file's old
// records.
#ifndef WALSHIP_AGENT_ROCKSDB_ROCKSDB_FORMAT_H_
#define WALSHIP_AGENT_ROCKSDB_ROCKSDB_FORMAT_H_

#include "agent/wal_format.h"

namespace walship::agent {

// Adds the RocksDB format ("rocksdb") to `registry`.
void RegisterRocksdbFormat(WalFormatRegistry& registry);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_ROCKSDB_ROCKSDB_FORMAT_H_
