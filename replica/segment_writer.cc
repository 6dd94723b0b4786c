#include "replica/segment_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_crc.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"
#include "common/wire/segment_name.h"
#include "spdlog/spdlog.h"
#include "common/thread_name.h"

namespace walship::replica {
namespace {
constexpr char kPartial[] = ".partial";
constexpr uint64_t kDropSliceBytes = 1 << 20;
constexpr absl::Duration kDropSlicePause = absl::Microseconds(500);

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

absl::StatusOr<uint64_t> FileSize(sys::SysCalls& sys, int fd, const std::string& path) {
  struct stat st;
  sys::SysResult r = sys.Fstat(fd, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", path));
  return static_cast<uint64_t>(st.st_size);
}
}  // namespace

// One job at a time on a long-lived thread, so the flusher can wait for two
// device flushes at once without creating a thread per cycle.
class SegmentWriter::Helper {
 public:
  explicit Helper(std::string thread_name)
      : thread_([this, name = std::move(thread_name)] {
          NameThisThread(name);
          Loop();
        }) {}
  ~Helper() {
    {
      absl::MutexLock lock(&mu_);
      quit_ = true;
    }
    thread_.join();
  }
  void Start(std::function<absl::Status()> job) {
    absl::MutexLock lock(&mu_);
    job_ = std::move(job);
    done_ = false;
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return result_;
  }

 private:
  void Loop() {
    for (;;) {
      std::function<absl::Status()> job;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this] { return quit_ || job_ != nullptr; };
        mu_.Await(absl::Condition(&ready));
        if (job_ == nullptr) return;
        job = std::move(job_);
        job_ = nullptr;
      }
      absl::Status s = job();
      absl::MutexLock lock(&mu_);
      result_ = s;
      done_ = true;
    }
  }

  absl::Mutex mu_;
  std::function<absl::Status()> job_ ABSL_GUARDED_BY(mu_);
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

SegmentWriter::SegmentWriter(sys::SysCalls& sys, std::string dest_dir,
                             WriterOptions options)
    : sys_(sys), dir_(std::move(dest_dir)), options_(options), crc_reader_(sys) {}

SegmentWriter::~SegmentWriter() = default;

absl::Status SegmentWriter::RunAtOnce(std::vector<std::function<absl::Status()>> jobs) {
  if (jobs.empty()) return absl::OkStatus();
  while (helpers_.size() + 1 < jobs.size()) {
    helpers_.push_back(std::make_unique<Helper>(
        helpers_.empty() ? std::string("ws-state-write")
                         : absl::StrCat("ws-sync-", helpers_.size())));
  }
  for (size_t i = 1; i < jobs.size(); ++i) helpers_[i - 1]->Start(std::move(jobs[i]));
  absl::Status first = jobs[0]();
  for (size_t i = 1; i < jobs.size(); ++i) {
    absl::Status s = helpers_[i - 1]->Wait();
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status SegmentWriter::SyncOverlapped(int fd, const std::string& path,
                                           const PersistFn& persist,
                                           const DurablePoint& target) {
  std::vector<std::function<absl::Status()>> jobs;
  jobs.push_back([this, fd, &path] { return SyncFile(fd, path); });
  jobs.push_back([&persist, &target] { return persist(target); });
  return RunAtOnce(std::move(jobs));
}

absl::Status SegmentWriter::SyncFile(int fd, const std::string& path) {
  const absl::Time start = absl::Now();
  sys::SysResult r = sys_.Fdatasync(fd);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  if (options_.on_data_sync) options_.on_data_sync(absl::Now() - start);
  return absl::OkStatus();
}

std::string SegmentWriter::PathOf(const std::string& name, bool partial) const {
  return absl::StrCat(dir_, "/", name, partial ? kPartial : "");
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
  // What is on disk: complete segments and partials.
  std::vector<std::string> complete, partial;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    return sys::ErrnoToStatus(errno, absl::StrCat("open destination ", dir_));
  }
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (absl::EndsWith(n, kPartial)) {
      partial.push_back(n.substr(0, n.size() - strlen(kPartial)));
    } else if (wire::ValidateSegmentName(n).ok()) {  // never the replica's walship.*
      complete.push_back(n);
    }
  }
  closedir(d);
  std::sort(complete.begin(), complete.end());

  // A partial whose segment is published too is a leftover copy (a rename
  // undone and redone across crashes): every acknowledged byte of that
  // segment is in the published file, which was verified before its rename.
  bool removed = false;
  for (auto it = partial.begin(); it != partial.end();) {
    if (!std::binary_search(complete.begin(), complete.end(), *it)) {
      ++it;
      continue;
    }
    spdlog::info("removing {}{}: {} is published", *it, kPartial, *it);
    sys::SysResult r = sys_.Unlink(PathOf(*it, true).c_str());
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("unlink ", PathOf(*it, true)));
    removed = true;
    it = partial.erase(it);
  }

