// tcp_pair.h: a connected TCP connection over loopback, both ends in the
// test's hands (real sockets: what a socketpair would not show, such as
// MSG_MORE, FIONREAD on TCP or socket buffer sizes, behaves as in the
// daemons).
#ifndef WALSHIP_TESTS_FAKES_TCP_PAIR_H_
#define WALSHIP_TESTS_FAKES_TCP_PAIR_H_

#include "absl/status/statusor.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::testing {

struct TcpPair {
  sys::UniqueFd tx;  // the connecting end
  sys::UniqueFd rx;  // the accepted end (blocking)
};

// Listens on 127.0.0.1 port 0, connects (non-blocking when
// `nonblocking_tx`), accepts, and closes the listener; all through `sys`.
absl::StatusOr<TcpPair> LoopbackTcpPair(sys::SysCalls& sys, bool nonblocking_tx = false);

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_TCP_PAIR_H_
