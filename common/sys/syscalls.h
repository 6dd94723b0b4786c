// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: syscalls.h
// -----------------------------------------------------------------------------
//
// The syscall seam. Every operating-system call walship makes on a descriptor
// or path goes through a `SysCalls` object, so that tests can script the
// kernel's answers (short transfers, EINTR, EAGAIN, EPIPE, EIO, ...) and fault
// injectors can decorate single calls.
//
// Contract of every method:
//   * It performs exactly one system call (or, for Realpath and
//     Getaddrinfo, one libc call) with the given arguments; it never retries
//     (not even on EINTR), loops or logs, and allocates only what the libc
//     call does (Getaddrinfo's list). Retry and loop policy live above the
//     seam (see transfer.h).
//   * It returns a `SysResult`: `rc` is the kernel's return value (a byte
//     count, a new descriptor, or 0) and `err` is errno captured immediately
//     after the call, before anything else could clobber it. On success
//     `err == 0` and `rc >= 0`; on failure `rc == -1` and `err != 0`.
//   * Descriptors returned in `rc` (Open, Socket, Accept4, Pipe2,
//     InotifyInit1) are owned by the caller, who should wrap them in a
//     `UniqueFd` at once (UniqueFd closes them: the seam has no Close). Pass
//     O_CLOEXEC / SOCK_CLOEXEC yourself: the seam does not add flags
//     (file_util.h's OpenFile does).
//
// Ownership and lifetime: objects that do I/O receive a `SysCalls&` through
// their constructor and must not outlive it. Only `main()` (and tests) call
// `DefaultSysCalls()`; library code never reaches for the global.
//
// Thread-safety: `RealSysCalls` is stateless and safe to use from any number
// of threads at once; the calls are exactly as thread-safe as the syscalls
// themselves. Subclasses (fakes, fault injectors) document their own rules.

#ifndef WALSHIP_COMMON_SYS_SYSCALLS_H_
#define WALSHIP_COMMON_SYS_SYSCALLS_H_

#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace walship {
namespace sys {

// SysResult
//
// The raw outcome of one system call. See the file comment for the meaning of
// the fields; convert a failure to an absl::Status with `SysError()` from
// errors.h, the one place errno becomes a Status. [[nodiscard]]: a result
// dropped on purpose is cast to void with a comment saying why.
struct [[nodiscard]] SysResult {
  int64_t rc;
  int err;

  bool ok() const { return rc >= 0; }
};

// SchedAttr
//
// The kernel's `struct sched_attr` (sched_setattr(2)), which glibc 2.36 does
// not declare and <linux/sched/types.h> cannot be included beside <sched.h>
// (both define `struct sched_param`). The layout is the kernel's ABI: version
// 1, 56 bytes.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;       // SCHED_OTHER, SCHED_BATCH
  uint32_t sched_priority;  // SCHED_FIFO, SCHED_RR
  // SCHED_DEADLINE; for SCHED_OTHER and SCHED_BATCH since Linux 6.12 the
  // thread's slice (100 µs to 100 ms; 0: the default), in ns.
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
static_assert(sizeof(SchedAttr) == 56, "sched_attr version 1 is 56 bytes");
static_assert(offsetof(SchedAttr, sched_nice) == 16, "sched_attr ABI");
static_assert(offsetof(SchedAttr, sched_runtime) == 24, "sched_attr ABI");
static_assert(offsetof(SchedAttr, sched_util_min) == 48, "sched_attr ABI");
// sched_attr.sched_flags: threads the thread starts get the normal policy
// back (from a real-time or deadline one), a nice value of 0 (from a negative
// one) and the default slice.
inline constexpr uint64_t kSchedFlagResetOnFork = 0x01;

// SysCalls
//
// Abstract syscall interface. Method names and argument orders follow the
// corresponding man pages (sendfile(2), splice(2), ...).
class SysCalls {
 public:
  SysCalls() = default;
  SysCalls(const SysCalls&) = delete;
  SysCalls& operator=(const SysCalls&) = delete;
  virtual ~SysCalls() = default;

