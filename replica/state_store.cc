#include "replica/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_crc.h"
#include "common/status_macros.h"
#include "common/wire/segment_name.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "common/wire/crc32c.h"

namespace walship::replica {

StateStore::StateStore(sys::SysCalls& sys, std::string dir)
    : sys_(sys), dir_(std::move(dir)) {}

std::string StateStore::Encode(const ReplicaState& s, uint64_t seq) {
  std::string body = absl::StrCat("walship-replica-state 3\nseq=", seq,
                                  "\nstream=", s.stream_id,
                                  "\nsegment=", s.durable.segment,
                                  "\noffset=", s.durable.offset,
                                  "\ncomplete=", s.segment_complete ? 1 : 0,
                                  absl::StrFormat("\nprefix_crc=%08x\n", s.prefix_crc32c));
  return absl::StrCat(body,
                      absl::StrFormat("crc=%08x\n", wire::Crc32c(body.data(), body.size())));
}

absl::StatusOr<ReplicaState> StateStore::Decode(const std::string& text, uint64_t* seq) {
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
  int first = 1;
  uint64_t record_seq = 0;
  if (lines.size() == 7 && lines[0] == "walship-replica-state 3") {
    if (lines[1].compare(0, 4, "seq=") != 0 ||
        !absl::SimpleAtoi(lines[1].substr(4), &record_seq)) {
      return bad("line 2 is not seq");
    }
    first = 2;
  } else if (lines.size() != 6 || lines[0] != "walship-replica-state 2") {
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
  auto stream = value(first, "stream");
  auto seg = value(first + 1, "segment");
  auto off = value(first + 2, "offset");
  auto complete = value(first + 3, "complete");
  auto prefix = value(first + 4, "prefix_crc");
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
  if (seq != nullptr) *seq = record_seq;
  return s;
}

absl::StatusOr<StateStore::Newest> StateStore::DecodeFile(const std::string& contents) {
  if (contents.size() != 2 * kSlotBytes) {
    Newest n;
    WALSHIP_ASSIGN_OR_RETURN(n.state, Decode(contents, &n.seq));
    return n;
  }
  std::optional<Newest> best;
  std::optional<Newest> other;
  absl::Status why = absl::DataLossError(absl::StrCat("state file ", kStateFileName,
                                                      " is damaged: both slots are empty"));
  for (int slot = 0; slot < 2; ++slot) {
    std::string record = contents.substr(slot * kSlotBytes, kSlotBytes);
    record.resize(strnlen(record.data(), record.size()));
    if (record.empty()) continue;
    uint64_t seq = 0;
    absl::StatusOr<ReplicaState> st = Decode(record, &seq);
    if (!st.ok()) {
      // A slot torn by a crash mid-save; the other one is the truth.
      why = absl::DataLossError(
          absl::StrCat(st.status().message(), " (slot ", slot, "; the other slot is unusable too)"));
      continue;
    }
    Newest n{*st, slot, seq, std::nullopt};
    if (!best.has_value() || seq > best->seq) {
      other = std::move(best);
      best = std::move(n);
    } else {
      other = std::move(n);
    }
  }
  if (!best.has_value()) return why;
  if (other.has_value()) best->previous = other->state;
  return *best;
}

absl::StatusOr<std::optional<ReplicaState>> StateStore::Load() {
  auto text = sys::ReadFileToString(sys_, absl::StrCat(dir_, "/", kStateFileName));
  previous_.reset();
  if (absl::IsNotFound(text.status())) {
    known_ = true;
    newest_slot_ = -1;
    return std::optional<ReplicaState>();
  }
  if (!text.ok()) return text.status();
  auto n = DecodeFile(*text);
  if (!n.ok()) return n.status();
  known_ = true;
  newest_slot_ = n->slot;
  seq_ = n->seq;
  previous_ = n->previous;
  return std::optional<ReplicaState>(n->state);
}

absl::Status StateStore::Save(const ReplicaState& state) {
  if (!known_) {
    // Learn which slot is newest; a missing or damaged file is recreated.
    if (!Load().ok()) {
      known_ = true;
      newest_slot_ = -1;
    }
  }
  const uint64_t seq = seq_ + 1;
  std::string record = Encode(state, seq);
  if (record.size() >= kSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state record of ", record.size(), " bytes does not fit a ", kSlotBytes,
        "-byte slot (stream id or segment name too long)"));
  }
  record.resize(kSlotBytes, '\0');
  if (newest_slot_ < 0) {
    std::string file = record + std::string(kSlotBytes, '\0');
    WALSHIP_RETURN_IF_ERROR(sys::WriteFileAtomically(sys_, dir_, kStateFileName, file));
    newest_slot_ = 0;
    seq_ = seq;
    return absl::OkStatus();
  }
  const int slot = 1 - newest_slot_;
  const std::string path = absl::StrCat(dir_, "/", kStateFileName);
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenFile(sys_, path, O_WRONLY));
  absl::Status s = sys::PwriteFully(sys_, fd.get(), record.data(), record.size(),
                                    static_cast<off_t>(slot * kSlotBytes));
  if (s.ok()) {
    sys::SysResult r = sys_.Fdatasync(fd.get());
    if (!r.ok()) s = sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  }
  if (!s.ok()) {
    // After a failed write or fdatasync neither slot is known to be durable
    // (the kernel may have dropped the dirty page): the next save rewrites
    // the whole file atomically.
    newest_slot_ = -1;
    seq_ = seq;
    return s;
  }
  newest_slot_ = slot;
  seq_ = seq;
  return absl::OkStatus();
}

