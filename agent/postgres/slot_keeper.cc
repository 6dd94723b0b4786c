#include "agent/postgres/slot_keeper.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/thread_name.h"
#include "spdlog/spdlog.h"

namespace walship::agent {
namespace {

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string Names(const ReplicaTable& table) {
  std::vector<std::string> names;
  for (const auto& [name, r] : table.replicas) names.push_back(name);
  return names.empty() ? std::string("(none)") : absl::StrJoin(names, ", ");
}

}  // namespace

bool TakeLivePositions(ReplicaTable& table, const std::vector<ReplicaFlush>& live,
                       const PositionToLsnFn& to_lsn, absl::Time now) {
  const absl::Time seen = absl::FromUnixSeconds(absl::ToUnixSeconds(now));
  bool changed = false;
  for (const ReplicaFlush& r : live) {
    if (!to_lsn(r.flushed).ok()) continue;  // keeps its recorded position, if any
    auto [it, inserted] = table.replicas.try_emplace(r.name);
    KnownReplica& k = it->second;
    if (!inserted && k.flushed == r.flushed) continue;  // a released one stays released
    k.flushed = r.flushed;
    k.seen = seen;
    k.released = false;
    changed = true;
  }
  return changed;
}

SlotPlan PlanSlotRound(ReplicaTable& table, const std::vector<ReplicaFlush>& live,
                       const PositionToLsnFn& to_lsn, pg::Lsn restart, pg::Lsn flush,
                       uint64_t bound, absl::Time now) {
  SlotPlan plan;
  plan.changed = TakeLivePositions(table, live, to_lsn, now);
  std::set<std::string> with_session;
  for (const ReplicaFlush& r : live) with_session.insert(r.name);

  // The start of the oldest segment any replica still held for is in: until
  // the shipper has confirmed a segment at its completion (an idle primary
  // may leave a replica at its very end for long) the agent needs the file.
  pg::Lsn target = flush;
  bool any = false;
  for (const auto& [name, k] : table.replicas) {
    if (k.released) continue;
    absl::StatusOr<pg::Lsn> lsn = to_lsn(Position{k.flushed.segment, 0});
    if (!lsn.ok()) continue;
    any = true;
    target = std::min(target, *lsn);
  }
  if (!any) target = restart;  // nobody to keep WAL for yet: hold where we are

  plan.retained = flush > target ? flush - target : 0;
  if (bound > 0 && plan.retained > bound) {
    const pg::Lsn released_at = flush - bound;
    for (auto& [name, k] : table.replicas) {
      if (k.released) continue;
      absl::StatusOr<pg::Lsn> lsn = to_lsn(k.flushed);
      if (!lsn.ok() || *lsn >= released_at) continue;
      k.released = true;
      plan.changed = true;
      plan.released.push_back(absl::StrCat(
          name, " at ", pg::FormatLsn(*lsn),
          with_session.count(name) > 0
              ? std::string()
              : absl::StrCat(" (not connected since the agent started; last acknowledged ",
                             TimeText(k.seen), ")")));
    }
    plan.over_bound = true;
    target = released_at;
  }
  plan.target = target;
  return plan;
}

SlotKeeper::SlotKeeper(sys::SysCalls& sys, SlotKeeperOptions options,
                       std::function<std::vector<ReplicaFlush>()> replicas,
                       PositionToLsnFn to_lsn, Clock& clock)
    : clock_(clock),
      options_(std::move(options)),
      replicas_(std::move(replicas)),
      to_lsn_(std::move(to_lsn)),
      pg_(options_.conninfo),
      store_(sys, options_.state_dir) {}

SlotKeeper::~SlotKeeper() { Stop(); }

absl::Status SlotKeeper::LoadTable() {
  WALSHIP_RETURN_IF_ERROR(store_.EnsureDir());
  WALSHIP_ASSIGN_OR_RETURN(ReplicaTable table, store_.Load());
  if (!table.stream_id.empty() && table.stream_id != options_.stream_id) {
    spdlog::warn("{} records replicas of stream {}, but this agent serves stream {}: "
                 "forgetting replica(s) {}",
                 store_.path(), table.stream_id, options_.stream_id, Names(table));
    table.replicas.clear();
  }
  const std::vector<std::string>& allowed = options_.allowed_replicas;
  for (auto it = table.replicas.begin(); it != table.replicas.end();) {
    if (allowed.empty() || std::find(allowed.begin(), allowed.end(), it->first) != allowed.end()) {
      ++it;
      continue;
    }
    spdlog::info("forgetting replica {} recorded in {}: it is not in --allow-replicas",
                 it->first, store_.path());
    it = table.replicas.erase(it);
  }
  table.stream_id = options_.stream_id;
  for (const auto& [name, r] : table.replicas) {
    absl::StatusOr<pg::Lsn> lsn = to_lsn_(r.flushed);
    const std::string at =
        lsn.ok() ? absl::StrCat(pg::FormatLsn(*lsn), " (", r.flushed.ToString(), ")")
                 : r.flushed.ToString();
    if (r.released) {
      spdlog::warn("replica {} (recorded in {}, last acknowledged {} at {}) was released past "
                   "--max-retained-bytes: no WAL is held for it until it acknowledges a new "
                   "position",
                   name, store_.path(), at, TimeText(r.seen));
    } else if (!lsn.ok()) {
      spdlog::warn("replica {} recorded in {} at {}: that is no position in this stream's WAL "
                   "({}); no WAL is held for it until it acknowledges a new position",
                   name, store_.path(), at, std::string(lsn.status().message()));
    } else {
      spdlog::info("holding WAL for replica {} from {} (recorded in {}, last acknowledged {})",
                   name, at, store_.path(), TimeText(r.seen));
    }
  }
  table_ = std::move(table);
  return absl::OkStatus();
}

absl::Status SlotKeeper::Start() {
  {
    absl::MutexLock lock(&mu_);
    WALSHIP_RETURN_IF_ERROR(LoadTable());
    PublishStats();
    // Written back at once: a state directory the agent cannot write stops
    // it here rather than when a replica first needs the record.
    if (absl::Status s = store_.Save(table_); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot record replica positions in ",
                                                 store_.path(), ": ", s.message()));
    }
  }
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
  if (!thread_.joinable()) return;
  thread_.join();
  // The positions taken since the last round, so that a restart knows every
  // replica that had a session, even one that came and went within a round.
  absl::MutexLock lock(&mu_);
  dirty_ = TakeLivePositions(table_, replicas_(), to_lsn_, clock_.Now()) || dirty_;
  (void)SaveIfDirty();  // a failure is logged there; the last saved file stands
}

