// wal_source.h: the seam between WAL formats and the shipping machinery.
//
// A WalSource watches a primary's WAL and publishes what may be shipped into
// a SegmentCatalog. Each format (append-only segment directories, PostgreSQL
// pg_wal, ...) is one implementation; shippers only ever see the catalog and
// read segment files from `wal_dir()`.
//
// Lifecycle: Start() once, then Stop() once (idempotent); the object must
// outlive neither its catalog nor its SysCalls. Methods are thread-safe.
#ifndef WALSHIP_AGENT_WAL_SOURCE_H_
#define WALSHIP_AGENT_WAL_SOURCE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/position.h"

namespace walship::agent {

class WalSource {
 public:
  virtual ~WalSource() = default;

  // Scans the WAL once synchronously (so the catalog is populated when Start
  // returns), then follows changes on a background thread.
  virtual absl::Status Start() = 0;
  virtual void Stop() = 0;

  // Identity of the WAL stream, stable across agent restarts: a replica
  // refuses to mix bytes of two streams.
  virtual std::string StreamId() const = 0;
  // "append", "postgres", ...
  virtual std::string FormatName() const = 0;
  // Directory holding the segment files named in the catalog.
  virtual std::string wal_dir() const = 0;

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
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_WAL_SOURCE_H_
