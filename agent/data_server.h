// data_server.h: the agent's data port.
//
// Accepts TCP connections; each must start, within `hello_timeout`, with a
// HELLO frame whose segment_id is a session id and whose payload is that
// session's one-time token (common/wire/wire_format.md). Anything else --
// garbage, a bad header, a wrong, expired or replayed token -- is logged with
// the peer's address and the reason, and the connection is closed; nothing
// else happens. A valid HELLO hands the socket to the session, which starts
// shipping.
//
// Handshakes run on short-lived threads, at most `max_pending` at once (more
// are closed at once), so a client that connects and says nothing cannot
// stall the port. Thread-safety: Start/Stop from one thread.
#ifndef WALSHIP_AGENT_DATA_SERVER_H_
#define WALSHIP_AGENT_DATA_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/replica_session.h"
#include "common/net.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::agent {

struct DataServerOptions {
  HostPort listen;
  absl::Duration hello_timeout = absl::Seconds(5);
  int max_pending = 64;
  int socket_buffer_bytes = 4 << 20;
  // Called (on a data-server thread) for every rejected connection with a
  // short reason: "too_many_pending", "closed", "timeout", "bad_frame",
  // "bad_token", "other". Optional; used for metrics.
  std::function<void(const std::string& reason)> on_reject;
};

class DataServer {
 public:
  DataServer(sys::SysCalls& sys, DataServerOptions options, SessionRegistry& registry,
             ShipperRunner runner);
  ~DataServer();

  // Binds and starts accepting. The bound port is port() afterwards.
  absl::Status Start();
  void Stop();
  uint16_t port() const { return port_; }

 private:
  void AcceptLoop();
  void Handshake(sys::UniqueFd fd, std::string peer);
  absl::Status ReadHello(int fd, std::shared_ptr<ReplicaSession>* session);

  sys::SysCalls& sys_;
  const DataServerOptions options_;
  SessionRegistry& registry_;
  ShipperRunner runner_;
  sys::UniqueFd listen_fd_;
  sys::UniqueFd wake_read_;
  sys::UniqueFd wake_write_;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_DATA_SERVER_H_
