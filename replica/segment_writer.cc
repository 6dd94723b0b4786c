#include "replica/segment_writer.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/file_crc.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"
#include "common/wire/segment_name.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {
bool SamePoint(const DurablePoint& a, const DurablePoint& b) {
  return a.position == b.position && a.complete == b.complete &&
         a.prefix_crc32c == b.prefix_crc32c;
}

// After a failed sync whose cycle had already saved a record claiming its
// bytes: puts the last durable point back, so nothing trusts the record,
// and returns the sync's error (data loss if the record cannot be put back).
absl::Status PutBackRecord(const absl::Status& failed, const SegmentWriter::PersistFn& persist,
                           const DurablePoint& before) {
  absl::Status back = persist(before);
  if (back.ok()) return failed;
  return absl::DataLossError(absl::StrCat(
      failed.message(), "; and restoring the previous durable position failed: ",
      back.message()));
}
}  // namespace

SegmentWriter::SegmentWriter(sys::SysCalls& sys, std::string dest_dir,
                             WriterOptions options, Clock& clock)
    : clock_(clock),
      sys_(sys),
      dir_(std::move(dest_dir)),
      options_(options),
      crc_reader_(sys),
      publisher_(sys, dir_, options_.drop_behind, clock) {}

SegmentWriter::~SegmentWriter() = default;

absl::Status SegmentWriter::SyncOverlapped(int fd, const std::string& path,
                                           const PersistFn& persist,
                                           const DurablePoint& target) {
  std::vector<std::function<absl::Status()>> jobs;
  jobs.push_back([this, fd, &path] { return SyncFile(fd, path); });
  jobs.push_back([&persist, &target] { return persist(target); });
  return pool_.RunAtOnce(std::move(jobs));
}

absl::Status SegmentWriter::SyncFile(int fd, const std::string& path) {
  const absl::Time start = clock_.Now();
  sys::SysResult r = sys_.Fdatasync(fd);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  if (options_.on_data_sync) options_.on_data_sync(clock_.Now() - start);
  return absl::OkStatus();
}

std::string SegmentWriter::PathOf(const std::string& name, bool partial) const {
  return SegmentPath(dir_, name, partial);
}

std::optional<DurablePoint> SegmentWriter::tail() const {
  absl::MutexLock lock(&mu_);
  return tail_;
}

absl::Status SegmentWriter::ResolveTail(bool keep) {
  std::optional<DurablePoint> tail;
  DurablePoint durable;
  {
    absl::MutexLock lock(&mu_);
    tail = tail_;
    durable = durable_;
  }
  if (!tail.has_value()) return absl::OkStatus();
  if (!keep) {
    // Cutting back need not be durable: a crash that undoes it leaves the
    // same unconfirmed tail for the next recovery.
    const std::string path = PathOf(durable.position.segment, true);
    WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenFile(sys_, path, O_RDWR));
    sys::SysResult r = sys_.Ftruncate(fd.get(), durable.position.offset);
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("truncate ", path));
  }
  absl::MutexLock lock(&mu_);
  if (keep) durable_ = *tail;
  tail_.reset();
  return absl::OkStatus();
}

absl::StatusOr<DurablePoint> SegmentWriter::Recover(const std::optional<ReplicaState>& state,
                                                    Tail keep) {
  WALSHIP_ASSIGN_OR_RETURN(RecoveredPoint r,
                           RecoverDirectory(sys_, dir_, state, keep, options_.segment_size));
  absl::MutexLock lock(&mu_);
  durable_ = r.durable;
  tail_ = r.tail;
  last_begun_ = r.durable.position.segment;
  return r.durable;
}

absl::Status SegmentWriter::EnsurePipe() {
  if (pipe_.has_value()) return absl::OkStatus();
  WALSHIP_ASSIGN_OR_RETURN(sys::Pipe p, sys::Pipe::Create(sys_, options_.pipe_bytes));
  pipe_.emplace(std::move(p));
  return absl::OkStatus();
}

