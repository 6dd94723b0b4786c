// sqlite_wal.h: why walship refuses SQLite's write-ahead log, and how it
// recognises one.
//
// A SQLite database in WAL mode (PRAGMA journal_mode=WAL) keeps a "DB-wal"
// file beside "DB" (and "DB-shm"). The -wal file starts with a 32-byte header
// whose first four bytes, big-endian, are 0x377f0682 or 0x377f0683; frames
// of one page each follow. After a checkpoint has copied every frame into the
// database, the next writer starts the WAL again FROM OFFSET 0 with new salts
// in the header, overwriting the old frames in place; the file keeps its size
// (unless journal_size_limit truncates it). Following the file by its size,
// as walship's append format does, cannot represent that: the new frames are
// invisible until the file grows past its old size, and what would then be
// shipped mixes two generations. A copy restored from it would be a corrupt
// database.
//
// So walship refuses SQLite's WAL at start-up rather than stall or ship a
// mix: --format=sqlite-wal exists only to say so, and the append format
// refuses a segment that carries the SQLite WAL magic. What works instead:
// a consistent copy made by SQLite itself (`sqlite3 DB ".backup COPY"`, the
// online backup API, or `VACUUM INTO`), taken as often as the copy needs to
// be fresh; shipping the WAL frame by frame per generation (the salts in
// the header name a generation), as litestream does, is possible future work.
#ifndef WALSHIP_AGENT_SQLITE_SQLITE_WAL_H_
#define WALSHIP_AGENT_SQLITE_SQLITE_WAL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace walship::agent::sqlite {

inline constexpr uint32_t kWalMagicLittle = 0x377f0682;
inline constexpr uint32_t kWalMagicBig = 0x377f0683;

// True when `head` (a file's first bytes, at least 4) starts with the
// SQLite WAL magic.
inline bool IsSqliteWal(absl::string_view head) {
  if (head.size() < 4) return false;
  const uint32_t m = (static_cast<uint32_t>(static_cast<uint8_t>(head[0])) << 24) |
                     (static_cast<uint32_t>(static_cast<uint8_t>(head[1])) << 16) |
                     (static_cast<uint32_t>(static_cast<uint8_t>(head[2])) << 8) |
                     static_cast<uint32_t>(static_cast<uint8_t>(head[3]));
  return m == kWalMagicLittle || m == kWalMagicBig;
}

// The refusal's explanation: why, and what works instead.
inline std::string WhyNotSqliteWal() {
  return "a SQLite WAL (the DB-wal file of a database in WAL mode) is rewritten from offset "
         "0 after every checkpoint, keeping its size, so following it by its size cannot "
         "represent it: walship would stall or ship frames of two generations mixed. Use a "
         "consistent copy made by SQLite instead (sqlite3 DB \".backup COPY\", the online "
         "backup API, or VACUUM INTO); shipping the WAL per generation (its salts), as "
         "litestream does, is not supported";
}

}  // namespace walship::agent::sqlite

#endif  // WALSHIP_AGENT_SQLITE_SQLITE_WAL_H_
