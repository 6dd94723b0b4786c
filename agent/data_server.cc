#include "agent/data_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"
#include "common/wire/frame.h"
#include "spdlog/spdlog.h"
#include "common/thread_name.h"

namespace walship::agent {
namespace {
// HELLO payloads are tokens; anything longer is refused before it is read.
constexpr uint32_t kMaxHelloPayload = 64;
}  // namespace

DataServer::DataServer(sys::SysCalls& sys, DataServerOptions options,
                       SessionRegistry& registry, ShipperRunner runner)
    : sys_(sys),
      options_(std::move(options)),
      registry_(registry),
      runner_(std::move(runner)) {}

DataServer::~DataServer() { Stop(); }

absl::Status DataServer::Start() {
  WALSHIP_ASSIGN_OR_RETURN(listen_fd_, ListenTcp(sys_, options_.listen, 128, &port_));
  int fds[2];
  sys::SysResult r = sys_.Pipe2(fds, O_CLOEXEC | O_NONBLOCK);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "pipe2");
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
  accept_thread_ = std::thread([this] {
    NameThisThread("ws-data-accept");
    AcceptLoop();
  });
  return absl::OkStatus();
}

void DataServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_write_.valid()) {
    char c = 1;
    sys_.Write(wake_write_.get(), &c, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  // Handshake threads are detached and bounded by hello_timeout; wait for
  // them so none outlives the server.
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&idle), options_.hello_timeout + absl::Seconds(1));
}

void DataServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd pfds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    sys::SysResult r = sys_.Poll(pfds, 2, 1000);
    if (stopping_.load()) break;
    if (!r.ok() || !(pfds[0].revents & POLLIN)) continue;
    // Non-blocking, so every wait on the socket (HELLO deadline, a replica
    // that stops reading) is a bounded poll in the transfer loops.
    r = sys_.Accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (!r.ok()) {
      if (r.err != EAGAIN && r.err != EINTR && r.err != ECONNABORTED) {
        spdlog::warn("data port: accept failed: {}",
                     sys::ErrnoToStatus(r.err, "accept4").ToString());
        absl::SleepFor(absl::Milliseconds(50));  // EMFILE and friends: do not spin
      }
      continue;
    }
    sys::UniqueFd fd(static_cast<int>(r.rc));
    std::string peer = PeerName(fd.get());
    {
      absl::MutexLock lock(&mu_);
      if (pending_ >= options_.max_pending) {
        spdlog::warn("data port: rejected connection from {}: too many pending handshakes ({})",
                     peer, pending_);
        if (options_.on_reject) options_.on_reject("too_many_pending");
        continue;
      }
      ++pending_;
    }
    std::thread([this, fd = std::move(fd), peer]() mutable {
      NameThisThread("ws-data-hello");
      Handshake(std::move(fd), peer);
      absl::MutexLock lock(&mu_);
      --pending_;
    }).detach();
  }
}

absl::Status DataServer::ReadHello(int fd, std::shared_ptr<ReplicaSession>* session) {
  sys::TransferOptions io;
  io.io_timeout = options_.hello_timeout;
  uint8_t header[wire::kFrameHeaderSize];
  absl::Status s = sys::ReadFully(sys_, fd, header, sizeof(header), io);
  if (absl::IsOutOfRange(s)) return absl::UnavailableError("closed before sending a frame");
  WALSHIP_RETURN_IF_ERROR(s);
  WALSHIP_ASSIGN_OR_RETURN(
      wire::FrameHeader h,
      wire::DecodeFrameHeader(absl::MakeConstSpan(header, sizeof(header)), kMaxHelloPayload));
  if (h.type != wire::FrameType::kHello) {
    return absl::DataLossError(absl::StrCat(
        "first frame is ", wire::FrameTypeName(h.type), ", expected HELLO"));
  }
  std::vector<uint8_t> token(h.payload_length);
  s = sys::ReadFully(sys_, fd, token.data(), token.size(), io);
  if (absl::IsOutOfRange(s)) return absl::UnavailableError("closed inside the HELLO frame");
  WALSHIP_RETURN_IF_ERROR(s);
  WALSHIP_RETURN_IF_ERROR(wire::VerifyPayload(h, token));
  std::shared_ptr<ReplicaSession> found = registry_.Find(h.segment_id);
  if (!found) {
    return absl::UnauthenticatedError(absl::StrCat("unknown session ", h.segment_id));
  }
  absl::Status claim = found->ClaimToken(absl::string_view(
      reinterpret_cast<const char*>(token.data()), token.size()));
  if (!claim.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "session ", h.segment_id, " (replica ", found->name(), "): ", claim.message()));
  }
  *session = std::move(found);
  return absl::OkStatus();
}

void DataServer::Handshake(sys::UniqueFd fd, std::string peer) {
  std::shared_ptr<ReplicaSession> session;
  absl::Status s = ReadHello(fd.get(), &session);
  if (!s.ok()) {
    spdlog::warn("data port: rejected connection from {}: {}", peer, s.ToString());
    if (options_.on_reject) {
      const char* reason = "other";
      switch (s.code()) {
        case absl::StatusCode::kUnavailable: reason = "closed"; break;
        case absl::StatusCode::kDeadlineExceeded: reason = "timeout"; break;
        case absl::StatusCode::kDataLoss:
        case absl::StatusCode::kInvalidArgument:
        case absl::StatusCode::kOutOfRange: reason = "bad_frame"; break;
        case absl::StatusCode::kUnauthenticated: reason = "bad_token"; break;
        default: break;
      }
      options_.on_reject(reason);
    }
    return;
  }
  int buf = options_.socket_buffer_bytes;
  sys_.Setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  absl::Status nd = SetNoDelay(sys_, fd.get());
  if (!nd.ok()) spdlog::warn("data port: {}", nd.ToString());
  spdlog::info("replica {} (session {}) connected its data socket from {}",
               session->name(), session->id(), peer);
  session->StartShipping(std::move(fd), runner_);
}

}  // namespace walship::agent
