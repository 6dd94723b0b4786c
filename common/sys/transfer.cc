// Copyright walship authors.

#include "common/sys/transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>  // NOLINT(build/c++11)
#include <climits>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"

namespace walship {
namespace sys {
namespace {

// Linux never moves more than this in one read/write/sendfile/splice
// (MAX_RW_COUNT); asking for more only makes "rc <= requested" checks
// meaningless.
constexpr size_t kMaxSyscallBytes = 0x7ffff000;

// Both sides of every splice are non-blocking on the pipe: a pipe can run out
// of slots before it runs out of bytes (each socket fragment takes a slot), and
// a blocking splice into a full pipe would wait for a reader that is us.
constexpr unsigned int kSpliceFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;

constexpr char kUseCopyTransport[] =
    "; zero-copy transfer is not supported for these descriptors, use "
    "--transport=copy";

int PollTimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

// Waits until `fd` reports `events` (or an error/hangup, which the caller's
// retried syscall will then report precisely). `what` describes the transfer
// for the timeout message and is only formatted on failure.
template <typename DescribeFn>
absl::Status WaitForReadiness(SysCalls& sys, int fd, short events,  // NOLINT
                              const TransferOptions& opts,
                              DescribeFn describe) {
  using Clock = std::chrono::steady_clock;
  const int timeout_ms = PollTimeoutMs(opts.io_timeout);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  int wait_ms = timeout_ms;
  for (;;) {
    struct pollfd pfd;
    pfd.fd = fd;
    pfd.events = events;
    pfd.revents = 0;
    const SysResult r = sys.Poll(&pfd, 1, wait_ms);
    if (r.ok()) {
      if (r.rc > 0) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat(
          "timed out after ", absl::FormatDuration(opts.io_timeout),
          " waiting for fd ", fd, " to become ",
          (events & POLLIN) ? "readable" : "writable", " (", describe(), ")"));
    }
    if (r.err != EINTR) {
      return sys::ErrnoToStatus(
          r.err, absl::StrCat("poll fd ", fd, " (", describe(), ")"));
    }
    // A signal must not extend the wait: resume with what is left of it.
    if (timeout_ms > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(left.count(), 0));
    }
  }
}

absl::Status CheckRange(absl::string_view op, off_t offset, size_t count) {
  constexpr uint64_t kMaxOff = std::numeric_limits<off_t>::max();
  if (offset < 0 || static_cast<uint64_t>(count) > kMaxOff ||
      static_cast<uint64_t>(offset) > kMaxOff - count) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": invalid range offset ", offset, " count ", count));
  }
  return absl::OkStatus();
}

absl::Status CheckBuffer(absl::string_view op, absl::Span<char> buffer,
                         size_t count) {
  if (buffer.empty() && count > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": empty buffer for ", count, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Overreported(absl::string_view what, int64_t rc, size_t asked) {
  return absl::InternalError(absl::StrCat(
      what, " returned ", rc, " bytes but only ", asked, " were requested"));
}

absl::Status UseCopyTransport(int err, absl::string_view context) {
  return absl::UnimplementedError(absl::StrCat(
      sys::ErrnoToStatus(err, context).message(), kUseCopyTransport));
}

bool ZeroCopyUnsupported(int err) {
  return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP;
}

}  // namespace

absl::Status SendFileFully(SysCalls& sys, int out_sock, int in_fd, off_t offset,
                           size_t count, const TransferOptions& opts) {
  WALSHIP_RETURN_IF_ERROR(CheckRange("sendfile", offset, count));
  const off_t end = offset + static_cast<off_t>(count);
  off_t pos = offset;
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("sendfile fd ", in_fd, " -> socket fd ", out_sock,
                        " at offset ", pos, ", ", done, " of ", count,
                        " bytes sent");
  };
  while (done < count) {
    const size_t want = std::min(count - done, kMaxSyscallBytes);
    // The kernel advances its copy; we advance `pos` by what it reports, so
    // the two cannot disagree about where the next call starts.
    off_t kernel_offset = pos;
    const SysResult r = sys.SendFile(out_sock, in_fd, &kernel_offset, want);
    if (r.ok()) {
      if (r.rc == 0) {
        return absl::DataLossError(
            absl::StrCat("source truncated: file ended at offset ", pos,
                         ", expected ", end, " (", describe(), ")"));
      }
      if (static_cast<uint64_t>(r.rc) > want) {
        return Overreported(describe(), r.rc, want);
      }
      pos += r.rc;
      done += static_cast<size_t>(r.rc);
      continue;
    }
    if (r.err == EINTR) continue;
    if (r.err == EAGAIN) {
      WALSHIP_RETURN_IF_ERROR(
          WaitForReadiness(sys, out_sock, POLLOUT, opts, describe));
      continue;
    }
    if (ZeroCopyUnsupported(r.err)) return UseCopyTransport(r.err, describe());
    return sys::ErrnoToStatus(r.err, describe());
  }
  return absl::OkStatus();
}

