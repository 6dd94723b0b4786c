// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: file_util.h
// -----------------------------------------------------------------------------
//
// Small whole-file helpers on top of the syscall seam: opening with
// O_CLOEXEC, reading a small file, and the crash-safe replacement of a state
// file (temp + fsync + rename + fsync dir) that every durable state file in
// walship uses.
//
// All functions take the `SysCalls&` to use; errors are converted by
// ErrnoToStatus with the path in the message (ENOENT -> kNotFound, ENOSPC ->
// kResourceExhausted, EIO -> kDataLoss, ...).
//
// Thread-safety: the functions hold no state and may be called concurrently,
// except that concurrent WriteFileAtomically calls for the same dir/name race
// on the shared temp file and must be serialized by the caller.

#ifndef WALSHIP_COMMON_SYS_FILE_UTIL_H_
#define WALSHIP_COMMON_SYS_FILE_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship {
namespace sys {

// OpenFile()
//
// open(2)s `path` with `flags | O_CLOEXEC` (retrying EINTR) and returns the
// owned descriptor. `mode` only matters with O_CREAT/O_TMPFILE.
absl::StatusOr<UniqueFd> OpenFile(SysCalls& sys, const std::string& path,
                                  int flags, mode_t mode = 0644);

// OpenRegularFile()
//
// Opens `path` for reading only if it is a regular file: never through a
// symbolic link in its last component (O_NOFOLLOW), and without blocking
// should it be a FIFO (O_NONBLOCK, which changes nothing for reads of a
// regular file). kFailedPrecondition naming the path when it is a symbolic
// link or not a regular file; otherwise as OpenFile (kNotFound, ...). For
// files a directory listing named, e.g. WAL segments: a link planted in the
// directory must never make its target shippable.
absl::StatusOr<UniqueFd> OpenRegularFile(SysCalls& sys, const std::string& path);

// FileFacts, DescribeFd(), DescribePath()
//
// What walship needs to know of a file it follows but does not write (a
// database's WAL segment): device, inode, type, links and size, asked of
// statx(2) without the file's times. Asking for the times (stat, fstat,
// lstat) marks them as seen on Linux 6.13 and later (multigrain
// timestamps): the owner's next write then takes a fine-grained timestamp,
// so the inode changes at every write instead of once a clock tick, and on
// ext4 without a journal each fdatasync of the owner writes the inode as
// well as the data. Checked at every frame, a look at the times would cost
// the primary one more synchronous write per commit
// (integration/drill/pg_source_times_test.py). Where a check needs the
// modification time (a cache keyed by it), one fstat per file is right:
// after it, the next write is sure to change the time.
//
// Return as the seam's calls: on failure `err` says why. Where statx(2) is
// missing (ENOSYS) or filtered (EPERM from a seccomp profile that predates
// it), fstat / lstat answer instead.
struct FileFacts {
  uint64_t dev = 0;    // as st_dev
  uint64_t ino = 0;
  uint32_t mode = 0;   // type and permission bits, as st_mode
  uint64_t nlink = 0;
  uint64_t size = 0;
};
SysResult DescribeFd(SysCalls& sys, int fd, FileFacts* out);
// Of `path` itself: a symbolic link is described, not followed (as lstat).
SysResult DescribePath(SysCalls& sys, const std::string& path, FileFacts* out);

// FsyncDir()
//
// fsync(2)s the directory `dir`, making previously created, renamed or
// removed entries in it durable. Needed after every create/rename whose
// survival across a crash matters.
absl::Status FsyncDir(SysCalls& sys, const std::string& dir);

// WriteFileAtomically()
//
// Replaces `dir`/`name` with `contents`: writes `dir`/`name`.tmp (truncating
// any leftover from an earlier crash), fsyncs it, closes it, renames it over
// `dir`/`name` and fsyncs `dir`. `name` must be a plain file name (no '/').
//
// Guarantee:
//   * After OK, the new contents are what a reader sees, and they survive a
//     crash or power loss.
//   * After a failure, or a crash at any point, `dir`/`name` holds either the
//     complete old contents (or is absent, if it never existed) or the
//     complete new contents, never a mix or a prefix. A failure after the
//     rename (the directory fsync) leaves the new contents visible but
//     possibly not yet durable.
//   * On failure the temp file is removed (best effort); a crash may leave
//     it behind, and the next call overwrites it.
absl::Status WriteFileAtomically(SysCalls& sys, const std::string& dir,
                                 const std::string& name,
                                 absl::string_view contents);

// ReadFileToString()
//
// Returns the whole contents of `path` (meant for small state/config files;
// it reads until end of file, whatever its size). kNotFound when the file
// does not exist.
absl::StatusOr<std::string> ReadFileToString(SysCalls& sys,
                                             const std::string& path);

// ReadToEnd()
//
// Reads the open `fd` from its current position to end of file, retrying
// EINTR; ReadFileToString once the file is open. `path` only names the file
// in an error ("read PATH at offset N: ...").
absl::StatusOr<std::string> ReadToEnd(SysCalls& sys, int fd,
                                      const std::string& path);

// ListDirectory()
//
// The names in directory `path` (unsorted; without "." and ".."), read with
// getdents64(2) through the seam. An error names the directory as
// "open WHAT PATH" or "read WHAT PATH", e.g. what = "WAL directory".
absl::StatusOr<std::vector<std::string>> ListDirectory(SysCalls& sys, const std::string& path,
                                                       absl::string_view what = "directory");

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_FILE_UTIL_H_