  // Files and descriptors.
  virtual SysResult Open(const char* path, int flags, mode_t mode) = 0;
  virtual SysResult Read(int fd, void* buf, size_t n) = 0;
  virtual SysResult Write(int fd, const void* buf, size_t n) = 0;
  virtual SysResult Pread(int fd, void* buf, size_t n, off_t off) = 0;
  virtual SysResult Pwrite(int fd, const void* buf, size_t n, off_t off) = 0;
  virtual SysResult Fstat(int fd, struct stat* st) = 0;
  virtual SysResult Stat(const char* path, struct stat* st) = 0;
  // lstat(2): a symbolic link is described, not followed.
  virtual SysResult Lstat(const char* path, struct stat* st) = 0;
  // statx(2): only what `mask` asks for is looked up. A file walship
  // follows but does not own is described through it without its times
  // (file_util.h's DescribeFd / DescribePath say why).
  virtual SysResult Statx(int dirfd, const char* path, int flags, unsigned int mask,
                          struct statx* out) = 0;
  // lseek(2); rc is the resulting offset. SEEK_DATA / SEEK_HOLE find the
  // next data / hole at or after `off` (ENXIO when `off` is at or past the
  // end); file systems report preallocated, never written ranges as holes.
  virtual SysResult Lseek(int fd, off_t off, int whence) = 0;
  // `arg` is long because fcntl(2)'s third argument is.
  virtual SysResult Fcntl(int fd, int cmd, long arg) = 0;  // NOLINT
  virtual SysResult Fdatasync(int fd) = 0;
  virtual SysResult Fsync(int fd) = 0;
  virtual SysResult Ftruncate(int fd, off_t len) = 0;
  virtual SysResult Fallocate(int fd, int mode, off_t off, off_t len) = 0;
  // posix_fadvise(2), which returns the error instead of setting errno.
  virtual SysResult Fadvise(int fd, off_t off, off_t len, int advice) = 0;
  virtual SysResult Rename(const char* from, const char* to) = 0;
  virtual SysResult Unlink(const char* path) = 0;
  virtual SysResult Mkdir(const char* path, mode_t mode) = 0;
  // statvfs(2): the file system holding `path`.
  virtual SysResult Statvfs(const char* path, struct statvfs* st) = 0;
  // getdents64(2) on a directory opened with O_DIRECTORY: fills `buf` with
  // linux_dirent64 records; rc is the bytes filled, 0 at the end. See
  // file_util.h's ListDirectory for the loop.
  virtual SysResult Getdents64(int fd, void* buf, size_t n) = 0;
  // flock(2): an advisory lock on the open file, released when the last
  // descriptor of the open file description closes (LOCK_NB: EWOULDBLOCK
  // while another holds it).
  virtual SysResult Flock(int fd, int operation) = 0;
  // realpath(3): the absolute path of `path` with every symbolic link, "."
  // and ".." resolved, written to `resolved`, which must hold PATH_MAX
  // bytes; rc 0 on success.
  virtual SysResult Realpath(const char* path, char* resolved) = 0;

  // Zero-copy transfer. `offset`, `off_in` and `off_out` follow the man
  // pages: when non-null the kernel reads the offset from, and writes the
  // advanced offset back to, the pointed-to value, and the file position is
  // left alone.
  virtual SysResult SendFile(int out_fd, int in_fd, off_t* offset,
                             size_t count) = 0;
  virtual SysResult Splice(int fd_in, off_t* off_in, int fd_out, off_t* off_out,
                           size_t len, unsigned int flags) = 0;
  // On success rc == 0 and fds[0] (read end) / fds[1] (write end) are set.
  virtual SysResult Pipe2(int fds[2], int flags) = 0;

  // Readiness. rc is the number of ready descriptors; 0 means timed out.
  virtual SysResult Poll(struct pollfd* fds, nfds_t n, int timeout_ms) = 0;

