// segment_catalog.h: the agent's view of which WAL bytes may be shipped.
//
// A source (append-mode tailer, PostgreSQL flush-LSN follower, ...) publishes
// the list of segments in WAL order, each with the number of bytes that are
// safe to ship ("shippable": durable on the primary and validated) and
// whether the segment is complete (no byte will ever be added). Shippers read
// snapshots and wait for changes. Data flows one way: source -> catalog ->
// shippers; the catalog never calls back into a source.
//
// A shipper may also listen (CatalogListener): a publication it claims is
// handed to it on the publisher's thread, right after Publish has made it
// visible, and it does not wake the shipper's own thread when the listener
// says it has nothing left to do at that version. One thread switch fewer
// per publication for a replica that keeps up.
//
// Thread-safety: all methods are thread-safe. Snapshots are immutable and
// shared; holding one never blocks Publish.
#ifndef WALSHIP_AGENT_SEGMENT_CATALOG_H_
#define WALSHIP_AGENT_SEGMENT_CATALOG_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/position.h"

namespace walship::agent {

struct SegmentInfo {
  std::string name;
  // Bytes [0, shippable) may be shipped.
  uint64_t shippable = 0;
  // True once no further bytes will be appended; `shippable` is then the
  // segment's final length.
  bool complete = false;
};

struct CatalogSnapshot {
  uint64_t version = 0;
  // Sorted by name (WAL order).
  std::shared_ptr<const std::vector<SegmentInfo>> segments;
  // Non-OK once the source has failed (e.g. a segment shrank); shipping must
  // stop with this status.
  absl::Status source_status;
  // When this snapshot was published.
  absl::Time published;

  // Index of `name` in `segments`, or -1.
  int Find(const std::string& name) const;
  // The end of shippable WAL: (last segment, its shippable bytes).
  Position End() const;
  // Bytes from `from` to End(); 0 when `from` is at or past the end.
  uint64_t BytesAfter(const Position& from) const;
};

// See the file comment. Registered with AddListener; must outlive its
// registration.
class CatalogListener {
 public:
  virtual ~CatalogListener() = default;
  // Called by Publish with the catalog's lock held: true to take this
  // publication (Pump follows). Must not block or call the catalog.
  virtual bool Claim() = 0;
  // After a true Claim, on the publisher's thread with no catalog lock held:
  // act on `snap`, then call `catalog.Release()` once, as its last use of
  // the listener's own state.
  virtual void Pump(const CatalogSnapshot& snap) = 0;
};

class SegmentCatalog {
 public:
  // `published` times are read from `clock`.
  explicit SegmentCatalog(Clock& clock = DefaultClock());
  SegmentCatalog(const SegmentCatalog&) = delete;
  SegmentCatalog& operator=(const SegmentCatalog&) = delete;

  // Replaces the view and wakes waiters. `segments` must be sorted by name;
  // a segment's shippable count must never decrease (the source reports that
  // as an error instead). Then pumps the listeners that claimed it, on this
  // thread, before returning.
  void Publish(std::vector<SegmentInfo> segments);
  // Marks the source failed; every waiter wakes and sees the status.
  void Fail(absl::Status status);
  // Wakes all waiters permanently; WaitForChange returns at once afterwards.
  void Shutdown();

  CatalogSnapshot Get() const;
  // When the byte just after `p` became shippable (the first publication
  // whose end was past `p`), or nullopt if no byte after `p` is shippable.
  // Used for lag in time: the age of the oldest byte a replica lacks.
  std::optional<absl::Time> ShippableSince(const Position& p) const;
  // Blocks until the version differs from `seen_version`, `deadline` passes
  // or Shutdown is called. Returns false only on shutdown.
  bool WaitForChange(uint64_t seen_version, absl::Time deadline) const;

  // The name published right after `name` among every name this catalog
  // has ever published (in name order), or nullopt when `name` was never
  // published or nothing after it has been. The record of what the source
  // showed, for proving that no segment was skipped where names alone cannot
  // tell (stream_order.h); a name stays in it after the source removes it.
  std::optional<std::string> PublishedAfter(const std::string& name) const;

  // Listeners. RemoveListener waits for a Pump of `l` that is still
  // running to Release(); `l` may be destroyed once it returns.
  void AddListener(CatalogListener* l);
  void RemoveListener(CatalogListener* l);
  // Ends a Pump of `l` at `version`: `caught_up` when `l` has nothing left
  // to do at that version, so that WaitForChange(l, ...) sleeps on.
  void Release(CatalogListener* l, uint64_t version, bool caught_up);
  // WaitForChange for `l`'s own thread: not woken by a publication `l`
  // claimed, nor by one it pumped and caught up with. A null or unregistered
  // `l` waits as the plain WaitForChange.
  bool WaitForChange(const CatalogListener* l, uint64_t seen_version, absl::Time deadline) const;

 private:
  struct ListenerState {
    bool claimed = false;
    uint64_t caught_up = 0;  // the version its last Pump caught up with
  };
  // `l`'s entry in listeners_, or null.
  ListenerState* StateOf(const CatalogListener* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const ListenerState* StateOf(const CatalogListener* l) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Clock& clock_;
  mutable absl::Mutex mu_;
  CatalogSnapshot current_ ABSL_GUARDED_BY(mu_);
  // (end of shippable WAL, when it was published), oldest first; bounded.
  std::deque<std::pair<Position, absl::Time>> ends_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Every name ever published (PublishedAfter).
  std::set<std::string> ever_published_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<CatalogListener*, ListenerState>> listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SEGMENT_CATALOG_H_
