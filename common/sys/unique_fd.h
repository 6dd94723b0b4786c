// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: unique_fd.h
// -----------------------------------------------------------------------------
//
// `UniqueFd` is the sole owner of one file descriptor, and the only code in
// walship that calls close(2). Everything else holds either a `UniqueFd`
// (ownership) or a plain `int` borrowed from one (no ownership; the borrower
// must not outlive the owner).
//
// Close semantics (Linux): close(2) releases the descriptor even when it
// fails, including on EINTR, so a close is never retried; retrying could close
// a descriptor another thread has just been handed. Errors from the implicit
// closes in the destructor, `reset()` and move-assignment are discarded
// because there is nothing useful to do with them; call `Close()` where the
// error matters (e.g. a file just written on a network filesystem, where
// close is the last chance to see a deferred write error — durability still
// requires fsync/fdatasync before that).
//
// Thread-safety: a `UniqueFd` is a plain value; concurrent calls on one
// object must be externally synchronized. Distinct objects are independent.
// `get()` may be called concurrently with other `get()` calls.
//
// A value of -1 means "no descriptor". Any negative value passed in is
// normalized to -1.

#ifndef WALSHIP_COMMON_SYS_UNIQUE_FD_H_
#define WALSHIP_COMMON_SYS_UNIQUE_FD_H_

namespace walship {
namespace sys {

// UniqueFd
//
// Move-only owner of a file descriptor.
//
// Example:
//
//   WALSHIP_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(sys, path, O_RDONLY));
//   ... use fd.get() ...
//   // closed when `fd` goes out of scope
class UniqueFd {
 public:
  // Takes ownership of `fd` (which may be -1 for "empty").
  explicit UniqueFd(int fd = -1) noexcept;

  UniqueFd(UniqueFd&& other) noexcept;
  // Closes the currently owned descriptor (if any) and takes `other`'s.
  // Self-move-assignment is a no-op.
  UniqueFd& operator=(UniqueFd&& other) noexcept;

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  ~UniqueFd();

  // The owned descriptor, or -1. Ownership is not transferred.
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives up ownership without closing; returns the descriptor (or -1). The
  // caller becomes responsible for closing it.
  [[nodiscard]] int release() noexcept;

  // Closes the currently owned descriptor (if any, ignoring errors) and takes
  // ownership of `fd`. `reset(get())` is a no-op rather than a close of the
  // descriptor being adopted.
  void reset(int fd = -1) noexcept;

  // Closes the owned descriptor now and reports what close(2) said: 0 on
  // success, otherwise the errno value (EBADF if nothing was owned). The
  // object is empty afterwards in every case, since Linux has released the
  // descriptor even on error.
  [[nodiscard]] int Close() noexcept;

 private:
  int fd_;
};

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_UNIQUE_FD_H_
