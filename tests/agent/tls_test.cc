// Mutual TLS on the agent's control port, in-process, with certificates
// made by integration/make_test_certs.sh (the documented recipe): who is
// refused, with what status, log line and metric; and the checks on the
// TLS flags and files at start-up.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "common/tls.h"
#include "gtest/gtest.h"
#include "proto/walship.grpc.pb.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/log_capture.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

using testing::ReadFile;

// Two unrelated CAs: `certs_` (the cluster's) and `other_` (a stranger's).
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new std::string(testing::FreshTempDir("certs"));
    other_ = new std::string(testing::FreshTempDir("other"));
    const std::string script = "integration/make_test_certs.sh";
    for (const std::string* d : {certs_, other_}) {
      std::string cmd = absl::StrCat("bash ", script, " ", *d, " r1 operator >/dev/null");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
  }

  void TearDown() override {
    if (agent_) agent_->Shutdown();
  }

  static TlsOptions Files(const std::string& dir, const std::string& who) {
    TlsOptions t;
    t.cert_file = absl::StrCat(dir, "/", who, ".pem");
    t.key_file = absl::StrCat(dir, "/", who, ".key");
    t.ca_file = absl::StrCat(*certs_, "/ca.pem");
    return t;
  }

  void StartAgent() {
    wal_ = testing::FreshTempDir("wal");
    testing::WriteFile(wal_ + "/seg-001", std::string(10000, 'a'));
    AgentOptions o;
    o.wal_dir = wal_;
    o.tls = Files(*certs_, "agent");
    o.allow_replicas = {"r1", "r2"};
    agent_ = std::make_unique<Agent>(sys::DefaultSysCalls(), o);
    absl::Status s = agent_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }

  std::unique_ptr<walship::v1::Control::Stub> Stub(
      std::shared_ptr<grpc::ChannelCredentials> creds) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return walship::v1::Control::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", agent_->control_port()), creds, args));
  }

  static std::shared_ptr<grpc::ChannelCredentials> Creds(const std::string& dir,
                                                         const std::string& who,
                                                         const std::string& ca_dir) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadFile(ca_dir + "/ca.pem");
    if (!who.empty()) {
      o.pem_cert_chain = ReadFile(absl::StrCat(dir, "/", who, ".pem"));
      o.pem_private_key = ReadFile(absl::StrCat(dir, "/", who, ".key"));
    }
    return grpc::SslCredentials(o);
  }

  static grpc::Status CallStatus(walship::v1::Control::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    walship::v1::StatusResponse resp;
    return stub.Status(&ctx, walship::v1::StatusRequest(), &resp);
  }

  static grpc::Status CallHandshake(walship::v1::Control::Stub& stub, const std::string& name) {
    walship::v1::HandshakeRequest r;
    r.set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
    r.set_replica_name(name);
    r.set_data_tls(walship::v1::DATA_TLS_ON);  // the agent's default with TLS
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    walship::v1::HandshakeResponse resp;
    return stub.Handshake(&ctx, r, &resp);
  }

  double Counter(const std::string& family, const std::string& reason) {
    std::string text = agent_->metrics().Render();
    std::string key = absl::StrCat(family, "{reason=\"", reason, "\"} ");
    size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }



  static std::string* certs_;
  static std::string* other_;
  std::string wal_;
  std::unique_ptr<Agent> agent_;
  testing::LogCapture log_;
};

std::string* TlsTest::certs_ = nullptr;
std::string* TlsTest::other_ = nullptr;

constexpr char kRefused[] = "walship_agent_control_calls_rejected_total";

TEST_F(TlsTest, ClientWithCertificateFromTheClusterCaIsServed) {
  StartAgent();
  auto stub = Stub(Creds(*certs_, "operator", *certs_));
  grpc::Status s = CallStatus(*stub);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(CallHandshake(*stub, "operator").error_code() ==
              grpc::StatusCode::PERMISSION_DENIED)
      << "operator is not on the allow-list";
}

