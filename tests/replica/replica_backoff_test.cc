// Replica::Run's reconnect backoff, stepped on a FakeClock: after each failed
// session it waits min_backoff, then twice as long each time up to
// max_backoff, on the clock it was given (no real time passes in the waits).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gtest/gtest.h"
#include "replica/replica.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

// A TCP port on 127.0.0.1 that refuses connections: bound (so no one else
// takes it) but not listening.
class RefusingPort {
 public:
  RefusingPort() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
  }
  uint16_t port() const { return port_; }

 private:
  sys::UniqueFd fd_;
  uint16_t port_ = 0;
};

// Sessions that ended with an error, whatever the code.
int Failures(MetricsRegistry& metrics) {
  int total = 0;
  std::istringstream lines(metrics.Render());
  for (std::string line; std::getline(lines, line);) {
    if (!absl::StartsWith(line, "walship_replica_session_failures_total{")) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) total += static_cast<int>(v);
  }
  return total;
}

class ReplicaBackoffTest : public ::testing::Test {
 protected:
  // The replica's backoff loop pauses in steps of this much.
  static constexpr absl::Duration kStep = absl::Milliseconds(20);

  void SetUp() override {
    ASSERT_NE(agent_.port(), 0);
    ReplicaOptions o;
    o.agent = absl::StrCat("127.0.0.1:", agent_.port());
    o.dest = testing::FreshTempDir("backoff-dest");
    o.name = "r1";
    o.tls.insecure = true;
    o.min_backoff = absl::Milliseconds(100);
    o.max_backoff = absl::Milliseconds(400);
    replica_ = std::make_unique<Replica>(sys::DefaultSysCalls(), o, &metrics_, clock_);
    runner_ = std::thread([this] { (void)replica_->Run(); });
  }
  void TearDown() override {
    replica_->Stop();
    clock_.Release();
    runner_.join();
  }

  // After `failures` failed sessions, with the replica pausing: no new
  // session for `backoff` minus 1 ms of fake time, one more within a step.
  void ExpectNextSessionAfter(int failures, absl::Duration backoff) {
    ASSERT_TRUE(clock_.AwaitSleeper()) << "the replica never paused";
    ASSERT_EQ(Failures(metrics_), failures);
    clock_.Advance(backoff - absl::Milliseconds(1));
    ASSERT_TRUE(clock_.AwaitSleeper());
    EXPECT_EQ(Failures(metrics_), failures)
        << "a new session began before the backoff of " << backoff << " had passed";
    clock_.Advance(absl::Milliseconds(1) + kStep);
    ASSERT_TRUE(clock_.AwaitSleeper());
    EXPECT_EQ(Failures(metrics_), failures + 1)
        << "no new session once the backoff of " << backoff << " had passed";
  }

  RefusingPort agent_;
  // Real time at the start, so that deadlines derived from it mean something
  // to gRPC.
  testing::FakeClock clock_{absl::Now(), testing::FakeClock::Sleeps::kWaitForAdvance};
  MetricsRegistry metrics_;
  std::unique_ptr<Replica> replica_;
  std::thread runner_;
};

TEST_F(ReplicaBackoffTest, DoublesFromTheMinimumUpToTheMaximumOnItsClock) {
  ExpectNextSessionAfter(1, absl::Milliseconds(100));
  ExpectNextSessionAfter(2, absl::Milliseconds(200));
  ExpectNextSessionAfter(3, absl::Milliseconds(400));
  ExpectNextSessionAfter(4, absl::Milliseconds(400));  // capped at max_backoff
}

}  // namespace
}  // namespace walship::replica
