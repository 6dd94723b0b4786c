// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: errors.h
// -----------------------------------------------------------------------------
//
// The one place an errno value becomes an absl::Status. Nothing else in
// walship builds a Status from errno, so the message format and the code
// mapping are uniform across the agent and the replica.
//
// Message: "<context>: <strerror text> (errno N)". The context is supplied by
// the caller and should name what was being done and to what: the path, the
// segment, the descriptor and byte offset (e.g. "pwrite segment
// 000000010000000A0000003F at offset 8192").
//
// Codes are chosen by what the caller should do next (see absl/status/
// status.h and STYLE.md):
//
//   kUnavailable        retry with backoff: the peer or network went away or
//                       is not ready (EPIPE, ECONNRESET, ECONNREFUSED,
//                       ECONNABORTED, ENOTCONN, ETIMEDOUT, EHOSTUNREACH,
//                       ENETUNREACH, ENETDOWN, ENETRESET, EHOSTDOWN, EAGAIN,
//                       EINTR, EBUSY, EADDRINUSE)
//   kNotFound           ENOENT
//   kAlreadyExists      EEXIST
//   kPermissionDenied   an operator must grant access (EACCES, EPERM, EROFS)
//   kResourceExhausted  free space / descriptors / memory, then retry
//                       (ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM, ENOBUFS)
//   kDataLoss           the storage failed under us (EIO)
//   kInvalidArgument    we passed something wrong (EINVAL, ENAMETOOLONG,
//                       EBADF, ENOTDIR, EISDIR, ELOOP, EFAULT, ESPIPE,
//                       ENOTSOCK)
//   kFailedPrecondition the filesystem is not in a state we can use as is
//                       (ENOTEMPTY, EXDEV)
//   kOutOfRange         EFBIG, EOVERFLOW, ERANGE
//   kUnimplemented      the kernel/filesystem lacks the feature (ENOSYS,
//                       EOPNOTSUPP/ENOTSUP)
//   kCancelled          ECANCELED
//   kInternal           anything else, and errno 0
//
// Callers that know better for a specific call (e.g. EINVAL from splice(2)
// meaning "this fd pair cannot splice") override the code themselves, keeping
// the message.
//
// Name clash: Abseil has its own absl::ErrnoToStatus with the same signature,
// which argument-dependent lookup finds whenever an argument is an
// absl::string_view. Such calls fail to compile as ambiguous; write
// `sys::ErrnoToStatus(...)` (qualified names disable ADL). Never call the absl
// one: its codes and message format differ.
//
// Thread-safety: all functions are thread-safe (strerror_r is used).

#ifndef WALSHIP_COMMON_SYS_ERRORS_H_
#define WALSHIP_COMMON_SYS_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/sys/syscalls.h"

namespace walship {
namespace sys {

// ErrnoToStatusCode()
//
// The code `ErrnoToStatus()` uses for `err`; exposed for tests and for
// callers that build their own message.
absl::StatusCode ErrnoToStatusCode(int err);

// ErrnoToStatus()
//
// Returns a non-OK Status for `err` with the message described above. Never
// returns OK, not even for `err == 0` (which yields kInternal "unknown error"):
// it is only called on a failure path, and turning a lost errno into success
// would hide that failure.
absl::Status ErrnoToStatus(int err, absl::string_view context);

// SysError()
//
// `ErrnoToStatus(r.err, context)` if `r` failed, OK if it succeeded, so that
// a call whose only failure handling is "report it" reads
//
//   return SysError(sys.Fsync(fd), absl::StrCat("fsync ", path));
absl::Status SysError(const SysResult& r, absl::string_view context);

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_ERRORS_H_