absl::Status SpliceFully(SysCalls& sys, int in_sock, const Pipe& pipe,
                         int out_fd, off_t out_offset, size_t count,
                         const TransferOptions& opts) {
  WALSHIP_RETURN_IF_ERROR(CheckRange("splice", out_offset, count));
  const size_t capacity = std::min(pipe.capacity(), kMaxSyscallBytes);
  if (capacity == 0 && count > 0) {
    return absl::InvalidArgumentError("splice: pipe has zero capacity");
  }
  size_t received = 0;  // Bytes moved socket -> pipe.
  size_t written = 0;   // Bytes moved pipe -> file; received - written in pipe.
  auto describe_socket = [&] {
    return absl::StrCat("splice socket fd ", in_sock, " -> pipe fd ",
                        pipe.write_fd(), ", ", received, " of ", count,
                        " bytes received");
  };
  auto describe_file = [&] {
    return absl::StrCat("splice pipe fd ", pipe.read_fd(), " -> fd ", out_fd,
                        " at file offset ",
                        out_offset + static_cast<off_t>(written), ", ", written,
                        " of ", count, " bytes written");
  };
  while (written < count) {
    const size_t in_pipe = received - written;
    if (received < count && in_pipe < capacity) {
      const size_t want = std::min(count - received, capacity - in_pipe);
      const SysResult r = sys.Splice(in_sock, nullptr, pipe.write_fd(), nullptr,
                                     want, kSpliceFlags);
      if (r.ok()) {
        if (r.rc == 0) {
          return absl::UnavailableError(
              absl::StrCat("peer closed after ", received, " of ", count,
                           " bytes (", describe_socket(), ")"));
        }
        if (static_cast<uint64_t>(r.rc) > want) {
          return Overreported(describe_socket(), r.rc, want);
        }
        received += static_cast<size_t>(r.rc);
      } else if (r.err == EINTR) {
        continue;
      } else if (r.err == EAGAIN) {
        // With bytes in the pipe, EAGAIN may mean the pipe ran out of slots;
        // draining is progress either way. With an empty pipe it can only be
        // the socket.
        if (in_pipe == 0) {
          WALSHIP_RETURN_IF_ERROR(
              WaitForReadiness(sys, in_sock, POLLIN, opts, describe_socket));
          continue;
        }
      } else if (ZeroCopyUnsupported(r.err)) {
        return UseCopyTransport(r.err, describe_socket());
      } else {
        return sys::ErrnoToStatus(r.err, describe_socket());
      }
    }

    const size_t pending = received - written;
    if (pending == 0) continue;
    off_t file_offset = out_offset + static_cast<off_t>(written);
    const SysResult w = sys.Splice(pipe.read_fd(), nullptr, out_fd,
                                   &file_offset, pending, kSpliceFlags);
    if (w.ok()) {
      // The pipe holds `pending` bytes, so 0 or more than asked means our
      // accounting and the kernel disagree; looping on would hang or corrupt.
      if (w.rc == 0 || static_cast<uint64_t>(w.rc) > pending) {
        return absl::InternalError(
            absl::StrCat(describe_file(), ": splice from pipe returned ", w.rc,
                         " with ", pending, " bytes buffered"));
      }
      written += static_cast<size_t>(w.rc);
      continue;
    }
    if (w.err == EINTR) continue;
    if (w.err == EAGAIN) {
      return absl::InternalError(absl::StrCat(describe_file(),
                                              ": pipe reported empty with ",
                                              pending, " bytes buffered"));
    }
    if (ZeroCopyUnsupported(w.err)) {
      return UseCopyTransport(w.err, describe_file());
    }
    return sys::ErrnoToStatus(w.err, describe_file());
  }
  return absl::OkStatus();
}

