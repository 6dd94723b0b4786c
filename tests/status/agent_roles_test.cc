// What walship-status says of several agents (status/agent_roles.h). The
// same against real agents beside a PostgreSQL primary and its standby is
// integration/drill/pg_follow_leader_test.py's.
#include "status/agent_roles.h"

#include "gtest/gtest.h"

namespace walship {
namespace status {
namespace {

AgentAnswer Serving(const std::string& address, const std::string& member, uint32_t timeline) {
  AgentAnswer a;
  a.address = address;
  a.member = member;
  a.answered = true;
  a.timeline = timeline;
  return a;
}

AgentAnswer Standby(const std::string& address) {
  AgentAnswer a = Serving(address, "", 0);
  a.not_serving = "PostgreSQL at /var/run/postgresql is in recovery, not a primary";
  return a;
}

AgentAnswer Silent(const std::string& address, const std::string& member) {
  AgentAnswer a;
  a.address = address;
  a.member = member;
  a.error = "failed to connect to all addresses";
  return a;
}

TEST(AgentRolesTest, EachAgentHasALine) {
  EXPECT_EQ(AgentLine(Serving("db1:7400", "db1", 3)), "agent db1 (db1:7400): serving, timeline 3");
  EXPECT_EQ(AgentLine(Serving("log:7400", "", 0)), "agent log:7400: serving");
  EXPECT_EQ(AgentLine(Standby("db2:7400")),
            "agent db2:7400: not serving: PostgreSQL at /var/run/postgresql is in recovery, "
            "not a primary");
  EXPECT_EQ(AgentLine(Silent("db3:7400", "db3")),
            "agent db3 (db3:7400): DID NOT ANSWER: failed to connect to all addresses");
}

TEST(AgentRolesTest, TheSummaryNamesTheOneThatServes) {
  EXPECT_EQ(ServingSummary({Standby("db1:7400"), Serving("db2:7400", "db2", 2),
                            Silent("db3:7400", "")}),
            "serving: db2 (db2:7400), timeline 2 (1 of 3 agents; 1 did not answer)");
  EXPECT_EQ(ServingSummary({Standby("db1:7400"), Serving("db2:7400", "", 0)}),
            "serving: db2:7400 (1 of 2 agents)");
}

TEST(AgentRolesTest, NoneOrSeveralServingIsSaidLoudly) {
  EXPECT_EQ(ServingSummary({Standby("db1:7400"), Silent("db2:7400", "db2")}),
            "NO AGENT SERVES (2 agents asked; 1 did not answer)");
  EXPECT_EQ(ServingSummary({Standby("db1:7400"), Standby("db2:7400")}),
            "NO AGENT SERVES (2 agents asked)");
  EXPECT_EQ(ServingSummary({Serving("db1:7400", "db1", 2), Standby("db3:7400"),
                            Serving("db2:7400", "db2", 3)}),
            "SEVERAL AGENTS SERVE: db1 (db1:7400) timeline 2, db2 (db2:7400) timeline 3");
}

LeaderView Leader(const std::string& member) {
  LeaderView v;
  v.state = LeaderView::State::kNamed;
  v.member = member;
  return v;
}

TEST(AgentRolesTest, TheLeaderKeyAndTheServingAgentMustAgree) {
  AgentAnswer db1 = Serving("db1:7400", "db1", 3);
  AgentAnswer db2 = Standby("db2:7400");
  db2.member = "db2";
  EXPECT_EQ(LeaderDisagreement({db1, db2}, Leader("db1")), "");
  EXPECT_EQ(LeaderDisagreement({db1, db2}, Leader("db2")),
            "THE LEADER KEY NAMES db2, BUT db1 (db1:7400) SERVES");
  EXPECT_EQ(LeaderDisagreement({db2}, Leader("db2")),
            "THE LEADER KEY NAMES db2, WHOSE AGENT db2 (db2:7400) DOES NOT SERVE");
  EXPECT_EQ(LeaderDisagreement({db2}, Leader("db3")),
            "THE LEADER KEY NAMES db3, AND NO AGENT ASKED IS db3'S");
  // Its agent silent (its host lost): the agents' lines say so.
  EXPECT_EQ(LeaderDisagreement({db2, Silent("db3:7400", "db3")}, Leader("db3")), "");
  LeaderView absent;
  absent.state = LeaderView::State::kAbsent;
  EXPECT_EQ(LeaderDisagreement({db1}, absent), "");
  EXPECT_EQ(LeaderDisagreement({db1}, LeaderView{}), "");
}

}  // namespace
}  // namespace status
}  // namespace walship
