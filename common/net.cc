#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"

namespace walship {
namespace {

// Frees a Getaddrinfo list through the seam that made it.
struct AddrInfoDeleter {
  sys::SysCalls* sys;
  void operator()(addrinfo* ai) const { sys->Freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoPtr> Resolve(sys::SysCalls& sys, const HostPort& addr, bool passive) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  const char* host = addr.host.empty() ? nullptr : addr.host.c_str();
  const sys::SysResult r = sys.Getaddrinfo(host, port.c_str(), &hints, &res);
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", addr.ToString(),
                                               ": ", gai_strerror(r.err)));
  }
  return AddrInfoPtr(res, AddrInfoDeleter{&sys});
}

}  // namespace

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  HostPort hp;
  absl::string_view port_text;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address \"", text, "\": expected [IPV6]:PORT"));
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address \"", text, "\": expected HOST:PORT"));
    }
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port in \"", text, "\": expected 0..65535"));
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

absl::StatusOr<sys::UniqueFd> ListenTcp(sys::SysCalls& sys, const HostPort& addr,
                                        int backlog, uint16_t* bound_port) {
  auto ai = Resolve(sys, addr, /*passive=*/true);
  if (!ai.ok()) return ai.status();
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* p = ai->get(); p != nullptr; p = p->ai_next) {
    sys::SysResult r = sys.Socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC,
                                  p->ai_protocol);
    if (!r.ok()) {
      last = sys::ErrnoToStatus(r.err, "socket");
      continue;
    }
    sys::UniqueFd fd(static_cast<int>(r.rc));
    int one = 1;
    // Ignored on purpose: without SO_REUSEADDR the bind below may fail with
    // EADDRINUSE, and that failure is reported.
    (void)sys.Setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    r = sys.Bind(fd.get(), p->ai_addr, p->ai_addrlen);
    if (!r.ok()) {
      last = sys::ErrnoToStatus(r.err, absl::StrCat("bind ", addr.ToString()));
      continue;
    }
    r = sys.Listen(fd.get(), backlog);
    if (!r.ok()) {
      last = sys::ErrnoToStatus(r.err, absl::StrCat("listen ", addr.ToString()));
      continue;
    }
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    r = sys.Getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    if (!r.ok()) return sys::ErrnoToStatus(r.err, "getsockname");
    if (ss.ss_family == AF_INET6) {
      *bound_port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    } else {
      *bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    }
    return fd;
  }
  return last;
}

absl::StatusOr<sys::UniqueFd> ConnectTcp(sys::SysCalls& sys, const HostPort& addr,
                                         absl::Duration timeout, bool nonblocking) {
  auto ai = Resolve(sys, addr, /*passive=*/false);
  if (!ai.ok()) return ai.status();
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* p = ai->get(); p != nullptr; p = p->ai_next) {
    sys::SysResult r = sys.Socket(
        p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
    if (!r.ok()) {
      last = sys::ErrnoToStatus(r.err, "socket");
      continue;
    }
    sys::UniqueFd fd(static_cast<int>(r.rc));
    r = sys.Connect(fd.get(), p->ai_addr, p->ai_addrlen);
    if (!r.ok() && r.err == EINPROGRESS) {
      pollfd pfd{fd.get(), POLLOUT, 0};
      r = sys.Poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
      if (r.ok() && r.rc == 0) {
        last = absl::UnavailableError(
            absl::StrCat("connect ", addr.ToString(), ": timed out"));
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      r = sys.Getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (r.ok() && err != 0) r = sys::SysResult{-1, err};
    }
    if (!r.ok()) {
      last = sys::ErrnoToStatus(r.err, absl::StrCat("connect ", addr.ToString()));
      continue;
    }
    if (!nonblocking) {
      r = sys.Fcntl(fd.get(), F_GETFL, 0);
      if (r.ok()) r = sys.Fcntl(fd.get(), F_SETFL, r.rc & ~O_NONBLOCK);
      if (!r.ok()) return sys::ErrnoToStatus(r.err, "fcntl F_SETFL (blocking)");
    }
    return fd;
  }
  return last;
}

absl::Status SetNoDelay(sys::SysCalls& sys, int fd) {
  int one = 1;
  sys::SysResult r = sys.Setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "setsockopt TCP_NODELAY");
  return absl::OkStatus();
}

}  // namespace walship
