#include "replica/recovery.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_crc.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "common/wire/segment_name.h"
#include "replica/publisher.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

// One run of RecoverDirectory(): the steps in the order they run, over the
// lists of what the directory holds.
class DirectoryRecovery {
 public:
  DirectoryRecovery(sys::SysCalls& sys, const std::string& dir,
                    const std::optional<ReplicaState>& state, TailPolicy tail,
                    uint64_t segment_size)
      : sys_(sys),
        dir_(dir),
        state_(state),
        keep_tail_(tail == TailPolicy::kKeep),
        segment_size_(segment_size) {}

  absl::StatusOr<RecoveredPoint> Run();

 private:
  bool has_record() const { return state_.has_value() && !state_->durable.segment.empty(); }
  std::string PathOf(const std::string& name, bool partial) const {
    return SegmentPath(dir_, name, partial);
  }
  absl::Status ListDirectory();
  absl::Status RemovePublishedCopies();
  absl::Status FinishLostRenames();
  // Sets dp_ from the record (or the newest published segment).
  absl::Status FindDurablePoint();
  absl::Status ResumeInPartial(const std::string& path);
  absl::Status RemoveUnacknowledged();
  absl::Status CheckPrefix();
  absl::StatusOr<bool> PublishPatched();
  absl::StatusOr<std::optional<DurablePoint>> TailPoint();
  absl::Status Unlink(const std::string& name);

  sys::SysCalls& sys_;
  const std::string& dir_;
  const std::optional<ReplicaState>& state_;
  const bool keep_tail_;
  const uint64_t segment_size_;  // 0: unknown (see RecoverDirectory)
  std::vector<std::string> complete_, partial_;  // names, without .partial
  DurablePoint dp_;
  uint64_t tail_size_ = 0;  // the partial's size when it keeps a tail
  bool removed_ = false;    // an entry was removed: the directory needs an fsync
  bool sync_dir_ = false;   // the resumed segment's entry needs one too
};

absl::StatusOr<RecoveredPoint> DirectoryRecovery::Run() {
  WALSHIP_RETURN_IF_ERROR(ListDirectory());
  WALSHIP_RETURN_IF_ERROR(RemovePublishedCopies());
  WALSHIP_RETURN_IF_ERROR(FinishLostRenames());
  WALSHIP_RETURN_IF_ERROR(FindDurablePoint());
  WALSHIP_RETURN_IF_ERROR(RemoveUnacknowledged());
  if (removed_ || sync_dir_) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
  WALSHIP_RETURN_IF_ERROR(CheckPrefix());
  WALSHIP_ASSIGN_OR_RETURN(std::optional<DurablePoint> tail, TailPoint());
  return RecoveredPoint{dp_, tail};
}

absl::Status DirectoryRecovery::ListDirectory() {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           sys::ListDirectory(sys_, dir_, "destination"));
  for (const std::string& n : names) {
    if (absl::EndsWith(n, kPartialSuffix)) {
      partial_.push_back(n.substr(0, n.size() - strlen(kPartialSuffix)));
    } else if (wire::ValidateSegmentName(n).ok()) {  // never the replica's walship.*
      complete_.push_back(n);
    }
  }
  std::sort(complete_.begin(), complete_.end());
  return absl::OkStatus();
}

absl::Status DirectoryRecovery::Unlink(const std::string& name) {
  const std::string path = PathOf(name, true);
  sys::SysResult r = sys_.Unlink(path.c_str());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("unlink ", path));
  removed_ = true;
  return absl::OkStatus();
}

// A partial whose segment is published too is a leftover copy (a rename
// undone and redone across crashes): every acknowledged byte of that
// segment is in the published file, which was verified before its rename.
absl::Status DirectoryRecovery::RemovePublishedCopies() {
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (!std::binary_search(complete_.begin(), complete_.end(), *it)) {
      ++it;
      continue;
    }
    spdlog::info("removing {}{}: {} is published", *it, kPartialSuffix, *it);
    WALSHIP_RETURN_IF_ERROR(Unlink(*it));
    it = partial_.erase(it);
  }
  return absl::OkStatus();
}