  // Sockets.
  virtual SysResult Socket(int domain, int type, int protocol) = 0;
  virtual SysResult Bind(int fd, const sockaddr* addr, socklen_t len) = 0;
  virtual SysResult Listen(int fd, int backlog) = 0;
  virtual SysResult Accept4(int fd, sockaddr* addr, socklen_t* len,
                            int flags) = 0;
  virtual SysResult Connect(int fd, const sockaddr* addr, socklen_t len) = 0;
  virtual SysResult Send(int fd, const void* buf, size_t n, int flags) = 0;
  virtual SysResult Recv(int fd, void* buf, size_t n, int flags) = 0;
  // Bytes waiting to be read in a TCP socket (ioctl SIOCINQ), in rc.
  virtual SysResult InputQueued(int fd) = 0;
  // Payload bytes a TCP socket can take now without waiting for its peer,
  // in rc: half its send buffer (SO_SNDBUF, which counts the kernel's
  // bookkeeping too) less what is queued and unacknowledged (ioctl
  // SIOCOUTQ); 0 when that is negative. An estimate on the safe side.
  virtual SysResult SendRoom(int fd) = 0;
  virtual SysResult Setsockopt(int fd, int level, int name, const void* val,
                               socklen_t len) = 0;
  // getsockopt(2); *len is the size of `val` in, of the value out.
  virtual SysResult Getsockopt(int fd, int level, int name, void* val,
                               socklen_t* len) = 0;
  virtual SysResult Getsockname(int fd, sockaddr* addr, socklen_t* len) = 0;
  virtual SysResult Shutdown(int fd, int how) = 0;
  // getaddrinfo(3): on success rc == 0 and `*res` is a list the caller
  // releases with Freeaddrinfo. On failure rc == -1 and `err` is the EAI_*
  // code (not an errno: describe it with gai_strerror(3), never with
  // ErrnoToStatus).
  virtual SysResult Getaddrinfo(const char* node, const char* service,
                                const addrinfo* hints, addrinfo** res) = 0;
  // freeaddrinfo(3) of a list Getaddrinfo returned (cannot fail, so it
  // returns nothing).
  virtual void Freeaddrinfo(addrinfo* res) = 0;

  // inotify(7).
  virtual SysResult InotifyInit1(int flags) = 0;
  virtual SysResult InotifyAddWatch(int fd, const char* path,
                                    uint32_t mask) = 0;

  // isatty(3): rc 1 when `fd` refers to a terminal; otherwise rc -1 and err
  // (ENOTTY for anything else that is open).
  virtual SysResult Isatty(int fd) = 0;

  // The process.
  // getpid(2): rc is this process's id (never fails).
  virtual SysResult Getpid() = 0;
  // gethostname(2) into `name` (`len` bytes; NUL-terminated only when the
  // name is shorter than `len`).
  virtual SysResult Gethostname(char* name, size_t len) = 0;
  // pthread_sigmask(3) of the calling thread, which returns the error
  // instead of setting errno (err is that error).
  virtual SysResult PthreadSigmask(int how, const sigset_t* set,
                                   sigset_t* old) = 0;
  // sigwait(3): blocks until a signal of `set` (blocked in every thread) is
  // pending, takes it and stores its number in `*sig`; rc 0. Returns the
  // error instead of setting errno, as PthreadSigmask.
  virtual SysResult Sigwait(const sigset_t* set, int* sig) = 0;
  // sched_getattr(2) / sched_setattr(2) of the calling thread (pid 0),
  // `flags` 0. SchedGetattr fills sizeof(SchedAttr) bytes; SchedSetattr
  // reads `attr->size` of them.
  virtual SysResult SchedGetattr(SchedAttr* attr) = 0;
  virtual SysResult SchedSetattr(const SchedAttr* attr) = 0;
};

// RealSysCalls
//
// The production implementation: each method is the libc call of the same
// name. Deliberately not `final`, so that a test decorator can override one
// method (say, fail Fsync with EIO) and inherit the real behaviour for the
// rest.
class RealSysCalls : public SysCalls {
 public:
  RealSysCalls() = default;

