// net.h: TCP addresses, listening and connecting through the syscall seam.
//
// Addresses are "HOST:PORT" or "[IPV6]:PORT"; HOST may be a name, resolved
// once with getaddrinfo. Port 0 asks the kernel for a free port; the bound
// port is reported back so it can be logged and published.
//
// All sockets are created with SOCK_CLOEXEC and owned by UniqueFd. Functions
// are stateless and thread-safe.
#ifndef WALSHIP_COMMON_NET_H_
#define WALSHIP_COMMON_NET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship {

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;
};

// Parses "host:port" / "[v6]:port". kInvalidArgument on malformed input.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

// Binds and listens on `addr` (SO_REUSEADDR). `*bound_port` receives the
// port actually bound.
absl::StatusOr<sys::UniqueFd> ListenTcp(sys::SysCalls& sys, const HostPort& addr,
                                        int backlog, uint16_t* bound_port);

// Connects to `addr` within `timeout`. kUnavailable when the peer refuses or
// does not answer in time. The returned socket is blocking unless
// `nonblocking` (then every wait on it is the caller's bounded poll, as in
// common/sys/transfer.h).
absl::StatusOr<sys::UniqueFd> ConnectTcp(sys::SysCalls& sys, const HostPort& addr,
                                         absl::Duration timeout, bool nonblocking = false);

// Disables Nagle: the tail of the WAL must not wait for more bytes.
absl::Status SetNoDelay(sys::SysCalls& sys, int fd);

}  // namespace walship

#endif  // WALSHIP_COMMON_NET_H_