  // Flush() saves the record that moves past a segment (or calls it
  // complete) beside the directory fsync that makes its rename durable, so
  // a crash can leave that segment as NAME.partial with the record already
  // past it. Its bytes and its checksum line were durable before that
  // record was saved: finish the publication. Such a partial that does not
  // match its line is damage.
  bool renamed = false;
  if (state.has_value() && !state->durable.segment.empty()) {
    std::optional<std::map<std::string, SegmentSum>> sums;
    for (auto it = partial.begin(); it != partial.end();) {
      const std::string p = *it;
      if (!(p < state->durable.segment ||
            (p == state->durable.segment && state->segment_complete))) {
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
      if (absl::Status v =
              VerifyCompleteFile(p, Checkpoint{sum->second.length, sum->second.crc32c}, true);
          !v.ok()) {
        return absl::DataLossError(absl::StrCat(
            "state says ", state->durable.ToString(), " is durable, so ", p,
            " is complete, but ", p, kPartial, " does not match ", kSumsFileName, ": ",
            v.message()));
      }
      const std::string from = PathOf(p, true), to = PathOf(p, false);
      sys::SysResult r = sys_.Rename(from.c_str(), to.c_str());
      if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("rename ", from));
      spdlog::info("{}{}: complete and matching {}, published (its rename had not reached "
                   "the disk)", p, kPartial, kSumsFileName);
      renamed = true;
      complete.push_back(p);
      it = partial.erase(it);
    }
  }
  if (renamed) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
  std::sort(complete.begin(), complete.end());

