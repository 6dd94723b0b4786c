// -----------------------------------------------------------------------------
// File: agent/postgres/pg_stream_protocol.h
// -----------------------------------------------------------------------------
//
// The messages of PostgreSQL's physical streaming replication protocol that
// the agent's flush feed reads and writes (PostgreSQL documentation,
// "Streaming Replication Protocol"; the sender is
// src/backend/replication/walsender.c). After START_REPLICATION the server
// sends CopyData messages whose first byte names them:
//
//   'w' XLogData:   Int64 dataStart, Int64 walEnd, Int64 sendTime, Byte_n data
//   'k' Keepalive:  Int64 walEnd, Int64 sendTime, Byte1 replyRequested
//
// and the client answers with
//
//   'r' Standby status update: Int64 write, Int64 flush, Int64 apply,
//                              Int64 clientTime, Byte1 replyRequested
//
// Every integer is big-endian (network order). Times are microseconds since
// 2000-01-01 00:00:00 UTC. In an XLogData message of a primary's walsender,
// walEnd is the server's flush position when the message was built
// (GetFlushRecPtr()): WAL up to it is durable on the primary. In a
// keepalive it is the position sent so far, which is never past the flush
// position.
//
// Thread-safety: every function is pure.
#ifndef WALSHIP_AGENT_POSTGRES_PG_STREAM_PROTOCOL_H_
#define WALSHIP_AGENT_POSTGRES_PG_STREAM_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/pgwal/wal_names.h"

namespace walship::agent::pgstream {

// Header bytes before an XLogData message's payload; a keepalive's length.
inline constexpr size_t kXLogDataHeaderSize = 1 + 8 + 8 + 8;
inline constexpr size_t kKeepaliveSize = 1 + 8 + 8 + 1;
inline constexpr size_t kStandbyStatusSize = 1 + 8 + 8 + 8 + 8 + 1;

struct ServerMessage {
  enum class Kind { kXLogData, kKeepalive };
  Kind kind = Kind::kKeepalive;
  // The server's walEnd (see above).
  pg::Lsn wal_end = 0;
  // XLogData only: the payload covers [data_start, data_start + data_len).
  pg::Lsn data_start = 0;
  uint64_t data_len = 0;
  int64_t send_time_us = 0;
  // Keepalive only: the server wants a status update now (it is about to
  // time the connection out otherwise).
  bool reply_requested = false;
};

// ParseServerMessage()
//
// Decodes one CopyData payload. kDataLoss when it is shorter than its kind
// requires (a keepalive must be exactly kKeepaliveSize); kInvalidArgument for
// a first byte that is neither 'w' nor 'k'. Messages never name their own
// length, so `message` must be exactly one CopyData payload.
absl::StatusOr<ServerMessage> ParseServerMessage(absl::Span<const uint8_t> message);

// EncodeStandbyStatus()
//
// A standby status update of kStandbyStatusSize bytes. PostgreSQL takes 0 as
// "unknown" for any position (pg_receivewal reports apply as 0 too: it
// replays nothing).
std::string EncodeStandbyStatus(pg::Lsn write, pg::Lsn flush, pg::Lsn apply,
                                int64_t client_time_us, bool reply_requested);

// PgTimestamp()
//
// `t` as PostgreSQL's TimestampTz: microseconds since 2000-01-01 UTC.
int64_t PgTimestamp(absl::Time t);

}  // namespace walship::agent::pgstream

#endif  // WALSHIP_AGENT_POSTGRES_PG_STREAM_PROTOCOL_H_
