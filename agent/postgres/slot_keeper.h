// slot_keeper.h: keeps the primary from recycling WAL a known replica needs.
//
// Holds a physical replication slot on the primary (created with
// immediately_reserve if missing) and, every `interval`, advances it with
// pg_replication_slot_advance to the start of the segment holding the oldest
// position any KNOWN replica has acknowledged as flushed: the agent needs a
// segment a replica holds whole until it has confirmed it (the shipper's
// check at its completion), which an idle primary may leave undone for long.
// PostgreSQL then keeps every segment from there on.
//
// Known replicas: those in the agent's replica positions file
// (replica_positions.h, in --state-dir), loaded at Start, plus every replica
// with a session since. A replica that is down across an agent restart is
// still known, so the slot never moves past its position because the others
// acknowledged. Each round:
//   1. takes every live session's flushed position into the table (a moved
//      position refreshes `seen` and un-releases a released replica);
//   2. the target is the minimum over the table's held replicas (positions
//      that map to no LSN, e.g. a history file, are skipped; a replica whose
//      live position does not map keeps its recorded one);
//   3. if the table changed, saves it, BEFORE advancing the slot: every
//      replica the slot was ever advanced for is on disk. A failed save is
//      logged (once per streak, with the file and the reason), counted, and
//      the slot is not advanced that round except to release WAL past the
//      bound (below);
//   4. advances the slot to the target if it is past the slot's restart_lsn.
// Stop() takes the live positions once more and saves them, so a clean
// restart knows every replica that had a session, even within its first
// round.
//
// Limits: after a crash of the agent (kill -9, host loss) the file is up to
// one round old: a replica whose first session began less than a round
// before the crash, and that is down when the agent comes back, is not
// known. A replica that has no position in a WAL segment yet (a new one
// durable at "(start)") is not recorded until it has one.
//
// The bound: a replica that vanished must not fill the primary's disk. When
// the slot would retain more than `max_retained_bytes` (primary flush
// position minus the target), the keeper warns at 80 % and, past the bound,
// releases WAL: it advances the slot so that the bound is retained, logs
// (error) every replica whose position falls before that, connected or only
// recorded, and marks them released in the table. A released replica holds
// no WAL until it acknowledges a new position, so a dead one is not held
// for forever; it gets a FAILED_PRECONDITION gap error at its next
// handshake if its segment is gone by then.
//
// Thread-safety: Start/Stop from one thread; the keeper runs on its own.
// RunOnce may be called from any thread (rounds serialize); stats() too.
#ifndef WALSHIP_AGENT_POSTGRES_SLOT_KEEPER_H_
#define WALSHIP_AGENT_POSTGRES_SLOT_KEEPER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/postgres/pg_client.h"
#include "agent/postgres/replica_positions.h"
#include "common/clock.h"
#include "common/pgwal/wal_names.h"
#include "common/position.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

struct SlotKeeperOptions {
  std::string conninfo;
  std::string slot = "walship";
  uint64_t max_retained_bytes = 4ull << 30;
  absl::Duration interval = absl::Seconds(1);
  // The agent's state directory: the replica positions file lives there.
  std::string state_dir;
  // The stream served; a positions file recorded for another stream is
  // forgotten at Start (with a warning naming its replicas).
  std::string stream_id;
  // Non-empty: recorded replicas not in it are forgotten at Start (they
  // would be refused at handshake anyway).
  std::vector<std::string> allowed_replicas;
};

struct ReplicaFlush {
  std::string name;
  Position flushed;
};

using PositionToLsnFn = std::function<absl::StatusOr<pg::Lsn>(const Position&)>;

// Takes every live position that maps to an LSN into `table`: a replica not
// in it is added; one whose position differs is updated (seen = `now`, whole
// seconds) and un-released. True if `table` changed.
bool TakeLivePositions(ReplicaTable& table, const std::vector<ReplicaFlush>& live,
                       const PositionToLsnFn& to_lsn, absl::Time now);

// One round's decision (pure: no I/O, so tests can drive it).
struct SlotPlan {
  pg::Lsn target = 0;  // advance the slot here if past its restart_lsn
  uint64_t retained = 0;  // flush minus the held replicas' minimum
  bool over_bound = false;  // WAL was released past max_retained_bytes
  // Replicas released this round: "NAME at LSN" (and why, if not connected).
  std::vector<std::string> released;
  bool changed = false;  // `table` changed: save it before advancing
};

// Takes `live` into `table` (TakeLivePositions) and plans the round for a
// slot at `restart` on a primary flushed to `flush`; `bound` 0 means
// unbounded. With no held replica the target is `restart` (hold). Marks the
// replicas it releases in `table`.
SlotPlan PlanSlotRound(ReplicaTable& table, const std::vector<ReplicaFlush>& live,
                       const PositionToLsnFn& to_lsn, pg::Lsn restart, pg::Lsn flush,
                       uint64_t bound, absl::Time now);

class SlotKeeper {
 public:
  // `replicas` lists every live session's acknowledged flushed position;
  // `to_lsn` maps a position to an LSN (an error for non-segment positions,
  // which are skipped). `sys` must outlive the keeper.
  SlotKeeper(sys::SysCalls& sys, SlotKeeperOptions options,
             std::function<std::vector<ReplicaFlush>()> replicas, PositionToLsnFn to_lsn,
             Clock& clock = DefaultClock());
  ~SlotKeeper();

  // Loads the replica positions file (its errors, with the file named, stop
  // the start: kDataLoss for a damaged file), saves it back (so a state
  // directory that cannot be written fails here, not later), then creates
  // the slot if needed: kFailedPrecondition when it cannot (e.g.
  // max_replication_slots = 0), with PostgreSQL's message.
  absl::Status Start();
  // Stops the thread, then takes the live positions into the table and
  // saves it once more (a failure is logged; the file last saved stands).
  void Stop();

  // One round (also called by the thread); exposed for tests.
  absl::Status RunOnce();

  struct Stats {
    uint64_t save_failures = 0;  // failed saves of the positions file
    size_t held = 0;             // known replicas the slot holds WAL for
    size_t released = 0;         // known replicas released past the bound
  };
  // Lock-free: as of the end of the last round (or Start).
  Stats stats() const;

 private:
  absl::Status LoadTable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves the table if it changed since the last save; logs a failure once
  // per streak. OK when nothing had to be saved.
  absl::Status SaveIfDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishStats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock& clock_;

  const SlotKeeperOptions options_;
  std::function<std::vector<ReplicaFlush>()> replicas_;
  PositionToLsnFn to_lsn_;
  PgClient pg_;
  ReplicaPositionStore store_;
  std::thread thread_;
  absl::Notification stop_;

  mutable absl::Mutex mu_;
  ReplicaTable table_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;  // table_ differs from the file
  bool save_failing_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  // Stats, published for the metrics collector.
  std::atomic<uint64_t> save_failures_{0};
  std::atomic<size_t> held_{0};
  std::atomic<size_t> released_{0};
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_SLOT_KEEPER_H_
