// SegmentWriter: the agent's checkpoints (segment_writer.h), and the
// in-place patches they may carry (walship.proto Checkpoint.patches).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/segment_patch.h"
#include "common/status_macros.h"
#include "common/sys/transfer.h"
#include "replica/segment_writer.h"
#include "spdlog/spdlog.h"

namespace walship::replica {

void SegmentWriter::AddCheckpoint(const std::string& name, uint64_t length, uint32_t crc32c,
                                  std::vector<SegmentPatch> patches) {
  absl::MutexLock lock(&mu_);
  checkpoints_[name] = Checkpoint{length, crc32c};
  if (patches.empty()) {
    patches_.erase(name);
  } else {
    patches_[name] = std::move(patches);
  }
}

absl::Status SegmentWriter::SettlePublished() {
  // Checkpoints for segments already published here: the complete segment
  // this session resumed at (verified once), or one whose walship.sums line
  // was lost, presented at handshake and confirmed by the agent (its line is
  // recorded again once the file matches).
  std::vector<std::pair<std::string, Checkpoint>> resumed, confirmed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = checkpoints_.begin(); it != checkpoints_.end();) {
      const std::string& name = it->first;
      if (durable_.complete && name == durable_.position.segment) {
        resumed.emplace_back(name, it->second);
      } else if (FindOpen(name) == nullptr && name < last_begun_) {
        confirmed.emplace_back(name, it->second);
      } else {
        ++it;
        continue;
      }
      patches_.erase(name);
      it = checkpoints_.erase(it);
    }
  }
  for (const auto& [name, cp] : resumed) {
    WALSHIP_RETURN_IF_ERROR(VerifySegmentFile(sys_, dir_, name, cp));
  }
  return publisher_.RecordMissingSums(confirmed);
}

// A segment whose checkpoint carries patches and whose every byte is
// durable gets them before the publication round compares its CRC32C:
//   1. the CRC32C it would have once patched is computed from its durable
//      CRC32C and the bytes the patches replace (segment_patch.h); unless it
//      equals the checkpoint's, nothing is written (kFailedPrecondition);
//   2. unless the file holds those bytes already (a patch applied before a
//      crash, or a no-op): the walship.sums line first (durable), then each
//      patch with pwrite, then fdatasync. A crash in between leaves
//      NAME.partial unpatched (resumed as recorded: the agent's prefix check
//      lets the declared bits differ, and it sends the checkpoint again) or
//      patched and matching its line (recovery publishes it);
//   3. its written and flushed CRC32C become the patched one, and the
//      publication round publishes it as any other.
absl::Status SegmentWriter::ApplyPatches() {
  struct Job {
    std::string name;
    std::shared_ptr<sys::UniqueFd> fd;
    uint32_t crc;
    Checkpoint cp;
    std::vector<SegmentPatch> patches;
  };
  std::vector<Job> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (const Segment& s : open_) {
      auto p = patches_.find(s.name);
      auto cp = checkpoints_.find(s.name);
      if (p == patches_.end() || cp == checkpoints_.end()) continue;
      if (s.written != cp->second.length || s.flushed != s.written) continue;
      jobs.push_back(Job{s.name, s.fd, s.flushed_crc, cp->second, p->second});
    }
  }
  for (const Job& j : jobs) {
    WALSHIP_ASSIGN_OR_RETURN(uint32_t crc, ApplyPatch(j.name, j.fd->get(), j.crc, j.cp, j.patches));
    absl::MutexLock lock(&mu_);
    Segment* s = FindOpen(j.name);
    if (s != nullptr && s->written == j.cp.length && s->flushed == j.cp.length) {
      s->written_crc = crc;
      s->flushed_crc = crc;
    }
    patches_.erase(j.name);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SegmentWriter::ApplyPatch(const std::string& name, int fd,
                                                   uint32_t crc, const Checkpoint& cp,
                                                   const std::vector<SegmentPatch>& patches) {
  const std::string path = PathOf(name, true);
  size_t total = 0;
  bool changes = false;
  for (const SegmentPatch& p : patches) {
    total += p.bytes.size();
    if (p.bytes.empty() || p.offset > cp.length || p.bytes.size() > cp.length - p.offset ||
        total > kMaxPatchBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "segment ", name, ": the agent's checkpoint patches ", p.bytes.size(),
          " bytes at offset ", p.offset, " (", total, " in all) of a segment of ", cp.length,
          " bytes; at most ", kMaxPatchBytes, " bytes inside the segment may be patched"));
    }
    std::string before(p.bytes.size(), '\0');
    WALSHIP_RETURN_IF_ERROR(
        sys::PreadFully(sys_, fd, before.data(), before.size(), static_cast<off_t>(p.offset)));
    crc = PatchedCrc32c(crc, cp.length, p.offset, before, p.bytes);
    changes = changes || before != p.bytes;
  }
  if (crc != cp.crc32c) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "segment %s: with the agent's in-place patches its %d bytes would have CRC32C %08x, "
        "but the checkpoint says %08x; not patching it",
        name, cp.length, crc, cp.crc32c));
  }
  if (!changes) return crc;
  WALSHIP_RETURN_IF_ERROR(publisher_.AppendSum(name, cp.length, cp.crc32c));
  for (const SegmentPatch& p : patches) {
    WALSHIP_RETURN_IF_ERROR(sys::PwriteFully(sys_, fd, p.bytes.data(), p.bytes.size(),
                                             static_cast<off_t>(p.offset)));
  }
  WALSHIP_RETURN_IF_ERROR(SyncFile(fd, path));
  spdlog::info("{}: wrote the {} byte(s) the source rewrote in place after shipping them "
               "(first at offset {}): now as the source's complete segment, CRC32C {:08x}",
               path, total, patches.front().offset, crc);
  return crc;
}

}  // namespace walship::replica
