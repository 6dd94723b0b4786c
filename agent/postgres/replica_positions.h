// replica_positions.h: the replicas the agent has seen, persisted.
//
// The replication slot (slot_keeper.h) must keep the WAL of every replica
// the agent knows, not only of those connected since it started: after a
// restart, the first replica to acknowledge would otherwise move the slot
// past one that is down, which then finds a gap. So the agent records, in
// the file `replicas` of its state directory (--state-dir), every replica's
// last acknowledged flushed position, and loads it at start: every replica
// in it is known, and held for, even if it has not connected since.
//
// What a record means:
//   * `flushed` is the last flushed position the replica acknowledged (a
//     byte offset within WAL segment `segment`): it holds every byte before
//     it durably, and needs every byte from it on.
//   * `seen` is when the agent last took a new position from it.
//   * `released`: --max-retained-bytes released the WAL it needed; the slot
//     holds nothing for it until it acknowledges a new position (it is most
//     likely to find a gap at its next handshake).
//
// When it is written: by the slot keeper, at start (which proves the
// directory writable), at most once per round (1 s) and only when something
// changed, always BEFORE the slot is advanced, so that every replica the
// slot was ever advanced for is in the file, and once more when the agent
// stops. A failed save leaves the previous file whole (temp + fsync +
// rename + fsync dir, sys::WriteFileAtomically).
//
// Format version 1: text, one record per line, '\n' after every line:
//   walship-agent-replicas 1
//   stream <stream id: the rest of the line>
//   replica <name> <segment> <offset> <seen> <held|released>   (0 or more)
//   crc32c <8 lower-case hex digits: CRC32C of every byte before this line>
// <name> is 1..64 of [A-Za-z0-9._-] (as the handshake requires), <segment>
// a segment name (wire::ValidateSegmentName), <offset> decimal, <seen>
// RFC 3339 UTC to the second (2024-05-01T12:00:00Z). Replicas sort by name.
// Example:
//   walship-agent-replicas 1
//   stream pg-7365025346473391442
//   replica r1 000000010000000000000009 80 2024-05-01T12:00:00Z held
//   replica r2 000000010000000000000005 4136 2024-05-01T11:58:31Z released
//   crc32c 0f3a9b12
//
// Load: a missing file is an empty table (a new agent). A file that does
// not parse or whose CRC does not match is kDataLoss, never silently
// treated as empty: it lists replicas whose WAL the slot must keep. A file
// of a later format version is kFailedPrecondition. (A torn write cannot
// produce either: the file is replaced whole.)
//
// Forgetting a replica: stop the agent and delete the file (every replica is
// forgotten; the connected ones are recorded again within a second of the
// restart), or take the replica out of a non-empty --allow-replicas list:
// at start the agent forgets recorded replicas it would refuse.
//
// Thread-safety: not thread-safe; one owner (the slot keeper). One agent
// per state directory.
#ifndef WALSHIP_AGENT_POSTGRES_REPLICA_POSITIONS_H_
#define WALSHIP_AGENT_POSTGRES_REPLICA_POSITIONS_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/position.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

struct KnownReplica {
  Position flushed;
  absl::Time seen = absl::UnixEpoch();
  bool released = false;

  friend bool operator==(const KnownReplica& a, const KnownReplica& b) {
    return a.flushed == b.flushed && a.seen == b.seen && a.released == b.released;
  }
};

struct ReplicaTable {
  std::string stream_id;  // empty in a table never saved
  std::map<std::string, KnownReplica> replicas;  // by replica name

  friend bool operator==(const ReplicaTable& a, const ReplicaTable& b) {
    return a.stream_id == b.stream_id && a.replicas == b.replicas;
  }
};

inline constexpr char kReplicaPositionsFileName[] = "replicas";

class ReplicaPositionStore {
 public:
  // The file is `dir`/replicas; `sys` must outlive the store.
  ReplicaPositionStore(sys::SysCalls& sys, std::string dir);

  // Creates the state directory (mode 0700) if it does not exist; one
  // level, as the replica's --dest. Errors as sys::ErrnoToStatus.
  absl::Status EnsureDir();
  // The table on disk; empty when there is no file. kDataLoss (damaged) or
  // kFailedPrecondition (later version) as above, naming the file and what
  // to do; other errors as sys::ErrnoToStatus (kPermissionDenied, ...).
  absl::StatusOr<ReplicaTable> Load();
  // Durable when it returns OK; on failure the previous file is unchanged.
  // kInvalidArgument for a table that cannot be written (an invalid name or
  // segment, a stream id with a newline).
  absl::Status Save(const ReplicaTable& table);

  std::string path() const;

  static std::string Encode(const ReplicaTable& table);
  // kDataLoss / kFailedPrecondition as Load (without the path).
  static absl::StatusOr<ReplicaTable> Decode(absl::string_view contents);
  // The rule Save and Decode apply to names (the handshake's).
  static bool ValidName(absl::string_view name);

 private:
  sys::SysCalls& sys_;
  const std::string dir_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_REPLICA_POSITIONS_H_
