#include "agent/wal_source_factory.h"

#include "agent/append_format.h"
#include "agent/etcd/etcd_format.h"
#include "agent/mysql/mysql_format.h"
#include "agent/postgres/postgres_format.h"
#include "agent/rocksdb/rocksdb_format.h"
#include "agent/sqlite/sqlite_format.h"

namespace walship::agent {

const WalFormatRegistry& KnownWalFormats() {
  static const WalFormatRegistry* const formats = [] {
    auto* r = new WalFormatRegistry();
    // The list: each format's registration, in the order of --help.
    RegisterAppendFormat(*r);
    RegisterPostgresFormat(*r);
    RegisterEtcdFormat(*r);
    RegisterRocksdbFormat(*r);
    RegisterMysqlBinlogFormat(*r);
    RegisterSqliteFormat(*r);
    return r;
  }();
  return *formats;
}

absl::StatusOr<std::unique_ptr<WalSource>> MakeWalSource(sys::SysCalls& sys,
                                                         const AgentOptions& options,
                                                         SegmentCatalog& catalog,
                                                         Clock& clock) {
  return KnownWalFormats().MakeSource(sys, options, catalog, clock);
}

}  // namespace walship::agent