// Flush() saves the record that moves past a segment (or calls it complete)
// beside the directory fsync that makes its rename durable, so a crash can
// leave that segment as NAME.partial with the record already past it. Its
// bytes and its checksum line were durable before that record was saved:
// finish the publication. Such a partial that does not match its line is
// damage.
absl::Status DirectoryRecovery::FinishLostRenames() {
  if (!has_record()) return absl::OkStatus();
  bool renamed = false;
  std::optional<std::map<std::string, SegmentSum>> sums;
  for (auto it = partial_.begin(); it != partial_.end();) {
    const std::string p = *it;
    if (!(p < state_->durable.segment ||
          (p == state_->durable.segment && state_->segment_complete))) {
      ++it;
      continue;
    }
    if (!sums.has_value()) sums = LoadSegmentSums(sys_, dir_);
    auto sum = sums->find(p);
    if (sum == sums->end()) {
      // No line to verify it against (an ancestor timeline's switch
      // segment, or a line lost to damage): not this case. It lies before
      // the durable position, so its bytes may have been acknowledged: it
      // stays (never served by restore without a line), and is not removed
      // below.
      ++it;
      continue;
    }
    if (absl::Status v = VerifySegmentFile(sys_, dir_, p, sum->second, true); !v.ok()) {
      return absl::DataLossError(absl::StrCat(
          "state says ", state_->durable.ToString(), " is durable, so ", p,
          " is complete, but ", p, kPartialSuffix, " does not match ", kSumsFileName, ": ",
          v.message()));
    }
    WALSHIP_RETURN_IF_ERROR(RenamePartial(sys_, dir_, p));
    spdlog::info("{}{}: complete and matching {}, published (its rename had not reached "
                 "the disk)", p, kPartialSuffix, kSumsFileName);
    renamed = true;
    complete_.push_back(p);
    it = partial_.erase(it);
  }
  if (renamed) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
  std::sort(complete_.begin(), complete_.end());
  return absl::OkStatus();
}

absl::Status DirectoryRecovery::FindDurablePoint() {
  if (has_record()) {
    const std::string& s = state_->durable.segment;
    if (!std::binary_search(complete_.begin(), complete_.end(), s)) {
      return ResumeInPartial(PathOf(s, true));
    }
    dp_.position.segment = s;
    dp_.complete = true;
    auto fd = sys::OpenFile(sys_, PathOf(s, false), O_RDONLY);
    if (!fd.ok()) return fd.status();
    WALSHIP_ASSIGN_OR_RETURN(dp_.position.offset, FileSizeOf(sys_, fd->get(), s));
  } else if (!complete_.empty()) {
    // No state (lost or never written): everything complete is verified and
    // durable, so resume after the newest complete segment.
    dp_.position.segment = complete_.back();
    dp_.complete = true;
    auto fd = sys::OpenFile(sys_, PathOf(complete_.back(), false), O_RDONLY);
    if (!fd.ok()) return fd.status();
    WALSHIP_ASSIGN_OR_RETURN(dp_.position.offset,
                             FileSizeOf(sys_, fd->get(), complete_.back()));
  }
  return absl::OkStatus();
}

// The record's segment is not published: resume inside its NAME.partial.
absl::Status DirectoryRecovery::ResumeInPartial(const std::string& path) {
  auto fd = sys::OpenFile(sys_, path, O_RDWR);
  if (absl::IsNotFound(fd.status())) {
    if (state_->durable.offset > 0) {
      return absl::DataLossError(absl::StrCat(
          "state says ", state_->durable.ToString(), " is durable but ", path, " is missing"));
    }
    dp_.position = state_->durable;
    return absl::OkStatus();
  }
  if (!fd.ok()) return fd.status();
  WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(sys_, fd->get(), path));
  if (size < state_->durable.offset) {
    return absl::DataLossError(absl::StrCat("state says ", state_->durable.ToString(),
                                            " is durable but ", path, " holds only ", size,
                                            " bytes"));
  }
  if (size > state_->durable.offset) {
    if (keep_tail_) {
      // Written after the last recorded flush: kept only if the agent
      // confirms it (SegmentWriter::ResolveTail).
      // A pre-sized one (spare_segment.h): the zeros the spare left cannot
      // be told from zero bytes of data, so the tail ends at its last
      // non-zero byte; zero bytes of data past it are received again.
      const uint64_t seg = segment_size_ != 0
                               ? segment_size_
                               : PgSegmentSizeOf(sys_, fd->get(), state_->durable.segment);
      WALSHIP_ASSIGN_OR_RETURN(
          tail_size_, PartialTailEnd(sys_, fd->get(), state_->durable.offset, size, seg, path));
      if (tail_size_ != size) {
        spdlog::info("{} is pre-sized to its segment size {}: bytes past {} are zeros, "
                     "not held", path, size, tail_size_);
      }
      if (tail_size_ == state_->durable.offset) tail_size_ = 0;
    } else {
      // Written after the last flush, never acknowledged: discard.
      sys::SysResult r = sys_.Ftruncate(fd->get(), state_->durable.offset);
      if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("truncate ", path));
    }
  }
  // The record may have been saved alongside this fdatasync when the
  // process died (a cycle that records a new segment), or it comes from
  // walship.progress (RecoverFromStore): the bytes are in the page cache
  // but maybe not on disk. Make sure before building on them.
  sys::SysResult r = sys_.Fdatasync(fd->get());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  dp_.position = state_->durable;
  // Nor need its directory entry be durable: the process may have died
  // before the directory fsync meant for it. BeginSegment counts on it.
  sync_dir_ = true;
  return absl::OkStatus();
}

