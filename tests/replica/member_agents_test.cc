// A replica's agents from the HA manager's member keys
// (replica/member_agents.h), with member values as Patroni 3.0 writes them.
#include "replica/member_agents.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace walship::replica {
namespace {

constexpr char kPrefix[] = "/service/main/members/";

// A member key's value as Patroni writes it (ha.py touch_member), with
// `tags` as the node's configuration gives them.
std::string Member(const std::string& role, const std::string& tags) {
  return "{\"conn_url\": \"postgres://127.0.0.1:5432/postgres\", \"api_url\": "
         "\"http://127.0.0.1:8008/patroni\", \"state\": \"running\", \"role\": \"" +
         role + "\", \"version\": \"3.0.2\", \"xlog_location\": 50331808, \"timeline\": 3" +
         (tags.empty() ? "" : ", \"tags\": " + tags) + "}";
}

LeaderKey::KeyValue Key(const std::string& name, const std::string& value) {
  return {std::string(kPrefix) + name, value};
}

TEST(MemberAgentsTest, EachTaggedMemberNamesItsAgent) {
  const MemberAgents m = AgentsFromMembers(
      {Key("db1", Member("primary", "{\"walship_agent\": \"10.0.0.1:7400\"}")),
       Key("db2", Member("replica", "{\"nofailover\": true, \"walship_agent\": \"db2:7400\"}")),
       Key("db3", Member("replica", ""))},
      kPrefix, "walship_agent");
  ASSERT_EQ(m.agents.size(), 2u);
  EXPECT_EQ(m.agents[0], (AgentEntry{"10.0.0.1:7400", "db1"}));
  EXPECT_EQ(m.agents[1], (AgentEntry{"db2:7400", "db2"}));
  EXPECT_EQ(m.untagged, std::vector<std::string>{"db3"});
  EXPECT_TRUE(m.problems.empty());
  EXPECT_EQ(DescribeAgents(m.agents), "db1=10.0.0.1:7400, db2=db2:7400");
}

TEST(MemberAgentsTest, WhatGivesNoAgentIsSaid) {
  const MemberAgents m = AgentsFromMembers(
      {Key("a", "not json"), Key("b", Member("replica", "{\"walship_agent\": 7400}")),
       Key("c", Member("replica", "{\"walship_agent\": \"no-port\"}")),
       Key("d", Member("replica", "{\"walship_agent\": \"h:1\"}")),
       Key("e", Member("replica", "{\"walship_agent\": \"h:1\"}")),
       // Not members: deeper keys, another prefix.
       Key("d/x", Member("replica", "{\"walship_agent\": \"h:2\"}")),
       {"/service/other/members/f", Member("replica", "{\"walship_agent\": \"h:3\"}")}},
      kPrefix, "walship_agent");
  ASSERT_EQ(m.agents.size(), 1u);
  EXPECT_EQ(m.agents[0], (AgentEntry{"h:1", "d"}));
  ASSERT_EQ(m.problems.size(), 4u);
  EXPECT_NE(m.problems[0].find("member a: its key /service/main/members/a does not hold a JSON"),
            std::string::npos)
      << m.problems[0];
  EXPECT_NE(m.problems[1].find("member b: tag walship_agent is not a HOST:PORT string"),
            std::string::npos);
  EXPECT_NE(m.problems[2].find("member c:"), std::string::npos);
  EXPECT_NE(m.problems[3].find("member e: tag walship_agent gives h:1, which another member "
                               "gave first"),
            std::string::npos);
  EXPECT_TRUE(m.untagged.empty());
}

TEST(MemberAgentsTest, TheOperatorsEntriesWin) {
  const std::vector<AgentEntry> merged =
      MergeAgents({{"h1:7400", "db1"}, {"h9:7400", "old"}},
                  {{"other:7400", "db1"}, {"h9:7400", "db9"}, {"h2:7400", "db2"}});
  EXPECT_EQ(merged, (std::vector<AgentEntry>{
                        {"h1:7400", "db1"}, {"h9:7400", "old"}, {"h2:7400", "db2"}}));
  EXPECT_EQ(DescribeAgents({}), "none");
}

TEST(MemberAgentsTest, PatroniKeepsMembersBesideTheLeader) {
  EXPECT_EQ(PatroniMembersPrefix("/service/main/leader"), "/service/main/members/");
  EXPECT_EQ(PatroniMembersPrefix("leader"), "members/");
  EXPECT_EQ(MemberOfKey("/service/main/members/db1", "/service/main/members/"), "db1");
  EXPECT_EQ(MemberOfKey("/service/main/members/db1/x", "/service/main/members/"), "");
  EXPECT_EQ(MemberOfKey("/service/main/members/", "/service/main/members/"), "");
  EXPECT_EQ(MemberOfKey("/service/other/members/db1", "/service/main/members/"), "");
}

}  // namespace
}  // namespace walship::replica
