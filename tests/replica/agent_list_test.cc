// The agent list, the rotation between agents and the timeline fence
// (replica/agent_list.h).
#include "replica/agent_list.h"

#include <string>
#include <vector>

#include "common/reason.h"
#include "gtest/gtest.h"

namespace walship::replica {
namespace {

using Agents = std::vector<std::string>;

absl::Status NotPrimary() {
  return WithReason(absl::UnavailableError("in recovery"), Reason::kNotPrimary);
}
absl::Status Unreachable() { return absl::UnavailableError("connection refused"); }
absl::Status Older() {
  return WithReason(absl::UnavailableError("older timeline"), Reason::kOlderTimeline);
}

TEST(ParseAgentListTest, OneAddressIsAListOfOne) {
  auto list = ParseAgentList("127.0.0.1:7000");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, Agents({"127.0.0.1:7000"}));
}

TEST(ParseAgentListTest, SeveralInOrderWithSpaces) {
  auto list = ParseAgentList("db1:7000, db2:7001 ,[::1]:7002");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, Agents({"db1:7000", "db2:7001", "[::1]:7002"}));
}

TEST(ParseAgentListTest, RefusesBadLists) {
  for (const char* bad : {"", " ", "db1:7000,", ",db1:7000", "db1:7000,,db2:7000", "db1",
                          "db1:7000,db2", "db1:7000,db1:7000", "db1:notaport"}) {
    auto list = ParseAgentList(bad);
    EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
  }
}

TEST(ParseAgentEntriesTest, MemberNamesAreOptionalAndKept) {
  auto entries = ParseAgentEntries("db1=10.0.0.1:7400, 10.0.0.2:7400 , db3 = 10.0.0.3:7400");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].address, "10.0.0.1:7400");
  EXPECT_EQ((*entries)[0].member, "db1");
  EXPECT_EQ((*entries)[1].address, "10.0.0.2:7400");
  EXPECT_EQ((*entries)[1].member, "");
  EXPECT_EQ((*entries)[2].address, "10.0.0.3:7400");
  EXPECT_EQ((*entries)[2].member, "db3");
  // The list of addresses leaves the names out.
  auto list = ParseAgentList("db1=10.0.0.1:7400,10.0.0.2:7400");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, Agents({"10.0.0.1:7400", "10.0.0.2:7400"}));
}

TEST(ParseAgentEntriesTest, RefusesEmptyOrRepeatedNames) {
  for (const char* bad : {"=db1:7000", " =db1:7000", "db1=", "db1=db1", "a=db1:7000,a=db2:7000",
                          "a=db1:7000,b=db1:7000", "a=b=db1:7000"}) {
    auto entries = ParseAgentEntries(bad);
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << bad << "\"";
  }
}

TEST(AgentCannotServeTest, NotLeaderMovesTheRotationOn) {
  EXPECT_TRUE(AgentCannotServe(WithReason(absl::UnavailableError("x"), Reason::kNotLeader)));
  AgentRotation r(Agents{"a:1", "b:1"});
  r.OnSessionEnd(absl::CancelledError("ended"), /*established=*/true);
  ASSERT_EQ(r.current(), "a:1");
  const AgentRotation::Step step = r.OnSessionEnd(
      WithReason(absl::UnavailableError("etcd names b"), Reason::kNotLeader), true);
  EXPECT_TRUE(step.switched);
  EXPECT_EQ(step.outcome, "not_leader");
  EXPECT_EQ(r.current(), "b:1");
}

TEST(TimelineOfWalNameTest, SegmentsAndHistoryFiles) {
  EXPECT_EQ(TimelineOfWalName("000000010000000000000003"), 1u);
  EXPECT_EQ(TimelineOfWalName("0000000A0000000100000003"), 10u);
  EXPECT_EQ(TimelineOfWalName("00000002.history"), 2u);
  EXPECT_EQ(TimelineOfWalName("0000001F.history"), 31u);
}