void SlotKeeper::PublishStats() {
  size_t released = 0;
  for (const auto& [name, r] : table_.replicas) released += r.released ? 1 : 0;
  held_.store(table_.replicas.size() - released);
  released_.store(released);
}

SlotKeeper::Stats SlotKeeper::stats() const {
  return Stats{save_failures_.load(), held_.load(), released_.load()};
}

absl::Status SlotKeeper::SaveIfDirty() {
  if (!dirty_) return absl::OkStatus();
  absl::Status s = store_.Save(table_);
  if (s.ok()) {
    if (save_failing_) spdlog::info("replica positions recorded in {} again", store_.path());
    dirty_ = false;
    save_failing_ = false;
    return s;
  }
  save_failures_.fetch_add(1);
  if (!save_failing_) {
    spdlog::error("cannot record replica positions in {}: {}; the replication slot is not "
                  "advanced until they are recorded (WAL past --max-retained-bytes is still "
                  "released)",
                  store_.path(), s.ToString());
  }
  save_failing_ = true;
  return s;
}

absl::Status SlotKeeper::RunOnce() {
  absl::MutexLock lock(&mu_);
  const std::string slot = SqlLiteral(options_.slot);
  // On a standby (the node was demoted, or the agent runs beside every
  // node of an HA cluster) pg_current_wal_flush_lsn() is an ERROR in the
  // server's log at every round: ask it only of a primary.
  auto rows = pg_.Query(absl::StrCat(
      "SELECT restart_lsn, CASE WHEN pg_is_in_recovery() THEN NULL "
      "ELSE pg_current_wal_flush_lsn() END FROM pg_replication_slots WHERE slot_name = ",
      slot));
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    return absl::FailedPreconditionError(absl::StrCat("replication slot ", options_.slot,
                                                      " disappeared"));
  }
  if ((*rows)[0][1].empty()) {
    return WithReason(absl::UnavailableError("in recovery: the slot waits for a primary"),
                      Reason::kNotPrimary);
  }
  auto restart = pg::ParseLsn((*rows)[0][0]);
  auto flush = pg::ParseLsn((*rows)[0][1]);
  if (!restart.ok() || !flush.ok()) return absl::InternalError("unparsable slot LSNs");

  const uint64_t bound = options_.max_retained_bytes;
  SlotPlan plan =
      PlanSlotRound(table_, replicas_(), to_lsn_, *restart, *flush, bound, clock_.Now());
  dirty_ = dirty_ || plan.changed;
  if (plan.over_bound) {
    spdlog::error(
        "WAL retention bound exceeded: replicas would keep {} bytes on the primary, more than "
        "--max-retained-bytes={}; releasing WAL before {} -- replica(s) {} may need a new "
        "base backup if they cannot catch up",
        plan.retained, bound, pg::FormatLsn(plan.target),
        plan.released.empty() ? std::string("(none known)") : absl::StrJoin(plan.released, ", "));
  } else if (bound > 0 && plan.retained > bound / 10 * 8) {
    if (!warned_) {
      spdlog::warn("WAL retained for replicas is {} bytes, over 80% of --max-retained-bytes={}",
                   plan.retained, bound);
    }
    warned_ = true;
  } else {
    warned_ = false;
  }
  PublishStats();

  // Recorded before the slot relies on it; unrecorded, the slot holds
  // (unless the bound releases WAL: the primary's disk comes first).
  pg::Lsn target = plan.target;
  absl::Status saved = SaveIfDirty();
  if (!saved.ok() && !plan.over_bound) target = *restart;
  if (target > *restart) {
    auto adv = pg_.Query(absl::StrCat("SELECT pg_replication_slot_advance(", slot, ", ",
                                      SqlLiteral(pg::FormatLsn(target)), "::pg_lsn)"));
    if (!adv.ok()) return adv.status();
  }
  return saved;
}

}  // namespace walship::agent