absl::Status SegmentWriter::WriteData(int sock, const wire::FrameHeader& h,
                                      net::DataConn* tls) {
  WALSHIP_ASSIGN_OR_RETURN(const FrameTarget t, TargetOf(h));
  const uint64_t off = h.offset;
  const uint64_t len = h.payload_length;
  uint32_t crc = 0;
  // Bytes already on disk are compared, never overwritten.
  const uint64_t overlap = std::min(len, t.written - off);
  if (overlap > 0) WALSHIP_RETURN_IF_ERROR(CompareResent(sock, tls, t, off, overlap, &crc));
  const uint64_t rest = len - overlap;
  if (rest > 0) return LandNew(sock, tls, h, t, rest, crc);
  if (crc != h.payload_crc32c) {
    return WithReason(absl::DataLossError(absl::StrCat(
                          "payload checksum mismatch in resent frame of ", t.name, " at offset ",
                          off)),
                      Reason::kChecksum);
  }
  return absl::OkStatus();
}

absl::Status SegmentWriter::LandNew(int sock, net::DataConn* tls, const wire::FrameHeader& h,
                                    const FrameTarget& t, uint64_t rest, uint32_t resent_crc) {
  const std::string path = PathOf(t.name, true);
  const uint64_t written = t.written;
  absl::Status s;
  if (tls != nullptr) {
    s = tls->ReceiveToFile(t.fd->get(), static_cast<off_t>(written), rest, options_.io);
  } else if (options_.transport == Transport::kZeroCopy) {
    s = EnsurePipe();
    if (s.ok()) {
      s = sys::SpliceFully(sys_, sock, *pipe_, t.fd->get(), static_cast<off_t>(written), rest,
                           options_.io);
      if (!s.ok()) pipe_.reset();  // may hold stray bytes
    }
  } else {
    if (buffer_.size() < options_.copy_buffer_bytes) buffer_.resize(options_.copy_buffer_bytes);
    s = sys::CopySocketToFile(sys_, sock, t.fd->get(), static_cast<off_t>(written), rest,
                              absl::MakeSpan(buffer_), options_.io);
  }
  uint32_t new_crc = 0;
  if (s.ok() && options_.trace != nullptr) {
    options_.trace->Record(TraceStage::kSpliced, t.name, written + rest);
  }
  if (s.ok()) {
    // One pass over what landed: the frame's CRC (to verify it) and the
    // segment's running CRC (for the durable prefix and the checkpoint).
    auto got = crc_reader_.Twice(t.fd->get(), written, rest, path, resent_crc, t.written_crc);
    if (!got.ok()) {
      s = got.status();
    } else if (got->first != h.payload_crc32c) {
      s = WithReason(absl::DataLossError(absl::StrFormat(
                         "payload checksum mismatch in %s at offset %d (%d bytes): frame says "
                         "%08x, received %08x; discarded",
                         t.name, h.offset, h.payload_length, h.payload_crc32c, got->first)),
                     Reason::kChecksum);
    } else {
      new_crc = got->second;
      if (options_.trace != nullptr) {
        options_.trace->Record(TraceStage::kVerified, t.name, written + rest);
      }
    }
  }
  if (!s.ok()) return DiscardLanded(t, s);
  const bool zerocopy =
      tls != nullptr ? tls->zerocopy() : options_.transport == Transport::kZeroCopy;
  return CommitLanded(t, rest, new_crc, zerocopy);
}

absl::StatusOr<DurablePoint> SegmentWriter::Flush(const PersistFn& persist) {
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
  }
  absl::StatusOr<DurablePoint> dp = FlushCycle(persist);
  if (!dp.ok()) CutBackAfterFailure(dp.status());
  return dp;
}

bool SegmentWriter::sync_failed() const {
  absl::MutexLock lock(&mu_);
  return !failed_.ok();
}

