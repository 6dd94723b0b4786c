// What the HA manager's leader key decides (replica/leader_key.h), and the
// flags that ask for it (ReplicaOptions::Validate). Reading the key from a
// real etcd is integration/drill/pg_leader_etcd_test.py's.
#include "replica/leader_key.h"

#include <string>

#include "common/reason.h"
#include "gtest/gtest.h"
#include "replica/replica_options.h"

namespace walship::replica {
namespace {

constexpr char kKey[] = "/service/main/leader";

LeaderView Named(const std::string& member) {
  LeaderView v;
  v.state = LeaderView::State::kNamed;
  v.member = member;
  return v;
}
LeaderView Absent() {
  LeaderView v;
  v.state = LeaderView::State::kAbsent;
  return v;
}
LeaderView Unreadable() {
  LeaderView v;
  v.error = "127.0.0.1:2379: connection refused";
  return v;
}

TEST(CheckLeaderTest, OnlyTheNamedMembersAgentIsFollowed) {
  EXPECT_TRUE(CheckLeader(Named("db1"), "h1:7400", "db1", kKey).ok());
  for (const LeaderView& v : {Named("db2"), Absent(), Unreadable()}) {
    const absl::Status s = CheckLeader(v, "h1:7400", "db1", kKey);
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_EQ(ReasonOf(s), Reason::kNotLeader) << s;
    EXPECT_NE(s.message().find("agent h1:7400 (member db1)"), absl::string_view::npos) << s;
  }
  // A member name is matched whole.
  EXPECT_FALSE(CheckLeader(Named("db10"), "h1:7400", "db1", kKey).ok());
  EXPECT_FALSE(CheckLeader(Named("db1"), "h1:7400", "", kKey).ok());
}

TEST(CheckLeaderTest, SaysWhatTheKeySays) {
  EXPECT_NE(CheckLeader(Named("db2"), "h1:7400", "db1", kKey)
                .message()
                .find("etcd names db2 as the leader (key /service/main/leader)"),
            absl::string_view::npos);
  EXPECT_NE(CheckLeader(Absent(), "h1:7400", "db1", kKey)
                .message()
                .find("etcd has no leader (key /service/main/leader absent)"),
            absl::string_view::npos);
  const absl::Status s = CheckLeader(Unreadable(), "h1:7400", "db1", kKey);
  EXPECT_NE(s.message().find("cannot read the leader key /service/main/leader from etcd: "
                             "127.0.0.1:2379: connection refused"),
            absl::string_view::npos)
      << s;
}

TEST(LeaderMovedAwayTest, OnlyAnotherNameEndsASession) {
  EXPECT_FALSE(LeaderMovedAway(Named("db1"), "db1"));
  EXPECT_TRUE(LeaderMovedAway(Named("db2"), "db1"));
  // A lease that expired, or an etcd that does not answer, leaves a primary
  // that still ships alone.
  EXPECT_FALSE(LeaderMovedAway(Absent(), "db1"));
  EXPECT_FALSE(LeaderMovedAway(Unreadable(), "db1"));
}

TEST(ParseEtcdEndpointsTest, HostPortList) {
  auto e = ParseEtcdEndpoints("etcd1:2379, 10.0.0.2:2379");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, (std::vector<std::string>{"etcd1:2379", "10.0.0.2:2379"}));
  for (const char* bad : {"", "etcd1", "etcd1:2379,", "http://etcd1:2379"}) {
    EXPECT_EQ(ParseEtcdEndpoints(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << bad << "\"";
  }
}

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
  o.leader_etcd = "etcd1:2379";
  o.leader_key = kKey;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();

  ReplicaOptions unnamed = o;
  unnamed.agent = "db1=h1:7400,h2:7400";
  absl::Status s = unnamed.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("agent h2:7400 has no member name"), absl::string_view::npos) << s;

  ReplicaOptions no_key = o;
  no_key.leader_key.clear();
  EXPECT_NE(no_key.Validate().message().find("--leader-etcd needs --leader-key"),
            absl::string_view::npos);

  ReplicaOptions no_etcd = o;
  no_etcd.leader_etcd.clear();
  EXPECT_NE(no_etcd.Validate().message().find("need --leader-etcd"), absl::string_view::npos);
  ReplicaOptions tls_only = Options("db1=h1:7400");
  tls_only.leader_etcd_tls.ca_file = "/etc/walship/etcd-ca.pem";
  EXPECT_NE(tls_only.Validate().message().find("need --leader-etcd"), absl::string_view::npos);

  ReplicaOptions half_client = o;
  half_client.leader_etcd_tls.ca_file = "/etc/walship/etcd-ca.pem";
  half_client.leader_etcd_tls.cert_file = "/etc/walship/r1.pem";
  EXPECT_NE(half_client.Validate().message().find("--leader-etcd-cert and --leader-etcd-key go "
                                                  "together"),
            absl::string_view::npos);
  ReplicaOptions client_without_ca = half_client;
  client_without_ca.leader_etcd_tls.ca_file.clear();
  client_without_ca.leader_etcd_tls.key_file = "/etc/walship/r1.key";
  EXPECT_NE(client_without_ca.Validate().message().find("--leader-etcd-cert needs "
                                                        "--leader-etcd-ca"),
            absl::string_view::npos);

  ReplicaOptions bad_endpoint = o;
  bad_endpoint.leader_etcd = "etcd1";
  EXPECT_EQ(bad_endpoint.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walship::replica
