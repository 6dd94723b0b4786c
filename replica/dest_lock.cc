#include "replica/dest_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"

namespace walship::replica {

absl::StatusOr<DestLock> DestLock::Acquire(sys::SysCalls& sys, const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kLockFileName);
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                           sys::OpenFile(sys, path, O_RDWR | O_CREAT, 0644));
  sys::SysResult r = sys.Flock(fd.get(), LOCK_EX | LOCK_NB);
  if (!r.ok() && r.err == EWOULDBLOCK) {
    std::string holder = "unknown";
    if (auto text = sys::ReadFileToString(sys, path); text.ok()) {
      std::string pid(absl::StripAsciiWhitespace(*text));
      if (!pid.empty()) holder = pid;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "another walship-replica (pid ", holder, ") is already following into ", dir,
        "; two replicas in one directory would interleave their segments and state. Give "
        "each replica its own --dest"));
  }
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("flock ", path));
  const std::string pid = absl::StrCat(sys.Getpid().rc, "\n");  // getpid never fails
  if (sys::SysResult t = sys.Ftruncate(fd.get(), 0); !t.ok()) {
    return sys::ErrnoToStatus(t.err, absl::StrCat("truncate ", path));
  }
  WALSHIP_RETURN_IF_ERROR(sys::PwriteFully(sys, fd.get(), pid.data(), pid.size(), 0));
  return DestLock(std::move(fd));
}

}  // namespace walship::replica
