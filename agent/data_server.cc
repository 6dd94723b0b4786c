#include "agent/data_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/thread_name.h"
#include "common/wire/frame.h"
#include "spdlog/spdlog.h"

namespace walship::agent {
namespace {

// New connections accepted per loop round: the HELLOs already arrived are
// read first, so a burst of connections cannot starve them.
constexpr int kAcceptsPerRound = 16;
// How long to stop accepting after accept fails for want of resources
// (EMFILE, ENOBUFS, ...), so the loop does not spin on the listening socket.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(50);
// At most one "accept failed" line per this, with a count of the others.
constexpr absl::Duration kAcceptErrorLogEvery = absl::Seconds(10);
// Longest real-time wait in one poll; also how often log summaries are due.
constexpr absl::Duration kMaxPollWait = absl::Seconds(1);

// The rejection reason (metric label) for a refused HELLO.
const char* ReasonFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable: return "closed";
    case absl::StatusCode::kDeadlineExceeded: return "timeout";
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return "bad_frame";
    case absl::StatusCode::kUnauthenticated: return "bad_token";
    case absl::StatusCode::kPermissionDenied: return "wrong_identity";
    default: return "other";
  }
}

// "ip" and "ip:port" ("[v6]:port") of an accepted peer.
void DescribePeer(const sockaddr_storage& ss, std::string* address, std::string* peer) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    *address = buf;
    *peer = absl::StrCat("[", buf, "]:", ntohs(a->sin6_port));
  } else if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *address = buf;
    *peer = absl::StrCat(buf, ":", ntohs(a->sin_port));
  } else {
    *address = "?";
    *peer = "?";
  }
}

absl::Duration Millis(absl::Duration d) { return absl::Trunc(d, absl::Milliseconds(1)); }

}  // namespace

DataServer::DataServer(sys::SysCalls& sys, DataServerOptions options,
                       SessionRegistry& registry, ShipperRunner runner)
    : sys_(sys),
      options_(std::move(options)),
      registry_(registry),
      runner_(std::move(runner)),
      table_(options_.max_pending, options_.max_pending_per_address),
      limiter_(options_.failure_limits),
      rejects_(options_.reject_log, [](const std::string& line) { spdlog::warn("{}", line); }) {
  if (options_.clock == nullptr) options_.clock = &DefaultClock();
}

DataServer::~DataServer() { Stop(); }

absl::Status DataServer::Start() {
  WALSHIP_ASSIGN_OR_RETURN(listen_fd_, ListenTcp(sys_, options_.listen, 128, &port_));
  // Non-blocking, so a connection that went away between poll and accept
  // cannot stall the loop.
  sys::SysResult r = sys_.Fcntl(listen_fd_.get(), F_SETFL, O_NONBLOCK);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "fcntl O_NONBLOCK on the data port");
  int fds[2];
  r = sys_.Pipe2(fds, O_CLOEXEC | O_NONBLOCK);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "pipe2");
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
  loop_thread_ = std::thread([this] {
    NameThisThread("ws-data-port");
    Loop();
  });
  return absl::OkStatus();
}

void DataServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_write_.valid()) {
    char c = 1;
    // Ignored on purpose: the pipe is nonblocking, and when it is full
    // (EAGAIN) a wake-up is already pending.
    (void)sys_.Write(wake_write_.get(), &c, 1);
  }
  if (loop_thread_.joinable()) loop_thread_.join();
}

int DataServer::PollTimeoutMs(absl::Time now) const {
  absl::Time next = std::min(now + kMaxPollWait, table_.NextDeadline());
  if (now < accept_paused_until_) next = std::min(next, accept_paused_until_);
  if (next <= now) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(next - now, absl::Milliseconds(1))));
}

