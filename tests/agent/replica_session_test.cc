// The session's data token and id: what a HELLO may consume, and whether the
// next session's id can be guessed.
#include "agent/replica_session.h"
#include "common/sys/syscalls.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "tests/fakes/log_capture.h"

namespace walship::agent {
namespace {

std::shared_ptr<ReplicaSession> NewSession(SessionRegistry& registry, const std::string& name,
                                           std::string* token) {
  return registry.Create(name, ShipStart{Position{"seg-001", 0}, 0}, "zerocopy", absl::Seconds(30), token);
}

TEST(ReplicaSessionTest, ForgedHelloConsumesNothing) {
  SessionRegistry registry{sys::DefaultSysCalls()};
  std::string token;
  auto session = NewSession(registry, "r1", &token);
  std::string forged = token;
  forged[0] ^= 1;

  absl::Status s = session->ClaimToken(forged);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("wrong token"), std::string::npos) << s;
  s = session->ClaimToken(std::string(token.size() + 1, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;

  // The real replica's HELLO, after the forged ones, still gets in...
  s = session->ClaimToken(token);
  EXPECT_TRUE(s.ok()) << "a wrong token consumed the session's token: " << s;
  // ... and only once: the same token replayed is refused.
  s = session->ClaimToken(token);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("already used"), std::string::npos) << s;
  registry.CloseAll();
}

// At debug level every new durable position a replica acknowledges is one
// log line: the acknowledgement log a fault campaign checks replicas
// against (sampling the status could miss the last one before a crash).
TEST(ReplicaSessionTest, EachNewDurablePositionIsLoggedAtDebugLevel) {
  testing::LogCapture logs;
  const spdlog::level::level_enum was = spdlog::get_level();
  spdlog::set_level(spdlog::level::debug);
  SessionRegistry registry{sys::DefaultSysCalls()};
  std::string token;
  auto session = NewSession(registry, "r7", &token);
  walship::v1::Ack ack;
  ack.mutable_flushed()->set_segment("seg-001");
  ack.mutable_flushed()->set_offset(4096);
  session->OnAck(ack);
  session->OnAck(ack);  // nothing new
  ack.mutable_flushed()->set_offset(8192);
  session->OnAck(ack);
  spdlog::set_level(was);
  EXPECT_TRUE(logs.Logged("ack: replica r7 flushed seg-001@4096"));
  EXPECT_TRUE(logs.Logged("ack: replica r7 flushed seg-001@8192"));
  registry.CloseAll();
}

TEST(ReplicaSessionTest, SessionIdsAreRandomNotTheNextNumber) {
  SessionRegistry registry{sys::DefaultSysCalls()};
  std::set<uint64_t> ids;
  uint64_t previous = 0;
  for (int i = 0; i < 200; ++i) {
    std::string token;
    auto s = NewSession(registry, absl::StrCat("r", i), &token);
    EXPECT_NE(s->id(), 0u);
    EXPECT_TRUE(ids.insert(s->id()).second) << "id " << s->id() << " given twice";
    EXPECT_EQ(registry.Find(s->id()), s);
    EXPECT_EQ(token.size(), 32u);
    if (i > 0) {
      // Random 64-bit ids: two consecutive ones within 2^32 of each other
      // happen with probability 2^-31; sequential ids always are.
      const uint64_t gap = s->id() > previous ? s->id() - previous : previous - s->id();
      ASSERT_GT(gap, uint64_t{1} << 32)
          << "session " << i << " has id " << s->id() << " after " << previous;
    }
    previous = s->id();
  }
  registry.CloseAll();
}

}  // namespace
}  // namespace walship::agent
