// The replica's leader-key flags (ReplicaOptions::Validate): with
// --leader-etcd every --agent entry names its member. The flags common to
// the agent are tests/common/leader_key_test.cc's.
#include <string>

#include "gtest/gtest.h"
#include "replica/replica_options.h"

namespace walship::replica {
namespace {

ReplicaOptions Options(const std::string& agent) {
  ReplicaOptions o;
  o.agent = agent;
  o.dest = "/tmp/dest";
  o.name = "r1";
  o.tls.insecure = true;
  return o;
}

TEST(LeaderFlagsTest, EveryAgentNamedAndAKey) {
  ReplicaOptions o = Options("db1=h1:7400,db2=h2:7400");
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  o.leader.etcd = "etcd1:2379";
  o.leader.key = "/service/main/leader";
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();

  ReplicaOptions unnamed = o;
  unnamed.agent = "db1=h1:7400,h2:7400";
  absl::Status s = unnamed.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("agent h2:7400 has no member name"), absl::string_view::npos) << s;

  ReplicaOptions no_key = o;
  no_key.leader.key.clear();
  EXPECT_NE(no_key.Validate().message().find("--leader-etcd needs --leader-key"),
            absl::string_view::npos);
}

TEST(LeaderFlagsTest, AgentsFromMemberKeysNeedTheLeaderKey) {
  ReplicaOptions o = Options("");
  absl::Status s = o.Validate();
  EXPECT_NE(s.message().find("--agent is required (or --agent-tag with --leader-etcd)"),
            absl::string_view::npos)
      << s;
  o.agent_tag = "walship_agent";
  s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--agent-tag reads the agents from the HA manager's member keys: "
                             "it needs --leader-etcd"),
            absl::string_view::npos)
      << s;
  o.leader.etcd = "etcd1:2379";
  o.leader.key = "/service/main/leader";
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  // Beside --agent entries, which still carry their member names.
  o.agent = "db1=h1:7400";
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  o.agent = "h1:7400";
  EXPECT_NE(o.Validate().message().find("has no member name"), absl::string_view::npos);
  // Agents from etcd may be several: no single --data-address.
  o.agent = "db1=h1:7400";
  o.data_address = "h1:7401";
  EXPECT_NE(o.Validate().message().find("--data-address names one data socket"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace walship::replica
