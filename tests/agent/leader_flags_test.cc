// The agent's leader-key flags (AgentOptions::Validate): --leader-etcd and
// --member go together. The flags it shares with the replica are
// tests/common/leader_key_test.cc's; the gate itself, against a real etcd,
// integration/drill/pg_leader_etcd_test.py's.
#include "agent/agent_options.h"
#include "gtest/gtest.h"

namespace walship::agent {
namespace {

AgentOptions Options() {
  AgentOptions o;
  o.wal_dir = "/var/lib/postgresql/15/main/pg_wal";
  o.tls.insecure = true;
  return o;
}

TEST(AgentLeaderFlagsTest, KeyAndMemberTogether) {
  AgentOptions o = Options();
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  o.leader.etcd = "etcd1:2379,etcd2:2379";
  o.leader.key = "/service/main/leader";
  o.member = "db1";
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();

  AgentOptions no_member = o;
  no_member.member.clear();
  EXPECT_EQ(no_member.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_member.Validate().message().find("--leader-etcd needs --member"),
            absl::string_view::npos)
      << no_member.Validate();

  AgentOptions member_only = Options();
  member_only.member = "db1";
  EXPECT_NE(member_only.Validate().message().find("--member needs --leader-etcd"),
            absl::string_view::npos)
      << member_only.Validate();

  AgentOptions no_key = o;
  no_key.leader.key.clear();
  EXPECT_NE(no_key.Validate().message().find("--leader-etcd needs --leader-key"),
            absl::string_view::npos);

  AgentOptions fast = o;
  fast.leader_check_interval = absl::Milliseconds(10);
  EXPECT_EQ(fast.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walship::agent
