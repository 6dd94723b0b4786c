#include "agent/rocksdb/rocksdb_format.h"

#include <memory>

#include "agent/append_format.h"
#include "agent/rocksdb/rocksdb_log.h"

namespace walship::agent {

void RegisterRocksdbFormat(WalFormatRegistry& registry) {
  RegisterScannedFormat(
      registry,
      ScannedFormat{
          "rocksdb",
          "RocksDB's write-ahead log: only NNNNNN.log files are segments (the database "
          "directory or its wal_dir); each is shipped up to the end of its last complete "
          "record (block framing and CRC checked), never a recycled file's old records; logs "
          "RocksDB moved to archive/ (WAL_ttl_seconds) are followed there.",
          rocksdb::kSegmentPattern,
          [] { return std::make_unique<rocksdb::RocksdbRecordScanner>(); },
          "archive"});
}

}  // namespace walship::agent
