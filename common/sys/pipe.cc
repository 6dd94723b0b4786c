// Copyright walship authors.

#include "common/sys/pipe.h"

#include <fcntl.h>

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"

namespace walship {
namespace sys {

absl::StatusOr<Pipe> Pipe::Create(SysCalls& sys, size_t desired_capacity) {
  int fds[2] = {-1, -1};
  const SysResult created = sys.Pipe2(fds, O_CLOEXEC);
  if (!created.ok()) return sys::ErrnoToStatus(created.err, "pipe2");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);

  if (desired_capacity > 0) {
    // The kernel takes an int; a larger request could only fail anyway.
    const long wanted =  // NOLINT(runtime/int)
        desired_capacity > static_cast<size_t>(INT_MAX)
            ? INT_MAX
            : static_cast<long>(desired_capacity);  // NOLINT(runtime/int)
    // Best effort: a smaller pipe only means more splice calls.
    (void)sys.Fcntl(write_end.get(), F_SETPIPE_SZ, wanted);
  }

  const SysResult size = sys.Fcntl(write_end.get(), F_GETPIPE_SZ, 0);
  if (!size.ok()) {
    return sys::ErrnoToStatus(
        size.err,
        absl::StrCat("fcntl(F_GETPIPE_SZ) on pipe fd ", write_end.get()));
  }
  return Pipe(std::move(read_end), std::move(write_end),
              static_cast<size_t>(size.rc));
}

}  // namespace sys
}  // namespace walship
