#include "tests/fakes/tcp_pair.h"

#include <sys/socket.h>

#include <utility>

#include "absl/time/time.h"
#include "common/net.h"
#include "common/sys/errors.h"

namespace walship::testing {

absl::StatusOr<TcpPair> LoopbackTcpPair(sys::SysCalls& sys, bool nonblocking_tx) {
  uint16_t port = 0;
  absl::StatusOr<sys::UniqueFd> listener = ListenTcp(sys, HostPort{"127.0.0.1", 0}, 1, &port);
  if (!listener.ok()) return listener.status();
  absl::StatusOr<sys::UniqueFd> client =
      ConnectTcp(sys, HostPort{"127.0.0.1", port}, absl::Seconds(5), nonblocking_tx);
  if (!client.ok()) return client.status();
  sys::SysResult a = sys.Accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC);
  if (!a.ok()) return sys::ErrnoToStatus(a.err, "accept4 on the loopback listener");
  TcpPair pair;
  pair.tx = std::move(*client);
  pair.rx = sys::UniqueFd(static_cast<int>(a.rc));
  return pair;
}

}  // namespace walship::testing
