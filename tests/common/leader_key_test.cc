// What the HA manager's leader key decides (common/leader_key.h), and the
// flags that ask for it (LeaderKeyConfig::Validate). Reading the key from a
// real etcd is integration/drill/pg_leader_etcd_test.py's.
#include "common/leader_key.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/clock.h"
#include "common/reason.h"
#include "common/sys/syscalls.h"
#include "gtest/gtest.h"

namespace walship {
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

// A password file gone between the daemon's check and the key's making
// (replaced at that moment): Make() refuses; MakeAwaitingFiles() gives a key
// whose reads name the file until it is back, then reads etcd (here a port
// nobody listens on, so the error names the endpoint instead).
TEST(LeaderKeyTest, AKeyAwaitingItsFilesReadsOnceTheyAreBack) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string pw = std::string(tmp != nullptr ? tmp : "/tmp") + "/awaited-password";
  ::unlink(pw.c_str());
  LeaderKeyConfig c;
  c.etcd = "127.0.0.1:1";
  c.key = kKey;
  c.user = "walship";
  c.password_file = pw;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const absl::Duration timeout = absl::Milliseconds(200);
  EXPECT_EQ(LeaderKey::Make(sys::DefaultSysCalls(), DefaultClock(), c, timeout).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<std::unique_ptr<LeaderKey>> key =
      LeaderKey::MakeAwaitingFiles(sys::DefaultSysCalls(), DefaultClock(), c, timeout);
  ASSERT_TRUE(key.ok()) << key.status();
  for (int i = 0; i < 2; ++i) {
    LeaderKey::Reading r = (*key)->Read();
    EXPECT_EQ(r.view.state, LeaderView::State::kUnreadable);
    EXPECT_NE(r.view.error.find("--leader-etcd-password-file=" + pw), std::string::npos)
        << r.view.error;
    EXPECT_EQ(r.view.error.find("127.0.0.1:1"), std::string::npos) << r.view.error;
    absl::StatusOr<std::vector<LeaderKey::KeyValue>> members =
        (*key)->ReadPrefix("/service/main/members/");
    EXPECT_EQ(members.status().code(), absl::StatusCode::kUnavailable);
  }

  std::ofstream(pw, std::ios::trunc) << "secret\n";
  LeaderKey::Reading r = (*key)->Read();
  EXPECT_EQ(r.view.state, LeaderView::State::kUnreadable);
  EXPECT_NE(r.view.error.find("127.0.0.1:1: "), std::string::npos) << r.view.error;
  EXPECT_EQ(r.view.error.find("password-file"), std::string::npos) << r.view.error;
}

TEST(LeaderKeyConfigTest, EtcdAndAKeyOrNothing) {
  LeaderKeyConfig none;
  EXPECT_TRUE(none.Validate().ok());
  EXPECT_FALSE(none.enabled());
  LeaderKeyConfig c;
  c.etcd = "etcd1:2379";
  c.key = kKey;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_TRUE(c.enabled());

  LeaderKeyConfig no_key = c;
  no_key.key.clear();
  EXPECT_NE(no_key.Validate().message().find("--leader-etcd needs --leader-key"),
            absl::string_view::npos);
  LeaderKeyConfig no_etcd = c;
  no_etcd.etcd.clear();
  EXPECT_NE(no_etcd.Validate().message().find("need --leader-etcd"), absl::string_view::npos);
  LeaderKeyConfig tls_only;
  tls_only.tls.ca_file = "/etc/walship/etcd-ca.pem";
  EXPECT_NE(tls_only.Validate().message().find("need --leader-etcd"), absl::string_view::npos);

  LeaderKeyConfig half_client = c;
  half_client.tls.ca_file = "/etc/walship/etcd-ca.pem";
  half_client.tls.cert_file = "/etc/walship/r1.pem";
  EXPECT_NE(half_client.Validate().message().find("--leader-etcd-cert and --leader-etcd-key go "
                                                  "together"),
            absl::string_view::npos);
  LeaderKeyConfig client_without_ca = half_client;
  client_without_ca.tls.ca_file.clear();
  client_without_ca.tls.key_file = "/etc/walship/r1.key";
  EXPECT_NE(client_without_ca.Validate().message().find("--leader-etcd-cert needs "
                                                        "--leader-etcd-ca"),
            absl::string_view::npos);

  LeaderKeyConfig user = c;
  user.user = "walship";
  EXPECT_NE(user.Validate().message().find("--leader-etcd-user and --leader-etcd-password-file "
                                           "go together"),
            absl::string_view::npos);
  user.password_file = "/etc/walship/etcd-password";
  EXPECT_TRUE(user.Validate().ok()) << user.Validate();
  LeaderKeyConfig password_only;
  password_only.password_file = "/etc/walship/etcd-password";
  EXPECT_NE(password_only.Validate().message().find("need --leader-etcd"),
            absl::string_view::npos);

  LeaderKeyConfig bad_endpoint = c;
  bad_endpoint.etcd = "etcd1";
  EXPECT_EQ(bad_endpoint.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walship
