// Copyright walship authors.

#include "common/sys/unique_fd.h"

#include <errno.h>
#include <unistd.h>

#include <utility>

namespace walship {
namespace sys {
namespace {

// Returns 0 or the errno of close(2). Never retried: on Linux the descriptor
// is gone once close returns, whatever it returns (see close(2), "Dealing with
// error returns from close()").
int CloseOnce(int fd) {
  if (::close(fd) == 0) return 0;
  return errno;
}

}  // namespace

UniqueFd::UniqueFd(int fd) noexcept : fd_(fd < 0 ? -1 : fd) {}

UniqueFd::UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

UniqueFd::~UniqueFd() { reset(); }

int UniqueFd::release() noexcept { return std::exchange(fd_, -1); }

void UniqueFd::reset(int fd) noexcept {
  if (fd < 0) fd = -1;
  if (fd == fd_) return;
  const int old = std::exchange(fd_, fd);
  if (old >= 0) (void)CloseOnce(old);
}

int UniqueFd::Close() noexcept {
  if (fd_ < 0) return EBADF;
  return CloseOnce(std::exchange(fd_, -1));
}

}  // namespace sys
}  // namespace walship
