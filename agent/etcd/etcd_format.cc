#include "agent/etcd/etcd_format.h"

#include <memory>

#include "agent/append_format.h"
#include "agent/etcd/etcd_wal.h"

namespace walship::agent {

void RegisterEtcdFormat(WalFormatRegistry& registry) {
  RegisterScannedFormat(
      registry,
      ScannedFormat{
          "etcd",
          "etcd 3.4's member/wal directory: each .wal file is shipped up to the end of its "
          "last valid record (length and CRC chain checked), never its preallocated zeros; "
          ".tmp files are skipped; the replica's copy of a file is its valid records.",
          etcd::kSegmentPattern,
          [] { return std::make_unique<etcd::EtcdRecordScanner>(); }});
}

}  // namespace walship::agent
