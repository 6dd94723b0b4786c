// stream_order.h: proves that one segment follows another with nothing
// missing between them.
//
// Shipping moves from a complete segment to the next one the catalog lists;
// a handshake may resume a replica whose complete segment the source has
// since removed at the oldest one it still has. Either way, a segment that
// existed between the two and is gone (removed by retention while a replica
// was down, recycled, deleted by hand) must stop shipping as a gap, naming
// it, never be skipped. Proof comes from the source's own naming rule when it
// has one (WalSource::Successor: PostgreSQL segment numbers and timeline
// switches, an append pattern's sequence number), else from the catalog's
// record of every name it has published (SegmentCatalog::PublishedAfter):
// the step is proven when the name the catalog published right after `prev`
// is `next`. When neither can tell (the agent started after `prev` was
// removed and names carry no sequence number), the step is refused as a gap
// that cannot be named: loud, never silent.
//
// Thread-safety: const and thread-safe; the source and catalog must outlive
// it.
#ifndef WALSHIP_AGENT_STREAM_ORDER_H_
#define WALSHIP_AGENT_STREAM_ORDER_H_

#include <string>

#include "absl/status/status.h"
#include "agent/segment_catalog.h"
#include "agent/wal_source.h"

namespace walship::agent {

class StreamOrder {
 public:
  StreamOrder(const WalSource& source, const SegmentCatalog& catalog)
      : source_(source), catalog_(catalog) {}

  // OK when `next` comes right after the complete segment `prev`.
  // Otherwise kFailedPrecondition with Reason::kGap, naming the first
  // missing segment when it is known.
  absl::Status CheckNext(const std::string& prev, const std::string& next) const;

 private:
  const WalSource& source_;
  const SegmentCatalog& catalog_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_STREAM_ORDER_H_
