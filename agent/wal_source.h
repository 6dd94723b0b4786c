// wal_source.h: the seam between WAL formats and the shipping machinery.
//
// A WalSource watches a primary's WAL and publishes what may be shipped into
// a SegmentCatalog. Each format (append-only segment directories, PostgreSQL
// pg_wal, ...) is one implementation; shippers only ever see the catalog and
// read segment files from `wal_dir()`.
//
// A source may also act on the agent's replicas (PostgreSQL reports their
// positions to the primary and keeps WAL for them in a replication slot) and
// export metrics of its own: the hooks at the end, which default to nothing.
// The agent builds its source through its format's registration
// (wal_format.h) and never names a format.
//
// Lifecycle: DeclareMetrics() and FollowReplicas() once each, then Start()
// once, then StopFollowingReplicas() and Stop() once each (idempotent); the
// object must outlive neither its catalog nor its SysCalls. Methods are
// thread-safe.
#ifndef WALSHIP_AGENT_WAL_SOURCE_H_
#define WALSHIP_AGENT_WAL_SOURCE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/segment_locator.h"
#include "common/segment_patch.h"
#include "common/metrics.h"
#include "common/position.h"

namespace walship::agent {

// A replica as the agent knows it (WalSource::FollowReplicas).
struct ReplicaProgress {
  std::string name;
  Position written;  // the end of what it has written
  Position flushed;  // the end of what it has made durable
};

// How a source reaches the agent's replicas. Both are callable from any
// thread until the source's Stop() returns.
struct ReplicaLink {
  // Every replica with a session since the agent started, with its positions.
  std::function<std::vector<ReplicaProgress>()> replicas;
  // How soon every replica must acknowledge new positions (zero: at once),
  // now and in every session created later. Until a source calls it,
  // replicas acknowledge at the agent's --ack-interval.
  std::function<void(absl::Duration)> set_ack_pacing;
};

// What a source holds back of its open segment (WalSource::Hold).
struct SourceHold {
  std::string segment;     // the open segment
  uint64_t valid_end = 0;  // its shippable end
  uint64_t file_size = 0;  // its size on disk
  std::string reason;      // "none", "partial_record", "preallocated", ...
};

class WalSource {
 public:
  virtual ~WalSource() = default;

  // Scans the WAL once synchronously (so the catalog is populated when Start
  // returns), then follows changes on a background thread.
  virtual absl::Status Start() = 0;
  virtual void Stop() = 0;
  // Asks a Start() under way in another thread to give up soon (it then
  // returns kCancelled): a signal during start-up. Thread-safe; a source
  // whose Start() never waits need not override it.
  virtual void CancelStart() {}

  // Identity of the WAL stream, stable across agent restarts: a replica
  // refuses to mix bytes of two streams.
  virtual std::string StreamId() const = 0;
  // "append", "postgres", ...
  virtual std::string FormatName() const = 0;
  // Directory holding the segment files named in the catalog.
  virtual std::string wal_dir() const = 0;
  // Where readers find a segment's file: wal_dir(), and for formats whose
  // database moves old segments elsewhere under the same name (RocksDB's
  // archive/), those directories after it (segment_locator.h).
  virtual SegmentLocator Segments() const { return SegmentLocator(wal_dir()); }

  // For a replica durable at `durable` (`prefix_crc32c`: the CRC32C of its
  // bytes [0, durable.offset)) whose segment is no longer in the catalog:
  // where the stream continues when that segment was superseded without
  // loss (PostgreSQL: a timeline switch inside it at or after the replica's
  // position, whose successor segment holds the same bytes up to there);
  // nullopt when this source knows no continuation (the caller then reports
  // a gap, or waits); or an error with a reason (common/reason.h) when the
  // source can prove the position divergent (kDivergent) or cannot check it
  // yet (kNotReady).
  virtual absl::StatusOr<std::optional<Position>> RedirectMissing(
      const Position& durable, uint32_t prefix_crc32c) const {
    (void)durable;
    (void)prefix_crc32c;
    return std::optional<Position>();
  }

  // The name of the segment that must come right after the complete segment
  // `name` in this stream, when names alone tell (PostgreSQL: the next
  // segment number of the timeline, or at a switch point the next timeline's
  // history file; append: the next sequence number when the segment pattern
  // declares one), else nullopt. Shippers and handshakes check every step
  // from one segment to the next against it (or, for nullopt, against the
  // names the catalog has published), so a segment missing between two is a
  // gap, never skipped.
  virtual std::optional<std::string> Successor(const std::string& name) const {
    (void)name;
    return std::nullopt;
  }

  // OK while the source can serve handshakes. kUnavailable while it cannot
  // yet but may later, with why (its PostgreSQL is in recovery, not a
  // primary; it has not finished its first scan): replicas retry, and keep
  // every byte they hold.
  virtual absl::Status Readiness() const { return absl::OkStatus(); }

  // The timeline the source serves (PostgreSQL: its primary's current
  // timeline, the last one seen while it is in recovery or down), 0 for
  // formats without timelines or before the first scan. Handshakes and
  // Status report it, so that a replica with several agents can refuse one
  // whose timeline is older than the newest it holds.
  virtual uint32_t Timeline() const { return 0; }

  // For formats that find a segment's valid end from its content
  // (record_scanner.h): the open segment's valid end, file size and why the
  // bytes between them are not shipped; nullopt for other formats or before
  // the first scan. Thread-safe, cheap.
  virtual std::optional<SourceHold> Hold() const { return std::nullopt; }

  // The bits of every segment the database may rewrite in place after they
  // were shipped (common/segment_patch.h: MariaDB's in-use flag); empty for
  // logs that only grow. Handshakes and shippers let only these differ
  // between the replica's bytes and the source's, and each Checkpoint
  // carries their final values; a replica that cannot apply such a patch is
  // refused. Constant for the source's lifetime.
  virtual std::vector<MutableBits> MutableBytes() const { return {}; }

  // Hooks for a source that acts on the agent's replicas or exports metrics.

  // Before Start(): declares the source's own metric families and
  // collectors in `metrics`; the caller keeps the source alive for as long
  // as `metrics` may render.
  virtual void DeclareMetrics(MetricsRegistry& metrics) { (void)metrics; }
  // Before Start(): how to reach the agent's replicas (see ReplicaLink).
  virtual void FollowReplicas(ReplicaLink link) { (void)link; }
  // After a replica took a new acknowledgement, on the thread reading its
  // control stream: must be cheap and must not block.
  virtual void OnReplicaAcknowledged() {}
  // At shutdown, before the agent ends its sessions: the source's last look
  // at the replicas while they are all listed (PostgreSQL: the slot keeper
  // records their positions and stops).
  virtual void StopFollowingReplicas() {}
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_WAL_SOURCE_H_