absl::Status CopyFileToSocket(SysCalls& sys, int out_sock, int in_fd,
                              off_t offset, size_t count,
                              absl::Span<char> buffer,
                              const TransferOptions& opts) {
  WALSHIP_RETURN_IF_ERROR(CheckRange("copy file to socket", offset, count));
  WALSHIP_RETURN_IF_ERROR(CheckBuffer("copy file to socket", buffer, count));
  const off_t end = offset + static_cast<off_t>(count);
  off_t pos = offset;
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("copy fd ", in_fd, " -> socket fd ", out_sock,
                        " at offset ", pos, ", ", done, " of ", count,
                        " bytes sent");
  };
  while (done < count) {
    const size_t want =
        std::min({count - done, buffer.size(), kMaxSyscallBytes});
    const SysResult r = sys.Pread(in_fd, buffer.data(), want, pos);
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(r.err, absl::StrCat("pread: ", describe()));
    }
    if (r.rc == 0) {
      return absl::DataLossError(
          absl::StrCat("source truncated: file ended at offset ", pos,
                       ", expected ", end, " (", describe(), ")"));
    }
    if (static_cast<uint64_t>(r.rc) > want) {
      return Overreported(describe(), r.rc, want);
    }
    const size_t got = static_cast<size_t>(r.rc);
    WALSHIP_RETURN_IF_ERROR(
        SendFully(sys, out_sock, buffer.data(), got, /*flags=*/0, opts));
    pos += r.rc;
    done += got;
  }
  return absl::OkStatus();
}

absl::Status CopySocketToFile(SysCalls& sys, int in_sock, int out_fd,
                              off_t out_offset, size_t count,
                              absl::Span<char> buffer,
                              const TransferOptions& opts) {
  WALSHIP_RETURN_IF_ERROR(CheckRange("copy socket to file", out_offset, count));
  WALSHIP_RETURN_IF_ERROR(CheckBuffer("copy socket to file", buffer, count));
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("copy socket fd ", in_sock, " -> fd ", out_fd,
                        " at file offset ",
                        out_offset + static_cast<off_t>(done), ", ", done,
                        " of ", count, " bytes received");
  };
  while (done < count) {
    const size_t want =
        std::min({count - done, buffer.size(), kMaxSyscallBytes});
    const SysResult r = sys.Read(in_sock, buffer.data(), want);
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      if (r.err == EAGAIN) {
        WALSHIP_RETURN_IF_ERROR(
            WaitForReadiness(sys, in_sock, POLLIN, opts, describe));
        continue;
      }
      return sys::ErrnoToStatus(r.err, absl::StrCat("read: ", describe()));
    }
    if (r.rc == 0) {
      return absl::UnavailableError(absl::StrCat("peer closed after ", done,
                                                 " of ", count, " bytes (",
                                                 describe(), ")"));
    }
    if (static_cast<uint64_t>(r.rc) > want) {
      return Overreported(describe(), r.rc, want);
    }
    const size_t got = static_cast<size_t>(r.rc);
    WALSHIP_RETURN_IF_ERROR(PwriteFully(sys, out_fd, buffer.data(), got,
                                        out_offset + static_cast<off_t>(done)));
    done += got;
  }
  return absl::OkStatus();
}

SysResult ReadOnce(SysCalls& sys, int fd, void* buf, size_t count) {
  SysResult r;
  do {
    r = sys.Read(fd, buf, count);
  } while (!r.ok() && r.err == EINTR);
  return r;
}

absl::Status ReadFully(SysCalls& sys, int fd, void* buf, size_t count,
                       const TransferOptions& opts) {
  char* const out = static_cast<char*>(buf);
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("read fd ", fd, ", ", done, " of ", count, " bytes");
  };
  while (done < count) {
    const size_t want = std::min(count - done, kMaxSyscallBytes);
    const SysResult r = sys.Read(fd, out + done, want);
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      if (r.err == EAGAIN) {
        WALSHIP_RETURN_IF_ERROR(
            WaitForReadiness(sys, fd, POLLIN, opts, describe));
        continue;
      }
      return sys::ErrnoToStatus(r.err, describe());
    }
    if (r.rc == 0) {
      if (done == 0) return absl::OutOfRangeError("end of stream");
      return absl::UnavailableError(absl::StrCat("peer closed mid-read after ",
                                                 done, " of ", count,
                                                 " bytes (fd ", fd, ")"));
    }
    if (static_cast<uint64_t>(r.rc) > want) {
      return Overreported(describe(), r.rc, want);
    }
    done += static_cast<size_t>(r.rc);
  }
  return absl::OkStatus();
}