TEST(TimelineOfWalNameTest, OtherNamesHaveNone) {
  for (const char* n : {"", "wal-000001.seg", "000000010000000000000003.partial",
                        "00000001000000000000000", "0000000100000000000000034",
                        "000000010000000000000a03", "0000000g.history", "00000002.histor",
                        "2.history"}) {
    EXPECT_EQ(TimelineOfWalName(n), 0u) << n;
  }
}

TEST(TimelineFenceTest, SameOrNewerTimelinePasses) {
  EXPECT_TRUE(CheckTimelineFence(2, 2, "a:1").ok());
  EXPECT_TRUE(CheckTimelineFence(3, 2, "a:1").ok());
}

TEST(TimelineFenceTest, WithoutTimelinesThereIsNoFence) {
  EXPECT_TRUE(CheckTimelineFence(0, 2, "a:1").ok());  // the agent's format has none
  EXPECT_TRUE(CheckTimelineFence(1, 0, "a:1").ok());  // the replica holds nothing yet
}

TEST(TimelineFenceTest, OlderTimelineIsRefusedTypedAndRetryable) {
  absl::Status s = CheckTimelineFence(1, 2, "old-primary:7000");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReasonOf(s), Reason::kOlderTimeline);
  EXPECT_NE(s.message().find("old-primary:7000"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("timeline 1"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("timeline 2"), absl::string_view::npos) << s;
}

TEST(AgentRotationTest, OneAgentCompletesARoundAtEveryFailure) {
  AgentRotation r({"a:1"});
  for (int i = 0; i < 3; ++i) {
    AgentRotation::Step step = r.OnSessionEnd(Unreachable(), false);
    EXPECT_TRUE(step.round_complete);
    EXPECT_FALSE(step.switched);
    EXPECT_EQ(r.current(), "a:1");
  }
}

TEST(AgentRotationTest, NotPrimaryMovesToTheNextAndARoundEndsAfterAll) {
  AgentRotation r({"a:1", "b:2", "c:3"});
  EXPECT_EQ(r.current(), "a:1");
  AgentRotation::Step step = r.OnSessionEnd(NotPrimary(), false);
  EXPECT_EQ(step.agent, "a:1");
  EXPECT_EQ(step.outcome, "not_primary");
  EXPECT_TRUE(step.switched);
  EXPECT_FALSE(step.round_complete);
  EXPECT_EQ(r.current(), "b:2");
  step = r.OnSessionEnd(Unreachable(), false);
  EXPECT_EQ(step.outcome, "unavailable");
  EXPECT_FALSE(step.round_complete);
  EXPECT_EQ(r.current(), "c:3");
  step = r.OnSessionEnd(NotPrimary(), false);
  EXPECT_TRUE(step.round_complete);  // every agent tried: back off
  EXPECT_EQ(r.current(), "a:1");
}

TEST(AgentRotationTest, TheLeaderIsTriedAgainAfterAnEstablishedSession) {
  AgentRotation r({"a:1", "b:2"});
  r.OnSessionEnd(NotPrimary(), false);  // a is a standby
  ASSERT_EQ(r.current(), "b:2");
  AgentRotation::Step step = r.OnSessionEnd(Unreachable(), true);  // b shipped, then a blip
  EXPECT_FALSE(step.switched);
  EXPECT_FALSE(step.round_complete);
  EXPECT_EQ(r.current(), "b:2");
  EXPECT_EQ(r.leader(), "b:2");
}

TEST(AgentRotationTest, ALeaderThatCannotServeIsLeft) {
  for (const absl::Status& why : {NotPrimary(), Older()}) {
    AgentRotation r({"a:1", "b:2"});
    AgentRotation::Step step = r.OnSessionEnd(why, true);
    EXPECT_TRUE(step.switched) << why;
    EXPECT_FALSE(step.round_complete) << why;
    EXPECT_EQ(r.current(), "b:2") << why;
  }
}

TEST(AgentRotationTest, AnOlderTimelineAgentIsNeverSettledOn) {
  // b serves an older timeline than the replica holds: every round passes it
  // by, and the round completes (backoff) while a is down.
  AgentRotation r({"a:1", "b:2"});
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(r.current(), "a:1");
    r.OnSessionEnd(Unreachable(), false);
    ASSERT_EQ(r.current(), "b:2");
    AgentRotation::Step step = r.OnSessionEnd(Older(), false);
    EXPECT_TRUE(step.round_complete);
  }
  EXPECT_EQ(r.leader(), "");
}