SegmentWriter::Segment* SegmentWriter::FindOpen(const std::string& name) {
  for (Segment& s : open_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void SegmentWriter::CutBackAfterFailure(const absl::Status& why) {
  struct Cut {
    std::shared_ptr<sys::UniqueFd> fd;
    std::string name;
    uint64_t to;
  };
  std::vector<Cut> cuts;
  {
    absl::MutexLock lock(&mu_);
    if (failed_.ok()) failed_ = why;
    for (Segment& s : open_) {
      if (s.written > s.flushed) cuts.push_back({s.fd, s.name, s.flushed});
      s.written = s.flushed;
      s.written_crc = s.flushed_crc;
    }
  }
  for (const Cut& c : cuts) {
    // Bytes past the last durable offset may be gone from the disk while
    // still readable from the cache: none of them is kept.
    sys::SysResult r = sys_.Ftruncate(c.fd->get(), static_cast<off_t>(c.to));
    if (r.ok()) {
      spdlog::warn("{}: cut back to its last durable offset {} after a failed flush ({})",
                   PathOf(c.name, true), c.to, why.ToString());
    } else {
      spdlog::error("{}: cutting back to its last durable offset {} after a failed flush "
                    "failed too: {}; the next session resumes from the recorded position",
                    PathOf(c.name, true), c.to,
                    sys::ErrnoToStatus(r.err, "ftruncate").ToString());
    }
  }
}

// A cycle runs in two rounds, each planned under mu_, executed without it
// (every file operation) and committed under mu_, so the receiver never
// waits for a device flush:
//   data round         plan: which files to fdatasync up to which byte, and
//                      which checksum lines can go along; execute: those
//                      syncs at once (in the common cycle, one sync beside
//                      the record); commit: the flushed offsets.
//   publication round  plan: the segments now complete and matching their
//                      checkpoint, the entries the directory fsync covers,
//                      bytes of younger segments that arrived during the
//                      data round, and the point the cycle reaches; execute:
//                      checksum lines and renames, then the directory fsync
//                      beside the late bytes' syncs and the record; commit:
//                      entries, offsets, the published segments leave
//                      open_, the durable point moves.
// The publication round is planned only after the data round committed: it
// publishes what that round made durable, and picks up what arrived
// meanwhile (at a segment boundary, the next segment's first bytes).
absl::StatusOr<DurablePoint> SegmentWriter::FlushCycle(const PersistFn& persist) {
  WALSHIP_RETURN_IF_ERROR(SettlePublished());
  WALSHIP_RETURN_IF_ERROR(ApplyPatches());
  DataRound data;
  {
    absl::MutexLock lock(&mu_);
    data = PlanDataRound(persist != nullptr);
  }
  WALSHIP_RETURN_IF_ERROR(ExecuteDataRound(data, persist));
  PublicationRound publication;
  {
    absl::MutexLock lock(&mu_);
    CommitDataRound(data);
    WALSHIP_ASSIGN_OR_RETURN(publication, PlanPublicationRound(data));
  }
  WALSHIP_RETURN_IF_ERROR(ExecutePublicationRound(data, publication, persist));
  absl::MutexLock lock(&mu_);
  return CommitPublicationRound(publication);
}

SegmentWriter::DataRound SegmentWriter::PlanDataRound(bool persisting) {
  DataRound r;
  r.before = durable_;
  // The common cycle: more bytes of the oldest open segment, whose entry is
  // durable and which has nothing to publish yet. Just its fdatasync; bytes
  // of younger segments wait for the next cycle (a new entry costs a
  // directory fsync, which need not delay acknowledging the older segment's
  // bytes). When its bytes are the first past the recorded segment, the
  // record must name that segment before they can be acknowledged: it is
  // saved alongside (its target is known before the sync).
  if (persisting && !open_.empty()) {
    const Segment& f = open_.front();
    if (f.entry_durable && f.flushed < f.written &&
        checkpoints_.find(f.name) == checkpoints_.end() &&
        (r.before.complete || r.before.position.segment == f.name)) {
      r.pending.push_back({f.fd, f.name, f.written, f.written_crc});
      r.common = DurablePoint{Position{f.name, f.written}, false, f.written_crc};
      r.record_first = r.before.position.segment != f.name;
      return r;
    }
  }
  // Bytes of segments begun later wait for the next Flush().
  for (const Segment& s : open_) {
    if (s.flushed < s.written) r.pending.push_back({s.fd, s.name, s.written, s.written_crc});
  }
  // Segments written to the end that match their checkpoint get their
  // checksum line during the data's fdatasync, not after it. A line for a
  // segment not yet published is harmless: walship.sums is consulted for
  // published names only, and a repeated line says the same.
  for (const Segment& s : open_) {
    auto it = checkpoints_.find(s.name);
    if (it == checkpoints_.end() || s.written != it->second.length ||
        s.written_crc != it->second.crc32c) {
      break;
    }
    r.early_sums.push_back({s.name, it->second.length, it->second.crc32c});
  }
  return r;
}

absl::Status SegmentWriter::ExecuteDataRound(const DataRound& round, const PersistFn& persist) {
  if (round.common.has_value()) {
    const Pending& p = round.pending[0];
    if (!round.record_first) return SyncFile(p.fd->get(), PathOf(p.name, true));
    absl::Status s = SyncOverlapped(p.fd->get(), PathOf(p.name, true), persist, *round.common);
    // The record may now claim bytes that are not durable.
    if (!s.ok()) return PutBackRecord(s, persist, round.before);
    return absl::OkStatus();
  }
  // Several files at a segment boundary (the old segment's tail, the new
  // one's head, walship.sums): their device flushes overlap (and on a
  // journaling file system share one commit) instead of queueing.
  std::vector<std::function<absl::Status()>> jobs;
  for (const Pending& p : round.pending) {
    jobs.push_back([this, &p] { return SyncFile(p.fd->get(), PathOf(p.name, true)); });
  }
  if (!round.early_sums.empty()) {
    jobs.push_back([this, &round] {
      for (const Sum& e : round.early_sums) {
        WALSHIP_RETURN_IF_ERROR(publisher_.AppendSum(e.name, e.length, e.crc32c));
      }
      return absl::OkStatus();
    });
  }
  return pool_.RunAtOnce(std::move(jobs));
}

void SegmentWriter::CommitDataRound(const DataRound& round) {
  for (const Pending& p : round.pending) {
    for (Segment& s : open_) {
      if (s.name == p.name && p.written > s.flushed) {
        s.flushed = p.written;
        s.flushed_crc = p.written_crc;
      }
    }
  }
}

absl::StatusOr<SegmentWriter::PublicationRound> SegmentWriter::PlanPublicationRound(
    const DataRound& data) {
  PublicationRound r;
  // Segments whose bytes are all durable and whose checkpoint matches, in
  // order from the oldest.
  for (const Segment& s : open_) {
    auto it = checkpoints_.find(s.name);
    if (it == checkpoints_.end()) break;
    const Checkpoint cp = it->second;
    if (s.written > cp.length) {
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
          "divergent history: ", s.name, " has ", s.written,
          " bytes here but the agent says it is complete at ", cp.length)), Reason::kDivergent);
    }
    if (s.flushed < cp.length || patches_.count(s.name) != 0) break;  // patches: next cycle
    if (s.flushed_crc != cp.crc32c) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "segment %s: CRC32C of the %d bytes written here is %08x but the agent's "
          "checkpoint says %08x; not publishing it",
          s.name, cp.length, s.flushed_crc, cp.crc32c));
    }
    r.finals.push_back({s.name, cp.length, cp.crc32c, s.fd});
  }
  // One directory fsync makes both the renames and new entries durable. The
  // entries it covers are those of the segments open now: a file joins
  // open_ only after it was created, so the segment the agent began during
  // the data round (at a segment boundary, the next one) needs no directory
  // fsync of its own. One begun from now on sets dir_sync_needed_ again.
  // Bytes that arrived for younger segments meanwhile are synced during the
  // directory fsync: the point returned can then lie in the next segment
  // already, instead of a cycle later.
  if (!data.common.has_value()) {
    for (const Segment& s : open_) r.snapshot.push_back(s.name);
    r.sync_dir = dir_sync_needed_;
    dir_sync_needed_ = false;
    if (r.sync_dir || !r.finals.empty()) {
      for (size_t i = r.finals.size(); i < open_.size(); ++i) {
        const Segment& s = open_[i];
        if (s.flushed < s.written) r.late.push_back({s.fd, s.name, s.written, s.written_crc});
      }
    }
  }
  r.sync_dir = r.sync_dir || !r.finals.empty();
  r.next = PointReached(r);
  return r;
}