  DurablePoint dp;
  uint64_t tail_size = 0;  // the partial's size when it keeps a tail
  bool sync_dir = false;
  if (state.has_value() && !state->durable.segment.empty()) {
    const std::string& s = state->durable.segment;
    bool is_complete = std::binary_search(complete.begin(), complete.end(), s);
    if (is_complete) {
      dp.position.segment = s;
      dp.complete = true;
      auto fd = sys::OpenFile(sys_, PathOf(s, false), O_RDONLY);
      if (!fd.ok()) return fd.status();
      WALSHIP_ASSIGN_OR_RETURN(dp.position.offset, FileSize(sys_, fd->get(), s));
    } else {
      std::string path = PathOf(s, true);
      auto fd = sys::OpenFile(sys_, path, O_RDWR);
      if (absl::IsNotFound(fd.status())) {
        if (state->durable.offset > 0) {
          return absl::DataLossError(absl::StrCat(
              "state says ", state->durable.ToString(), " is durable but ", path,
              " is missing"));
        }
        dp.position = state->durable;
      } else if (!fd.ok()) {
        return fd.status();
      } else {
        WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSize(sys_, fd->get(), path));
        if (size < state->durable.offset) {
          return absl::DataLossError(absl::StrCat(
              "state says ", state->durable.ToString(), " is durable but ", path,
              " holds only ", size, " bytes"));
        }
        if (size > state->durable.offset) {
          if (keep == Tail::kKeep) {
            // Written after the last recorded flush: kept only if the agent
            // confirms it (ResolveTail).
            tail_size = size;
          } else {
            // Written after the last flush, never acknowledged: discard.
            sys::SysResult r = sys_.Ftruncate(fd->get(), state->durable.offset);
            if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("truncate ", path));
          }
        }
        // The record may have been saved alongside this fdatasync when the
        // process died (a cycle that records a new segment), or it comes
        // from walship.progress (RecoverFromStore): the bytes are in the page
        // cache but maybe not on disk. Make sure before building on them.
        sys::SysResult r = sys_.Fdatasync(fd->get());
        if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
        dp.position = state->durable;
        // Nor need its directory entry be durable: the process may have died
        // before the directory fsync meant for it. BeginSegment counts on it.
        sync_dir = true;
      }
    }
  } else if (!complete.empty()) {
    // No state (lost or never written): everything complete is verified and
    // durable, so resume after the newest complete segment.
    dp.position.segment = complete.back();
    dp.complete = true;
    auto fd = sys::OpenFile(sys_, PathOf(complete.back(), false), O_RDONLY);
    if (!fd.ok()) return fd.status();
    WALSHIP_ASSIGN_OR_RETURN(dp.position.offset, FileSize(sys_, fd->get(), complete.back()));
  }
  for (const std::string& p : partial) {
    if (!dp.complete && p == dp.position.segment) continue;
    if (p < dp.position.segment || (p == dp.position.segment && dp.complete)) {
      // Before the durable position: acknowledged, maybe. Nothing proves
      // otherwise, so nothing of it is deleted.
      spdlog::warn("keeping {}{}: it lies before the durable position {}, so its bytes may "
                   "have been acknowledged, and {} has no line to verify it by",
                   p, kPartial, dp.position.ToString(), kSumsFileName);
      continue;
    }
    // After the recorded segment: no byte of a segment is acknowledged
    // before the record names it (Flush), so these never were.
    spdlog::info("removing {}{}: never acknowledged as durable", p, kPartial);
    sys::SysResult r = sys_.Unlink(PathOf(p, true).c_str());
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("unlink ", PathOf(p, true)));
    removed = true;
  }
  if (removed || sync_dir) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
  if (!dp.position.segment.empty() && dp.position.offset > 0) {
    auto fd = sys::OpenFile(sys_, PathOf(dp.position.segment, !dp.complete), O_RDONLY);
    if (!fd.ok()) return fd.status();
    WALSHIP_ASSIGN_OR_RETURN(
        dp.prefix_crc32c, Crc32cOfFileRange(sys_, fd->get(), 0, dp.position.offset,
                                            dp.position.segment));
    if (state.has_value() && !dp.complete && state->durable == dp.position &&
        state->prefix_crc32c != dp.prefix_crc32c) {
      return absl::DataLossError(absl::StrFormat(
          "the durable bytes of %s changed on disk: CRC32C of its first %d bytes is %08x, "
          "%08x when acknowledged",
          PathOf(dp.position.segment, true), dp.position.offset, dp.prefix_crc32c,
          state->prefix_crc32c));
    }
  }
  std::optional<DurablePoint> tail;
  if (tail_size > 0) {
    const std::string path = PathOf(dp.position.segment, true);
    auto fd = sys::OpenFile(sys_, path, O_RDONLY);
    if (!fd.ok()) return fd.status();
    tail = DurablePoint{Position{dp.position.segment, tail_size}, false, 0};
    // The prefix's CRC is known: extend it over the tail only.
    WALSHIP_ASSIGN_OR_RETURN(
        tail->prefix_crc32c,
        Crc32cOfFileRange(sys_, fd->get(), dp.position.offset, tail_size - dp.position.offset,
                          path, dp.prefix_crc32c));
  }
  absl::MutexLock lock(&mu_);
  durable_ = dp;
  tail_ = tail;
  last_begun_ = dp.position.segment;
  return dp;
}

absl::Status SegmentWriter::BeginSegment(const std::string& name, uint64_t handle,
                                         uint64_t start_offset) {
  WALSHIP_RETURN_IF_ERROR(wire::ValidateSegmentName(name));
  {
    absl::MutexLock lock(&mu_);
    if (tail_.has_value()) {
      return absl::FailedPreconditionError(
          "internal: the recovered tail was neither confirmed nor discarded");
    }
    if (handle <= handle_) {
      return absl::DataLossError(absl::StrCat("SEGMENT handle ", handle,
                                              " does not increase (last ", handle_, ")"));
    }
    if (name < last_begun_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "agent went backwards: segment ", name, " after ", last_begun_));
    }
    if (durable_.complete && name == durable_.position.segment) {
      if (start_offset != durable_.position.offset) {
        return WithReason(absl::FailedPreconditionError(absl::StrCat(
            "divergent history: ", name, " is complete here at ",
            durable_.position.offset, " bytes but the agent resumes it at ", start_offset)), Reason::kDivergent);
      }
      handle_ = handle;
      handle_complete_ = true;
      last_begun_ = name;
      return absl::OkStatus();
    }
    if (!open_.empty() && open_.back().name == name) {
      return absl::DataLossError(absl::StrCat("segment ", name, " announced twice"));
    }
  }
  // File I/O without the lock: the flusher finalizes older segments
  // meanwhile, and only this (receiver) thread adds segments.
  const std::string path = PathOf(name, true);
  sys::SysResult r = sys_.Open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("open ", path));
  auto fd = std::make_shared<sys::UniqueFd>(static_cast<int>(r.rc));
  WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSize(sys_, fd->get(), path));
  if (start_offset > size) {
    return absl::OutOfRangeError(absl::StrCat("gap: agent starts ", name, " at ",
                                            start_offset, " but only ", size,
                                            " bytes are on disk"));
  }
  Segment seg;
  seg.name = name;
  seg.written = size;
  if (size > 0) {
    WALSHIP_ASSIGN_OR_RETURN(seg.written_crc, Crc32cOfFileRange(sys_, fd->get(), 0, size, path));
  }
  seg.fd = std::move(fd);
  absl::MutexLock lock(&mu_);
  if (name == durable_.position.segment && durable_.position.offset == size) {
    seg.flushed = size;
    seg.flushed_crc = seg.written_crc;
  }
  // Only the segment we resume in is known to have a durable entry.
  seg.entry_durable = name == durable_.position.segment;
  handle_ = handle;
  handle_complete_ = false;
  open_.push_back(std::move(seg));
  last_begun_ = name;
  // The new directory entry must be durable before any byte in it is
  // acknowledged; the flusher's next Flush() fsyncs the directory, off the
  // receive path.
  dir_sync_needed_ = true;
  return absl::OkStatus();
}

