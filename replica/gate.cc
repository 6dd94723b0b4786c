#include "replica/gate.h"

#include <sys/stat.h>

#include <map>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/postgres/pg_client.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_scan.h"
#include "common/sys/file_util.h"
#include "replica/fetch.h"
#include "replica/gate_config.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

// What one replica answered, with its end as an LSN.
struct ReplicaEnd {
  std::string address;
  std::unique_ptr<v1::WalServe::StubInterface> stub;
  v1::HeldResponse held;
  uint32_t timeline = 0;
  pg::Lsn end = 0;  // 0: holds nothing
};

// The standby, as its SQL interface shows it.
struct Standby {
  bool in_recovery = false;
  pg::Lsn replay = 0;
  pg::Lsn received = 0;  // pg_last_wal_receive_lsn(): streamed and flushed
  uint64_t segment_size = 0;
  std::string stream_id;  // "pg-<system identifier>", as the agent names it
  uint64_t system_id = 0;
};

absl::StatusOr<Standby> ReadStandby(agent::PgClient& pg) {
  auto rows = pg.Query(
      "SELECT pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn(), '0/0'), "
      "coalesce(pg_last_wal_receive_lsn(), '0/0'), "
      "(SELECT setting FROM pg_settings WHERE name = 'wal_segment_size'), "
      "(SELECT system_identifier FROM pg_control_system())");
  if (!rows.ok()) return rows.status();
  if (rows->size() != 1 || (*rows)[0].size() != 5) {
    return absl::InternalError("unexpected answer to the standby query");
  }
  const std::vector<std::string>& r = (*rows)[0];
  Standby s;
  s.in_recovery = r[0] == "t";
  auto replay = pg::ParseLsn(r[1]);
  if (!replay.ok()) return replay.status();
  s.replay = *replay;
  auto received = pg::ParseLsn(r[2]);
  if (!received.ok()) return received.status();
  s.received = *received;
  if (!absl::SimpleAtoi(r[3], &s.segment_size) || !pg::IsValidSegmentSize(s.segment_size) ||
      !absl::SimpleAtoi(r[4], &s.system_id)) {
    return absl::InternalError(absl::StrCat("unexpected wal_segment_size ", r[3],
                                            " or system identifier ", r[4]));
  }
  s.stream_id = absl::StrCat("pg-", r[4]);
  return s;
}

// Connects and reads the standby, retrying until `deadline` (it may still be
// starting).
absl::StatusOr<Standby> WaitForStandby(Clock& clock, agent::PgClient& pg, absl::Time deadline,
                                       absl::Duration poll) {
  absl::Status last;
  while (true) {
    auto s = ReadStandby(pg);
    if (s.ok()) return s;
    last = s.status();
    pg.Disconnect();
    if (clock.Now() + poll >= deadline) break;
    clock.SleepFor(poll);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the standby did not answer within the timeout: ", last.ToString()));
}

// The end of what `held` holds as an LSN on its timeline, or an error if it
// is not the standby's cluster.
absl::Status ComputeEnd(const Standby& standby, ReplicaEnd* r) {
  const v1::HeldResponse& h = r->held;
  if (!h.stream_id().empty() && h.stream_id() != standby.stream_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        r->address, " holds stream ", h.stream_id(), ", the standby is ", standby.stream_id));
  }
  if (h.segment_size() != 0 && h.segment_size() != standby.segment_size) {
    return absl::FailedPreconditionError(absl::StrCat(r->address, " holds ", h.segment_size(),
                                                      "-byte segments, the standby ",
                                                      standby.segment_size));
  }
  if (h.durable().segment().empty()) return absl::OkStatus();
  auto id = pg::ParseSegmentName(h.durable().segment(), standby.segment_size);
  if (!id.ok()) return id.status();
  r->timeline = id->timeline;
  r->end = pg::SegmentStartLsn(id->segno, standby.segment_size) +
           (h.durable_segment_complete() ? standby.segment_size : h.durable().offset());
  return absl::OkStatus();
}

