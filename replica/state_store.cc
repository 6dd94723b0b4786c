#include "replica/state_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"

namespace walship::replica {

StateStore::StateStore(sys::SysCalls& sys, std::string dir)
    : sys_(sys), dir_(std::move(dir)) {}

std::string StateStore::Encode(const ReplicaState& s) {
  std::string body = absl::StrCat("walship-replica-state 2\nstream=", s.stream_id,
                                  "\nsegment=", s.durable.segment,
                                  "\noffset=", s.durable.offset,
                                  "\ncomplete=", s.segment_complete ? 1 : 0,
                                  absl::StrFormat("\nprefix_crc=%08x\n", s.prefix_crc32c));
  return absl::StrCat(body,
                      absl::StrFormat("crc=%08x\n", wire::Crc32c(body.data(), body.size())));
}

absl::StatusOr<ReplicaState> StateStore::Decode(const std::string& text) {
  auto bad = [](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("state file ", kStateFileName,
                                            " is damaged: ", why));
  };
  size_t crc_at = text.rfind("crc=");
  if (crc_at == std::string::npos) return bad("no crc line");
  std::string body = text.substr(0, crc_at);
  uint32_t want = 0;
  std::string crc_text = text.substr(crc_at + 4);
  while (!crc_text.empty() && crc_text.back() == '\n') crc_text.pop_back();
  if (!absl::SimpleHexAtoi(crc_text, &want)) return bad("unreadable crc");
  if (wire::Crc32c(body.data(), body.size()) != want) return bad("crc mismatch");
  std::vector<std::string> lines = absl::StrSplit(body, '\n', absl::SkipEmpty());
  if (lines.size() != 6 || lines[0] != "walship-replica-state 2") {
    return bad("unknown layout or version");
  }
  auto value = [&](int i, absl::string_view key) -> absl::StatusOr<std::string> {
    std::string prefix = absl::StrCat(key, "=");
    if (lines[i].compare(0, prefix.size(), prefix) != 0) {
      return bad(absl::StrCat("line ", i + 1, " is not ", key));
    }
    return lines[i].substr(prefix.size());
  };
  ReplicaState s;
  auto stream = value(1, "stream");
  auto seg = value(2, "segment");
  auto off = value(3, "offset");
  auto complete = value(4, "complete");
  auto prefix = value(5, "prefix_crc");
  if (!prefix.ok()) return prefix.status();
  if (!absl::SimpleHexAtoi(*prefix, &s.prefix_crc32c)) return bad("unreadable prefix_crc");
  if (!stream.ok()) return stream.status();
  if (!seg.ok()) return seg.status();
  if (!off.ok()) return off.status();
  if (!complete.ok()) return complete.status();
  s.stream_id = *stream;
  s.durable.segment = *seg;
  if (!absl::SimpleAtoi(*off, &s.durable.offset)) return bad("unreadable offset");
  s.segment_complete = *complete == "1";
  return s;
}

absl::StatusOr<std::optional<ReplicaState>> StateStore::Load() {
  auto text = sys::ReadFileToString(sys_, absl::StrCat(dir_, "/", kStateFileName));
  if (absl::IsNotFound(text.status())) return std::optional<ReplicaState>();
  if (!text.ok()) return text.status();
  auto s = Decode(*text);
  if (!s.ok()) return s.status();
  return std::optional<ReplicaState>(*s);
}

absl::Status StateStore::Save(const ReplicaState& state) {
  return sys::WriteFileAtomically(sys_, dir_, kStateFileName, Encode(state));
}

}  // namespace walship::replica
