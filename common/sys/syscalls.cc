// Copyright walship authors.

#include "common/sys/syscalls.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <linux/sockios.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace walship {
namespace sys {
namespace {

// Called as `Capture(::call(...))`: the argument is evaluated first, so errno
// is read before any other library code runs.
inline SysResult Capture(int64_t rc) {
  if (rc < 0) return SysResult{-1, errno};
  return SysResult{rc, 0};
}

}  // namespace

SysResult RealSysCalls::Open(const char* path, int flags, mode_t mode) {
  return Capture(::open(path, flags, mode));
}

SysResult RealSysCalls::Read(int fd, void* buf, size_t n) {
  return Capture(::read(fd, buf, n));
}

SysResult RealSysCalls::Write(int fd, const void* buf, size_t n) {
  return Capture(::write(fd, buf, n));
}

SysResult RealSysCalls::Pread(int fd, void* buf, size_t n, off_t off) {
  return Capture(::pread(fd, buf, n, off));
}

SysResult RealSysCalls::Pwrite(int fd, const void* buf, size_t n, off_t off) {
  return Capture(::pwrite(fd, buf, n, off));
}

SysResult RealSysCalls::Fstat(int fd, struct stat* st) {
  return Capture(::fstat(fd, st));
}

SysResult RealSysCalls::Stat(const char* path, struct stat* st) {
  return Capture(::stat(path, st));
}

SysResult RealSysCalls::Lstat(const char* path, struct stat* st) {
  return Capture(::lstat(path, st));
}

SysResult RealSysCalls::Statx(int dirfd, const char* path, int flags, unsigned int mask,
                              struct statx* out) {
  return Capture(::statx(dirfd, path, flags, mask, out));
}

SysResult RealSysCalls::Lseek(int fd, off_t off, int whence) {
  return Capture(::lseek(fd, off, whence));
}

SysResult RealSysCalls::Fcntl(int fd, int cmd, long arg) {  // NOLINT
  return Capture(::fcntl(fd, cmd, arg));
}

SysResult RealSysCalls::Fdatasync(int fd) { return Capture(::fdatasync(fd)); }

SysResult RealSysCalls::Fsync(int fd) { return Capture(::fsync(fd)); }

SysResult RealSysCalls::Ftruncate(int fd, off_t len) {
  return Capture(::ftruncate(fd, len));
}

SysResult RealSysCalls::Fallocate(int fd, int mode, off_t off, off_t len) {
  return Capture(::fallocate(fd, mode, off, len));
}

SysResult RealSysCalls::Fadvise(int fd, off_t off, off_t len, int advice) {
  const int err = ::posix_fadvise(fd, off, len, advice);
  return err == 0 ? SysResult{0, 0} : SysResult{-1, err};
}

SysResult RealSysCalls::Rename(const char* from, const char* to) {
  return Capture(::rename(from, to));
}

SysResult RealSysCalls::Unlink(const char* path) {
  return Capture(::unlink(path));
}

SysResult RealSysCalls::Mkdir(const char* path, mode_t mode) {
  return Capture(::mkdir(path, mode));
}

SysResult RealSysCalls::Statvfs(const char* path, struct statvfs* st) {
  return Capture(::statvfs(path, st));
}

SysResult RealSysCalls::Getdents64(int fd, void* buf, size_t n) {
  return Capture(::getdents64(fd, buf, n));
}

SysResult RealSysCalls::Flock(int fd, int operation) {
  return Capture(::flock(fd, operation));
}

SysResult RealSysCalls::Realpath(const char* path, char* resolved) {
  if (::realpath(path, resolved) == nullptr) return SysResult{-1, errno};
  return SysResult{0, 0};
}

SysResult RealSysCalls::SendFile(int out_fd, int in_fd, off_t* offset,
                                 size_t count) {
  return Capture(::sendfile(out_fd, in_fd, offset, count));
}

SysResult RealSysCalls::Splice(int fd_in, off_t* off_in, int fd_out,
                               off_t* off_out, size_t len, unsigned int flags) {
  return Capture(::splice(fd_in, off_in, fd_out, off_out, len, flags));
}

SysResult RealSysCalls::Pipe2(int fds[2], int flags) {
  return Capture(::pipe2(fds, flags));
}

SysResult RealSysCalls::Poll(struct pollfd* fds, nfds_t n, int timeout_ms) {
  return Capture(::poll(fds, n, timeout_ms));
}

SysResult RealSysCalls::Socket(int domain, int type, int protocol) {
  return Capture(::socket(domain, type, protocol));
}

SysResult RealSysCalls::Bind(int fd, const sockaddr* addr, socklen_t len) {
  return Capture(::bind(fd, addr, len));
}

SysResult RealSysCalls::Listen(int fd, int backlog) {
  return Capture(::listen(fd, backlog));
}

SysResult RealSysCalls::Accept4(int fd, sockaddr* addr, socklen_t* len,
                                int flags) {
  return Capture(::accept4(fd, addr, len, flags));
}

SysResult RealSysCalls::Connect(int fd, const sockaddr* addr, socklen_t len) {
  return Capture(::connect(fd, addr, len));
}

SysResult RealSysCalls::Send(int fd, const void* buf, size_t n, int flags) {
  return Capture(::send(fd, buf, n, flags));
}

SysResult RealSysCalls::Recv(int fd, void* buf, size_t n, int flags) {
  return Capture(::recv(fd, buf, n, flags));
}

SysResult RealSysCalls::InputQueued(int fd) {
  int queued = 0;
  SysResult r = Capture(::ioctl(fd, SIOCINQ, &queued));
  if (r.ok()) r.rc = queued;
  return r;
}

SysResult RealSysCalls::SendRoom(int fd) {
  int sndbuf = 0;
  socklen_t len = sizeof(sndbuf);
  SysResult r = Capture(::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len));
  if (!r.ok()) return r;
  int queued = 0;
  r = Capture(::ioctl(fd, SIOCOUTQ, &queued));
  if (r.ok()) r.rc = std::max(0, sndbuf / 2 - queued);
  return r;
}

