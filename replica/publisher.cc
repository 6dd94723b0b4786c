#include "replica/publisher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_crc.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "common/sys/thread_name.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {
constexpr uint64_t kDropSliceBytes = 1 << 20;
constexpr absl::Duration kDropSlicePause = absl::Microseconds(500);
}  // namespace

std::string SegmentPath(const std::string& dir, const std::string& name, bool partial) {
  return absl::StrCat(dir, "/", name, partial ? kPartialSuffix : "");
}

absl::StatusOr<uint64_t> FileSizeOf(sys::SysCalls& sys, int fd, const std::string& label) {
  struct stat st;
  sys::SysResult r = sys.Fstat(fd, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", label));
  return static_cast<uint64_t>(st.st_size);
}

absl::Status VerifySegmentFile(sys::SysCalls& sys, const std::string& dir,
                               const std::string& name, const SegmentSum& sum, bool partial) {
  auto fd = sys::OpenFile(sys, SegmentPath(dir, name, partial), O_RDONLY);
  if (!fd.ok()) return fd.status();
  WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(sys, fd->get(), name));
  if (size != sum.length) {
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
        "divergent history: complete segment ", name, " has ", size,
        " bytes here but the agent's checkpoint says ", sum.length)), Reason::kDivergent);
  }
  WALSHIP_ASSIGN_OR_RETURN(
      uint32_t crc, Crc32cOfFileRange(sys, fd->get(), 0, size, SegmentPath(dir, name, false)));
  if (crc != sum.crc32c) {
    return WithReason(absl::FailedPreconditionError(absl::StrFormat(
        "divergent history: complete segment %s has CRC32C %08x here, the agent's is %08x",
        name, crc, sum.crc32c)), Reason::kDivergent);
  }
  return absl::OkStatus();
}

absl::Status RenamePartial(sys::SysCalls& sys, const std::string& dir, const std::string& name) {
  const std::string from = SegmentPath(dir, name, true), to = SegmentPath(dir, name, false);
  sys::SysResult r = sys.Rename(from.c_str(), to.c_str());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("rename ", from));
  return absl::OkStatus();
}

Publisher::Publisher(sys::SysCalls& sys, std::string dir, bool drop_behind, Clock& clock)
    : clock_(clock), sys_(sys), dir_(std::move(dir)), drop_behind_(drop_behind) {}

Publisher::~Publisher() = default;

absl::Status Publisher::AppendSum(const std::string& name, uint64_t length, uint32_t crc32c) {
  const std::string path = absl::StrCat(dir_, "/", kSumsFileName);
  std::string line = SegmentSumLine(name, length, crc32c);
  if (!sums_.valid()) {
    struct stat st;
    const bool existed = sys_.Stat(path.c_str(), &st).ok();
    WALSHIP_ASSIGN_OR_RETURN(sums_, sys::OpenFile(sys_, path, O_RDWR | O_CREAT | O_APPEND));
    if (!existed) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, dir_));
    // A crash in the middle of an earlier append leaves a last line without
    // its newline: end it, so that it stays one unreadable line (which
    // LoadSegmentSums skips) instead of swallowing this one.
    WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(sys_, sums_.get(), path));
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

absl::Status Publisher::CutToLength(const sys::UniqueFd& fd, const std::string& name,
                                    uint64_t length) {
  WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(sys_, fd.get(), name));
  if (size <= length) return absl::OkStatus();
  const std::string path = SegmentPath(dir_, name, true);
  sys::SysResult r = sys_.Ftruncate(fd.get(), static_cast<off_t>(length));
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("truncate ", path));
  r = sys_.Fdatasync(fd.get());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path));
  spdlog::info("{}: complete at {} bytes, cut from its pre-sized {}", path, length, size);
  return absl::OkStatus();
}

absl::Status Publisher::Rename(const std::string& name) {
  return RenamePartial(sys_, dir_, name);
}

absl::Status Publisher::SyncDir() { return sys::FsyncDir(sys_, dir_); }

void Publisher::QueueDrop(std::shared_ptr<sys::UniqueFd> fd, std::string name) {
  if (!drop_behind_) return;
  absl::MutexLock lock(&drop_mu_);
  to_drop_.push_back({std::move(fd), std::move(name)});
}

absl::Status Publisher::RecordMissingSums(
    const std::vector<std::pair<std::string, SegmentSum>>& confirmed) {
  if (confirmed.empty()) return absl::OkStatus();
  const std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys_, dir_);
  for (const auto& [name, cp] : confirmed) {
    if (sums.count(name) > 0) continue;
    if (absl::Status v = VerifySegmentFile(sys_, dir_, name, cp); !v.ok()) {
      spdlog::error("not recording the walship.sums line of {}: {}", name, v.ToString());
      continue;
    }
    WALSHIP_RETURN_IF_ERROR(AppendSum(name, cp.length, cp.crc32c));
    spdlog::info("{} had no walship.sums line; the agent confirmed its {} bytes, line recorded",
                 name, cp.length);
  }
  return absl::OkStatus();
}

bool Publisher::HasPagesToDrop() const {
  absl::MutexLock lock(&drop_mu_);
  return !to_drop_.empty();
}

void Publisher::DropPublishedPages() {
  std::vector<Queued> batch;
  {
    absl::MutexLock lock(&drop_mu_);
    batch.swap(to_drop_);
  }
  for (const Queued& q : batch) DropPages(q);
}

void Publisher::DropPages(const Queued& q) {
  // In one call a 16 MiB segment keeps a CPU busy for a few milliseconds,
  // just when the next segment's first bytes are being made durable: slices
  // with a pause between them, unless more segments are waiting.
  auto size = FileSizeOf(sys_, q.fd->get(), q.name);
  const uint64_t total = size.ok() ? *size : 0;
  uint64_t off = 0;
  do {
    const uint64_t len = total == 0 ? 0 : std::min<uint64_t>(kDropSliceBytes, total - off);
    sys::SysResult r = sys_.Fadvise(q.fd->get(), static_cast<off_t>(off),
                                    static_cast<off_t>(len), POSIX_FADV_DONTNEED);
    if (!r.ok()) {
      if (!drop_warned_) {
        drop_warned_ = true;
        spdlog::warn("cannot drop the cached pages of published segment {}: {} (harmless; "
                     "they stay cached until the kernel needs the memory)",
                     q.name, sys::ErrnoToStatus(r.err, "posix_fadvise").ToString());
      }
      return;
    }
    off += len;
    if (off < total && !HasPagesToDrop()) clock_.SleepFor(kDropSlicePause);
  } while (off < total);
}

// One job at a time on a long-lived thread, so the flusher can wait for two
// device flushes at once without creating a thread per cycle.
class HelperPool::Helper {
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

HelperPool::HelperPool() = default;

HelperPool::~HelperPool() = default;

absl::Status HelperPool::RunAtOnce(std::vector<std::function<absl::Status()>> jobs) {
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

}  // namespace walship::replica
