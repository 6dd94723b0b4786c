#include "integration/chaos/fault_syscalls.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace walship::chaos {
namespace {

constexpr struct {
  FaultKind kind;
  const char* name;
} kKinds[] = {
    {FaultKind::kEioFdatasync, "eio-fdatasync"}, {FaultKind::kEioWrite, "eio-write"},
    {FaultKind::kTornWrite, "torn-write"},       {FaultKind::kEnospcWrite, "enospc-write"},
    {FaultKind::kPowerLoss, "power-loss"},
};

bool IsWriteFault(FaultKind k) {
  return k == FaultKind::kEioWrite || k == FaultKind::kTornWrite ||
         k == FaultKind::kEnospcWrite;
}

bool IsSyncFault(FaultKind k) { return k == FaultKind::kEioFdatasync; }

bool IsRegularFile(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

std::optional<FaultKind> ParseFaultKind(absl::string_view word) {
  for (const auto& k : kKinds) {
    if (word == k.name) return k.kind;
  }
  return std::nullopt;
}

FaultSysCalls::FaultSysCalls(std::string root, FiredFn on_fired)
    : CrashSimSysCalls(root), root_(std::move(root)), on_fired_(std::move(on_fired)) {}

void FaultSysCalls::Arm(const std::string& id, FaultKind kind, const std::string& suffix) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({id, kind, suffix});
  if (IsWriteFault(kind)) ++pending_writes_;
  if (kind == FaultKind::kEioFdatasync) ++pending_syncs_;
}

void FaultSysCalls::PowerLoss(const std::string& id) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    off_ = true;
    cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; });
  }
  // Nothing changes files any more: leave what a power loss leaves.
  Crash();
  if (on_fired_) on_fired_(id, FaultKind::kPowerLoss, root_);
}

bool FaultSysCalls::powered_off() {
  std::lock_guard<std::mutex> lock(mu_);
  return off_;
}

void FaultSysCalls::Enter() {
  std::unique_lock<std::mutex> lock(mu_);
  if (off_) {
    // No power: this call never returns (the process is about to end).
    cv_.wait(lock, [] { return false; });
  }
  ++in_flight_;
}

void FaultSysCalls::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  cv_.notify_all();
}

std::optional<FaultSysCalls::Pending> FaultSysCalls::TakeWriteFault(int fd, std::string* path) {
  if (pending_writes_.load() == 0) return std::nullopt;
  *path = TrackedPathOfFd(fd);
  if (path->empty()) return std::nullopt;
  return Take(*path, IsWriteFault);
}

std::optional<FaultSysCalls::Pending> FaultSysCalls::Take(const std::string& path,
                                                          bool (*is_kind)(FaultKind)) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) {
    return is_kind(p.kind) && absl::EndsWith(path, p.suffix);
  });
  if (it == pending_.end()) return std::nullopt;
  Pending p = *it;
  pending_.erase(it);
  --(IsWriteFault(p.kind) ? pending_writes_ : pending_syncs_);
  return p;
}

sys::SysResult FaultSysCalls::FaultWrite(const Pending& fault, const std::string& path,
                                         size_t n,
                                         const std::function<sys::SysResult(size_t)>& write) {
  sys::SysResult r{-1, fault.kind == FaultKind::kEnospcWrite ? ENOSPC : EIO};
  if (fault.kind == FaultKind::kTornWrite && n > 0) {
    sys::SysResult part = write(std::max<size_t>(1, n / 2));
    if (!part.ok()) r = part;
  }
  if (on_fired_) on_fired_(fault.id, fault.kind, path);
  return r;
}