// Asks every replica for its end; those that do not answer are left out.
std::vector<ReplicaEnd> AskReplicas(sys::SysCalls& sys, Clock& clock, const GateOptions& o,
                                    absl::Time deadline,
                                    absl::Status* fatal) {
  std::vector<ReplicaEnd> answered;
  for (const std::string& address : o.from) {
    ReplicaEnd r;
    r.address = address;
    auto stub = MakeWalServeStub(sys, clock, address, o.tls);
    if (!stub.ok()) {
      *fatal = stub.status();
      continue;
    }
    r.stub = std::move(*stub);
    auto held = FetchHeld(*r.stub, std::min(deadline, clock.Now() + absl::Seconds(5)));
    if (!held.ok()) {
      if (held.status().code() == absl::StatusCode::kDataLoss) {
        *fatal = absl::DataLossError(absl::StrCat(address, ": ", held.status().message()));
      } else {
        spdlog::warn("gate: replica {} did not answer: {}", address, held.status().ToString());
      }
      continue;
    }
    r.held = std::move(*held);
    answered.push_back(std::move(r));
  }
  return answered;
}

// GateHistoryCheck on the newest timeline history file in `pg_wal` (none:
// timeline 1), the timeline the standby follows.
absl::Status CheckStandbyHistory(sys::SysCalls& sys, const std::string& pg_wal,
                                 uint32_t timeline, pg::Lsn end) {
  auto names = sys::ListDirectory(sys, pg_wal, "WAL directory");
  if (!names.ok()) return names.status();
  uint32_t newest = 1;
  for (const std::string& name : *names) {
    uint32_t tli = 0;
    if (pg::ParseHistoryFileName(name, &tli)) newest = std::max(newest, tli);
  }
  std::vector<pg::TimelineSwitch> switches;
  if (newest > 1) {
    auto text = sys::ReadFileToString(sys, absl::StrCat(pg_wal, "/", pg::HistoryFileName(newest)));
    if (!text.ok()) return text.status();
    auto parsed = pg::ParseHistoryFile(*text);
    if (!parsed.ok()) return parsed.status();
    switches = std::move(*parsed);
  }
  return GateHistoryCheck(newest, switches, timeline, end);
}

int NotReached(const std::string& why) {
  spdlog::error("gate: NOT promoting: {}", why);
  return kGateNotReached;
}

// Writes into `pg_wal` what the standby needs of `best` to replay to its
// end (GateFilesToFetch), each file verified on arrival.
int FetchInto(sys::SysCalls& sys, ReplicaEnd& best, const Standby& standby,
              const std::string& pg_wal, absl::Time deadline) {
  auto names = GateFilesToFetch(best.held, best.timeline, standby.replay, best.end,
                                standby.segment_size);
  if (!names.ok()) {
    return NotReached(absl::StrCat(best.address, ": ", names.status().message()));
  }
  for (const std::string& name : *names) {
    auto got = FetchWalFile(sys, *best.stub, name, absl::StrCat(pg_wal, "/", name), deadline,
                            /*durable=*/true);
    if (!got.ok()) return NotReached(absl::StrCat("fetching ", name, " from ", best.address,
                                                  ": ", got.status().ToString()));
    spdlog::info("gate: wrote {} into {} ({} bytes, {} verified, {} zero bytes of padding)",
                 name, pg_wal, got->size, got->verified, got->pad);
  }
  return kGateReached;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> GateFilesToFetch(const v1::HeldResponse& held,
                                                          uint32_t timeline, pg::Lsn from,
                                                          pg::Lsn end, uint64_t segment_size) {
  std::vector<std::string> names;
  std::map<uint64_t, std::pair<uint32_t, std::string>> by_segno;
  auto consider = [&](const std::string& name) {
    uint32_t tli = 0;
    if (pg::ParseHistoryFileName(name, &tli)) {
      if (tli <= timeline) names.push_back(name);
      return;
    }
    auto id = pg::ParseSegmentName(name, segment_size);
    if (!id.ok() || id->timeline > timeline) return;
    auto& slot = by_segno[id->segno];
    if (slot.second.empty() || id->timeline >= slot.first) slot = {id->timeline, name};
  };
  for (const v1::HeldSegment& f : held.files()) consider(f.name());
  if (!held.durable_segment_complete() && held.durable().offset() > 0) {
    consider(held.durable().segment());
  }
  if (end <= from) return names;
  const uint64_t first = pg::SegmentOfLsn(from, segment_size);
  const uint64_t last = pg::SegmentOfLsn(end - 1, segment_size);
  for (uint64_t segno = first; segno <= last; ++segno) {
    auto it = by_segno.find(segno);
    if (it == by_segno.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the replica does not hold segment ",
                       pg::SegmentName(timeline, segno, segment_size),
                       " (between the standby's replay position and the replica's end)"));
    }
    names.push_back(it->second.second);
  }
  return names;
}

