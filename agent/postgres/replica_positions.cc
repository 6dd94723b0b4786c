#include "agent/postgres/replica_positions.h"

#include <sys/stat.h>

#include <cerrno>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"
#include "common/wire/segment_name.h"

namespace walship::agent {
namespace {

constexpr absl::string_view kMagic = "walship-agent-replicas ";
constexpr int kVersion = 1;
constexpr absl::string_view kCrcPrefix = "crc32c ";
// RFC 3339, UTC, whole seconds.
constexpr char kSeenFormat[] = "%Y-%m-%dT%H:%M:%SZ";

absl::Status Damaged(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("damaged: ", why));
}

// One "replica NAME SEGMENT OFFSET SEEN STATE" line (without "\n").
absl::Status DecodeReplica(absl::string_view line, int number, ReplicaTable& table) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
  auto bad = [number](absl::string_view why) {
    return Damaged(absl::StrCat("line ", number, ": ", why));
  };
  if (f.size() != 6 || f[0] != "replica") return bad("not a replica record");
  if (!ReplicaPositionStore::ValidName(f[1])) return bad("invalid replica name");
  if (!wire::ValidateSegmentName(f[2]).ok()) return bad("invalid segment name");
  KnownReplica r;
  r.flushed.segment = std::string(f[2]);
  if (!absl::SimpleAtoi(f[3], &r.flushed.offset)) return bad("unreadable offset");
  std::string err;
  if (!absl::ParseTime(kSeenFormat, f[4], absl::UTCTimeZone(), &r.seen, &err)) {
    return bad(absl::StrCat("unreadable time: ", err));
  }
  if (f[5] == "released") {
    r.released = true;
  } else if (f[5] != "held") {
    return bad("state is neither held nor released");
  }
  if (!table.replicas.emplace(std::string(f[1]), std::move(r)).second) {
    return bad(absl::StrCat("replica ", f[1], " recorded twice"));
  }
  return absl::OkStatus();
}

}  // namespace

ReplicaPositionStore::ReplicaPositionStore(sys::SysCalls& sys, std::string dir)
    : sys_(sys), dir_(std::move(dir)) {}

std::string ReplicaPositionStore::path() const {
  return absl::StrCat(dir_, "/", kReplicaPositionsFileName);
}

bool ReplicaPositionStore::ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string ReplicaPositionStore::Encode(const ReplicaTable& table) {
  std::string body = absl::StrCat(kMagic, kVersion, "\nstream ", table.stream_id, "\n");
  for (const auto& [name, r] : table.replicas) {
    absl::StrAppend(&body, "replica ", name, " ", r.flushed.segment, " ", r.flushed.offset,
                    " ", absl::FormatTime(kSeenFormat, r.seen, absl::UTCTimeZone()), " ",
                    r.released ? "released" : "held", "\n");
  }
  return absl::StrCat(body, kCrcPrefix,
                      absl::StrFormat("%08x\n", wire::Crc32c(body.data(), body.size())));
}

absl::StatusOr<ReplicaTable> ReplicaPositionStore::Decode(absl::string_view text) {
  if (text.empty()) return Damaged("empty");
  if (text.back() != '\n') return Damaged("the last line is incomplete");
  const absl::string_view first = text.substr(0, text.find('\n'));
  if (!absl::StartsWith(first, kMagic)) return Damaged("not a walship-agent replicas file");
  int version = 0;
  if (!absl::SimpleAtoi(first.substr(kMagic.size()), &version)) {
    return Damaged("unreadable format version");
  }
  if (version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "format version ", version, ", but this walship-agent reads version ", kVersion,
        " (written by a newer one?)"));
  }
  // The CRC line is the last; it covers every byte before it.
  const size_t last_nl = text.rfind('\n', text.size() - 2);
  if (last_nl == absl::string_view::npos) return Damaged("no crc32c line (truncated?)");
  const absl::string_view body = text.substr(0, last_nl + 1);
  const absl::string_view crc_line = text.substr(last_nl + 1, text.size() - last_nl - 2);
  if (!absl::StartsWith(crc_line, kCrcPrefix) ||
      crc_line.size() != kCrcPrefix.size() + 8) {
    return Damaged("no crc32c line at the end (truncated?)");
  }
  // Exactly the 8 lower-case digits Encode writes.
  const std::string have =
      absl::StrFormat("%08x", wire::Crc32c(body.data(), body.size()));
  if (crc_line.substr(kCrcPrefix.size()) != have) {
    return Damaged(absl::StrCat("CRC32C ", have, " of its contents, \"",
                                crc_line.substr(kCrcPrefix.size()), "\" recorded"));
  }
  std::vector<absl::string_view> lines = absl::StrSplit(body, '\n');
  lines.pop_back();  // after the body's last '\n'
  if (lines.size() < 2 || !absl::StartsWith(lines[1], "stream ")) {
    return Damaged("line 2 is not the stream");
  }
  ReplicaTable table;
  table.stream_id = std::string(lines[1].substr(7));
  for (size_t i = 2; i < lines.size(); ++i) {
    if (absl::Status s = DecodeReplica(lines[i], static_cast<int>(i + 1), table); !s.ok()) {
      return s;
    }
  }
  return table;
}

absl::Status ReplicaPositionStore::EnsureDir() {
  const sys::SysResult r = sys_.Mkdir(dir_.c_str(), 0700);
  if (r.ok() || r.err == EEXIST) return absl::OkStatus();
  return sys::ErrnoToStatus(r.err, absl::StrCat("create the state directory ", dir_));
}

absl::StatusOr<ReplicaTable> ReplicaPositionStore::Load() {
  absl::StatusOr<std::string> text = sys::ReadFileToString(sys_, path());
  if (absl::IsNotFound(text.status())) return ReplicaTable{};
  if (!text.ok()) return text.status();
  absl::StatusOr<ReplicaTable> table = Decode(*text);
  if (!table.ok()) {
    return absl::Status(
        table.status().code(),
        absl::StrCat("replica positions file ", path(), ": ", table.status().message(),
                     ". It lists the replicas whose WAL the replication slot must keep; "
                     "restore it, or stop the agent and delete it to forget them all "
                     "(replicas down then are no longer held for)"));
  }
  return table;
}

absl::Status ReplicaPositionStore::Save(const ReplicaTable& table) {
  if (table.stream_id.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError("replica positions: the stream id holds a newline");
  }
  for (const auto& [name, r] : table.replicas) {
    if (!ValidName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica positions: invalid replica name \"", name, "\""));
    }
    if (absl::Status s = wire::ValidateSegmentName(r.flushed.segment); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica positions of ", name, ": ", s.message()));
    }
  }
  return sys::WriteFileAtomically(sys_, dir_, kReplicaPositionsFileName, Encode(table));
}

}  // namespace walship::agent