TEST_F(TlsTest, ClientWithoutCertificateIsRefusedLoggedAndCounted) {
  StartAgent();
  auto stub = Stub(Creds("", "", *certs_));
  grpc::Status s = CallStatus(*stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "presented no certificate"))
      << s.error_message();
  EXPECT_EQ(Counter(kRefused, "no_client_certificate"), 1);
  EXPECT_TRUE(log_.Logged("refused a call: /walship.v1.Control/Status: the client presented no "
                     "certificate"));
  // A handshake (which would hand out a data token) is refused the same way.
  EXPECT_EQ(CallHandshake(*stub, "r1").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Counter(kRefused, "no_client_certificate"), 2);
}

TEST_F(TlsTest, ClientWithCertificateFromAnotherCaIsRefusedLoggedAndCounted) {
  StartAgent();
  // It trusts the agent (cluster CA) but presents a stranger's certificate.
  auto stub = Stub(Creds(*other_, "r1", *certs_));
  grpc::Status s = CallHandshake(*stub, "r1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "unable to get local issuer certificate"))
      << s.error_message();
  EXPECT_EQ(Counter(kRefused, "untrusted_certificate"), 1);
  EXPECT_TRUE(log_.Logged("refused a call: /walship.v1.Control/Handshake: the client's "
                     "certificate /CN=r1 is not accepted"));
}

TEST_F(TlsTest, ServerCertificateIsNotAClientCertificate) {
  StartAgent();
  // agent.pem is issued for serverAuth only.
  auto stub = Stub(Creds(*certs_, "agent", *certs_));
  grpc::Status s = CallStatus(*stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "unsuitable certificate purpose"))
      << s.error_message();
}

TEST_F(TlsTest, ReplicaNameMustBeInItsCertificate) {
  StartAgent();
  auto stub = Stub(Creds(*certs_, "r1", *certs_));
  EXPECT_TRUE(CallHandshake(*stub, "r1").ok());
  // r2 is on the allow-list, but this certificate is r1's.
  grpc::Status s = CallHandshake(*stub, "r2");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                "replica name r2 is not a name its client certificate "
                                "carries (r1)"))
      << s.error_message();
  EXPECT_EQ(Counter("walship_agent_handshakes_refused_total", "identity_mismatch"), 1);
}

TEST_F(TlsTest, ClientRefusesAnAgentItCannotVerify) {
  StartAgent();
  // A valid client certificate, but it trusts only the other CA.
  auto stub = Stub(Creds(*certs_, "r1", *other_));
  grpc::Status s = CallStatus(*stub);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(TlsTest, PlaintextClientGetsNothing) {
  StartAgent();
  auto stub = walship::v1::Control::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", agent_->control_port()), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(CallStatus(*stub).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, MakeChannelTalksToTheAgent) {
  StartAgent();
  TlsOptions t = Files(*certs_, "r1");
  t.server_name = "localhost";
  auto channel = MakeChannel(sys::DefaultSysCalls(), DefaultClock(),
                             absl::StrCat("127.0.0.1:", agent_->control_port()), t);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = walship::v1::Control::NewStub(*channel);
  EXPECT_TRUE(CallHandshake(*stub, "r1").ok());
}

TEST(TlsOptionsTest, ChoosingNeitherOrBothIsAnError) {
  TlsOptions none;
  absl::Status s = none.Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "--insecure")) << s;
  TlsOptions both;
  both.insecure = true;
  both.cert_file = "x.pem";
  EXPECT_TRUE(absl::IsInvalidArgument(both.Validate()));
  TlsOptions partial;
  partial.cert_file = "x.pem";
  s = partial.Validate();
  EXPECT_TRUE(absl::StrContains(s.message(), "--tls-key, --tls-ca")) << s;
  TlsOptions plain;
  plain.insecure = true;
  EXPECT_TRUE(plain.Validate().ok());
}