absl::Status GateHistoryCheck(uint32_t standby_timeline,
                              const std::vector<pg::TimelineSwitch>& switches,
                              uint32_t timeline, pg::Lsn end) {
  if (timeline == standby_timeline) return absl::OkStatus();
  if (timeline > standby_timeline) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the replicas hold timeline ", timeline, " up to ", pg::FormatLsn(end),
        ", newer than every timeline the standby knows (", standby_timeline,
        "): its replay position does not cover that timeline's WAL"));
  }
  for (const pg::TimelineSwitch& sw : switches) {
    if (sw.parent_timeline != timeline) continue;
    if (sw.switch_lsn >= end) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "the standby left timeline ", timeline, " at ", pg::FormatLsn(sw.switch_lsn),
        ", before the replicas' end ", pg::FormatLsn(end), " on it: the replicas hold ",
        "commits of that timeline the standby's history does not contain"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the replicas hold timeline ", timeline, ", which is not in the history of the "
      "standby's timeline ", standby_timeline));
}

pg::Lsn GateReplayTarget(sys::SysCalls& sys, const std::string& pg_wal,
                         const pg::WalExpectations& exp, uint32_t timeline, pg::Lsn from,
                         pg::Lsn end) {
  pg::DirectoryWalBytes wal(sys, pg_wal, timeline, exp.segment_size);
  auto scan = pg::ScanWal(wal, from, exp, end);
  if (!scan.ok()) {
    spdlog::warn("gate: cannot scan the fetched WAL ({}); waiting for the replica's end {}",
                 scan.status().ToString(), pg::FormatLsn(end));
    return end;
  }
  if (scan->stop == pg::ScanStop::kLimit && scan->end < end) {
    spdlog::info("gate: the replica's end {} is inside a record; the last whole record ends "
                 "at {}",
                 pg::FormatLsn(end), pg::FormatLsn(scan->end));
    return scan->end;
  }
  if (scan->end < end) {
    spdlog::warn("gate: the fetched WAL is valid only up to {} ({} at {}: {}); waiting for "
                 "the replica's end {}",
                 pg::FormatLsn(scan->end), pg::ScanStopName(scan->stop),
                 pg::FormatLsn(scan->stop_lsn), scan->stop_reason, pg::FormatLsn(end));
  }
  return end;
}

absl::Status GateOptions::Validate() const {
  if (from.empty()) return absl::InvalidArgumentError("--from: at least one HOST:PORT");
  if (pg_data.empty()) return absl::InvalidArgumentError("--pg-data is required");
  if (pg_conninfo.empty()) return absl::InvalidArgumentError("--pg-conninfo is required");
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  return tls.Validate();
}

