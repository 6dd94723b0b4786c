// The slot keeper's decision each round: which replicas it holds WAL for,
// where the slot goes, and who is released past --max-retained-bytes.
#include "agent/postgres/slot_keeper.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/pgwal/wal_names.h"
#include "gtest/gtest.h"

namespace walship::agent {
namespace {

constexpr uint64_t kSeg = 1 << 20;

absl::StatusOr<pg::Lsn> ToLsn(const Position& p) {
  absl::StatusOr<pg::SegmentId> id = pg::ParseSegmentName(p.segment, kSeg);
  if (!id.ok()) return id.status();
  return pg::SegmentStartLsn(id->segno, kSeg) + p.offset;
}

Position At(uint64_t segno, uint64_t offset) {
  return Position{pg::SegmentName(1, segno, kSeg), offset};
}

pg::Lsn Lsn(uint64_t segno, uint64_t offset) { return segno * kSeg + offset; }

const absl::Time kBefore = absl::FromUnixSeconds(1714564700);
const absl::Time kNow = absl::FromUnixSeconds(1714564800) + absl::Milliseconds(600);

// r2 recorded (down since before the agent started) at segment 9; r1 live.
ReplicaTable R2Recorded() {
  ReplicaTable t;
  t.stream_id = "s";
  t.replicas["r2"] = KnownReplica{At(9, 80), kBefore, false};
  return t;
}

TEST(PlanSlotRoundTest, ARecordedReplicaHoldsTheSlotThoughOthersAcknowledge) {
  ReplicaTable t = R2Recorded();
  SlotPlan plan = PlanSlotRound(t, {{"r1", At(13, 256)}}, ToLsn, /*restart=*/Lsn(9, 80),
                                /*flush=*/Lsn(13, 256), 0, kNow);
  // The start of r2's segment: the agent keeps the whole segment a replica
  // is in.
  EXPECT_EQ(plan.target, Lsn(9, 0));
  EXPECT_TRUE(plan.changed) << "r1 is new: it must be recorded before the slot moves";
  ASSERT_EQ(t.replicas.count("r1"), 1u);
  EXPECT_EQ(t.replicas["r1"].flushed, At(13, 256));
  EXPECT_EQ(t.replicas["r1"].seen, absl::FromUnixSeconds(1714564800)) << "whole seconds";
  EXPECT_EQ(t.replicas["r2"].seen, kBefore);
  EXPECT_FALSE(plan.over_bound);
}

TEST(PlanSlotRoundTest, TheSlotFollowsTheOldestKnownReplica) {
  ReplicaTable t = R2Recorded();
  PlanSlotRound(t, {{"r1", At(13, 256)}}, ToLsn, Lsn(9, 80), Lsn(13, 256), 0, kNow);
  // r2 is back and catches up past r1.
  SlotPlan plan = PlanSlotRound(t, {{"r1", At(13, 256)}, {"r2", At(14, 0)}}, ToLsn,
                                Lsn(9, 80), Lsn(14, 0), 0, kNow);
  EXPECT_TRUE(plan.changed);
  EXPECT_EQ(plan.target, Lsn(13, 0));
  // Nothing moved: nothing to save.
  plan = PlanSlotRound(t, {{"r1", At(13, 256)}, {"r2", At(14, 0)}}, ToLsn, Lsn(13, 256),
                       Lsn(14, 0), 0, kNow);
  EXPECT_FALSE(plan.changed);
  EXPECT_EQ(plan.target, Lsn(13, 0));
}

// A replica holding all of segment 6 before the agent could confirm it (an
// idle primary after pg_switch_wal): the slot keeps segment 6, which a
// checkpoint would otherwise recycle under the agent.
TEST(PlanSlotRoundTest, ASegmentAReplicaHoldsWholeIsKeptUntilConfirmed) {
  ReplicaTable t;
  SlotPlan plan = PlanSlotRound(t, {{"r1", At(6, kSeg)}}, ToLsn, Lsn(6, 100), Lsn(7, 0), 0,
                                kNow);
  EXPECT_EQ(plan.target, Lsn(6, 0));
}

TEST(PlanSlotRoundTest, WithNobodyKnownTheSlotHolds) {
  ReplicaTable t;
  SlotPlan plan = PlanSlotRound(t, {}, ToLsn, Lsn(3, 0), Lsn(9, 0), 0, kNow);
  EXPECT_EQ(plan.target, Lsn(3, 0));
  EXPECT_FALSE(plan.changed);
}

TEST(PlanSlotRoundTest, APositionThatMapsToNoLsnKeepsTheRecordedOne) {
  ReplicaTable t = R2Recorded();
  // A new replica durable at "(start)", and r2 at a timeline's history file.
  SlotPlan plan = PlanSlotRound(t, {{"r3", Position{}}, {"r2", Position{"00000002.history", 0}}},
                                ToLsn, Lsn(9, 0), Lsn(12, 0), 0, kNow);
  EXPECT_FALSE(plan.changed);
  EXPECT_EQ(t.replicas.count("r3"), 0u);
  EXPECT_EQ(t.replicas["r2"].flushed, At(9, 80));
  EXPECT_EQ(plan.target, Lsn(9, 0));
}

TEST(PlanSlotRoundTest, PastTheBoundARecordedReplicaIsReleasedAndNamed) {
  ReplicaTable t = R2Recorded();
  const uint64_t bound = 8 * kSeg;
  SlotPlan plan = PlanSlotRound(t, {{"r1", At(20, 0)}}, ToLsn, Lsn(9, 80), Lsn(20, 0), bound,
                                kNow);
  EXPECT_TRUE(plan.over_bound);
  EXPECT_EQ(plan.retained, Lsn(20, 0) - Lsn(9, 0));
  EXPECT_EQ(plan.target, Lsn(12, 0)) << "the bound is retained this round";
  ASSERT_EQ(plan.released.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(plan.released[0], "r2 at 0/900050 (not connected since"))
      << plan.released[0];
  EXPECT_TRUE(plan.changed);
  EXPECT_TRUE(t.replicas["r2"].released);
  EXPECT_FALSE(t.replicas["r1"].released);

  // Released, r2 holds nothing: the slot follows r1.
  plan = PlanSlotRound(t, {{"r1", At(21, 0)}}, ToLsn, Lsn(12, 0), Lsn(21, 0), bound, kNow);
  EXPECT_FALSE(plan.over_bound);
  EXPECT_EQ(plan.target, Lsn(21, 0));
}

TEST(PlanSlotRoundTest, AConnectedReplicaPastTheBoundIsNamedWithoutTheNote) {
  ReplicaTable t;
  SlotPlan plan = PlanSlotRound(t, {{"r1", At(20, 0)}, {"r2", At(2, 0)}}, ToLsn, Lsn(2, 0),
                                Lsn(20, 0), 4 * kSeg, kNow);
  ASSERT_EQ(plan.released.size(), 1u);
  EXPECT_EQ(plan.released[0], "r2 at 0/200000");
}

TEST(PlanSlotRoundTest, AReleasedReplicaIsHeldAgainOnceItAcknowledgesANewPosition) {
  ReplicaTable t = R2Recorded();
  t.replicas["r2"].released = true;
  // Its session still shows the old position: still released.
  SlotPlan plan = PlanSlotRound(t, {{"r1", At(20, 0)}, {"r2", At(9, 80)}}, ToLsn, Lsn(12, 0),
                                Lsn(20, 0), 0, kNow);
  EXPECT_TRUE(t.replicas["r2"].released);
  EXPECT_EQ(plan.target, Lsn(20, 0));
  // It acknowledged a new position: held for again.
  plan = PlanSlotRound(t, {{"r1", At(20, 0)}, {"r2", At(15, 0)}}, ToLsn, Lsn(20, 0),
                       Lsn(20, 0), 0, kNow);
  EXPECT_TRUE(plan.changed);
  EXPECT_FALSE(t.replicas["r2"].released);
  EXPECT_EQ(plan.target, Lsn(15, 0)) << "below the slot: it stays where it is";
}

TEST(PlanSlotRoundTest, WithoutReplicasPastTheBoundWalIsReleasedAndNobodyNamed) {
  ReplicaTable t;
  SlotPlan plan = PlanSlotRound(t, {}, ToLsn, Lsn(2, 0), Lsn(20, 0), 4 * kSeg, kNow);
  EXPECT_TRUE(plan.over_bound);
  EXPECT_TRUE(plan.released.empty());
  EXPECT_EQ(plan.target, Lsn(16, 0));
}

}  // namespace
}  // namespace walship::agent
