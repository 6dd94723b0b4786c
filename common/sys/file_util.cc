// Copyright walship authors.

#include "common/sys/file_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"

namespace walship {
namespace sys {
namespace {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (absl::EndsWith(dir, "/")) return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

// Writes, syncs and closes the temp file; leaves removing it to the caller.
absl::Status WriteAndSync(SysCalls& sys, const std::string& path,
                          absl::string_view contents) {
  WALSHIP_ASSIGN_OR_RETURN(
      UniqueFd fd, OpenFile(sys, path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  absl::Status written =
      WriteFully(sys, fd.get(), contents.data(), contents.size());
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat(path, ": ", written.message()));
  }
  WALSHIP_RETURN_IF_ERROR(
      SysError(sys.Fsync(fd.get()), absl::StrCat("fsync ", path)));
  // close(2) can still report a deferred write error (NFS); don't ignore it.
  const int close_err = fd.Close();
  if (close_err != 0) {
    return sys::ErrnoToStatus(close_err, absl::StrCat("close ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UniqueFd> OpenFile(SysCalls& sys, const std::string& path,
                                  int flags, mode_t mode) {
  for (;;) {
    const SysResult r = sys.Open(path.c_str(), flags | O_CLOEXEC, mode);
    if (r.ok()) return UniqueFd(static_cast<int>(r.rc));
    if (r.err == EINTR) continue;  // Possible on FIFOs and some NFS mounts.
    return sys::ErrnoToStatus(r.err, absl::StrCat("open ", path));
  }
}

namespace {

// Type, mode, links, inode and size: never a time (file_util.h).
constexpr unsigned int kFactsMask = STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_INO | STATX_SIZE;

// A kernel older than statx(2), or a seccomp filter that does not know it
// (older container runtimes answer EPERM).
bool NoStatx(int err) { return err == ENOSYS || err == EPERM; }

void FromStatx(const struct statx& x, FileFacts* out) {
  out->dev = makedev(x.stx_dev_major, x.stx_dev_minor);
  out->ino = x.stx_ino;
  out->mode = x.stx_mode;
  out->nlink = x.stx_nlink;
  out->size = x.stx_size;
}

void FromStat(const struct stat& st, FileFacts* out) {
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  out->mode = st.st_mode;
  out->nlink = st.st_nlink;
  out->size = static_cast<uint64_t>(st.st_size);
}

}  // namespace

SysResult DescribeFd(SysCalls& sys, int fd, FileFacts* out) {
  struct statx x;
  SysResult r = sys.Statx(fd, "", AT_EMPTY_PATH, kFactsMask, &x);
  if (r.ok()) {
    FromStatx(x, out);
  } else if (NoStatx(r.err)) {
    struct stat st;
    r = sys.Fstat(fd, &st);
    if (r.ok()) FromStat(st, out);
  }
  return r;
}

SysResult DescribePath(SysCalls& sys, const std::string& path, FileFacts* out) {
  struct statx x;
  SysResult r = sys.Statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, kFactsMask, &x);
  if (r.ok()) {
    FromStatx(x, out);
  } else if (NoStatx(r.err)) {
    struct stat st;
    r = sys.Lstat(path.c_str(), &st);
    if (r.ok()) FromStat(st, out);
  }
  return r;
}

absl::StatusOr<UniqueFd> OpenRegularFile(SysCalls& sys, const std::string& path) {
  SysResult r;
  do {
    r = sys.Open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
  } while (!r.ok() && r.err == EINTR);
  if (!r.ok() && r.err == ELOOP) {  // O_NOFOLLOW met a symbolic link
    return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link: not followed"));
  }
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("open ", path));
  UniqueFd fd(static_cast<int>(r.rc));
  FileFacts facts;
  const SysResult s = DescribeFd(sys, fd.get(), &facts);
  if (!s.ok()) return sys::ErrnoToStatus(s.err, absl::StrCat("statx ", path));
  if (!S_ISREG(facts.mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return fd;
}

absl::Status FsyncDir(SysCalls& sys, const std::string& dir) {
  WALSHIP_ASSIGN_OR_RETURN(UniqueFd fd,
                           OpenFile(sys, dir, O_RDONLY | O_DIRECTORY));
  return SysError(sys.Fsync(fd.get()), absl::StrCat("fsync directory ", dir));
}

absl::Status WriteFileAtomically(SysCalls& sys, const std::string& dir,
                                 const std::string& name,
                                 absl::string_view contents) {
  if (name.empty() || absl::StrContains(name, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteFileAtomically: bad file name \"", name, "\""));
  }
  const std::string final_path = JoinPath(dir, name);
  const std::string temp_path = absl::StrCat(final_path, ".tmp");

  absl::Status status = WriteAndSync(sys, temp_path, contents);
  if (status.ok()) {
    status = SysError(sys.Rename(temp_path.c_str(), final_path.c_str()),
                      absl::StrCat("rename ", temp_path, " to ", final_path));
  }
  if (!status.ok()) {
    // Best effort: the original error is the one worth reporting.
    (void)sys.Unlink(temp_path.c_str());
    return status;
  }
  // The rename is only durable once the directory entry is.
  return FsyncDir(sys, dir.empty() ? "." : dir);
}

absl::StatusOr<std::string> ReadFileToString(SysCalls& sys,
                                             const std::string& path) {
  WALSHIP_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(sys, path, O_RDONLY));
  return ReadToEnd(sys, fd.get(), path);
}

absl::StatusOr<std::string> ReadToEnd(SysCalls& sys, int fd,
                                      const std::string& path) {
  std::string out;
  struct stat st;
  if (sys.Fstat(fd, &st).ok() && st.st_size > 0) {
    out.reserve(static_cast<size_t>(st.st_size));
  }
  // Read to EOF rather than trusting st_size: the file may be growing, and
  // procfs-style files report 0.
  char chunk[64 * 1024];
  for (;;) {
    const SysResult r = sys.Read(fd, chunk, sizeof(chunk));
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(
          r.err, absl::StrCat("read ", path, " at offset ", out.size()));
    }
    if (r.rc == 0) return out;
    out.append(chunk, static_cast<size_t>(r.rc));
  }
}

absl::StatusOr<std::vector<std::string>> ListDirectory(SysCalls& sys, const std::string& path,
                                                       absl::string_view what) {
  SysResult opened;
  do {
    opened = sys.Open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  } while (!opened.ok() && opened.err == EINTR);
  if (!opened.ok()) return sys::ErrnoToStatus(opened.err, absl::StrCat("open ", what, " ", path));
  const UniqueFd fd(static_cast<int>(opened.rc));
  std::vector<std::string> names;
  alignas(struct dirent64) char buf[32 * 1024];
  for (;;) {
    const SysResult r = sys.Getdents64(fd.get(), buf, sizeof(buf));
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(r.err, absl::StrCat("read ", what, " ", path));
    }
    if (r.rc == 0) return names;
    for (int64_t off = 0; off < r.rc;) {
      const auto* e = reinterpret_cast<const struct dirent64*>(buf + off);
      const absl::string_view name(e->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
      off += e->d_reclen;
    }
  }
}

}  // namespace sys
}  // namespace walship