namespace {

// Steps 1 to 5 (gate.h): the standby replays what the replicas hold.
int ReplayReplicasEnd(sys::SysCalls& sys, Clock& clock, const GateOptions& o,
                      absl::Time deadline) {
  absl::Status fatal;
  std::vector<ReplicaEnd> replicas = AskReplicas(sys, clock, o, deadline, &fatal);
  if (!fatal.ok()) return NotReached(fatal.ToString());
  if (replicas.empty() && clock.Now() >= deadline) {
    // Not "no replica reachable": the bound ran out while asking.
    return NotReached(absl::StrCat("no replica answered within the timeout (",
                                   absl::FormatDuration(o.timeout), ")"));
  }
  if (replicas.empty()) {
    if (o.allow_without_replicas) {
      spdlog::warn("gate: NO walship replica answered (--from has {}); promoting anyway as "
                   "--allow-without-replicas says: commits acknowledged through walship but "
                   "missing on this standby ARE LOST",
                   o.from.size());
      return kGateReached;
    }
    spdlog::error("gate: NOT promoting: no walship replica answered (--from has {}); they "
                  "may hold acknowledged commits this standby lacks (--allow-without-replicas "
                  "promotes anyway)",
                  o.from.size());
    return kGateNoReplica;
  }
  agent::PgClient pg(o.pg_conninfo);
  auto standby = WaitForStandby(clock, pg, deadline, o.poll_interval);
  if (!standby.ok()) return NotReached(standby.status().ToString());
  if (!standby->in_recovery) return NotReached("the standby is not in recovery");
  ReplicaEnd* best = nullptr;
  for (ReplicaEnd& r : replicas) {
    if (absl::Status s = ComputeEnd(*standby, &r); !s.ok()) return NotReached(s.ToString());
    spdlog::info("gate: replica {} holds up to {} on timeline {}", r.address,
                 pg::FormatLsn(r.end), r.timeline);
    if (best == nullptr || std::make_pair(r.timeline, r.end) >
                               std::make_pair(best->timeline, best->end)) {
      best = &r;
    }
  }
  const std::string pg_wal = absl::StrCat(o.pg_data, "/pg_wal");
  if (standby->replay >= best->end) {
    if (absl::Status s = CheckStandbyHistory(sys, pg_wal, best->timeline, best->end);
        best->end > 0 && !s.ok()) {
      return NotReached(s.ToString());
    }
    spdlog::info("gate: the standby replayed {}, at or past the replicas' end {}: promote",
                 pg::FormatLsn(standby->replay), pg::FormatLsn(best->end));
    return kGateReached;
  }
  if (standby->received >= best->end) {
    // Its WAL receiver already wrote it all: nothing to fetch (and no file
    // it may still be writing is replaced).
    spdlog::info("gate: the standby received {}, at or past the replicas' end {}: waiting "
                 "for its replay",
                 pg::FormatLsn(standby->received), pg::FormatLsn(best->end));
  } else if (int rc = FetchInto(sys, *best, *standby, pg_wal, deadline); rc != kGateReached) {
    return rc;
  }
  pg::WalExpectations exp;
  exp.system_id = standby->system_id;
  exp.segment_size = standby->segment_size;
  const pg::Lsn target =
      GateReplayTarget(sys, pg_wal, exp, best->timeline, standby->replay, best->end);
  pg::Lsn replay = standby->replay;
  while (true) {
    auto now = ReadStandby(pg);
    if (now.ok()) {
      replay = now->replay;
      if (!now->in_recovery) return NotReached("the standby left recovery while waiting");
      if (replay >= target) {
        if (absl::Status s = CheckStandbyHistory(sys, pg_wal, best->timeline, best->end);
            !s.ok()) {
          return NotReached(s.ToString());
        }
        spdlog::info("gate: the standby replayed up to {} (replicas' end {}, from {}): promote",
                     pg::FormatLsn(replay), pg::FormatLsn(best->end),
                     pg::FormatLsn(standby->replay));
        return kGateReached;
      }
    } else {
      pg.Disconnect();
    }
    if (clock.Now() + o.poll_interval >= deadline) break;
    clock.SleepFor(o.poll_interval);
  }
  return NotReached(absl::StrCat("the standby replayed only up to ", pg::FormatLsn(replay),
                                 " of ", pg::FormatLsn(target), " within ",
                                 absl::FormatDuration(o.timeout)));
}

// Step 6 (gate_config.h): the configuration the standby is promoted with.
int ApplyConfiguration(Clock& clock, const GateOptions& o, absl::Time deadline) {
  agent::PgClient pg(o.pg_conninfo);
  auto names = ReloadAndReadSyncNames(clock, pg, deadline, o.poll_interval);
  if (!names.ok()) {
    return NotReached(absl::StrCat("reading the standby's configuration: ",
                                   names.status().ToString()));
  }
  if (!names->reloaded) {
    spdlog::warn("gate: the standby's configuration was not reloaded ({}); it runs with "
                 "synchronous_standby_names = '{}'",
                 names->why_not, names->value);
  }
  if (!o.synchronous_name.empty() &&
      !SyncStandbyNamesInclude(names->value, o.synchronous_name)) {
    return NotReached(absl::StrCat(
        "the standby's synchronous_standby_names is '", names->value, "'",
        names->reloaded ? " once its configuration is reloaded" : "", ", which does not name '",
        o.synchronous_name, "': promoted, it would acknowledge commits walship does not hold "
        "(--synchronous-name asks for this check)"));
  }
  spdlog::info("gate: configuration {}; the standby is promoted with "
               "synchronous_standby_names = '{}'",
               names->reloaded ? "reloaded" : "NOT reloaded", names->value);
  return kGateReached;
}

}  // namespace

int RunGate(sys::SysCalls& sys, Clock& clock, const GateOptions& o) {
  const absl::Time deadline = clock.Now() + o.timeout;
  const int rc = ReplayReplicasEnd(sys, clock, o, deadline);
  if (rc != kGateReached) return rc;
  return ApplyConfiguration(clock, o, deadline);
}

}  // namespace walship::replica