absl::Status SegmentWriter::EnsurePipe() {
  if (pipe_.has_value()) return absl::OkStatus();
  WALSHIP_ASSIGN_OR_RETURN(sys::Pipe p, sys::Pipe::Create(sys_, options_.pipe_bytes));
  pipe_.emplace(std::move(p));
  return absl::OkStatus();
}

absl::Status SegmentWriter::WriteData(int sock, const wire::FrameHeader& h) {
  std::string name;
  std::shared_ptr<sys::UniqueFd> fd;
  uint64_t written;
  uint32_t written_crc;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    if (h.segment_id != handle_ || handle_ == 0) {
      return absl::DataLossError(absl::StrCat("DATA for segment handle ", h.segment_id,
                                              " but the current handle is ", handle_));
    }
    if (handle_complete_) {
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
          "divergent history: agent sends bytes past the end of complete segment ",
          last_begun_)), Reason::kDivergent);
    }
    const Segment& seg = open_.back();
    name = seg.name;
    fd = seg.fd;
    written = seg.written;
    written_crc = seg.written_crc;
  }
  const uint64_t off = h.offset;
  const uint64_t len = h.payload_length;
  if (off > written) {
    return absl::OutOfRangeError(absl::StrCat("gap in ", name, ": frame at offset ", off,
                                            " but only ", written, " bytes written"));
  }
  const std::string path = PathOf(name, true);
  uint32_t crc = 0;
  // Bytes already on disk are compared, never overwritten.
  const uint64_t overlap = std::min(len, written - off);
  if (overlap > 0) {
    if (buffer_.size() < options_.copy_buffer_bytes) buffer_.resize(options_.copy_buffer_bytes);
    std::vector<char> disk(buffer_.size());
    for (uint64_t done = 0; done < overlap;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(overlap - done, buffer_.size()));
      WALSHIP_RETURN_IF_ERROR(sys::ReadFully(sys_, sock, buffer_.data(), n, options_.io));
      WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys_, fd->get(), disk.data(), n, off + done));
      if (std::memcmp(buffer_.data(), disk.data(), n) != 0) {
        size_t at = 0;
        while (buffer_[at] == disk[at]) ++at;
        return WithReason(absl::FailedPreconditionError(absl::StrCat(
            "divergent history: resent bytes of ", name, " differ from the replica's at offset ",
            off + done + at, "; refusing to overwrite")), Reason::kDivergent);
      }
      crc = wire::Crc32cExtend(crc, buffer_.data(), n);
      done += n;
    }
  }
  const uint64_t rest = len - overlap;
  if (rest > 0) {
    absl::Status s;
    const bool zerocopy = options_.transport == Transport::kZeroCopy;
    if (zerocopy) {
      s = EnsurePipe();
      if (s.ok()) {
        s = sys::SpliceFully(sys_, sock, *pipe_, fd->get(), static_cast<off_t>(written),
                             rest, options_.io);
        if (!s.ok()) pipe_.reset();  // may hold stray bytes
      }
    } else {
      if (buffer_.size() < options_.copy_buffer_bytes) buffer_.resize(options_.copy_buffer_bytes);
      s = sys::CopySocketToFile(sys_, sock, fd->get(), static_cast<off_t>(written), rest,
                                absl::MakeSpan(buffer_), options_.io);
    }
    uint32_t new_crc = 0;
    if (s.ok()) {
      // One pass over what landed: the frame's CRC (to verify it) and the
      // segment's running CRC (for the durable prefix and the checkpoint).
      auto got = crc_reader_.Twice(fd->get(), written, rest, path, crc, written_crc);
      if (!got.ok()) {
        s = got.status();
      } else if (got->first != h.payload_crc32c) {
        s = absl::DataLossError(absl::StrFormat(
            "payload checksum mismatch in %s at offset %d (%d bytes): frame says %08x, "
            "received %08x; discarded",
            name, off, len, h.payload_crc32c, got->first));
      } else {
        new_crc = got->second;
      }
    }
    if (!s.ok()) {
      // Nothing of a failed or corrupt frame stays on disk.
      sys::SysResult r = sys_.Ftruncate(fd->get(), static_cast<off_t>(written));
      if (!r.ok()) {
        s = absl::DataLossError(absl::StrCat(
            s.message(), "; and removing the frame's bytes from ", path, " failed: ",
            sys::ErrnoToStatus(r.err, "ftruncate").message()));
        CutBackAfterFailure(s);
      }
      return s;
    }
    uint64_t cut_to = 0;
    {
      absl::MutexLock lock(&mu_);
      Segment* seg = FindOpen(name);
      if (failed_.ok() && seg != nullptr) {
        seg->written = written + rest;
        seg->written_crc = new_crc;
        (zerocopy ? counters_.bytes_zerocopy : counters_.bytes_copy) += rest;
        return absl::OkStatus();
      }
      s = failed_.ok() ? absl::InternalError(absl::StrCat(name, " is no longer open")) : failed_;
      if (seg == nullptr) return s;
      cut_to = seg->flushed;
    }
    // A failed flush cut the file back while this frame was landing: its
    // bytes past the durable offset go as well.
    if (sys::SysResult r = sys_.Ftruncate(fd->get(), static_cast<off_t>(cut_to)); !r.ok()) {
      spdlog::error("{}: cutting back to {} failed: {}; the next session resumes from the "
                    "recorded position",
                    path, cut_to, sys::ErrnoToStatus(r.err, "ftruncate").ToString());
    }
    return s;
  } else if (crc != h.payload_crc32c) {
    return absl::DataLossError(absl::StrCat("payload checksum mismatch in resent frame of ",
                                            name, " at offset ", off));
  }
  return absl::OkStatus();
}

