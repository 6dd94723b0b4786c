// A replica session's times, on the clock its registry was given (a
// FakeClock here): the data token's deadline, and the progress behind the
// stall rule (replica_state.h: stalled, no_progress).
#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/replica_session.h"
#include "agent/replica_state.h"
#include "agent/segment_catalog.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_clock.h"

namespace walship::agent {
namespace {

constexpr absl::Duration kTtl = absl::Seconds(30);
constexpr absl::Duration kStall = absl::Seconds(10);

class SessionClockTest : public ::testing::Test {
 protected:
  ~SessionClockTest() override { registry_.CloseAll(); }

  std::shared_ptr<ReplicaSession> NewSession(const std::string& name, std::string* token) {
    return registry_.Create(name, ShipStart{Position{"seg-001", 0}, 0}, "zerocopy", kTtl,
                            token);
  }
  // Gives `session` a data socket and a shipper that has nothing to do.
  void Attach(ReplicaSession& session) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    peer_ = sys::UniqueFd(sv[1]);
    session.StartShipping(sys::UniqueFd(sv[0]),
                          [](int, net::DataConn*, const std::string&, const ShipStart&,
                             ShipperEvents*, const std::atomic<bool>&) { return absl::OkStatus(); });
  }
  // The replica's state now, against a source of 100 bytes in seg-001.
  ReplicaCondition Now(const ReplicaSession& session) const {
    CatalogSnapshot snap;
    snap.segments = std::make_shared<const std::vector<SegmentInfo>>(
        std::vector<SegmentInfo>{{"seg-001", 100, false}});
    return Classify(session.Facts(), snap, absl::OkStatus(), clock_.Now(), kStall);
  }
  static walship::v1::Ack FlushedTo(uint64_t offset) {
    walship::v1::Ack ack;
    ack.mutable_flushed()->set_segment("seg-001");
    ack.mutable_flushed()->set_offset(offset);
    return ack;
  }

  testing::FakeClock clock_;
  SessionRegistry registry_{sys::DefaultSysCalls(), clock_};
  sys::UniqueFd peer_;
};

TEST_F(SessionClockTest, TheTokenExpiresItsTtlAfterTheHandshakeOnTheClock) {
  std::string on_time, late;
  auto first = NewSession("r1", &on_time);
  auto second = NewSession("r2", &late);
  clock_.Advance(kTtl);
  EXPECT_TRUE(first->ClaimToken(on_time).ok()) << "refused at its deadline";
  clock_.Advance(absl::Milliseconds(1));
  absl::Status s = second->ClaimToken(late);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(s.message(), "token expired");
}

TEST_F(SessionClockTest, BehindWithoutProgressForTheStallTimeoutIsStalled) {
  std::string token;
  auto session = NewSession("r1", &token);
  Attach(*session);
  EXPECT_EQ(StateName(Now(*session).state), "streaming");
  clock_.Advance(kStall - absl::Milliseconds(1));
  EXPECT_EQ(StateName(Now(*session).state), "streaming");
  clock_.Advance(absl::Milliseconds(1));
  ReplicaCondition c = Now(*session);
  EXPECT_EQ(StateName(c.state), "stalled");
  EXPECT_EQ(c.reason, "no_progress");
  EXPECT_EQ(c.lag_bytes, 100u);

  // A new durable position is progress: the stall timeout starts again.
  session->OnAck(FlushedTo(40));
  EXPECT_EQ(StateName(Now(*session).state), "streaming");
  clock_.Advance(kStall - absl::Milliseconds(1));
  session->OnAck(FlushedTo(40));  // the same position again is not
  EXPECT_EQ(StateName(Now(*session).state), "streaming");
  clock_.Advance(absl::Milliseconds(1));
  c = Now(*session);
  EXPECT_EQ(StateName(c.state), "stalled");
  EXPECT_EQ(c.reason, "no_progress");
  EXPECT_EQ(c.lag_bytes, 60u);
}

}  // namespace
}  // namespace walship::agent
