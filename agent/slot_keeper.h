// slot_keeper.h: keeps the primary from recycling WAL no replica has flushed.
//
// Holds a physical replication slot on the primary (created with
// immediately_reserve if missing) and, every `interval`, advances it with
// pg_replication_slot_advance to the oldest position any known replica has
// acknowledged as flushed. PostgreSQL then keeps every segment from there on.
//
// The bound: a replica that vanished must not fill the primary's disk. When
// the slot retains more than `max_retained_bytes` (primary flush position
// minus the slot's restart_lsn), the keeper logs an alert at 80 % and, past
// the bound, releases WAL: it advances the slot so that at most the bound is
// retained, logging loudly which replicas are now at risk of a gap. A
// replica that falls behind retention gets a clear FAILED_PRECONDITION gap
// error at its next handshake.
//
// Thread-safety: Start/Stop from one thread; the keeper runs on its own.
#ifndef WALSHIP_AGENT_SLOT_KEEPER_H_
#define WALSHIP_AGENT_SLOT_KEEPER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/pg_client.h"
#include "common/pgwal/wal_names.h"
#include "common/position.h"

namespace walship::agent {

struct SlotKeeperOptions {
  std::string conninfo;
  std::string slot = "walship";
  uint64_t max_retained_bytes = 4ull << 30;
  absl::Duration interval = absl::Seconds(1);
};

struct ReplicaFlush {
  std::string name;
  Position flushed;
};

class SlotKeeper {
 public:
  // `replicas` lists every known replica's acknowledged flushed position;
  // `to_lsn` maps a position to an LSN (an error for non-segment positions,
  // which are skipped).
  SlotKeeper(SlotKeeperOptions options, std::function<std::vector<ReplicaFlush>()> replicas,
             std::function<absl::StatusOr<pg::Lsn>(const Position&)> to_lsn);
  ~SlotKeeper();

  // Creates the slot if needed. kFailedPrecondition when it cannot (e.g.
  // max_replication_slots = 0), with PostgreSQL's message.
  absl::Status Start();
  void Stop();

  // One round (also called by the thread); exposed for tests.
  absl::Status RunOnce();

 private:
  const SlotKeeperOptions options_;
  std::function<std::vector<ReplicaFlush>()> replicas_;
  std::function<absl::StatusOr<pg::Lsn>(const Position&)> to_lsn_;
  PgClient pg_;
  std::thread thread_;
  absl::Notification stop_;
  bool warned_ = false;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_SLOT_KEEPER_H_