absl::Status SegmentWriter::AppendSum(const std::string& name, uint64_t length,
                                     uint32_t crc32c) {
  const std::string path = absl::StrCat(dir_, "/", kSumsFileName);
  std::string line = SegmentSumLine(name, length, crc32c);
  if (!sums_.valid()) {
    bool existed = access(path.c_str(), F_OK) == 0;
    WALSHIP_ASSIGN_OR_RETURN(sums_, sys::OpenFile(sys_, path, O_RDWR | O_CREAT | O_APPEND));
    if (!existed) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
    // A crash in the middle of an earlier append leaves a last line without
    // its newline: end it, so that it stays one unreadable line (which
    // LoadSegmentSums skips) instead of swallowing this one.
    WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSize(sys_, sums_.get(), path));
    char last = '\n';
    if (size > 0) {
      WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys_, sums_.get(), &last, 1, size - 1));
    }
    if (last != '\n') {
      spdlog::warn("{} ends in a torn line (a crash while a line was appended); ending it "
                   "before the next line", path);
      line.insert(0, "\n");
    }
  }
  WALSHIP_RETURN_IF_ERROR(sys::WriteFully(sys_, sums_.get(), line.data(), line.size()));
  sys::SysResult r = sys_.Fdatasync(sums_.get());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  return absl::OkStatus();
}

void SegmentWriter::AddCheckpoint(const std::string& name, uint64_t length,
                                  uint32_t crc32c) {
  absl::MutexLock lock(&mu_);
  checkpoints_[name] = Checkpoint{length, crc32c};
}

