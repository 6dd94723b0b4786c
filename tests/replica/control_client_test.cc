// The handshake's tail negotiation (NegotiateHandshake), over a scripted
// agent: which points are presented, in what order, what becomes of the
// tail, and the status of each refusal.
#include "replica/control_client.h"

#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "gtest/gtest.h"

namespace walship::replica {
namespace {

constexpr char kSegment[] = "000000010000000000000003";

DurablePoint Point(uint64_t offset, uint32_t crc) {
  DurablePoint p;
  p.position = Position{kSegment, offset};
  p.prefix_crc32c = crc;
  return p;
}

// What the replica presented in one handshake call.
struct Presented {
  Position at;
  uint32_t prefix_crc32c;
  bool unrecorded;
};

// Answers each handshake call with the next scripted status; an OK answer
// carries protocol version 1, stream "s1" and session id = call number.
class ScriptedAgent {
 public:
  explicit ScriptedAgent(std::deque<grpc::Status> answers) : answers_(std::move(answers)) {}

  HandshakeCall call() {
    return [this](const DurablePoint& at, bool unrecorded,
                  walship::v1::HandshakeResponse* out) {
      presented.push_back(Presented{at.position, at.prefix_crc32c, unrecorded});
      if (answers_.empty()) return grpc::Status(grpc::StatusCode::INTERNAL, "unscripted call");
      grpc::Status s = answers_.front();
      answers_.pop_front();
      if (s.ok()) {
        out->set_protocol_version(version);
        out->set_stream_id(stream);
        out->set_session_id(presented.size());
      } else {
        // A failed call may leave something behind; a retry must not see it.
        out->set_session_id(999);
      }
      return s;
    };
  }
  ResolveTailFn resolve() {
    return [this](bool keep) {
      resolved.push_back(keep);
      return resolve_status;
    };
  }

  std::vector<Presented> presented;
  std::vector<bool> resolved;
  absl::Status resolve_status;
  walship::v1::ProtocolVersion version = walship::v1::PROTOCOL_VERSION_1;
  std::string stream = "s1";

 private:
  std::deque<grpc::Status> answers_;
};

grpc::Status Refusal(absl::Status s, Reason reason) { return ToGrpc(WithReason(s, reason)); }

class NegotiateHandshakeTest : public ::testing::Test {
 protected:
  NegotiateHandshakeTest() {
    options_.agent = "agent.example:7000";
    options_.dest = "/dest";
  }
  absl::StatusOr<Negotiated> Negotiate(ScriptedAgent& agent,
                                       const std::optional<DurablePoint>& tail,
                                       const std::string& stream_id = "s1") {
    return NegotiateHandshake(options_, stream_id, recorded_, tail, agent.call(),
                              agent.resolve());
  }

