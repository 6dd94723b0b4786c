// Classify: a replica that cannot advance never looks healthy.
#include "agent/replica_state.h"

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "common/reason.h"
#include "gtest/gtest.h"

namespace walship::agent {
namespace {

constexpr absl::Duration kStall = absl::Seconds(10);
const absl::Time kNow = absl::FromUnixSeconds(1000000);

CatalogSnapshot Snap(std::vector<SegmentInfo> segs, absl::Status source = absl::OkStatus()) {
  CatalogSnapshot s;
  s.segments = std::make_shared<const std::vector<SegmentInfo>>(std::move(segs));
  s.source_status = std::move(source);
  return s;
}

ReplicaFacts Live(Position flushed, absl::Duration since_progress = absl::ZeroDuration()) {
  return ReplicaFacts{false, true, absl::OkStatus(), std::move(flushed), kNow - since_progress};
}

TEST(ReplicaStateTest, CaughtUpAndStreaming) {
  const CatalogSnapshot snap = Snap({{"seg-1", 100, true}, {"seg-2", 50, false}});
  ReplicaCondition c = Classify(Live({"seg-2", 50}), snap, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kCaughtUp);
  EXPECT_EQ(c.lag_bytes, 0u);
  c = Classify(Live({"seg-1", 40}, absl::Seconds(1)), snap, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kStreaming);
  EXPECT_EQ(c.lag_bytes, 110u);
}

TEST(ReplicaStateTest, BehindWithoutProgressIsStalled) {
  const CatalogSnapshot snap = Snap({{"seg-1", 100, false}});
  ReplicaCondition c = Classify(Live({"seg-1", 40}, kStall), snap, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kStalled);
  EXPECT_EQ(c.reason, "no_progress");
  EXPECT_EQ(c.lag_bytes, 60u);
}

// Even with nothing left to ship, a failed source or one that is not a
// primary is never "caught up".
TEST(ReplicaStateTest, AFailedOrUnreadySourceIsNeverCaughtUp) {
  const CatalogSnapshot failed =
      Snap({{"seg-1", 100, false}}, absl::DataLossError("seg-1 shrank"));
  ReplicaCondition c = Classify(Live({"seg-1", 100}), failed, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kStalled);
  EXPECT_EQ(c.reason, "source_failed");
  const CatalogSnapshot ok = Snap({{"seg-1", 100, false}});
  c = Classify(Live({"seg-1", 100}), ok,
               WithReason(absl::UnavailableError("in recovery"), Reason::kNotPrimary), kNow,
               kStall);
  EXPECT_EQ(c.state, ReplicaState::kStalled);
  EXPECT_EQ(c.reason, "not_primary");
}

// A position the source does not show (a file that vanished, or a name that
// now sorts after newer data) counts the whole source as lag, never 0.
TEST(ReplicaStateTest, APositionTheSourceDoesNotShowIsStalled) {
  const CatalogSnapshot snap = Snap({{"seg-1", 100, true}, {"seg-3", 50, false}});
  ReplicaCondition c = Classify(Live({"seg-2", 7}), snap, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kStalled);
  EXPECT_EQ(c.reason, "position_not_in_source");
  EXPECT_EQ(c.lag_bytes, 50u);
}

TEST(ReplicaStateTest, EndedSessionsAreStoppedOrDisconnected) {
  const CatalogSnapshot snap = Snap({{"seg-1", 100, false}});
  ReplicaFacts f = Live({"seg-1", 40});
  f.finished = true;
  f.failure = WithReason(absl::FailedPreconditionError("gap: seg-0002"), Reason::kGap);
  ReplicaCondition c = Classify(f, snap, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kStopped);
  EXPECT_EQ(c.reason, "gap");
  EXPECT_EQ(c.lag_bytes, 60u);
  f.failure = absl::DataLossError("payload checksum mismatch");
  EXPECT_EQ(Classify(f, snap, absl::OkStatus(), kNow, kStall).reason, "data_loss");
  f.failure = absl::UnavailableError("replica closed the control stream");
  c = Classify(f, snap, absl::OkStatus(), kNow, kStall);
  EXPECT_EQ(c.state, ReplicaState::kDisconnected);
  EXPECT_FALSE(NeedsAttention(c.state));
}

TEST(ReplicaStateTest, WithoutADataSocketItIsConnecting) {
  ReplicaFacts f = Live({"seg-1", 40});
  f.has_data_socket = false;
  EXPECT_EQ(Classify(f, Snap({{"seg-1", 100, false}}), absl::OkStatus(), kNow, kStall).state,
            ReplicaState::kConnecting);
}

}  // namespace
}  // namespace walship::agent