absl::Status SegmentWriter::VerifyCompleteFile(const std::string& name, const Checkpoint& cp,
                                               bool partial) {
  auto fd = sys::OpenFile(sys_, PathOf(name, partial), O_RDONLY);
  if (!fd.ok()) return fd.status();
  WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSize(sys_, fd->get(), name));
  if (size != cp.length) {
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
        "divergent history: complete segment ", name, " has ", size,
        " bytes here but the agent's checkpoint says ", cp.length)), Reason::kDivergent);
  }
  WALSHIP_ASSIGN_OR_RETURN(uint32_t crc,
                           Crc32cOfFileRange(sys_, fd->get(), 0, size, PathOf(name, false)));
  if (crc != cp.crc32c) {
    return WithReason(absl::FailedPreconditionError(absl::StrFormat(
        "divergent history: complete segment %s has CRC32C %08x here, the agent's is %08x",
        name, crc, cp.crc32c)), Reason::kDivergent);
  }
  return absl::OkStatus();
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
      it = checkpoints_.erase(it);
    }
  }
  for (const auto& [name, cp] : resumed) WALSHIP_RETURN_IF_ERROR(VerifyCompleteFile(name, cp));
  if (confirmed.empty()) return absl::OkStatus();
  const std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys_, dir_);
  for (const auto& [name, cp] : confirmed) {
    if (sums.count(name) > 0) continue;
    if (absl::Status v = VerifyCompleteFile(name, cp); !v.ok()) {
      spdlog::error("not recording the walship.sums line of {}: {}", name, v.ToString());
      continue;
    }
    WALSHIP_RETURN_IF_ERROR(AppendSum(name, cp.length, cp.crc32c));
    spdlog::info("{} had no walship.sums line; the agent confirmed its {} bytes, line recorded",
                 name, cp.length);
  }
  return absl::OkStatus();
}

