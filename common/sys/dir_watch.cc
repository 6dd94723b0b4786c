#include "common/sys/dir_watch.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"

namespace walship::sys {

absl::StatusOr<DirWatch> DirWatch::Open(SysCalls& sys, const std::string& dir,
                                        uint32_t mask) {
  SysResult r = sys.InotifyInit1(IN_CLOEXEC | IN_NONBLOCK);
  if (!r.ok()) return ErrnoToStatus(r.err, "inotify_init1");
  UniqueFd inotify(static_cast<int>(r.rc));
  r = sys.InotifyAddWatch(inotify.get(), dir.c_str(), mask | IN_ONLYDIR);
  if (!r.ok()) return ErrnoToStatus(r.err, absl::StrCat("watch directory ", dir));
  int fds[2];
  r = sys.Pipe2(fds, O_CLOEXEC | O_NONBLOCK);
  if (!r.ok()) return ErrnoToStatus(r.err, "pipe2");
  return DirWatch(sys, dir, std::move(inotify), UniqueFd(fds[0]), UniqueFd(fds[1]));
}

absl::Status DirWatch::SetMask(uint32_t mask) {
  // Watching the same directory again changes its watch's mask.
  return SysError(sys_.InotifyAddWatch(inotify_.get(), dir_.c_str(), mask | IN_ONLYDIR),
                  absl::StrCat("watch directory ", dir_));
}

int DirWatch::Wait(absl::Duration timeout,
                   const std::function<void(const inotify_event&)>& on_event, int also_fd) {
  pollfd pfds[3] = {{inotify_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0},
                    {also_fd, POLLIN, 0}};
  // Rounded up: a caller waiting for a deadline must not wake just before
  // it, find nothing due, and poll again with a timeout of zero until then.
  int ms = static_cast<int>(std::max<int64_t>(
      0, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)))));
  const bool polled = sys_.Poll(pfds, also_fd >= 0 ? 3 : 2, ms).ok();
  // Read only what poll() found ready: at a wake-up per flushed commit, the
  // reads that would only say EAGAIN are a measurable share of the work.
  // (If poll itself failed, read both; they do not block.)
  char drain[64];
  if (!polled || pfds[1].revents != 0) {
    while (sys_.Read(wake_read_.get(), drain, sizeof(drain)).rc > 0) {
    }
  }
  int events = 0;
  if (polled && pfds[0].revents == 0) return 0;
  for (;;) {
    SysResult r = sys_.Read(inotify_.get(), buf_.data(), buf_.size());
    if (!r.ok() || r.rc <= 0) break;
    for (size_t off = 0; off < static_cast<size_t>(r.rc);) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf_.data() + off);
      off += sizeof(inotify_event) + ev->len;
      on_event(*ev);
      ++events;
    }
  }
  return events;
}

void DirWatch::Wake() {
  char c = 1;
  // Ignored on purpose: the pipe is nonblocking, and when it is full
  // (EAGAIN) a wake-up is already pending.
  (void)sys_.Write(wake_write_.get(), &c, 1);
}

}  // namespace walship::sys