absl::Status SendFully(SysCalls& sys, int fd, const void* buf, size_t count,
                       int flags, const TransferOptions& opts) {
  const char* const in = static_cast<const char*>(buf);
  flags |= MSG_NOSIGNAL;
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("send to socket fd ", fd, ", ", done, " of ", count,
                        " bytes sent");
  };
  while (done < count) {
    const size_t want = std::min(count - done, kMaxSyscallBytes);
    const SysResult r = sys.Send(fd, in + done, want, flags);
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      if (r.err == EAGAIN) {
        WALSHIP_RETURN_IF_ERROR(
            WaitForReadiness(sys, fd, POLLOUT, opts, describe));
        continue;
      }
      return sys::ErrnoToStatus(r.err, describe());
    }
    if (r.rc == 0 || static_cast<uint64_t>(r.rc) > want) {
      // send(2) never accepts 0 of a non-empty buffer; looping would spin.
      return Overreported(describe(), r.rc, want);
    }
    done += static_cast<size_t>(r.rc);
  }
  return absl::OkStatus();
}

absl::Status WriteFully(SysCalls& sys, int fd, const void* buf, size_t count) {
  const char* const in = static_cast<const char*>(buf);
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("write fd ", fd, ", ", done, " of ", count,
                        " bytes written");
  };
  while (done < count) {
    const size_t want = std::min(count - done, kMaxSyscallBytes);
    const SysResult r = sys.Write(fd, in + done, want);
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(r.err, describe());
    }
    if (r.rc == 0 || static_cast<uint64_t>(r.rc) > want) {
      return Overreported(describe(), r.rc, want);
    }
    done += static_cast<size_t>(r.rc);
  }
  return absl::OkStatus();
}

absl::Status PwriteFully(SysCalls& sys, int fd, const void* buf, size_t count,
                         off_t offset) {
  WALSHIP_RETURN_IF_ERROR(CheckRange("pwrite", offset, count));
  const char* const in = static_cast<const char*>(buf);
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("pwrite fd ", fd, " at offset ",
                        offset + static_cast<off_t>(done), ", ", done, " of ",
                        count, " bytes written");
  };
  while (done < count) {
    const size_t want = std::min(count - done, kMaxSyscallBytes);
    const SysResult r =
        sys.Pwrite(fd, in + done, want, offset + static_cast<off_t>(done));
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(r.err, describe());
    }
    if (r.rc == 0 || static_cast<uint64_t>(r.rc) > want) {
      return Overreported(describe(), r.rc, want);
    }
    done += static_cast<size_t>(r.rc);
  }
  return absl::OkStatus();
}

absl::Status PreadFully(SysCalls& sys, int fd, void* buf, size_t count,
                        off_t offset) {
  WALSHIP_RETURN_IF_ERROR(CheckRange("pread", offset, count));
  char* const out = static_cast<char*>(buf);
  size_t done = 0;
  auto describe = [&] {
    return absl::StrCat("pread fd ", fd, " at offset ",
                        offset + static_cast<off_t>(done), ", ", done, " of ",
                        count, " bytes read");
  };
  while (done < count) {
    const size_t want = std::min(count - done, kMaxSyscallBytes);
    const SysResult r =
        sys.Pread(fd, out + done, want, offset + static_cast<off_t>(done));
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(r.err, describe());
    }
    if (r.rc == 0) {
      return absl::OutOfRangeError(absl::StrCat(
          "file ended at offset ", offset + static_cast<off_t>(done),
          ", wanted ", offset + static_cast<off_t>(count), " (", describe(),
          ")"));
    }
    if (static_cast<uint64_t>(r.rc) > want) {
      return Overreported(describe(), r.rc, want);
    }
    done += static_cast<size_t>(r.rc);
  }
  return absl::OkStatus();
}

void IgnoreSigpipe() {
  // Re-applying SIG_IGN is harmless, so no once-flag is needed; sigaction is
  // thread-safe.
  struct sigaction action = {};
  action.sa_handler = SIG_IGN;
  sigemptyset(&action.sa_mask);
  (void)sigaction(SIGPIPE, &action, nullptr);
}

}  // namespace sys
}  // namespace walship
