// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: pipe.h
// -----------------------------------------------------------------------------
//
// `Pipe` owns both ends of a kernel pipe used as the in-kernel buffer for
// splice(2) (socket -> pipe -> file; see SpliceFully in transfer.h).
//
// Ownership: a `Pipe` owns its two descriptors (via UniqueFd) and closes them
// on destruction. It is move-only. The descriptors returned by `read_fd()` and
// `write_fd()` are borrowed and valid while the Pipe lives.
//
// Capacity: `capacity()` is the kernel's real capacity in bytes as reported
// by F_GETPIPE_SZ after creation, which may differ from the size asked for
// (rounded up to a power-of-two number of pages, or left at the default when
// F_SETPIPE_SZ is refused, e.g. above /proc/sys/fs/pipe-max-size for an
// unprivileged process). It is not refreshed if someone else resizes the
// pipe afterwards.
//
// State: a Pipe has no notion of its contents. After a failed transfer it may
// hold bytes nobody accounts for; such a pipe must be discarded and a new one
// created, never reused.
//
// Thread-safety: a Pipe is a value; the accessors are const and may be called
// concurrently, but only one transfer may use a pipe at a time.

#ifndef WALSHIP_COMMON_SYS_PIPE_H_
#define WALSHIP_COMMON_SYS_PIPE_H_

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship {
namespace sys {

class Pipe {
 public:
  // Creates a pipe with O_CLOEXEC and tries to resize it to
  // `desired_capacity` bytes (0 = keep the kernel default). The resize is best
  // effort: if F_SETPIPE_SZ fails, the pipe keeps its default size and no
  // error is returned. Errors: pipe2 or F_GETPIPE_SZ failing (e.g.
  // kResourceExhausted on EMFILE).
  static absl::StatusOr<Pipe> Create(SysCalls& sys, size_t desired_capacity);

  Pipe(Pipe&&) noexcept = default;
  Pipe& operator=(Pipe&&) noexcept = default;

  int read_fd() const { return read_.get(); }
  int write_fd() const { return write_.get(); }
  // Bytes the pipe can hold, as reported by the kernel at creation.
  size_t capacity() const { return capacity_; }

 private:
  Pipe(UniqueFd read, UniqueFd write, size_t capacity)
      : read_(std::move(read)), write_(std::move(write)), capacity_(capacity) {}

  UniqueFd read_;
  UniqueFd write_;
  size_t capacity_;
};

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_PIPE_H_
