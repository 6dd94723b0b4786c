// dir_watch.h: waits for changes in one directory (inotify) or a wake-up.
//
// The WAL sources sleep in Wait() until the kernel reports events in the
// watched directory, the timeout passes, or another thread calls Wake()
// (e.g. to stop). Events are drained in batches: a burst of appends costs the
// caller one pass, not one per write.
//
// Ownership: the object owns the inotify descriptor and the wake-up pipe
// (both O_CLOEXEC). Thread-safety: Wait() from one thread; Wake() from any.
#ifndef WALSHIP_COMMON_SYS_DIR_WATCH_H_
#define WALSHIP_COMMON_SYS_DIR_WATCH_H_

#include <sys/inotify.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::sys {

class DirWatch {
 public:
  // Watches `dir` for the inotify events in `mask` (IN_ONLYDIR is added).
  // kNotFound / kPermissionDenied etc. when the directory cannot be watched.
  static absl::StatusOr<DirWatch> Open(SysCalls& sys, const std::string& dir, uint32_t mask);

  DirWatch(DirWatch&&) = default;
  DirWatch& operator=(DirWatch&&) = delete;

  // Blocks until events arrive, `timeout` passes, Wake() is called or
  // `also_fd` (when not -1) is readable; then calls `on_event` for every
  // queued event. Returns the number of events. `also_fd` lets a caller wait
  // for a socket and the directory in one thread: it is only polled, never
  // read.
  int Wait(absl::Duration timeout, const std::function<void(const inotify_event&)>& on_event,
           int also_fd = -1);
  void Wake();

  // Replaces the mask given to Open() (IN_ONLYDIR is added); events queued
  // under the old mask are still delivered. Wait()'s thread only.
  absl::Status SetMask(uint32_t mask);

 private:
  DirWatch(SysCalls& sys, std::string dir, UniqueFd inotify, UniqueFd wake_read,
           UniqueFd wake_write)
      : sys_(sys),
        dir_(std::move(dir)),
        inotify_(std::move(inotify)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        buf_(64 * 1024) {}

  SysCalls& sys_;
  const std::string dir_;
  UniqueFd inotify_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  std::vector<char> buf_;
};

}  // namespace walship::sys

#endif  // WALSHIP_COMMON_SYS_DIR_WATCH_H_