std::string SegmentSumLine(const std::string& name, uint64_t length, uint32_t crc32c) {
  return absl::StrFormat("%s %d %08x\n", name, length, crc32c);
}

std::map<std::string, SegmentSum> LoadSegmentSums(sys::SysCalls& sys, const std::string& dir) {
  std::map<std::string, SegmentSum> sums;
  auto text = sys::ReadFileToString(sys, absl::StrCat(dir, "/", kSumsFileName));
  if (!text.ok()) return sums;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    SegmentSum s;
    if (f.size() == 3 && f[2].size() == 8 && absl::SimpleAtoi(f[1], &s.length) &&
        absl::SimpleHexAtoi(f[2], &s.crc32c)) {
      sums[f[0]] = s;
    }
  }
  return sums;
}

absl::StatusOr<std::vector<HeldCopy>> ListHeldSegments(sys::SysCalls& sys,
                                                       const std::string& dir, size_t max) {
  std::vector<std::string> names;
  WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> all,
                           sys::ListDirectory(sys, dir, "destination"));
  for (std::string& n : all) {
    if (wire::ValidateSegmentName(n).ok()) names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  if (names.size() > max) names.erase(names.begin(), names.end() - max);
  const std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys, dir);
  std::vector<HeldCopy> held;
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenFile(sys, path, O_RDONLY));
    struct stat st;
    if (sys::SysResult r = sys.Fstat(fd.get(), &st); !r.ok()) {
      return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", path));
    }
    HeldCopy h{name, static_cast<uint64_t>(st.st_size), 0, false};
    auto sum = sums.find(name);
    if (sum != sums.end()) {
      h.crc32c = sum->second.crc32c;
    } else {
      h.unrecorded = true;
      WALSHIP_ASSIGN_OR_RETURN(h.crc32c, Crc32cOfFileRange(sys, fd.get(), 0, h.length, path));
    }
    held.push_back(std::move(h));
  }
  return held;
}

ProgressFile::ProgressFile(sys::SysCalls& sys, std::string dir)
    : sys_(sys), path_(absl::StrCat(dir, "/", kProgressFileName)) {}

absl::Status ProgressFile::Write(const ReplicaState& state) {
  if (!fd_.valid()) {
    WALSHIP_ASSIGN_OR_RETURN(fd_, sys::OpenFile(sys_, path_, O_WRONLY | O_CREAT, 0600));
  }
  buf_ = StateStore::Encode(state, ++seq_);
  if (buf_.size() >= kBytes) {
    return absl::InvalidArgumentError(absl::StrCat("progress record of ", buf_.size(),
                                                   " bytes does not fit ", kBytes));
  }
  // Fixed size: a shorter record never leaves the end of a longer one.
  buf_.resize(kBytes, '\0');
  absl::Status s = sys::PwriteFully(sys_, fd_.get(), buf_.data(), buf_.size(), 0);
  if (!s.ok()) fd_ = sys::UniqueFd();
  return s;
}

std::optional<ReplicaState> ProgressFile::Load(sys::SysCalls& sys, const std::string& dir) {
  auto text = sys::ReadFileToString(sys, absl::StrCat(dir, "/", kProgressFileName));
  if (!text.ok()) return std::nullopt;
  text->resize(strnlen(text->data(), text->size()));
  absl::StatusOr<ReplicaState> st = StateStore::Decode(*text);
  if (!st.ok()) return std::nullopt;
  return *st;
}

std::optional<ReplicaState> ProgressPast(sys::SysCalls& sys, const std::string& dir,
                                         const ReplicaState& record) {
  std::optional<ReplicaState> p = ProgressFile::Load(sys, dir);
  if (!p.has_value() || p->stream_id != record.stream_id || p->segment_complete ||
      record.segment_complete || p->durable.segment != record.durable.segment ||
      p->durable.segment.empty() || p->durable.offset <= record.durable.offset) {
    return std::nullopt;
  }
  return p;
}

}  // namespace walship::replica
