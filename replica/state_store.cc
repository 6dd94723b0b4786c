#include "replica/state_store.h"

#include <fcntl.h>
#include <sys/uio.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
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

StateStore::~StateStore() {
  if (pending_.has_value()) (void)FinishSave();
  if (aio_ctx_ != 0) sys_.AioDestroy(aio_ctx_);
}

absl::Status StateStore::Save(const ReplicaState& state) {
  WALSHIP_RETURN_IF_ERROR(StartSave(state));
  return FinishSave();
}

absl::Status StateStore::StartSave(const ReplicaState& state) {
  if (pending_.has_value()) {
    return absl::FailedPreconditionError("a state save is already in flight");
  }
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
  Pending p;
  p.seq = seq;
  if (newest_slot_ < 0) {
    std::string file = record + std::string(kSlotBytes, '\0');
    p.slot = 0;
    p.result = sys::WriteFileAtomically(sys_, dir_, kStateFileName, file);
    pending_ = std::move(p);
    return absl::OkStatus();
  }
  p.slot = 1 - newest_slot_;
  const std::string path = absl::StrCat(dir_, "/", kStateFileName);
  const off_t off = static_cast<off_t>(p.slot * kSlotBytes);
  if (direct_) {
    // O_DIRECT + RWF_DSYNC through AIO: the device writes the slot while
    // the caller fdatasyncs its data, with no thread to hand off to.
    sys::SysResult r = sys_.Open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT, 0);
    if (r.ok()) {
      p.fd = sys::UniqueFd(static_cast<int>(r.rc));
      if (aio_ctx_ == 0 && !sys_.AioSetup(1, &aio_ctx_).ok()) aio_ctx_ = 0;
      if (aio_ctx_ != 0) {
        if (buffer_ == nullptr) {
          buffer_.reset(static_cast<char*>(std::aligned_alloc(kSlotBytes, kSlotBytes)));
        }
        std::memcpy(buffer_.get(), record.data(), kSlotBytes);  // kept until FinishSave
        sys::SysResult w = sys_.AioPwrite(aio_ctx_, p.fd.get(), buffer_.get(), kSlotBytes, off,
                                          RWF_DSYNC, p.seq);
        if (w.ok()) {
          p.in_flight = true;
          pending_ = std::move(p);
          return absl::OkStatus();
        }
      }
      p.fd = sys::UniqueFd();
    }
    // No O_DIRECT here (or no AIO, or no RWF_DSYNC for it): save the plain
    // way from now on.
    direct_ = false;
  }
  p.result = WriteSlotPlainly(p.slot, record);
  pending_ = std::move(p);
  return absl::OkStatus();
}

absl::Status StateStore::WriteSlotPlainly(int slot, const std::string& record) {
  const std::string path = absl::StrCat(dir_, "/", kStateFileName);
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenFile(sys_, path, O_WRONLY));
  WALSHIP_RETURN_IF_ERROR(sys::PwriteFully(sys_, fd.get(), record.data(), record.size(),
                                           static_cast<off_t>(slot * kSlotBytes)));
  sys::SysResult r = sys_.Fdatasync(fd.get());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  return absl::OkStatus();
}

absl::Status StateStore::FinishSave() {
  if (!pending_.has_value()) {
    return absl::FailedPreconditionError("no state save in flight");
  }
  Pending p = std::move(*pending_);
  pending_.reset();
  if (p.in_flight) {
    uint64_t tag = 0;
    int64_t res = 0;
    sys::SysResult r{-1, EINTR};
    while (!r.ok() && r.err == EINTR) r = sys_.AioWait(aio_ctx_, &tag, &res);
    const std::string path = absl::StrCat(dir_, "/", kStateFileName);
    if (!r.ok()) {
      p.result = sys::ErrnoToStatus(r.err, absl::StrCat("io_getevents ", path));
    } else if (tag == p.seq && (res == -EINVAL || res == -EOPNOTSUPP)) {
      // The file system took the submission but not the direct write: this
      // record, and every later one, the plain way.
      direct_ = false;
      p.fd = sys::UniqueFd();
      p.result = WriteSlotPlainly(p.slot, std::string(buffer_.get(), kSlotBytes));
    } else if (tag != p.seq || res != static_cast<int64_t>(kSlotBytes)) {
      p.result = res < 0 ? sys::ErrnoToStatus(static_cast<int>(-res),
                                              absl::StrCat("durable write of ", path))
                         : absl::DataLossError(absl::StrCat(
                               "durable write of ", path, " wrote ", res, " of ", kSlotBytes,
                               " bytes"));
    }
    // Closed only now: a watcher's IN_CLOSE_WRITE means the record is durable.
    p.fd = sys::UniqueFd();
  }
  if (!p.result.ok()) {
    // After a failed write or sync neither slot is known to be durable (the
    // kernel may have dropped the dirty page): the next save rewrites the
    // whole file atomically.
    newest_slot_ = -1;
    seq_ = p.seq;
    return p.result;
  }
  newest_slot_ = p.slot;
  seq_ = p.seq;
  return absl::OkStatus();
}

}  // namespace walship::replica