sys::SysResult FaultSysCalls::Open(const char* path, int flags, mode_t mode) {
  if ((flags & (O_CREAT | O_TRUNC)) == 0) return CrashSimSysCalls::Open(path, flags, mode);
  Enter();
  sys::SysResult r = CrashSimSysCalls::Open(path, flags, mode);
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Write(int fd, const void* buf, size_t n) {
  if (!IsRegularFile(fd)) return CrashSimSysCalls::Write(fd, buf, n);
  Enter();
  std::string path;
  sys::SysResult r;
  if (std::optional<Pending> f = TakeWriteFault(fd, &path)) {
    r = FaultWrite(*f, path, n, [&](size_t k) { return CrashSimSysCalls::Write(fd, buf, k); });
  } else {
    r = CrashSimSysCalls::Write(fd, buf, n);
  }
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Pwrite(int fd, const void* buf, size_t n, off_t off) {
  if (!IsRegularFile(fd)) return CrashSimSysCalls::Pwrite(fd, buf, n, off);
  Enter();
  std::string path;
  sys::SysResult r;
  if (std::optional<Pending> f = TakeWriteFault(fd, &path)) {
    r = FaultWrite(*f, path, n,
                   [&](size_t k) { return CrashSimSysCalls::Pwrite(fd, buf, k, off); });
  } else {
    r = CrashSimSysCalls::Pwrite(fd, buf, n, off);
  }
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Splice(int fd_in, off_t* off_in, int fd_out, off_t* off_out,
                                     size_t len, unsigned int flags) {
  if (!IsRegularFile(fd_out)) {
    return CrashSimSysCalls::Splice(fd_in, off_in, fd_out, off_out, len, flags);
  }
  Enter();
  std::string path;
  sys::SysResult r;
  if (std::optional<Pending> f = TakeWriteFault(fd_out, &path)) {
    r = FaultWrite(*f, path, len, [&](size_t k) {
      return CrashSimSysCalls::Splice(fd_in, off_in, fd_out, off_out, k, flags);
    });
  } else {
    r = CrashSimSysCalls::Splice(fd_in, off_in, fd_out, off_out, len, flags);
  }
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Fallocate(int fd, int mode, off_t off, off_t len) {
  Enter();
  sys::SysResult r = CrashSimSysCalls::Fallocate(fd, mode, off, len);
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Fdatasync(int fd) {
  Enter();
  std::optional<Pending> fault;
  std::string path;
  if (pending_syncs_.load() > 0 && !(path = TrackedPathOfFd(fd)).empty()) {
    fault = Take(path, IsSyncFault);
  }
  // The crash simulation fails it with Linux's semantics (its whole path
  // ends in itself).
  if (fault.has_value()) FailNextFdatasyncOf(PathOfFd(fd));
  sys::SysResult r = CrashSimSysCalls::Fdatasync(fd);
  Leave();
  if (fault.has_value() && on_fired_) on_fired_(fault->id, fault->kind, path);
  return r;
}

sys::SysResult FaultSysCalls::Fsync(int fd) {
  Enter();
  sys::SysResult r = CrashSimSysCalls::Fsync(fd);
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Ftruncate(int fd, off_t len) {
  Enter();
  sys::SysResult r = CrashSimSysCalls::Ftruncate(fd, len);
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Rename(const char* from, const char* to) {
  Enter();
  sys::SysResult r = CrashSimSysCalls::Rename(from, to);
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Unlink(const char* path) {
  Enter();
  sys::SysResult r = CrashSimSysCalls::Unlink(path);
  Leave();
  return r;
}

sys::SysResult FaultSysCalls::Mkdir(const char* path, mode_t mode) {
  Enter();
  sys::SysResult r = CrashSimSysCalls::Mkdir(path, mode);
  Leave();
  return r;
}

EventLog::EventLog(const std::string& dir) {
  const std::string path = dir + "/events";
  sys::SysResult r =
      sys_.Open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (!r.ok()) {
    spdlog::error("fault injector: cannot open {}: {}", path, std::strerror(r.err));
    return;
  }
  fd_ = sys::UniqueFd(static_cast<int>(r.rc));
}

void EventLog::Append(const std::string& line) {
  spdlog::warn("fault injector: {}", line);
  spdlog::default_logger()->flush();
  if (!fd_.valid()) return;
  const std::string text = line + "\n";
  sys::SysResult r = sys_.Write(fd_.get(), text.data(), text.size());
  if (!r.ok() || static_cast<size_t>(r.rc) != text.size()) {
    spdlog::error("fault injector: cannot append to the events file: {}",
                  r.ok() ? "short write" : std::strerror(r.err));
  }
}

FaultChannel::FaultChannel(std::string dir, FaultSysCalls& sys, EventLog& events)
    : dir_(std::move(dir)), sys_(sys), events_(events) {}

void FaultChannel::Start() {
  // The thread inherits this mask: it must take none of the daemon's signals.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::thread([this] { Run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  spdlog::info("fault injector: polling {} for commands", dir_);
}

FaultChannel::~FaultChannel() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void FaultChannel::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.Unlock();
    PollOnce(/*exit_on_power_loss=*/true);
    mu_.Lock();
    mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(5));
  }
}

void FaultChannel::PollOnce(bool exit_on_power_loss) {
  std::map<uint64_t, std::string> commands;  // by numeric id
  std::vector<std::string> odd;              // ids that are not numbers
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      absl::string_view name = e->d_name;
      if (!absl::ConsumePrefix(&name, "cmd-")) continue;
      uint64_t n = 0;
      if (absl::SimpleAtoi(name, &n)) {
        commands[n] = std::string(name);
      } else {
        odd.emplace_back(name);
      }
    }
    closedir(d);
  }
  for (const std::string& id : odd) commands.emplace(UINT64_MAX - commands.size(), id);
  for (const auto& [n, id] : commands) {
    const std::string path = dir_ + "/cmd-" + id;
    std::string text;
    sys::SysResult r = real_.Open(path.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (r.ok()) {
      sys::UniqueFd fd(static_cast<int>(r.rc));
      char buf[256];
      sys::SysResult got = real_.Read(fd.get(), buf, sizeof(buf));
      if (got.ok()) text.assign(buf, static_cast<size_t>(got.rc));
    }
    // A command file that cannot be removed is read again at the next poll:
    // say so rather than arm its fault twice in silence.
    if (!real_.Unlink(path.c_str()).ok()) {
      spdlog::warn("fault injector: could not remove {}", path);
    }
    Handle(id, std::string(absl::StripAsciiWhitespace(text)), exit_on_power_loss);
  }
}

void FaultChannel::Handle(const std::string& id, const std::string& command,
                          bool exit_on_power_loss) {
  std::vector<std::string> words = absl::StrSplit(command, ' ', absl::SkipWhitespace());
  std::optional<FaultKind> kind;
  if (words.size() == 1 || words.size() == 2) kind = ParseFaultKind(words[0]);
  const std::string suffix = words.size() == 2 ? words[1] : "";
  if (!kind.has_value() || (*kind == FaultKind::kPowerLoss && !suffix.empty())) {
    events_.Append(absl::StrCat(id, " error unknown command '", command,
                                "' (KIND [PATH-SUFFIX]: eio-fdatasync, eio-write, "
                                "torn-write, enospc-write; or power-loss)"));
    return;
  }
  const FaultKind k = *kind;
  events_.Append(absl::StrCat(id, " armed ", FaultKindName(k), suffix.empty() ? "" : " ", suffix));
  if (k != FaultKind::kPowerLoss) {
    sys_.Arm(id, k, suffix);
    return;
  }
  sys_.PowerLoss(id);
  if (exit_on_power_loss) _exit(kPowerLossExitCode);
}

}  // namespace walship::chaos