absl::StatusOr<DurablePoint> SegmentWriter::FlushCycle(const PersistFn& persist) {
  WALSHIP_RETURN_IF_ERROR(SettlePublished());
  struct Pending {
    std::shared_ptr<sys::UniqueFd> fd;
    std::string name;
    uint64_t written;
    uint32_t written_crc;
  };
  std::vector<Pending> pending;
  std::vector<Sum> early_sums;
  bool sync_dir = false;
  // The common cycle: more bytes of the oldest open segment, whose entry is
  // durable and which has nothing to publish yet. Just its fdatasync; bytes
  // of younger segments wait for the next cycle (a new entry costs a
  // directory fsync, which need not delay acknowledging the older segment's
  // bytes). When its bytes are the first past the recorded segment, the
  // record must name that segment before they can be acknowledged: it is
  // saved alongside (its target is known before the sync).
  std::optional<DurablePoint> common;
  bool record_first = false;
  DurablePoint before;
  std::vector<std::string> snapshot;  // segments whose entries the dir fsync covers
  {
    absl::MutexLock lock(&mu_);
    before = durable_;
    if (persist != nullptr && !open_.empty()) {
      const Segment& f = open_.front();
      if (f.entry_durable && f.flushed < f.written &&
          checkpoints_.find(f.name) == checkpoints_.end() &&
          (before.complete || before.position.segment == f.name)) {
        pending.push_back({f.fd, f.name, f.written, f.written_crc});
        common = DurablePoint{Position{f.name, f.written}, false, f.written_crc};
        record_first = before.position.segment != f.name;
      }
    }
    if (!common.has_value()) {
      // Bytes of segments begun later wait for the next Flush().
      for (const Segment& s : open_) {
        if (s.flushed < s.written) pending.push_back({s.fd, s.name, s.written, s.written_crc});
      }
      // Segments written to the end that match their checkpoint get their
      // checksum line during the data's fdatasync, not after it. A line for
      // a segment not yet published is harmless: walship.sums is consulted
      // for published names only, and a repeated line says the same.
      for (const Segment& s : open_) {
        auto it = checkpoints_.find(s.name);
        if (it == checkpoints_.end() || s.written != it->second.length ||
            s.written_crc != it->second.crc32c) {
          break;
        }
        early_sums.push_back({s.name, it->second.length, it->second.crc32c});
      }
    }
  }
  if (common.has_value() && record_first) {
    absl::Status s = SyncOverlapped(pending[0].fd->get(), PathOf(pending[0].name, true),
                                    persist, *common);
    // The record may now claim bytes that are not durable.
    if (!s.ok()) return PutBackRecord(s, persist, before);
  } else if (common.has_value()) {
    WALSHIP_RETURN_IF_ERROR(SyncFile(pending[0].fd->get(), PathOf(pending[0].name, true)));
  } else {
    // Several files at a segment boundary (the old segment's tail, the new
    // one's head, walship.sums): their device flushes overlap (and on a
    // journaling file system share one commit) instead of queueing.
    std::vector<std::function<absl::Status()>> jobs;
    for (const Pending& p : pending) {
      jobs.push_back([this, &p] { return SyncFile(p.fd->get(), PathOf(p.name, true)); });
    }
    if (!early_sums.empty()) {
      jobs.push_back([this, &early_sums] {
        for (const Sum& e : early_sums) {
          WALSHIP_RETURN_IF_ERROR(AppendSum(e.name, e.length, e.crc32c));
        }
        return absl::OkStatus();
      });
    }
    WALSHIP_RETURN_IF_ERROR(RunAtOnce(std::move(jobs)));
  }
  // Segments whose bytes are all durable and whose checkpoint matches, in
  // order: they are published below without holding the lock, so the
  // receiver never waits for this directory I/O.
  struct Final {
    std::string name;
    uint64_t length;
    uint32_t crc32c;
    std::shared_ptr<sys::UniqueFd> fd;
  };
  std::vector<Final> finals;
  {
    absl::MutexLock lock(&mu_);
    for (const Pending& p : pending) {
      for (Segment& s : open_) {
        if (s.name == p.name && p.written > s.flushed) {
          s.flushed = p.written;
          s.flushed_crc = p.written_crc;
        }
      }
    }
    for (const Segment& s : open_) {
      auto it = checkpoints_.find(s.name);
      if (it == checkpoints_.end()) break;
      const Checkpoint cp = it->second;
      if (s.written > cp.length) {
        return WithReason(absl::FailedPreconditionError(absl::StrCat(
            "divergent history: ", s.name, " has ", s.written,
            " bytes here but the agent says it is complete at ", cp.length)), Reason::kDivergent);
      }
      if (s.flushed < cp.length) break;
      if (s.flushed_crc != cp.crc32c) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "segment %s: CRC32C of the %d bytes written here is %08x but the agent's "
            "checkpoint says %08x; not publishing it",
            s.name, cp.length, s.flushed_crc, cp.crc32c));
      }
      finals.push_back({s.name, cp.length, cp.crc32c, s.fd});
    }
  }
  // Record each checksum, then publish under the final name.
  for (const Final& f : finals) {
    const bool summed = std::any_of(early_sums.begin(), early_sums.end(), [&f](const Sum& e) {
      return e.name == f.name && e.length == f.length && e.crc32c == f.crc32c;
    });
    if (!summed) WALSHIP_RETURN_IF_ERROR(AppendSum(f.name, f.length, f.crc32c));
    std::string from = PathOf(f.name, true), to = PathOf(f.name, false);
    sys::SysResult r = sys_.Rename(from.c_str(), to.c_str());
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("rename ", from));
  }
  // One directory fsync makes both the renames and new entries durable. The
  // entries it covers are those of the segments open now, not when this
  // cycle began: a file joins open_ only after it was created, so the
  // segment the agent began while this cycle synced (at a segment boundary,
  // the next one) needs no directory fsync of its own.
  // Bytes that arrived for younger segments meanwhile (at a boundary, the
  // next segment's first bytes) are synced during the directory fsync: the
  // point returned can then lie in the next segment already, instead of a
  // cycle later.
  std::vector<Pending> late;
  if (!common.has_value()) {
    absl::MutexLock lock(&mu_);
    for (const Segment& s : open_) snapshot.push_back(s.name);
    sync_dir = dir_sync_needed_;
    dir_sync_needed_ = false;
    if (sync_dir || !finals.empty()) {
      for (size_t i = finals.size(); i < open_.size(); ++i) {
        const Segment& s = open_[i];
        if (s.flushed < s.written) late.push_back({s.fd, s.name, s.written, s.written_crc});
      }
    }
  }
  const bool dir_synced = sync_dir || !finals.empty();
  // The point this cycle reaches: past the published segments, into the
  // oldest one still open if it holds flushed bytes whose entry is durable
  // by then. Known before the directory fsync, so the record can be saved
  // beside it.
  DurablePoint next;
  {
    absl::MutexLock lock(&mu_);
    next = durable_;
    if (!finals.empty()) {
      next = DurablePoint{Position{finals.back().name, finals.back().length}, true,
                          finals.back().crc32c};
    }
    if (open_.size() > finals.size()) {
      const Segment& s = open_[finals.size()];
      uint64_t flushed = s.flushed;
      uint32_t flushed_crc = s.flushed_crc;
      for (const Pending& p : late) {
        if (p.name == s.name && p.written > flushed) {
          flushed = p.written;
          flushed_crc = p.written_crc;
        }
      }
      const bool entry = s.entry_durable ||
                         (dir_synced && std::find(snapshot.begin(), snapshot.end(), s.name) !=
                                            snapshot.end());
      // A segment with nothing flushed adds nothing to a complete durable
      // point, and one whose entry is not durable yet cannot hold it.
      const bool nothing_new = (flushed == 0 || !entry) && next.complete;
      if (!nothing_new && (next.complete || next.position.segment != s.name ||
                           next.position.offset != flushed)) {
        next = DurablePoint{Position{s.name, flushed}, false, flushed_crc};
      }
    }
  }
  if (dir_synced) {
    // With `persist`, the record of `next` is saved beside these flushes,
    // as in the common cycle. A crash before they all reach the disk can
    // leave a record past a segment whose rename was lost (Recover()
    // finishes the publication: its bytes and checksum line were durable
    // before this phase) or naming bytes of the next segment that are not
    // on disk (Recover() finds them missing and the previous record is used).
    const bool record_alongside = persist != nullptr && !SamePoint(next, before);
    std::vector<std::function<absl::Status()>> jobs;
    jobs.push_back([this] { return sys::FsyncDir(sys_, dir_); });
    for (const Pending& p : late) {
      jobs.push_back([this, &p] { return SyncFile(p.fd->get(), PathOf(p.name, true)); });
    }
    if (record_alongside) jobs.push_back([&persist, &next] { return persist(next); });
    if (absl::Status s = RunAtOnce(std::move(jobs)); !s.ok()) {
      return record_alongside ? PutBackRecord(s, persist, before) : s;
    }
  }
  if (options_.drop_behind && !finals.empty()) {
    absl::MutexLock lock(&drop_mu_);
    for (const Final& f : finals) to_drop_.push_back({f.fd, f.name});
  }
  absl::MutexLock lock(&mu_);
  if (dir_synced) {
    for (Segment& s : open_) {
      if (std::find(snapshot.begin(), snapshot.end(), s.name) != snapshot.end()) {
        s.entry_durable = true;
      }
      for (const Pending& p : late) {
        if (s.name == p.name && p.written > s.flushed) {
          s.flushed = p.written;
          s.flushed_crc = p.written_crc;
        }
      }
    }
  }
  for (const Final& f : finals) {
    checkpoints_.erase(f.name);
    open_.pop_front();
  }
  durable_ = next;
  return durable_;
}

