#include "replica/spare_segment.h"

#include <fcntl.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/thread_name.h"
#include "common/sys/transfer.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {
constexpr size_t kZeroChunkBytes = 1u << 20;
}  // namespace

SpareSegment::SpareSegment(sys::SysCalls& sys, std::string dir, Clock& clock,
                           std::function<void(absl::Duration)> on_prepared)
    : sys_(sys),
      dir_(std::move(dir)),
      path_(absl::StrCat(dir_, "/", kSpareFileName)),
      clock_(clock),
      on_prepared_(std::move(on_prepared)),
      thread_([this] {
        NameThisThread("ws-spare");
        Loop();
      }) {}

SpareSegment::~SpareSegment() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  thread_.join();
}

void SpareSegment::Request(uint64_t size) {
  if (size == 0) return;
  absl::MutexLock lock(&mu_);
  if (state_ != State::kNone && size_ == size) return;
  if (state_ == State::kWriting) return;  // another size: asked again later
  state_ = State::kWanted;
  size_ = size;
}

bool SpareSegment::ready(uint64_t size) const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kReady && size_ == size;
}

bool SpareSegment::WaitReady(uint64_t size, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (state_ == State::kReady && size_ == size) || state_ == State::kNone;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return state_ == State::kReady && size_ == size;
}

absl::StatusOr<bool> SpareSegment::Take(uint64_t size, const std::string& to) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kReady || size_ != size) return false;
  }
  // While kReady the thread leaves the file alone, and only this thread
  // (which also makes the requests) changes the state.
  sys::SysResult r = sys_.Rename(path_.c_str(), to.c_str());
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kNone;
  }
  if (!r.ok()) {
    return sys::ErrnoToStatus(r.err, absl::StrCat("rename ", path_, " to ", to));
  }
  return true;
}

void SpareSegment::Loop() {
  for (;;) {
    uint64_t size = 0;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this] { return quit_ || state_ == State::kWanted; };
      mu_.Await(absl::Condition(&wake));
      if (quit_) return;
      state_ = State::kWriting;
      size = size_;
    }
    const absl::Time start = clock_.Now();
    absl::Status s = Write(size);
    if (!s.ok()) {
      spdlog::warn("cannot prepare a zero-filled segment file ({}); new segments are created "
                   "empty until the next attempt: {}", path_, s.ToString());
    } else {
      const absl::Duration took = clock_.Now() - start;
      spdlog::info("prepared {}: {} bytes of zeros written and synced in {}", path_, size,
                   absl::FormatDuration(took));
      if (on_prepared_) on_prepared_(took);
    }
    absl::MutexLock lock(&mu_);
    state_ = s.ok() ? State::kReady : State::kNone;
  }
}

// Zeros written from the start (a leftover spare may hold anything), then
// synced: its blocks and size are durable before it is ever renamed, so a
// later fdatasync of NAME.partial commits data only. Its directory entry is
// made durable too, so the rename later is the only change of the entry.
absl::Status SpareSegment::Write(uint64_t size) {
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                           sys::OpenFile(sys_, path_, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  const std::vector<char> zeros(kZeroChunkBytes, 0);
  for (uint64_t off = 0; off < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), size - off));
    WALSHIP_RETURN_IF_ERROR(sys::PwriteFully(sys_, fd.get(), zeros.data(), n, off));
    off += n;
  }
  sys::SysResult r = sys_.Fdatasync(fd.get());
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", path_));
  return sys::FsyncDir(sys_, dir_);
}

}  // namespace walship::replica
