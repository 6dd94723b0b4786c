#include "agent/slot_keeper.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "common/thread_name.h"

namespace walship::agent {

SlotKeeper::SlotKeeper(SlotKeeperOptions options,
                       std::function<std::vector<ReplicaFlush>()> replicas,
                       std::function<absl::StatusOr<pg::Lsn>(const Position&)> to_lsn)
    : options_(std::move(options)),
      replicas_(std::move(replicas)),
      to_lsn_(std::move(to_lsn)),
      pg_(options_.conninfo) {}

SlotKeeper::~SlotKeeper() { Stop(); }

absl::Status SlotKeeper::Start() {
  const std::string slot = SqlLiteral(options_.slot);
  auto rows = pg_.Query(absl::StrCat(
      "SELECT count(*) FROM pg_replication_slots WHERE slot_name = ", slot));
  if (!rows.ok()) return rows.status();
  if ((*rows)[0][0] == "0") {
    auto created = pg_.Query(
        absl::StrCat("SELECT pg_create_physical_replication_slot(", slot, ", true)"));
    if (!created.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create replication slot ", options_.slot, ": ", created.status().message()));
    }
    spdlog::info("created physical replication slot {} to keep unshipped WAL", options_.slot);
  } else {
    spdlog::info("using physical replication slot {}", options_.slot);
  }
  thread_ = std::thread([this] {
    NameThisThread("ws-slot-keeper");
    while (!stop_.WaitForNotificationWithTimeout(options_.interval)) {
      absl::Status s = RunOnce();
      if (!s.ok()) spdlog::debug("slot keeper: {}", s.ToString());
    }
  });
  return absl::OkStatus();
}

void SlotKeeper::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

absl::Status SlotKeeper::RunOnce() {
  const std::string slot = SqlLiteral(options_.slot);
  auto rows = pg_.Query(absl::StrCat(
      "SELECT restart_lsn, pg_current_wal_flush_lsn() FROM pg_replication_slots "
      "WHERE slot_name = ",
      slot));
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    return absl::FailedPreconditionError(absl::StrCat("replication slot ", options_.slot,
                                                      " disappeared"));
  }
  auto restart = pg::ParseLsn((*rows)[0][0]);
  auto flush = pg::ParseLsn((*rows)[0][1]);
  if (!restart.ok() || !flush.ok()) return absl::InternalError("unparsable slot LSNs");

  // The oldest acknowledged position of any known replica.
  pg::Lsn target = *flush;
  std::vector<std::string> laggards;
  bool any = false;
  for (const ReplicaFlush& r : replicas_()) {
    auto lsn = to_lsn_(r.flushed);
    if (!lsn.ok()) continue;
    any = true;
    target = std::min(target, *lsn);
  }
  if (!any) target = *restart;  // nobody to keep WAL for yet: hold where we are

  const uint64_t bound = options_.max_retained_bytes;
  const uint64_t retained = *flush > target ? *flush - target : 0;
  if (bound > 0 && retained > bound) {
    pg::Lsn released = *flush - bound;
    for (const ReplicaFlush& r : replicas_()) {
      auto lsn = to_lsn_(r.flushed);
      if (lsn.ok() && *lsn < released) {
        laggards.push_back(absl::StrCat(r.name, " at ", pg::FormatLsn(*lsn)));
      }
    }
    spdlog::error(
        "WAL retention bound exceeded: replicas would keep {} bytes on the primary, more than "
        "--max-retained-bytes={}; releasing WAL before {} -- replica(s) {} may need a new "
        "base backup if they cannot catch up",
        retained, bound, pg::FormatLsn(released),
        laggards.empty() ? std::string("(none connected)") : absl::StrJoin(laggards, ", "));
    target = released;
  } else if (bound > 0 && retained > bound / 10 * 8) {
    if (!warned_) {
      spdlog::warn("WAL retained for replicas is {} bytes, over 80% of --max-retained-bytes={}",
                   retained, bound);
    }
    warned_ = true;
  } else {
    warned_ = false;
  }
  if (target > *restart) {
    auto adv = pg_.Query(absl::StrCat("SELECT pg_replication_slot_advance(", slot, ", ",
                                      SqlLiteral(pg::FormatLsn(target)), "::pg_lsn)"));
    if (!adv.ok()) return adv.status();
  }
  return absl::OkStatus();
}

}  // namespace walship::agent