bool SegmentWriter::HasPagesToDrop() const {
  absl::MutexLock lock(&drop_mu_);
  return !to_drop_.empty();
}

void SegmentWriter::DropPublishedPages() {
  std::vector<Published> batch;
  {
    absl::MutexLock lock(&drop_mu_);
    batch.swap(to_drop_);
  }
  for (const Published& p : batch) DropPages(p);
}

void SegmentWriter::DropPages(const Published& p) {
  // Every byte is fdatasync'ed, so the pages are clean and simply freed. In
  // one call a 16 MiB segment keeps a CPU busy for 1-6 ms (measured under
  // load), just when the next segment's first bytes are being made durable:
  // slices with a pause between them, unless more segments are waiting.
  auto size = FileSize(sys_, p.fd->get(), p.name);
  const uint64_t total = size.ok() ? *size : 0;
  uint64_t off = 0;
  do {
    const uint64_t len = total == 0 ? 0 : std::min<uint64_t>(kDropSliceBytes, total - off);
    sys::SysResult r = sys_.Fadvise(p.fd->get(), static_cast<off_t>(off),
                                    static_cast<off_t>(len), POSIX_FADV_DONTNEED);
    if (!r.ok()) {
      if (!drop_warned_) {
        drop_warned_ = true;
        spdlog::warn("cannot drop the cached pages of published segment {}: {} (harmless; "
                     "they stay cached until the kernel needs the memory)",
                     p.name, sys::ErrnoToStatus(r.err, "posix_fadvise").ToString());
      }
      return;
    }
    off += len;
    if (off < total && !HasPagesToDrop()) absl::SleepFor(kDropSlicePause);
  } while (off < total);
}

bool SegmentWriter::HasUnflushedWork() const {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : open_) {
    if (s.flushed < s.written) return true;
  }
  if (!open_.empty()) {
    auto it = checkpoints_.find(open_.front().name);
    if (it != checkpoints_.end() && open_.front().flushed >= it->second.length) return true;
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
  if (state->has_value()) {
    // Acknowledged bytes past the lazily saved record: walship.progress
    // names them, and Recover() trusts them only while they still have the
    // CRC32C they had when received (kDataLoss otherwise: a power loss kept
    // the claim, not the bytes). They become the record before anything else.
    if (std::optional<ReplicaState> p = ProgressPast(store.sys(), store.dir(), **state)) {
      absl::StatusOr<DurablePoint> at = writer.Recover(p, tail);
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
  absl::StatusOr<DurablePoint> recovered = writer.Recover(*state, tail);
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
  recovered = writer.Recover(*state, tail);
  if (recovered.ok()) WALSHIP_RETURN_IF_ERROR(store.Save(**state));
  return recovered;
}

}  // namespace walship::replica
