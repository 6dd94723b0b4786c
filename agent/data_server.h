// data_server.h: the agent's data port.
//
// Accepts TCP connections; each must deliver, within `hello_timeout` of
// being accepted, one whole HELLO frame whose segment_id is a session id and
// whose payload is that session's one-time token (common/wire/wire_format.md).
// A valid HELLO hands the socket to the session, which starts shipping.
// Anything else -- garbage, a bad header, an unknown session, a wrong,
// expired or replayed token, a HELLO not complete by the deadline -- closes
// the connection without a byte sent back, and nothing else happens. In
// particular a wrong token consumes nothing: the session's replica can still
// present the right one. A right token is consumed by its first use.
//
// Who gets in while strangers abuse the port:
//   - One event-loop thread polls the listening socket and every connection
//     still sending its HELLO (non-blocking reads accumulate each HELLO), so
//     a client that sends a byte now and then holds one table slot, not a
//     thread, and only until its whole-HELLO deadline.
//   - At most `max_pending` connections wait for their HELLO, at most
//     `max_pending_per_address` from one IP address (further ones from it are
//     refused: "too_many_pending"). When the table is full, a new connection
//     evicts the one accepted earliest ("evicted"): a replica sends its HELLO
//     within milliseconds of connecting, so a table full of slow strangers
//     cannot keep it out.
//   - Every failed connection (any rejection but "rate_limited") counts
//     against its address (FailureLimiter, data_port_limits.h): past a burst
//     of failures, the address's connections are closed as soon as they are
//     accepted ("rate_limited") for a backoff of 1 s doubling to 30 s. A
//     replica that shares an address with a misbehaving peer (the same host,
//     or one NAT) may therefore be delayed by up to that backoff; replicas on
//     other addresses are not.
//
// With `tls` set, each connection first completes a TLS handshake and
// presents an accepted client certificate, and its HELLO (inside TLS) is
// admitted only from the certificate that obtained the token at handshake
// (data_port_tls.h); all of it within the same deadline and table slot.
//
// Every rejection is counted through `on_reject` with its reason, and
// logged through RejectLog (data_port_limits.h): per address and interval,
// the first rejection of each reason in full ("data port: rejected
// connection from IP:PORT: <why>"), the rest in one summary line ("data port:
// rejected N connections from IP in 10s (bad_token 1200, timeout 34); ...").
//
// Time (deadlines, backoff, log intervals) is read from `clock`, so tests
// can drive it; poll waits are real time, at most one second each.
//
// Thread-safety: Start and Stop from one thread; pending() from any.
// on_reject runs on the event-loop thread.
#ifndef WALSHIP_AGENT_DATA_SERVER_H_
#define WALSHIP_AGENT_DATA_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/data_port_limits.h"
#include "agent/data_port_tls.h"
#include "agent/replica_session.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::agent {

struct DataServerOptions {
  HostPort listen;
  // The whole HELLO must arrive within this of the connection's accept.
  absl::Duration hello_timeout = absl::Seconds(5);
  int max_pending = 64;
  int max_pending_per_address = 8;
  int socket_buffer_bytes = 4 << 20;
  FailureLimiterOptions failure_limits;
  RejectLogOptions reject_log;
  // Time and the pause after a failed poll; nullptr: DefaultClock(). Must
  // outlive the server.
  Clock* clock = nullptr;
  // Called (on the event-loop thread) for every rejected connection, before
  // it is closed, with a short reason: "rate_limited", "too_many_pending",
  // "evicted", "timeout", "closed", "bad_frame", "bad_token", "other".
  // Optional; used for metrics. With TLS also "tls_handshake",
  // "no_client_certificate", "untrusted_certificate", "wrong_identity"
  // (data_port_tls.h).
  std::function<void(const std::string& reason)> on_reject;
  // TLS on every connection (--data-tls=on), or plaintext (both null).
  DataPortTls tls;
};

class DataServer {
 public:
  DataServer(sys::SysCalls& sys, DataServerOptions options, SessionRegistry& registry,
             ShipperRunner runner);
  ~DataServer();

  // Binds and starts the event loop. The bound port is port() afterwards.
  absl::Status Start();
  // Stops the loop and closes every connection still sending its HELLO.
  void Stop();
  uint16_t port() const { return port_; }
  // Connections accepted and still sending their HELLO.
  int pending() const { return pending_count_.load(); }

 private:
  void Loop();
  int PollTimeoutMs(absl::Time now) const;
  void AcceptSome(absl::Time now);
  void Admit(PendingHello hello, absl::Time now);
  void OnReadable(uint64_t key, absl::Time now);
  // Reads what the socket has of the HELLO; a complete HELLO is checked and
  // either admitted (returns OK, *done) or refused (returns the reason).
  absl::Status ReadSome(PendingHello& p, bool* done);
  absl::Status CheckHello(const PendingHello& p, std::shared_ptr<ReplicaSession>* session);
  void StartSession(PendingHello p, std::shared_ptr<ReplicaSession> session);
  void Reject(PendingHello p, const char* reason, const absl::Status& why, absl::Time now);
  absl::Time Now() const { return options_.clock->Now(); }

  sys::SysCalls& sys_;
  DataServerOptions options_;
  SessionRegistry& registry_;
  ShipperRunner runner_;
  sys::UniqueFd listen_fd_;
  sys::UniqueFd wake_read_;
  sys::UniqueFd wake_write_;
  uint16_t port_ = 0;
  std::thread loop_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> pending_count_{0};

  // Event-loop thread only (after Start, until Stop joins it).
  PendingTable table_;
  FailureLimiter limiter_;
  RejectLog rejects_;
  absl::Time accept_paused_until_ = absl::InfinitePast();
  absl::Time accept_error_logged_ = absl::InfinitePast();
  uint64_t accept_errors_ = 0;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_DATA_SERVER_H_