absl::Status DirectoryRecovery::RemoveUnacknowledged() {
  for (const std::string& p : partial_) {
    if (!dp_.complete && p == dp_.position.segment) continue;
    if (p < dp_.position.segment || (p == dp_.position.segment && dp_.complete)) {
      // Before the durable position: acknowledged, maybe. Nothing proves
      // otherwise, so nothing of it is deleted.
      spdlog::warn("keeping {}{}: it lies before the durable position {}, so its bytes may "
                   "have been acknowledged, and {} has no line to verify it by",
                   p, kPartialSuffix, dp_.position.ToString(), kSumsFileName);
      continue;
    }
    // After the recorded segment: no byte of a segment is acknowledged
    // before the record names it (Flush), so these never were.
    spdlog::info("removing {}{}: never acknowledged as durable", p, kPartialSuffix);
    WALSHIP_RETURN_IF_ERROR(Unlink(p));
  }
  return absl::OkStatus();
}

absl::Status DirectoryRecovery::CheckPrefix() {
  if (dp_.position.segment.empty() || dp_.position.offset == 0) return absl::OkStatus();
  auto fd = sys::OpenFile(sys_, PathOf(dp_.position.segment, !dp_.complete), O_RDONLY);
  if (!fd.ok()) return fd.status();
  WALSHIP_ASSIGN_OR_RETURN(
      dp_.prefix_crc32c, Crc32cOfFileRange(sys_, fd->get(), 0, dp_.position.offset,
                                           dp_.position.segment));
  if (state_.has_value() && !dp_.complete && state_->durable == dp_.position &&
      state_->prefix_crc32c != dp_.prefix_crc32c) {
    WALSHIP_ASSIGN_OR_RETURN(bool patched, PublishPatched());
    if (patched) return absl::OkStatus();
    return absl::DataLossError(absl::StrFormat(
        "the durable bytes of %s changed on disk: CRC32C of its first %d bytes is %08x, "
        "%08x when acknowledged",
        PathOf(dp_.position.segment, true), dp_.position.offset, dp_.prefix_crc32c,
        state_->prefix_crc32c));
  }
  return absl::OkStatus();
}

// The record's NAME.partial differs from its prefix CRC: damage, unless the
// agent's in-place patch was written into it after every byte was durable
// and before the record moved on (SegmentWriter::ApplyPatches). Its
// walship.sums line was made durable before the patch, and is only written
// for a segment that matched the agent's checkpoint: a file matching it in
// length and CRC32C is that complete segment. Publishes it; false when it
// does not match a line.
absl::StatusOr<bool> DirectoryRecovery::PublishPatched() {
  const std::string& name = dp_.position.segment;
  std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys_, dir_);
  auto sum = sums.find(name);
  if (sum == sums.end() || !VerifySegmentFile(sys_, dir_, name, sum->second, true).ok()) {
    return false;
  }
  WALSHIP_RETURN_IF_ERROR(RenamePartial(sys_, dir_, name));
  WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
  spdlog::info("{}{}: complete, patched in place as the agent's checkpoint said, and matching "
               "{}: published (the record, at {}, had not moved on yet)",
               name, kPartialSuffix, kSumsFileName, dp_.position.ToString());
  complete_.push_back(name);
  std::sort(complete_.begin(), complete_.end());
  dp_ = DurablePoint{Position{name, sum->second.length}, true, sum->second.crc32c};
  tail_size_ = 0;
  return true;
}

