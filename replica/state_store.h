// state_store.h: the replica's durable position, persisted.
//
// The file `walship.state` in the destination directory records the stream
// the directory belongs to and the last durable position: every byte before
// it is fdatasync'ed in a segment file (complete segments under their own
// names, the current one as NAME.partial). It is replaced atomically (temp +
// fsync + rename + fsync dir), so after a crash it holds either the previous
// or the new position, never a torn one; a CRC line catches any other damage.
//
// Format (text, one key=value per line, in this order):
//   walship-replica-state 2
//   stream=<stream id>
//   segment=<segment name, may be empty>
//   offset=<decimal byte offset within segment>
//   complete=<0|1: segment is complete (renamed) on disk>
//   prefix_crc=<8 hex digits: CRC32C of bytes [0, offset) of segment>
//   crc=<8 hex digits: CRC32C of all preceding bytes>
//
// Thread-safety: not thread-safe; one owner (the replica's flusher).
#ifndef WALSHIP_REPLICA_STATE_STORE_H_
#define WALSHIP_REPLICA_STATE_STORE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/position.h"
#include "common/sys/syscalls.h"

namespace walship::replica {

struct ReplicaState {
  std::string stream_id;
  Position durable;
  bool segment_complete = false;
  // CRC32C of bytes [0, durable.offset) of durable.segment: lets a restart
  // and the restore helper prove the durable bytes unchanged on disk.
  uint32_t prefix_crc32c = 0;

  friend bool operator==(const ReplicaState& a, const ReplicaState& b) {
    return a.stream_id == b.stream_id && a.durable == b.durable &&
           a.segment_complete == b.segment_complete && a.prefix_crc32c == b.prefix_crc32c;
  }
};

inline constexpr char kStateFileName[] = "walship.state";
// Checksums of complete segments (segment_writer.h).
inline constexpr char kSumsFileName[] = "walship.sums";

class StateStore {
 public:
  StateStore(sys::SysCalls& sys, std::string dir);

  // std::nullopt when there is no state file (a new destination).
  // kDataLoss when it exists but is damaged.
  absl::StatusOr<std::optional<ReplicaState>> Load();
  absl::Status Save(const ReplicaState& state);

  static std::string Encode(const ReplicaState& state);
  static absl::StatusOr<ReplicaState> Decode(const std::string& text);

 private:
  sys::SysCalls& sys_;
  const std::string dir_;
};

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_STATE_STORE_H_
