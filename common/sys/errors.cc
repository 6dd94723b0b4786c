// Copyright walship authors.

#include "common/sys/errors.h"

#include <errno.h>
#include <string.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace walship {
namespace sys {
namespace {

// strerror_r has two incompatible signatures (XSI returns int and fills the
// buffer, GNU returns the string, which may not be the buffer). Overloading
// on the return type picks the right interpretation for whichever libc we
// are compiled against.
[[maybe_unused]] const char* StrerrorResult(int rc, const char* buf) {
  return rc == 0 ? buf : nullptr;
}
[[maybe_unused]] const char* StrerrorResult(const char* msg,
                                            const char* /*buf*/) {
  return msg;
}

std::string ErrnoText(int err) {
  char buf[256];
  buf[0] = '\0';
  const char* msg = StrerrorResult(strerror_r(err, buf, sizeof(buf)), buf);
  if (msg == nullptr || *msg == '\0') return "Unknown error";
  return msg;
}

}  // namespace

absl::StatusCode ErrnoToStatusCode(int err) {
  switch (err) {
    // The peer or the network: reconnect and retry with backoff.
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ENETRESET:
    case EHOSTDOWN:
    case EAGAIN:  // == EWOULDBLOCK on Linux.
    case EINTR:
    case EBUSY:
    case EADDRINUSE:
      return absl::StatusCode::kUnavailable;

    case ENOENT:
      return absl::StatusCode::kNotFound;

    case EEXIST:
      return absl::StatusCode::kAlreadyExists;

    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;

    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOBUFS:
      return absl::StatusCode::kResourceExhausted;

    case EIO:
      return absl::StatusCode::kDataLoss;

    case EINVAL:
    case ENAMETOOLONG:
    case EBADF:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case EFAULT:
    case ESPIPE:
    case ENOTSOCK:
      return absl::StatusCode::kInvalidArgument;

    case ENOTEMPTY:
    case EXDEV:
      return absl::StatusCode::kFailedPrecondition;

    case EFBIG:
    case EOVERFLOW:
    case ERANGE:
      return absl::StatusCode::kOutOfRange;

    case ENOSYS:
    case EOPNOTSUPP:  // == ENOTSUP on Linux.
      return absl::StatusCode::kUnimplemented;

    case ECANCELED:
      return absl::StatusCode::kCancelled;

    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoToStatus(int err, absl::string_view context) {
  const std::string text = err == 0 ? "unknown error" : ErrnoText(err);
  return absl::Status(ErrnoToStatusCode(err),
                      absl::StrCat(context, ": ", text, " (errno ", err, ")"));
}

absl::Status SysError(const SysResult& r, absl::string_view context) {
  if (r.ok()) return absl::OkStatus();
  return sys::ErrnoToStatus(r.err, context);
}

}  // namespace sys
}  // namespace walship
