// fault_syscalls.h: disk faults and power loss inside the real replica.
//
// `FaultSysCalls` decorates the crash simulation (tests/replica/
// crash_sim_syscalls.h) rooted at the replica's --dest, and arms faults at run
// time. `FaultChannel` is the control channel a chaos driver uses to arm them
// in a running walship-replica-faulty (integration/chaos/faultctl.py is its
// client). Test builds only.
//
// Fault kinds (the command word in parentheses):
//   kEioFdatasync (eio-fdatasync): the next fdatasync of a file under the
//     root fails with EIO and the process lives on, with Linux semantics: the
//     bytes the file held past its last good sync are not durable until the
//     file is cut back and they are rewritten (CrashSimSysCalls::
//     FailNextFdatasyncOf).
//   kEioWrite (eio-write): the next write/pwrite/splice into a file under the
//     root fails with EIO; nothing is written.
//   kTornWrite (torn-write): the next write/pwrite/splice into a file under
//     the root writes a prefix (half of what was asked, at least 1 byte) and
//     then fails with EIO: the caller sees an error, the prefix is in the
//     file (for splice, the prefix has left the pipe).
//   kEnospcWrite (enospc-write): as kEioWrite, with ENOSPC.
//   kPowerLoss (power-loss): the host loses power now (PowerLoss()): every
//     mutating call (write, pwrite, splice into a regular file, fallocate,
//     ftruncate, fdatasync, fsync, rename, unlink, mkdir, open with O_CREAT
//     or O_TRUNC) blocks forever from that instant; the calls already under
//     way finish; then CrashSimSysCalls::Crash() rewrites the root into what
//     a power loss leaves (unsynced bytes gone, unsynced creations and
//     renames undone). FaultChannel then ends the process at once with
//     _exit(kPowerLossExitCode), so a restarted replica sees durable state
//     only. Simplification: files present when the process started are taken
//     as durable (the crash simulation cannot know better), and no tail is
//     torn.
// Data faults fire once each, in the order armed; several may be pending. A
// data fault may be limited to files whose path ends in a given suffix
// (".partial", "walship.state").
//
// Thread-safety: every method may be called from any thread.
#ifndef WALSHIP_INTEGRATION_CHAOS_FAULT_SYSCALLS_H_
#define WALSHIP_INTEGRATION_CHAOS_FAULT_SYSCALLS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "tests/replica/crash_sim_syscalls.h"

namespace walship::chaos {

// The exit status of a process whose host lost power (power-loss).
inline constexpr int kPowerLossExitCode = 86;

enum class FaultKind { kEioFdatasync, kEioWrite, kTornWrite, kEnospcWrite, kPowerLoss };

// "eio-fdatasync", ... (the command words above).
const char* FaultKindName(FaultKind kind);
std::optional<FaultKind> ParseFaultKind(absl::string_view word);

class FaultSysCalls : public testing::CrashSimSysCalls {
 public:
  // Told, outside any lock, when an armed fault triggers: its id, kind and
  // the path of the file it hit (the root for power loss).
  using FiredFn =
      std::function<void(const std::string& id, FaultKind kind, const std::string& path)>;

  FaultSysCalls(std::string root, FiredFn on_fired);

  // Arms a data fault (not kPowerLoss: call PowerLoss()). It fires at the
  // next matching call on a file under the root whose path ends in
  // `suffix` (any file when empty).
  void Arm(const std::string& id, FaultKind kind, const std::string& suffix = "");
  // The power goes out now (see the file comment). Returns after Crash(),
  // with every later mutating call blocked forever; the caller ends the
  // process. Call at most once.
  void PowerLoss(const std::string& id);
  bool powered_off();

  sys::SysResult Open(const char* path, int flags, mode_t mode) override;
  sys::SysResult Write(int fd, const void* buf, size_t n) override;
  sys::SysResult Pwrite(int fd, const void* buf, size_t n, off_t off) override;
  sys::SysResult Splice(int fd_in, off_t* off_in, int fd_out, off_t* off_out, size_t len,
                        unsigned int flags) override;
  sys::SysResult Fallocate(int fd, int mode, off_t off, off_t len) override;
  sys::SysResult Fdatasync(int fd) override;
  sys::SysResult Fsync(int fd) override;
  sys::SysResult Ftruncate(int fd, off_t len) override;
  sys::SysResult Rename(const char* from, const char* to) override;
  sys::SysResult Unlink(const char* path) override;
  sys::SysResult Mkdir(const char* path, mode_t mode) override;

 private:
  struct Pending {
    std::string id;
    FaultKind kind;
    std::string suffix;
  };
  // Removes and returns the first pending fault `is_kind` accepts whose
  // suffix `path` ends in.
  std::optional<Pending> Take(const std::string& path, bool (*is_kind)(FaultKind));
  // A mutating call begins (blocks forever once the power is off) / ends.
  void Enter();
  void Leave();
  // The pending write fault to apply to a write into `fd`, if any, with the
  // file's path.
  std::optional<Pending> TakeWriteFault(int fd, std::string* path);
  // Applies `fault` to a write of `n` bytes; `write(k)` performs k of them.
  sys::SysResult FaultWrite(const Pending& fault, const std::string& path, size_t n,
                            const std::function<sys::SysResult(size_t)>& write);

  const std::string root_;
  const FiredFn on_fired_;
  std::atomic<int> pending_writes_{0};
  std::atomic<int> pending_syncs_{0};
  std::mutex mu_;  // std:: for its condition variable
  std::condition_variable cv_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool off_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

// Appends event lines to DIR/events (one write(2) per line, O_APPEND) and
// logs each as "fault injector: LINE".
class EventLog {
 public:
  explicit EventLog(const std::string& dir);
  void Append(const std::string& line);

 private:
  sys::RealSysCalls sys_;
  sys::UniqueFd fd_;
};

// FaultChannel
//
// Polls `dir` every 5 ms for commands a driver writes atomically (write
// DIR/cmd.tmp, rename it to DIR/cmd-<id>; content: one line, the command
// word, optionally followed by a path suffix, e.g. "torn-write .partial"), in
// the order of their numeric ids. For each it appends
// "<id> armed <kind>" to DIR/events and arms the fault (later
// "<id> fired <kind> <path>" when it triggers), or "<id> error <why>" for
// an unknown command, then deletes the command file. power-loss is applied
// at once, and the process ends with _exit(kPowerLossExitCode) after its
// "fired" line. The polling thread starts with every
// signal blocked (the daemon's signal thread keeps them) in Start() and
// stops in the destructor.
class FaultChannel {
 public:
  FaultChannel(std::string dir, FaultSysCalls& sys, EventLog& events);
  ~FaultChannel();
  FaultChannel(const FaultChannel&) = delete;
  FaultChannel& operator=(const FaultChannel&) = delete;

  // Starts the polling thread.
  void Start();

  // One pass over the directory (the thread's body; exposed for tests).
  // `exit_on_power_loss` false leaves the process running (tests).
  void PollOnce(bool exit_on_power_loss);

 private:
  void Run();
  void Handle(const std::string& id, const std::string& command, bool exit_on_power_loss);

  const std::string dir_;
  FaultSysCalls& sys_;
  EventLog& events_;
  sys::RealSysCalls real_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace walship::chaos

#endif  // WALSHIP_INTEGRATION_CHAOS_FAULT_SYSCALLS_H_