TEST(AgentRotationTest, AnOutcomeIsNewOnlyWhenItChanges) {
  AgentRotation r({"a:1", "b:2"});
  EXPECT_TRUE(r.OnSessionEnd(NotPrimary(), false).outcome_changed);   // a, first
  EXPECT_TRUE(r.OnSessionEnd(Unreachable(), false).outcome_changed);  // b, first
  EXPECT_FALSE(r.OnSessionEnd(NotPrimary(), false).outcome_changed);  // a, again
  EXPECT_FALSE(r.OnSessionEnd(Unreachable(), false).outcome_changed);  // b, again
  EXPECT_TRUE(r.OnSessionEnd(Older(), false).outcome_changed);        // a, another answer
  EXPECT_FALSE(r.OnSessionEnd(Unreachable(), false).outcome_changed);
}

TEST(AgentRotationTest, ANewListKeepsTheNextAgentAndStartsARound) {
  AgentRotation r({"a:1", "b:2"});
  r.OnSessionEnd(NotPrimary(), false);
  ASSERT_EQ(r.current(), "b:2");
  EXPECT_FALSE(r.SetAgents({"a:1", "b:2"}));  // the same list: nothing changes
  EXPECT_TRUE(r.SetAgents({"c:3", "b:2", "a:1"}));
  EXPECT_EQ(r.current(), "b:2");
  EXPECT_EQ(r.current_index(), 1u);
  // A new round: the two others are tried before it backs off.
  EXPECT_FALSE(r.OnSessionEnd(Unreachable(), false).round_complete);
  EXPECT_EQ(r.current(), "a:1");
  // a:1 keeps its last outcome: the same again is no news.
  EXPECT_FALSE(r.OnSessionEnd(NotPrimary(), false).outcome_changed);
  EXPECT_TRUE(r.OnSessionEnd(Unreachable(), false).round_complete);
  // The next agent gone from the list: the first.
  ASSERT_EQ(r.current(), "b:2");
  EXPECT_TRUE(r.SetAgents({"d:4", "a:1"}));
  EXPECT_EQ(r.current(), "d:4");
}

TEST(AgentRotationTest, NoAgentEndsEveryRound) {
  AgentRotation r({});
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.current(), "");
  AgentRotation::Step step = r.OnSessionEnd(Unreachable(), false);
  EXPECT_TRUE(step.round_complete);
  EXPECT_EQ(step.agent, "");
  EXPECT_TRUE(r.SetAgents({"a:1"}));
  EXPECT_EQ(r.current(), "a:1");
  EXPECT_TRUE(r.SetAgents({}));
  EXPECT_EQ(r.current(), "");
}

TEST(NewerPrimaryTest, OnlyAServingAgentOfANewerTimelineCounts) {
  const std::vector<AgentView> views = {
      {"standby:1", false, 3},   // not serving (in recovery): never
      {"stale:2", true, 1},      // older timeline
      {"same:3", true, 2},       // the same timeline: no reason to leave
      {"promoted:4", true, 3},   // the new primary
      {"later:5", true, 4}};
  std::optional<AgentView> v = NewerPrimary(2, views);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->agent, "promoted:4");
  EXPECT_FALSE(NewerPrimary(4, views).has_value());
  EXPECT_FALSE(NewerPrimary(2, {views[0], views[1], views[2]}).has_value());
}

TEST(NewerPrimaryTest, NoTimelinesNoWatch) {
  EXPECT_FALSE(NewerPrimary(0, {{"a:1", true, 5}}).has_value());
}

}  // namespace
}  // namespace walship::replica