  ReplicaOptions options_;
  const DurablePoint recorded_ = Point(8192, 0x1111);
  const DurablePoint tail_ = Point(12288, 0x2222);
};

TEST_F(NegotiateHandshakeTest, WithoutTailPresentsTheRecordedPointOnce) {
  ScriptedAgent agent({grpc::Status::OK});
  absl::StatusOr<Negotiated> n = Negotiate(agent, std::nullopt);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(agent.presented.size(), 1u);
  EXPECT_EQ(agent.presented[0].at, recorded_.position);
  EXPECT_EQ(agent.presented[0].prefix_crc32c, 0x1111u);
  EXPECT_FALSE(agent.presented[0].unrecorded);
  EXPECT_TRUE(agent.resolved.empty());
  EXPECT_EQ(n->durable.position, recorded_.position);
}

TEST_F(NegotiateHandshakeTest, ConfirmedTailIsKeptAndBecomesDurable) {
  ScriptedAgent agent({grpc::Status::OK});
  absl::StatusOr<Negotiated> n = Negotiate(agent, tail_);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(agent.presented.size(), 1u);
  EXPECT_EQ(agent.presented[0].at, tail_.position);
  EXPECT_EQ(agent.presented[0].prefix_crc32c, 0x2222u);
  EXPECT_TRUE(agent.presented[0].unrecorded);
  EXPECT_EQ(agent.resolved, std::vector<bool>{true});
  EXPECT_EQ(n->durable.position, tail_.position);
  EXPECT_EQ(n->durable.prefix_crc32c, 0x2222u);
}

TEST_F(NegotiateHandshakeTest, DivergentTailIsCutAndTheRecordedPointPresented) {
  ScriptedAgent agent(
      {Refusal(absl::FailedPreconditionError("prefix differs"), Reason::kDivergent),
       grpc::Status::OK});
  absl::StatusOr<Negotiated> n = Negotiate(agent, tail_);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(agent.presented.size(), 2u);
  EXPECT_TRUE(agent.presented[0].unrecorded);
  EXPECT_EQ(agent.presented[1].at, recorded_.position);
  EXPECT_EQ(agent.presented[1].prefix_crc32c, 0x1111u);
  EXPECT_FALSE(agent.presented[1].unrecorded);
  EXPECT_EQ(agent.resolved, std::vector<bool>{false});
  EXPECT_EQ(n->durable.position, recorded_.position);
  EXPECT_EQ(n->response.session_id(), 2u);  // the second answer's
}

TEST_F(NegotiateHandshakeTest, OtherRefusalLeavesTheTailAndEndsTheSession) {
  for (Reason reason : {Reason::kGap, Reason::kNotPrimary, Reason::kWrongStream}) {
    ScriptedAgent agent(
        {Refusal(absl::FailedPreconditionError("no"), reason)});
    absl::StatusOr<Negotiated> n = Negotiate(agent, tail_);
    ASSERT_FALSE(n.ok()) << ReasonName(reason);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(ReasonOf(n.status()), reason);
    EXPECT_TRUE(absl::StrContains(n.status().message(), "handshake with agent.example:7000"))
        << n.status();
    EXPECT_EQ(agent.presented.size(), 1u);
    EXPECT_TRUE(agent.resolved.empty()) << ReasonName(reason);
  }
}

TEST_F(NegotiateHandshakeTest, UnreachableAgentLeavesTheTail) {
  ScriptedAgent agent({grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused")});
  absl::StatusOr<Negotiated> n = Negotiate(agent, tail_);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(agent.resolved.empty());
}

TEST_F(NegotiateHandshakeTest, RefusalAfterCuttingTheTailIsReturned) {
  ScriptedAgent agent(
      {Refusal(absl::FailedPreconditionError("prefix differs"), Reason::kDivergent),
       Refusal(absl::FailedPreconditionError("behind retention"), Reason::kGap)});
  absl::StatusOr<Negotiated> n = Negotiate(agent, tail_);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReasonOf(n.status()), Reason::kGap);
  EXPECT_EQ(agent.resolved, std::vector<bool>{false});
  EXPECT_EQ(agent.presented.size(), 2u);
}

TEST_F(NegotiateHandshakeTest, DeadlineIsRetryableAndKeepsTheReason) {
  ScriptedAgent agent({Refusal(absl::DeadlineExceededError("slow"), Reason::kNotReady)});
  absl::StatusOr<Negotiated> n = Negotiate(agent, std::nullopt);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(n.status()), Reason::kNotReady);
  EXPECT_TRUE(absl::StrContains(n.status().message(), "handshake with")) << n.status();
}

TEST_F(NegotiateHandshakeTest, FailureToResolveTheTailIsReturned) {
  ScriptedAgent agent({grpc::Status::OK});
  agent.resolve_status = absl::DataLossError("cannot truncate");
  absl::StatusOr<Negotiated> n = Negotiate(agent, tail_);
  EXPECT_EQ(n.status(), absl::DataLossError("cannot truncate"));
  EXPECT_EQ(agent.resolved, std::vector<bool>{true});
}

TEST_F(NegotiateHandshakeTest, OtherProtocolVersionNeedsAnOperator) {
  ScriptedAgent agent({grpc::Status::OK});
  agent.version = walship::v1::PROTOCOL_VERSION_UNSPECIFIED;
  absl::StatusOr<Negotiated> n = Negotiate(agent, std::nullopt);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(n.status().message(), "protocol version")) << n.status();
}

TEST_F(NegotiateHandshakeTest, AnotherStreamNeedsAnOperator) {
  ScriptedAgent agent({grpc::Status::OK});
  agent.stream = "s2";
  absl::StatusOr<Negotiated> n = Negotiate(agent, std::nullopt, "s1");
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(n.status().message(), "destination /dest holds stream s1 but the agent serves s2");
}

TEST_F(NegotiateHandshakeTest, UnboundDestinationTakesTheAgentsStream) {
  ScriptedAgent agent({grpc::Status::OK});
  agent.stream = "s2";
  absl::StatusOr<Negotiated> n = Negotiate(agent, std::nullopt, "");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->response.stream_id(), "s2");
}

}  // namespace
}  // namespace walship::replica