void DataServer::Loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> keys;
  bool poll_error_logged = false;
  while (!stopping_.load()) {
    absl::Time now = Now();
    for (PendingHello& p : table_.TakeExpired(now)) {
      absl::Status late = absl::DeadlineExceededError(absl::StrCat(
          "timed out: no complete HELLO within ", absl::FormatDuration(options_.hello_timeout),
          " of connecting (", p.have, " bytes received)"));
      Reject(std::move(p), "timeout", late, now);
    }
    rejects_.Flush(now);
    pending_count_.store(static_cast<int>(table_.size()));

    fds.clear();
    keys.clear();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    const bool listening = now >= accept_paused_until_;
    if (listening) fds.push_back({listen_fd_.get(), POLLIN, 0});
    const size_t first_pending = fds.size();
    for (uint64_t key : table_.Keys()) {
      const PendingHello* p = table_.Find(key);
      fds.push_back({p->fd.get(), static_cast<short>(p->want_write ? POLLOUT : POLLIN), 0});
      keys.push_back(key);
    }
    sys::SysResult r = sys_.Poll(fds.data(), fds.size(), PollTimeoutMs(now));
    if (stopping_.load()) break;
    if (!r.ok()) {
      if (r.err != EINTR && !poll_error_logged) {
        spdlog::error("data port: {}", sys::ErrnoToStatus(r.err, "poll").ToString());
        poll_error_logged = true;
      }
      if (r.err != EINTR) options_.clock->SleepFor(kAcceptPause);
      continue;
    }
    if (r.rc == 0) continue;
    now = Now();
    // HELLOs first, then new connections: a replica whose HELLO has arrived
    // is admitted before anything newer can evict it.
    for (size_t i = 0; i < keys.size(); ++i) {
      if (fds[first_pending + i].revents != 0) OnReadable(keys[i], now);
    }
    if (listening && (fds[1].revents & POLLIN)) AcceptSome(now);
    pending_count_.store(static_cast<int>(table_.size()));
  }
  std::vector<PendingHello> left = table_.TakeAll();
  if (!left.empty()) {
    spdlog::info("data port: closing {} connections still sending their HELLO (shutting down)",
                 left.size());
  }
  rejects_.FlushAll();
  pending_count_.store(0);
}

void DataServer::AcceptSome(absl::Time now) {
  for (int i = 0; i < kAcceptsPerRound; ++i) {
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    std::memset(&ss, 0, sizeof(ss));
    sys::SysResult r = sys_.Accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                                    SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (!r.ok()) {
      if (r.err == EAGAIN || r.err == EWOULDBLOCK) return;
      if (r.err == EINTR || r.err == ECONNABORTED) continue;
      // EMFILE and friends: pause accepting rather than spin.
      ++accept_errors_;
      if (now >= accept_error_logged_ + kAcceptErrorLogEvery) {
        spdlog::warn("data port: accept failed ({} times since the last such line): {}; "
                     "not accepting for {}",
                     accept_errors_, sys::ErrnoToStatus(r.err, "accept4").ToString(),
                     absl::FormatDuration(kAcceptPause));
        accept_error_logged_ = now;
        accept_errors_ = 0;
      }
      accept_paused_until_ = now + kAcceptPause;
      return;
    }
    PendingHello p;
    p.fd.reset(static_cast<int>(r.rc));
    DescribePeer(ss, &p.address, &p.peer);
    p.accepted = now;
    p.deadline = now + options_.hello_timeout;
    if (options_.tls.on()) {
      if (absl::Status s = StartTls(sys_, options_.tls, p); !s.ok()) {
        Reject(std::move(p), p.refusal, s, now);
        continue;
      }
    }
    Admit(std::move(p), now);
  }
}

void DataServer::Admit(PendingHello hello, absl::Time now) {
  absl::Time until;
  if (limiter_.Blocked(hello.address, now, &until)) {
    absl::Status why = absl::UnavailableError(absl::StrCat(
        "refused at accept: too many failed attempts from ", hello.address,
        "; its connections are refused for another ", absl::FormatDuration(Millis(until - now))));
    Reject(std::move(hello), "rate_limited", why, now);
    return;
  }
  if (table_.AddressFull(hello.address)) {
    absl::Status why = absl::ResourceExhaustedError(absl::StrCat(
        table_.CountFrom(hello.address), " connections from ", hello.address,
        " are already sending their HELLO (the limit per address)"));
    Reject(std::move(hello), "too_many_pending", why, now);
    return;
  }
  std::optional<PendingHello> evicted;
  table_.Add(std::move(hello), &evicted);
  if (evicted) {
    absl::Status why = absl::ResourceExhaustedError(absl::StrCat(
        "evicted after ", absl::FormatDuration(Millis(now - evicted->accepted)),
        " without a complete HELLO (", evicted->have, " bytes received): ",
        options_.max_pending, " connections were waiting and a newer one needed the slot"));
    Reject(std::move(*evicted), "evicted", why, now);
  }
}

void DataServer::OnReadable(uint64_t key, absl::Time now) {
  PendingHello* p = table_.Find(key);
  if (p == nullptr) return;
  absl::Status s;
  bool complete = false;
  if (now >= p->deadline) {
    s = absl::DeadlineExceededError(absl::StrCat(
        "timed out: no complete HELLO within ", absl::FormatDuration(options_.hello_timeout),
        " of connecting (", p->have, " bytes received)"));
  } else {
    s = ReadSome(*p, &complete);
    if (s.ok() && !complete) return;
  }
  PendingHello hello = table_.Take(key);
  std::shared_ptr<ReplicaSession> session;
  if (s.ok()) s = CheckHello(hello, &session);
  if (!s.ok()) {
    const char* reason = hello.refusal != nullptr ? hello.refusal : ReasonFor(s);
    Reject(std::move(hello), reason, s, now);
    return;
  }
  StartSession(std::move(hello), std::move(session));
}