  SysResult Open(const char* path, int flags, mode_t mode) override;
  SysResult Read(int fd, void* buf, size_t n) override;
  SysResult Write(int fd, const void* buf, size_t n) override;
  SysResult Pread(int fd, void* buf, size_t n, off_t off) override;
  SysResult Pwrite(int fd, const void* buf, size_t n, off_t off) override;
  SysResult Fstat(int fd, struct stat* st) override;
  SysResult Stat(const char* path, struct stat* st) override;
  SysResult Lstat(const char* path, struct stat* st) override;
  SysResult Statx(int dirfd, const char* path, int flags, unsigned int mask,
                  struct statx* out) override;
  SysResult Lseek(int fd, off_t off, int whence) override;
  SysResult Fcntl(int fd, int cmd, long arg) override;  // NOLINT
  SysResult Fdatasync(int fd) override;
  SysResult Fsync(int fd) override;
  SysResult Ftruncate(int fd, off_t len) override;
  SysResult Fallocate(int fd, int mode, off_t off, off_t len) override;
  SysResult Fadvise(int fd, off_t off, off_t len, int advice) override;
  SysResult Rename(const char* from, const char* to) override;
  SysResult Unlink(const char* path) override;
  SysResult Mkdir(const char* path, mode_t mode) override;
  SysResult Statvfs(const char* path, struct statvfs* st) override;
  SysResult Getdents64(int fd, void* buf, size_t n) override;
  SysResult Flock(int fd, int operation) override;
  SysResult Realpath(const char* path, char* resolved) override;
  SysResult SendFile(int out_fd, int in_fd, off_t* offset,
                     size_t count) override;
  SysResult Splice(int fd_in, off_t* off_in, int fd_out, off_t* off_out,
                   size_t len, unsigned int flags) override;
  SysResult Pipe2(int fds[2], int flags) override;
  SysResult Poll(struct pollfd* fds, nfds_t n, int timeout_ms) override;
  SysResult Socket(int domain, int type, int protocol) override;
  SysResult Bind(int fd, const sockaddr* addr, socklen_t len) override;
  SysResult Listen(int fd, int backlog) override;
  SysResult Accept4(int fd, sockaddr* addr, socklen_t* len, int flags) override;
  SysResult Connect(int fd, const sockaddr* addr, socklen_t len) override;
  SysResult Send(int fd, const void* buf, size_t n, int flags) override;
  SysResult Recv(int fd, void* buf, size_t n, int flags) override;
  SysResult InputQueued(int fd) override;
  SysResult SendRoom(int fd) override;
  SysResult Setsockopt(int fd, int level, int name, const void* val,
                       socklen_t len) override;
  SysResult Getsockopt(int fd, int level, int name, void* val,
                       socklen_t* len) override;
  SysResult Getsockname(int fd, sockaddr* addr, socklen_t* len) override;
  SysResult Shutdown(int fd, int how) override;
  SysResult Getaddrinfo(const char* node, const char* service,
                        const addrinfo* hints, addrinfo** res) override;
  void Freeaddrinfo(addrinfo* res) override;
  SysResult InotifyInit1(int flags) override;
  SysResult InotifyAddWatch(int fd, const char* path, uint32_t mask) override;
  SysResult Isatty(int fd) override;
  SysResult Getpid() override;
  SysResult Gethostname(char* name, size_t len) override;
  SysResult PthreadSigmask(int how, const sigset_t* set,
                           sigset_t* old) override;
  SysResult Sigwait(const sigset_t* set, int* sig) override;
  SysResult SchedGetattr(SchedAttr* attr) override;
  SysResult SchedSetattr(const SchedAttr* attr) override;
};

// DefaultSysCalls()
//
// The process-lifetime `RealSysCalls` instance (never destroyed, so it is
// safe to use during static destruction). For `main()` and tests only;
// libraries take a `SysCalls&` instead.
SysCalls& DefaultSysCalls();

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_SYSCALLS_H_