DurablePoint SegmentWriter::PointReached(const PublicationRound& r) {
  // Past the published segments, into the oldest one still open if it
  // holds flushed bytes whose entry is durable by then. Known before the
  // directory fsync, so the record can be saved beside it.
  DurablePoint next = durable_;
  if (!r.finals.empty()) {
    next = DurablePoint{Position{r.finals.back().name, r.finals.back().length}, true,
                        r.finals.back().crc32c};
  }
  if (open_.size() <= r.finals.size()) return next;
  const Segment& s = open_[r.finals.size()];
  uint64_t flushed = s.flushed;
  uint32_t flushed_crc = s.flushed_crc;
  for (const Pending& p : r.late) {
    if (p.name == s.name && p.written > flushed) {
      flushed = p.written;
      flushed_crc = p.written_crc;
    }
  }
  const bool entry =
      s.entry_durable ||
      (r.sync_dir && std::find(r.snapshot.begin(), r.snapshot.end(), s.name) != r.snapshot.end());
  // A segment with nothing flushed adds nothing to a complete durable
  // point, and one whose entry is not durable yet cannot hold it.
  const bool nothing_new = (flushed == 0 || !entry) && next.complete;
  if (!nothing_new && (next.complete || next.position.segment != s.name ||
                       next.position.offset != flushed)) {
    next = DurablePoint{Position{s.name, flushed}, false, flushed_crc};
  }
  return next;
}