absl::Status DataServer::ReadSome(PendingHello& p, bool* complete) {
  if (p.tls != nullptr && !p.tls_ready) {
    WALSHIP_RETURN_IF_ERROR(AdvanceTls(options_.tls, p));
    if (!p.tls_ready) return absl::OkStatus();
  }
  for (;;) {
    const size_t total =
        wire::kFrameHeaderSize + (p.header ? p.header->payload_length : 0);
    if (p.have == total) {
      *complete = true;
      return absl::OkStatus();
    }
    sys::SysResult r{0, 0};
    if (p.tls != nullptr) {  // inside TLS: 0 bytes is "nothing decrypted yet"
      WALSHIP_ASSIGN_OR_RETURN(size_t got, p.tls->ReadSome(p.bytes + p.have, total - p.have));
      if (got == 0) return absl::OkStatus();
      r.rc = static_cast<int64_t>(got);
    } else {
      r = sys_.Recv(p.fd.get(), p.bytes + p.have, total - p.have, 0);
    }
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      if (r.err == EAGAIN || r.err == EWOULDBLOCK) return absl::OkStatus();
      return sys::ErrnoToStatus(r.err, absl::StrCat("reading the HELLO, ", p.have, " of ",
                                                    total, " bytes received"));
    }
    if (r.rc == 0) {
      if (p.have == 0) return absl::UnavailableError("closed before sending a frame");
      return absl::UnavailableError(
          absl::StrCat("closed mid-read after ", p.have, " of ", total, " bytes"));
    }
    p.have += static_cast<size_t>(r.rc);
    if (!p.header && p.have == wire::kFrameHeaderSize) {
      WALSHIP_ASSIGN_OR_RETURN(
          wire::FrameHeader h,
          wire::DecodeFrameHeader(absl::MakeConstSpan(p.bytes, wire::kFrameHeaderSize),
                                  wire::kMaxHelloPayloadLength));
      if (h.type != wire::FrameType::kHello) {
        return absl::DataLossError(absl::StrCat("first frame is ", wire::FrameTypeName(h.type),
                                                ", expected HELLO"));
      }
      p.header = h;
    }
  }
}

absl::Status DataServer::CheckHello(const PendingHello& p,
                                    std::shared_ptr<ReplicaSession>* session) {
  const wire::FrameHeader& h = *p.header;
  absl::Span<const uint8_t> token(p.bytes + wire::kFrameHeaderSize, h.payload_length);
  WALSHIP_RETURN_IF_ERROR(wire::VerifyPayload(h, token));
  std::shared_ptr<ReplicaSession> found = registry_.Find(h.segment_id);
  if (!found) {
    return absl::UnauthenticatedError(absl::StrCat("unknown session ", h.segment_id));
  }
  if (p.tls != nullptr) {
    // Before the token is looked at: a token works only from its replica.
    absl::Status id = found->CheckIdentity(p.fingerprint);
    if (!id.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "session ", h.segment_id, " (replica ", found->name(), "): ", id.message()));
    }
  }
  absl::Status claim = found->ClaimToken(
      absl::string_view(reinterpret_cast<const char*>(token.data()), token.size()));
  if (!claim.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "session ", h.segment_id, " (replica ", found->name(), "): ", claim.message()));
  }
  *session = std::move(found);
  return absl::OkStatus();
}

void DataServer::StartSession(PendingHello p, std::shared_ptr<ReplicaSession> session) {
  int buf = options_.socket_buffer_bytes;
  sys::SysResult r = sys_.Setsockopt(p.fd.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  if (!r.ok()) {
    spdlog::warn("data port: {}", sys::ErrnoToStatus(r.err, "setsockopt SO_SNDBUF").ToString());
  }
  absl::Status nd = SetNoDelay(sys_, p.fd.get());
  if (!nd.ok()) spdlog::warn("data port: {}", nd.ToString());
  spdlog::info("replica {} (session {}) connected its data socket from {} ({})",
               session->name(), session->id(), p.peer,
               p.tls == nullptr ? std::string("plaintext")
                                : absl::StrCat(p.tls->Describe(), ", data path ",
                                               net::DataPathName(p.tls->path())));
  session->StartShipping(std::move(p.fd), runner_, std::move(p.tls));
}

void DataServer::Reject(PendingHello p, const char* reason, const absl::Status& why,
                        absl::Time now) {
  if (options_.on_reject) options_.on_reject(reason);
  rejects_.Record(p.address, p.peer, reason, why.ToString(), now);
  if (std::strcmp(reason, "rate_limited") != 0) {
    limiter_.RecordFailure(p.address, now);
  }
  // p.fd closes here, after the rejection is counted.
}

}  // namespace walship::agent
