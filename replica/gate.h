// gate.h: `walship-replica gate`, the promotion gate for an HA manager.
//
//   walship-replica gate --from=HOST:PORT[,HOST2:PORT] --pg-data=PGDATA
//       --pg-conninfo='host=/run/pg port=5432 user=postgres dbname=postgres'
//       --timeout-ms=30000 [--allow-without-replicas] (--insecure | --tls-*)
//
// Run on a standby about to be promoted, as its OS user, while it is still
// in recovery (Patroni's `pre_promote`: after the node took the leader key,
// before it promotes; a non-zero exit cancels the promotion). It makes the
// standby replay every byte the walship replicas hold durably:
//   1. asks every replica (walship.v1.WalServe Held) for its verified
//      durable end, and takes the highest (timeline, then LSN); a replica of
//      another cluster (stream id, segment size) is an error;
//   2. asks the standby (libpq) for pg_last_wal_replay_lsn() R; if R has
//      reached the end, done;
//   3. unless its WAL receiver already wrote everything up to the end
//      (pg_last_wal_receive_lsn()), fetches from that replica every file
//      from R's segment to the end
//      (complete segments, the segment being received zero-padded, the
//      history files it holds up to the end's timeline) and writes them into
//      PGDATA/pg_wal under their names (temp file, fdatasync, rename,
//      directory fsync), each verified on arrival (replica/fetch.h);
//      PostgreSQL 15 in standby mode reads pg_wal whenever streaming fails
//      (every wal_retrieve_retry_interval), so it replays them whatever its
//      restore_command;
//   4. finds the position PostgreSQL will replay to: the end of the last
//      whole record before the end (common/pgwal/wal_scan.h over the files
//      just written; the end may cut a record in two, e.g. a flush of whole
//      pages), or the end itself when the scan cannot tell;
//   5. waits until pg_last_wal_replay_lsn() reaches that position;
//   6. checks that the standby's history holds the replicas' timeline up to
//      their end (GateHistoryCheck): a standby that left that timeline
//      before the end, or never followed it, replayed some other WAL;
//   7. reloads the standby's configuration and reads the
//      synchronous_standby_names it will be promoted with (gate_config.h:
//      an HA manager may have written a file PostgreSQL never reloaded; a
//      reload refused or not seen within 5 s is a warning, and the value
//      the standby runs with is the one judged);
//      with --synchronous-name=NAME, a value that does not name NAME is
//      refused (exit 2): the new primary would not wait for walship.
// Everything is bounded by --timeout. Exit status:
//   0 the standby replayed everything the replicas hold (or no replica was
//     reachable and --allow-without-replicas was given: a warning says the
//     promotion may lose acknowledged commits);
//   1 bad usage;
//   2 the position was not reached: timeout, a fetch refused (a replica's
//     copy fails its checksums), the standby not in recovery or of another
//     cluster; every case logged with why;
//   3 no replica reachable (without --allow-without-replicas).
// With no replica reachable the operator chooses: by default no promotion
// (zero loss: walship's replicas may hold commits the standby lacks), with
// --allow-without-replicas promotion anyway (availability). Replicas that
// answer are enough: one that does not is logged as a warning, and the gate
// goes on with the others. (The agent acknowledges to the primary the
// highest position any one replica holds, so with several replicas the one
// that does not answer may be the one holding the newest commits: list every
// replica in --from.)
#ifndef WALSHIP_REPLICA_GATE_H_
#define WALSHIP_REPLICA_GATE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"
#include "proto/walship.pb.h"

namespace walship::replica {

inline constexpr int kGateReached = 0;
inline constexpr int kGateUsage = 1;
inline constexpr int kGateNotReached = 2;
inline constexpr int kGateNoReplica = 3;

struct GateOptions {
  std::vector<std::string> from;  // HOST:PORT of each replica's --serve-listen
  std::string pg_data;            // the standby's data directory
  std::string pg_conninfo;        // libpq connection string to the standby
  absl::Duration timeout = absl::Seconds(30);
  bool allow_without_replicas = false;
  // Non-empty: refuse unless the reloaded synchronous_standby_names names
  // it (the agents' --pg-feed-name, "walship" by default) or '*'.
  std::string synchronous_name;
  TlsOptions tls;
  // How often the standby's replay position is read while waiting.
  absl::Duration poll_interval = absl::Milliseconds(100);

  // kInvalidArgument naming the flag.
  absl::Status Validate() const;
};

// Runs the gate; returns the exit status above. Logs (spdlog) every step
// and why it stopped.
int RunGate(sys::SysCalls& sys, Clock& clock, const GateOptions& options);

// The gate's steps 3 and 4, exposed for tests.
//
// GateFilesToFetch: the names to write into pg_wal for replay from LSN
// `from` to `end` (on `timeline`), given a replica's Held answer: every
// history file up to `timeline`, then for each segment number from `from`'s
// to the one holding byte end - 1 the copy of the newest timeline up to
// `timeline` (a complete file, or the segment being received).
// kFailedPrecondition naming the first segment the replica lacks.
absl::StatusOr<std::vector<std::string>> GateFilesToFetch(const v1::HeldResponse& held,
                                                          uint32_t timeline, pg::Lsn from,
                                                          pg::Lsn end, uint64_t segment_size);

// GateHistoryCheck: whether a standby following `standby_timeline` (whose
// history file lists `switches`; none for timeline 1) holds the WAL of
// `timeline` up to `end`: `timeline` is its own, or an ancestor it left at
// or after `end`. kFailedPrecondition saying which otherwise: the replicas
// then hold commits the standby's replay position, an LSN, does not cover
// however far it is. The gate checks it (on the newest history file in the
// standby's pg_wal) before it lets the standby be promoted.
absl::Status GateHistoryCheck(uint32_t standby_timeline,
                              const std::vector<pg::TimelineSwitch>& switches,
                              uint32_t timeline, pg::Lsn end);

// GateReplayTarget: where PostgreSQL will stop replaying the WAL of
// `timeline` in `pg_wal` (read through `sys`) when its valid records run
// from `from` to `end`: the end of the last whole record before `end` when
// a scan from `from` shows that `end` cuts a record in two, else `end` (a
// scan that fails or stops early proves nothing: the wait then needs
// replay to reach `end`).
pg::Lsn GateReplayTarget(sys::SysCalls& sys, const std::string& pg_wal,
                         const pg::WalExpectations& exp, uint32_t timeline, pg::Lsn from,
                         pg::Lsn end);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_GATE_H_