SysResult RealSysCalls::Setsockopt(int fd, int level, int name, const void* val,
                                   socklen_t len) {
  return Capture(::setsockopt(fd, level, name, val, len));
}

SysResult RealSysCalls::Getsockopt(int fd, int level, int name, void* val,
                                   socklen_t* len) {
  return Capture(::getsockopt(fd, level, name, val, len));
}

SysResult RealSysCalls::Getsockname(int fd, sockaddr* addr, socklen_t* len) {
  return Capture(::getsockname(fd, addr, len));
}

SysResult RealSysCalls::Shutdown(int fd, int how) {
  return Capture(::shutdown(fd, how));
}

SysResult RealSysCalls::Getaddrinfo(const char* node, const char* service,
                                    const addrinfo* hints, addrinfo** res) {
  const int err = ::getaddrinfo(node, service, hints, res);
  return err == 0 ? SysResult{0, 0} : SysResult{-1, err};
}

void RealSysCalls::Freeaddrinfo(addrinfo* res) { ::freeaddrinfo(res); }

SysResult RealSysCalls::InotifyInit1(int flags) {
  return Capture(::inotify_init1(flags));
}

SysResult RealSysCalls::InotifyAddWatch(int fd, const char* path,
                                        uint32_t mask) {
  return Capture(::inotify_add_watch(fd, path, mask));
}

SysResult RealSysCalls::Isatty(int fd) {
  if (::isatty(fd) == 1) return SysResult{1, 0};
  return SysResult{-1, errno};
}

SysResult RealSysCalls::Getpid() { return Capture(::getpid()); }

SysResult RealSysCalls::Gethostname(char* name, size_t len) {
  return Capture(::gethostname(name, len));
}

SysResult RealSysCalls::PthreadSigmask(int how, const sigset_t* set,
                                       sigset_t* old) {
  const int err = ::pthread_sigmask(how, set, old);
  return err == 0 ? SysResult{0, 0} : SysResult{-1, err};
}

SysResult RealSysCalls::Sigwait(const sigset_t* set, int* sig) {
  const int err = ::sigwait(set, sig);
  return err == 0 ? SysResult{0, 0} : SysResult{-1, err};
}

// glibc 2.36 wraps neither call.
SysResult RealSysCalls::SchedGetattr(SchedAttr* attr) {
  return Capture(::syscall(SYS_sched_getattr, 0, attr, sizeof(SchedAttr), 0));
}

SysResult RealSysCalls::SchedSetattr(const SchedAttr* attr) {
  return Capture(::syscall(SYS_sched_setattr, 0, attr, 0));
}

SysCalls& DefaultSysCalls() {
  static RealSysCalls* const kReal = new RealSysCalls();
  return *kReal;
}

}  // namespace sys
}  // namespace walship
