#include "agent/postgres/pg_stream_protocol.h"

#include "absl/strings/str_cat.h"

namespace walship::agent::pgstream {
namespace {

uint64_t LoadBig64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void AppendBig64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

}  // namespace

absl::StatusOr<ServerMessage> ParseServerMessage(absl::Span<const uint8_t> message) {
  if (message.empty()) return absl::DataLossError("empty replication message");
  ServerMessage m;
  switch (message[0]) {
    case 'w':
      if (message.size() < kXLogDataHeaderSize) {
        return absl::DataLossError(absl::StrCat("XLogData message of ", message.size(),
                                                " bytes, shorter than its ",
                                                kXLogDataHeaderSize, "-byte header"));
      }
      m.kind = ServerMessage::Kind::kXLogData;
      m.data_start = LoadBig64(message.data() + 1);
      m.wal_end = LoadBig64(message.data() + 9);
      m.send_time_us = static_cast<int64_t>(LoadBig64(message.data() + 17));
      m.data_len = message.size() - kXLogDataHeaderSize;
      return m;
    case 'k':
      if (message.size() != kKeepaliveSize) {
        return absl::DataLossError(absl::StrCat("keepalive message of ", message.size(),
                                                " bytes, expected ", kKeepaliveSize));
      }
      m.kind = ServerMessage::Kind::kKeepalive;
      m.wal_end = LoadBig64(message.data() + 1);
      m.send_time_us = static_cast<int64_t>(LoadBig64(message.data() + 9));
      m.reply_requested = message[17] != 0;
      return m;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown replication message type 0x",
                       absl::Hex(message[0], absl::kZeroPad2)));
  }
}

std::string EncodeStandbyStatus(pg::Lsn write, pg::Lsn flush, pg::Lsn apply,
                                int64_t client_time_us, bool reply_requested) {
  std::string out;
  out.reserve(kStandbyStatusSize);
  out.push_back('r');
  AppendBig64(&out, write);
  AppendBig64(&out, flush);
  AppendBig64(&out, apply);
  AppendBig64(&out, static_cast<uint64_t>(client_time_us));
  out.push_back(reply_requested ? 1 : 0);
  return out;
}

int64_t PgTimestamp(absl::Time t) {
  static const absl::Time kPgEpoch = absl::FromUnixSeconds(946684800);  // 2000-01-01
  return absl::ToInt64Microseconds(t - kPgEpoch);
}

}  // namespace walship::agent::pgstream