absl::StatusOr<std::optional<DurablePoint>> DirectoryRecovery::TailPoint() {
  if (tail_size_ == 0) return std::optional<DurablePoint>();
  const std::string path = PathOf(dp_.position.segment, true);
  auto fd = sys::OpenFile(sys_, path, O_RDONLY);
  if (!fd.ok()) return fd.status();
  DurablePoint tail{Position{dp_.position.segment, tail_size_}, false, 0};
  // The prefix's CRC is known: extend it over the tail only.
  WALSHIP_ASSIGN_OR_RETURN(
      tail.prefix_crc32c,
      Crc32cOfFileRange(sys_, fd->get(), dp_.position.offset, tail_size_ - dp_.position.offset,
                        path, dp_.prefix_crc32c));
  return std::optional<DurablePoint>(tail);
}

}  // namespace

absl::StatusOr<RecoveredPoint> RecoverDirectory(sys::SysCalls& sys, const std::string& dir,
                                                const std::optional<ReplicaState>& state,
                                                TailPolicy tail, uint64_t segment_size) {
  return DirectoryRecovery(sys, dir, state, tail, segment_size).Run();
}

uint64_t PgSegmentSizeOf(sys::SysCalls& sys, int fd, const std::string& name) {
  uint8_t header[pg::kLongPageHeaderSize];
  if (!sys::PreadFully(sys, fd, header, sizeof(header), 0).ok()) return 0;
  auto h = pg::DecodePageHeader(absl::MakeConstSpan(header, sizeof(header)));
  if (!h.ok() || !h->is_long || !pg::IsValidSegmentSize(h->seg_size) ||
      !pg::ParseSegmentName(name, h->seg_size).ok()) {
    return 0;
  }
  return h->seg_size;
}

absl::StatusOr<uint64_t> PartialTailEnd(sys::SysCalls& sys, int fd, uint64_t from, uint64_t size,
                                        uint64_t segment_size, const std::string& path) {
  if (segment_size == 0 || size != segment_size || size <= from) return size;
  return EndOfNonZeroBytes(sys, fd, from, size, path);
}

absl::StatusOr<DurablePoint> RecoverFromStore(StateStore& store, const RecoverFn& recover,
                                              std::optional<ReplicaState>* state) {
  if (state->has_value()) {
    // Acknowledged bytes past the lazily saved record: walship.progress
    // names them, and recovery trusts them only while they still have the
    // CRC32C they had when received (kDataLoss otherwise: a power loss kept
    // the claim, not the bytes). They become the record before anything else.
    if (std::optional<ReplicaState> p = ProgressPast(store.sys(), store.dir(), **state)) {
      absl::StatusOr<DurablePoint> at = recover(p);
      if (at.ok()) {
        spdlog::info("resuming from {} (walship.progress, verified against the file), past "
                     "the record at {}", p->durable.ToString(), (*state)->durable.ToString());
        WALSHIP_RETURN_IF_ERROR(store.Save(*p));
        *state = p;
        return at;
      }
      spdlog::warn("walship.progress names {} but recovering from it failed ({}); using the "
                   "record at {}", p->durable.ToString(), at.status().ToString(),
                   (*state)->durable.ToString());
    }
  }
  absl::StatusOr<DurablePoint> recovered = recover(*state);
  if (!absl::IsDataLoss(recovered.status()) || !store.previous().has_value() ||
      !state->has_value() || store.previous()->stream_id != (*state)->stream_id) {
    return recovered;
  }
  spdlog::warn("the newest position record ({}) names bytes that are not on disk as recorded "
               "({}); a machine that stops during the fdatasync this record was saved "
               "alongside leaves exactly this, before any acknowledgement. Resuming from the "
               "record before it ({}) and fetching the rest from the agent again",
               (*state)->durable.ToString(), std::string(recovered.status().message()),
               store.previous()->durable.ToString());
  *state = store.previous();
  recovered = recover(*state);
  if (recovered.ok()) WALSHIP_RETURN_IF_ERROR(store.Save(**state));
  return recovered;
}

}  // namespace walship::replica