TEST_F(TlsTest, BadFilesAreNamedAtStartUp) {
  TlsOptions t = Files(*certs_, "agent");
  t.key_file = absl::StrCat(*certs_, "/r1.key");  // another certificate's key
  auto creds = MakeServerCredentials(sys::DefaultSysCalls(), DefaultClock(), t, nullptr);
  ASSERT_FALSE(creds.ok());
  EXPECT_TRUE(absl::StrContains(creds.status().message(), "does not belong to --tls-cert"))
      << creds.status();

  t = Files(*certs_, "agent");
  t.ca_file = absl::StrCat(*certs_, "/missing.pem");
  creds = MakeServerCredentials(sys::DefaultSysCalls(), DefaultClock(), t, nullptr);
  ASSERT_FALSE(creds.ok());
  EXPECT_TRUE(absl::StrContains(creds.status().message(), "--tls-ca=")) << creds.status();

  t = Files(*certs_, "agent");
  t.cert_file = t.key_file;  // a key where a certificate belongs
  auto channel = MakeChannel(sys::DefaultSysCalls(), DefaultClock(), "127.0.0.1:1", t);
  ASSERT_FALSE(channel.ok());
  EXPECT_TRUE(absl::StrContains(channel.status().message(), "no PEM certificate"))
      << channel.status();
}

// The certificates make_test_certs.sh issues are valid from the moment it
// runs for 825 days; the fake clock puts "now" anywhere in or around that.
TEST_F(TlsTest, ValidityIsJudgedAtTheClocksTime) {
  const TlsOptions t = Files(*certs_, "agent");
  const absl::Time issued = absl::Now();
  auto creds_at = [&](absl::Time now) {
    testing::FakeClock clock(now);
    return MakeServerCredentials(sys::DefaultSysCalls(), clock, t, nullptr);
  };

  auto creds = creds_at(issued + absl::Hours(24 * 30));
  EXPECT_TRUE(creds.ok()) << creds.status();
  EXPECT_FALSE(log_.Logged("expires within 14 days"));

  creds = creds_at(issued + absl::Hours(24 * 820));
  EXPECT_TRUE(creds.ok()) << creds.status();
  EXPECT_TRUE(log_.Logged(absl::StrCat("--tls-cert=", t.cert_file, ": certificate /CN=agent "
                                       "expires within 14 days; rotate it")));

  creds = creds_at(issued + absl::Hours(24 * 830));
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(creds.status().message(),
            absl::StrCat("--tls-cert=", t.cert_file, ": certificate /CN=agent has expired"));

  testing::FakeClock before_issue(issued - absl::Hours(24));
  auto channel =
      MakeChannel(sys::DefaultSysCalls(), before_issue, "127.0.0.1:1", Files(*certs_, "r1"));
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().message(),
            absl::StrCat("--tls-cert=", *certs_, "/r1.pem: certificate /CN=r1 is not valid yet"));
}

TEST_F(TlsTest, VerifierJudgesClientCertificatesAtTheClocksTime) {
  testing::FakeClock clock(absl::Now() + absl::Hours(24 * 30));
  auto verifier = ClientCertVerifier::Create(ReadFile(*certs_ + "/ca.pem"), nullptr, clock);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const std::string r1 = ReadFile(*certs_ + "/r1.pem");
  absl::Status s = (*verifier)->Verify(r1, "");
  EXPECT_TRUE(s.ok()) << s;

  clock.Advance(absl::Hours(24 * 800));
  s = (*verifier)->Verify(r1, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "/CN=r1 is not accepted: certificate has expired"))
      << s;
}

// Stat of the key file reports what a test says.
class KeyModeSysCalls : public sys::RealSysCalls {
 public:
  explicit KeyModeSysCalls(mode_t mode) : mode_(mode) {}
  sys::SysResult Stat(const char* path, struct stat* st) override {
    sys::SysResult r = RealSysCalls::Stat(path, st);
    if (r.ok() && absl::EndsWith(path, ".key")) st->st_mode = S_IFREG | mode_;
    return r;
  }

 private:
  const mode_t mode_;
};

TEST_F(TlsTest, KeyReadableByOthersIsAWarning) {
  const TlsOptions t = Files(*certs_, "agent");
  KeyModeSysCalls private_key(0600);
  EXPECT_TRUE(MakeServerCredentials(private_key, DefaultClock(), t, nullptr).ok());
  EXPECT_FALSE(log_.Logged("is readable by group or others"));

  KeyModeSysCalls shared_key(0644);
  EXPECT_TRUE(MakeServerCredentials(shared_key, DefaultClock(), t, nullptr).ok());
  EXPECT_TRUE(log_.Logged(absl::StrCat("--tls-key=", t.key_file,
                                       " is readable by group or others (mode 644); chmod "
                                       "600 it")));
}

}  // namespace
}  // namespace walship::agent