absl::Status SegmentWriter::ExecutePublicationRound(const DataRound& data,
                                                    const PublicationRound& round,
                                                    const PersistFn& persist) {
  // Record each checksum (unless the data round did), then publish under
  // the final name.
  for (const Final& f : round.finals) {
    const bool summed =
        std::any_of(data.early_sums.begin(), data.early_sums.end(), [&f](const Sum& e) {
          return e.name == f.name && e.length == f.length && e.crc32c == f.crc32c;
        });
    // A pre-sized file longer than the segment (one that completes short,
    // at a timeline switch) is cut to its length before its line and name
    // say it is complete.
    WALSHIP_RETURN_IF_ERROR(publisher_.CutToLength(*f.fd, f.name, f.length));
    if (!summed) WALSHIP_RETURN_IF_ERROR(publisher_.AppendSum(f.name, f.length, f.crc32c));
    WALSHIP_RETURN_IF_ERROR(publisher_.Rename(f.name));
  }
  if (round.sync_dir) {
    // With `persist`, the record of `next` is saved beside these flushes,
    // as in the common cycle. A crash before they all reach the disk can
    // leave a record past a segment whose rename was lost (Recover()
    // finishes the publication: its bytes and checksum line were durable
    // before this phase) or naming bytes of the next segment that are not
    // on disk (Recover() finds them missing and the previous record is used).
    const bool record_alongside = persist != nullptr && !SamePoint(round.next, data.before);
    std::vector<std::function<absl::Status()>> jobs;
    jobs.push_back([this] { return publisher_.SyncDir(); });
    for (const Pending& p : round.late) {
      jobs.push_back([this, &p] { return SyncFile(p.fd->get(), PathOf(p.name, true)); });
    }
    if (record_alongside) jobs.push_back([&persist, &round] { return persist(round.next); });
    if (absl::Status s = pool_.RunAtOnce(std::move(jobs)); !s.ok()) {
      return record_alongside ? PutBackRecord(s, persist, data.before) : s;
    }
  }
  for (const Final& f : round.finals) publisher_.QueueDrop(f.fd, f.name);
  return absl::OkStatus();
}

DurablePoint SegmentWriter::CommitPublicationRound(const PublicationRound& round) {
  if (round.sync_dir) {
    for (Segment& s : open_) {
      if (std::find(round.snapshot.begin(), round.snapshot.end(), s.name) !=
          round.snapshot.end()) {
        s.entry_durable = true;
      }
      for (const Pending& p : round.late) {
        if (s.name == p.name && p.written > s.flushed) {
          s.flushed = p.written;
          s.flushed_crc = p.written_crc;
        }
      }
    }
  }
  for (const Final& f : round.finals) {
    checkpoints_.erase(f.name);
    open_.pop_front();
  }
  durable_ = round.next;
  return durable_;
}

bool SegmentWriter::HasPagesToDrop() const { return publisher_.HasPagesToDrop(); }

void SegmentWriter::DropPublishedPages() { publisher_.DropPublishedPages(); }

bool SegmentWriter::HasUnflushedWork() const {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : open_) {
    if (s.flushed < s.written) return true;
  }
  if (!open_.empty()) {
    auto it = checkpoints_.find(open_.front().name);
    if (it != checkpoints_.end() && open_.front().flushed >= it->second.length) return true;
    // (Patches wait for that: the cycle applies them, then publishes.)
  }
  return dir_sync_needed_;
}

Position SegmentWriter::written() const {
  absl::MutexLock lock(&mu_);
  if (open_.empty()) return durable_.position;
  return Position{open_.back().name, open_.back().written};
}

WriterCounters SegmentWriter::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

absl::StatusOr<DurablePoint> RecoverFromStore(StateStore& store, SegmentWriter& writer,
                                              std::optional<ReplicaState>* state,
                                              SegmentWriter::Tail tail) {
  return RecoverFromStore(
      store,
      [&writer, tail](const std::optional<ReplicaState>& candidate) {
        return writer.Recover(candidate, tail);
      },
      state);
}

}  // namespace walship::replica
