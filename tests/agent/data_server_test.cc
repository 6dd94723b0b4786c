// The data port over real loopback sockets: who gets in while strangers
// forge HELLOs, dribble them a byte at a time, or fill the pending table.
// Strangers connect from 127.0.0.2 and up (Linux routes all of 127/8 to lo),
// the replica from 127.0.0.1, so the per-address limits tell them apart.
#include "agent/data_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/string_recorder.h"

namespace walship::agent {
namespace {

// What the data port did with a connection, as its client sees it.
constexpr char kAdmitted[] = "admitted";  // the shipper runner's byte arrived
constexpr char kClosed[] = "closed";      // end of stream or reset, nothing sent
constexpr char kOpen[] = "still open";    // nothing within the read timeout

// The data port's refusal reasons, as its on_reject callback reports them.
using Rejections = testing::StringRecorder;

// A blocking connection to 127.0.0.1:port from `source`, with a 10 s
// receive timeout.
sys::UniqueFd ConnectFrom(const std::string& source, uint16_t port) {
  sys::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &local.sin_addr);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0)
      << "bind " << source;
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&server), sizeof(server)), 0)
      << "connect from " << source;
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `data`; false if the server already closed the connection.
bool Send(int fd, const std::string& data) {
  return ::send(fd, data.data(), data.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(data.size());
}

std::string Outcome(int fd) {
  char c;
  ssize_t n = ::recv(fd, &c, 1, 0);
  if (n == 1 && c == 'G') return kAdmitted;
  if (n == 0 || (n < 0 && errno == ECONNRESET)) return kClosed;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return kOpen;
  return absl::StrCat("unexpected: recv returned ", n, " errno ", errno);
}

class DataServerTest : public ::testing::Test {
 protected:
  void StartServer(DataServerOptions o) {
    o.listen = HostPort{"127.0.0.1", 0};
    o.on_reject = [this](const std::string& reason) { rejections_.Add(reason); };
    // Stands in for the shipper: one byte tells the client it was admitted.
    ShipperRunner runner = [](int fd, net::DataConn*, const std::string&, const ShipStart&,
                              ShipperEvents*, const std::atomic<bool>&) {
      char g = 'G';
      ::send(fd, &g, 1, MSG_NOSIGNAL);
      return absl::OkStatus();
    };
    server_ = std::make_unique<DataServer>(sys::DefaultSysCalls(), std::move(o), registry_,
                                           std::move(runner));
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
    registry_.CloseAll();
  }
  // A new session's HELLO; its id and token in *id and *token if given.
  std::string NewHello(const std::string& name, uint64_t* id = nullptr,
                       std::string* token = nullptr) {
    std::string t;
    auto s = registry_.Create(name, ShipStart{Position{"seg-001", 0}, 0}, "zerocopy", absl::Seconds(30), &t);
    if (id) *id = s->id();
    if (token) *token = t;
    return wire::EncodeFrame(wire::FrameType::kHello, s->id(), 0, t);
  }
  sys::UniqueFd Connect(const std::string& source) {
    return ConnectFrom(source, server_->port());
  }

  SessionRegistry registry_{sys::DefaultSysCalls()};
  Rejections rejections_;
  std::unique_ptr<DataServer> server_;
};

using Reasons = std::vector<std::string>;

TEST_F(DataServerTest, ForgedHelloConsumesNothing) {
  StartServer(DataServerOptions{});
  uint64_t id;
  std::string token;
  const std::string real = NewHello("r1", &id, &token);
  std::string wrong = token;
  wrong[0] ^= 1;

  sys::UniqueFd forger = Connect("127.0.0.2");
  ASSERT_TRUE(Send(forger.get(), wire::EncodeFrame(wire::FrameType::kHello, id, 0, wrong)));
  EXPECT_EQ(Outcome(forger.get()), kClosed);

  sys::UniqueFd replica = Connect("127.0.0.1");
  ASSERT_TRUE(Send(replica.get(), real));
  EXPECT_EQ(Outcome(replica.get()), kAdmitted)
      << "the replica's HELLO after a forged one was refused: the forgery consumed its token";

  // The right token is used once: a copy of the real HELLO is refused.
  sys::UniqueFd replay = Connect("127.0.0.3");
  ASSERT_TRUE(Send(replay.get(), real));
  EXPECT_EQ(Outcome(replay.get()), kClosed);
  EXPECT_EQ(rejections_.All(), (Reasons{"bad_token", "bad_token"}));
}

TEST_F(DataServerTest, AValidHelloGetsInWhileThePendingTableIsFullOfStrangers) {
  DataServerOptions o;
  o.max_pending = 4;
  o.hello_timeout = absl::Seconds(60);  // the strangers never time out here
  StartServer(std::move(o));
  // Four strangers from four addresses, each one byte into a HELLO: the
  // table is full. Connections are accepted in the order they connected.
  std::vector<sys::UniqueFd> strangers;
  for (int i = 0; i < 4; ++i) {
    strangers.push_back(Connect(absl::StrCat("127.0.0.", 10 + i)));
    ASSERT_TRUE(Send(strangers.back().get(), "W"));
  }
  sys::UniqueFd replica = Connect("127.0.0.1");
  ASSERT_TRUE(Send(replica.get(), NewHello("r1")));
  EXPECT_EQ(Outcome(replica.get()), kAdmitted)
      << "a replica with a valid token was refused while strangers filled the table";
  // It took the slot of the stranger that had waited longest.
  EXPECT_EQ(Outcome(strangers[0].get()), kClosed);
  EXPECT_EQ(rejections_.All(), (Reasons{"evicted"}));
}

TEST_F(DataServerTest, PendingConnectionsAreBoundedPerAddress) {
  DataServerOptions o;
  o.max_pending_per_address = 2;
  o.hello_timeout = absl::Seconds(60);
  StartServer(std::move(o));
  sys::UniqueFd a1 = Connect("127.0.0.2");
  sys::UniqueFd a2 = Connect("127.0.0.2");
  sys::UniqueFd a3 = Connect("127.0.0.2");
  EXPECT_EQ(Outcome(a3.get()), kClosed);
  EXPECT_EQ(rejections_.All(), (Reasons{"too_many_pending"}));
  // Another address is not affected, nor is the replica.
  sys::UniqueFd b1 = Connect("127.0.0.3");
  sys::UniqueFd replica = Connect("127.0.0.1");
  ASSERT_TRUE(Send(replica.get(), NewHello("r1")));
  EXPECT_EQ(Outcome(replica.get()), kAdmitted);
  for (int i = 0; i < 10000 && server_->pending() != 3; ++i) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(server_->pending(), 3);  // a1, a2, b1
  EXPECT_EQ(rejections_.All(), (Reasons{"too_many_pending"}));
}

TEST_F(DataServerTest, TheWholeHelloHasADeadlineNotEachRead) {
  testing::FakeClock clock;
  DataServerOptions o;
  o.hello_timeout = absl::Seconds(5);
  o.clock = &clock;
  StartServer(std::move(o));
  const std::string hello = NewHello("r1");
  sys::UniqueFd slow = Connect("127.0.0.2");
  for (int i = 0; i < 10000 && server_->pending() != 1; ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(server_->pending(), 1) << "the connection was not accepted";
  // A valid HELLO, one byte per (fake) second: every byte comes well within
  // any per-read timeout, the whole is late.
  for (char c : hello) {
    clock.Advance(absl::Seconds(1));
    if (!Send(slow.get(), std::string(1, c))) break;
  }
  EXPECT_EQ(Outcome(slow.get()), kClosed);
  EXPECT_EQ(rejections_.All(), (Reasons{"timeout"}));
}

TEST_F(DataServerTest, AnAddressThatKeepsFailingIsRefusedAtAcceptForABackoff) {
  testing::FakeClock clock;
  DataServerOptions o;
  o.failure_limits.burst = 3;
  o.failure_limits.first_backoff = absl::Seconds(1);
  o.clock = &clock;
  StartServer(std::move(o));
  const std::string garbage(40, '\0');
  auto attempt = [&](const std::string& source) {
    sys::UniqueFd fd = Connect(source);
    Send(fd.get(), garbage);
    return Outcome(fd.get());
  };
  for (int i = 0; i < 4; ++i) EXPECT_EQ(attempt("127.0.0.2"), kClosed);
  // The fourth failure in a row (more than the burst of 3) blocked it.
  EXPECT_EQ(attempt("127.0.0.2"), kClosed);
  EXPECT_EQ(rejections_.All(), (Reasons{"bad_frame", "bad_frame", "bad_frame", "bad_frame",
                                        "rate_limited"}));
  // Nobody else is affected.
  sys::UniqueFd replica = Connect("127.0.0.1");
  ASSERT_TRUE(Send(replica.get(), NewHello("r1")));
  EXPECT_EQ(Outcome(replica.get()), kAdmitted);
  // After the backoff, the address is heard again.
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(attempt("127.0.0.2"), kClosed);
  EXPECT_EQ(rejections_.All().back(), "bad_frame");
}

}  // namespace
}  // namespace walship::agent
