// Production operations on the agent, in-process: grpc.health.v1 health
// checking, server reflection, the --allow-replicas list and Prometheus
// metrics served over HTTP.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/agent.h"
#include "google/protobuf/descriptor.pb.h"
#include "gtest/gtest.h"
#include "proto/walship.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "tests/agent/reflection.pb.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

// GET http://127.0.0.1:port/path with a raw socket; returns the whole reply.
std::string HttpGet(uint16_t port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

class OpsTest : public ::testing::Test {
 protected:
  void StartAgent(AgentOptions o) {
    wal_ = testing::FreshTempDir("wal");
    testing::WriteFile(wal_ + "/seg-001", std::string(10000, 'a'));
    testing::WriteFile(wal_ + "/seg-002", "growing");
    o.wal_dir = wal_;
    o.heartbeat = absl::Milliseconds(50);
    o.tls.insecure = true;
    agent_ = std::make_unique<Agent>(sys::DefaultSysCalls(), o);
    absl::Status s = agent_->Start();
    ASSERT_TRUE(s.ok()) << s;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", agent_->control_port()),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (agent_) agent_->Shutdown();
  }
  grpc::Status Handshake(const std::string& name, walship::v1::HandshakeResponse* resp) {
    walship::v1::HandshakeRequest r;
    r.set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
    r.set_replica_name(name);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return walship::v1::Control::NewStub(channel_)->Handshake(&ctx, r, resp);
  }

  std::string wal_;
  std::unique_ptr<Agent> agent_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(OpsTest, HealthCheckReportsServingForTheServerAndTheControlService) {
  StartAgent(AgentOptions{});
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const std::string service : {"", "walship.v1.Control"}) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status s = health->Check(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << "service '" << service << "': " << s.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  EXPECT_EQ(health->Check(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// One request on a ServerReflectionInfo stream, through a generic call: the
// upstream reflection messages are serialized with the wire-compatible
// copies in reflection.proto, so the test does not share the agent's own
// definitions (proto/reflection.proto).
walship::test::reflection::ServerReflectionResponse AskReflection(
    const std::shared_ptr<grpc::Channel>& channel,
    const walship::test::reflection::ServerReflectionRequest& req) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto step = [&cq](intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  walship::test::reflection::ServerReflectionResponse resp;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  EXPECT_TRUE(step(1));
  std::string bytes = req.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  EXPECT_TRUE(step(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  EXPECT_TRUE(step(3));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  if (step(4)) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(in.Dump(&slices).ok());
    std::string reply;
    for (const grpc::Slice& s : slices) {
      reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    EXPECT_TRUE(resp.ParseFromString(reply));
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return resp;
}

TEST_F(OpsTest, ReflectionListsTheServices) {
  StartAgent(AgentOptions{});
  walship::test::reflection::ServerReflectionRequest req;
  req.set_list_services("");
  walship::test::reflection::ServerReflectionResponse resp = AskReflection(channel_, req);
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  EXPECT_NE(std::find(names.begin(), names.end(), "walship.v1.Control"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "grpc.health.v1.Health"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "grpc.reflection.v1alpha.ServerReflection"),
            names.end());
}

TEST_F(OpsTest, ReflectionDescribesTheControlService) {
  StartAgent(AgentOptions{});
  walship::test::reflection::ServerReflectionRequest req;
  req.set_file_containing_symbol("walship.v1.Control");
  walship::test::reflection::ServerReflectionResponse resp = AskReflection(channel_, req);
  ASSERT_FALSE(resp.has_error_response()) << resp.error_response().error_message();
  // The file that defines the service, with its methods, after the files it
  // imports.
  bool found = false;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    for (const auto& service : file.service()) {
      if (file.package() != "walship.v1" || service.name() != "Control") continue;
      found = true;
      std::vector<std::string> methods;
      for (const auto& m : service.method()) methods.push_back(m.name());
      EXPECT_NE(std::find(methods.begin(), methods.end(), "Handshake"), methods.end());
      EXPECT_NE(std::find(methods.begin(), methods.end(), "Session"), methods.end());
    }
  }
  EXPECT_TRUE(found);

  req.set_file_containing_symbol("walship.v1.NoSuchThing");
  resp = AskReflection(channel_, req);
  EXPECT_EQ(resp.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

TEST_F(OpsTest, AllowListRefusesOtherNamesWithPermissionDenied) {
  AgentOptions o;
  o.allow_replicas = {"r1", "r2"};
  StartAgent(o);
  walship::v1::HandshakeResponse resp;
  grpc::Status s = Handshake("intruder", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--allow-replicas")) << s.error_message();
  EXPECT_TRUE(Handshake("r2", &resp).ok());
  EXPECT_EQ(agent_->metrics().Value("walship_agent_handshakes_refused_total",
                                    {{"reason", "not_allowed"}}),
            1);
  EXPECT_EQ(agent_->metrics().Value("walship_agent_handshakes_total", {{"replica", "r2"}}),
            1);
}

TEST_F(OpsTest, EmptyAllowListAllowsEveryName) {
  StartAgent(AgentOptions{});
  walship::v1::HandshakeResponse resp;
  EXPECT_TRUE(Handshake("anyone", &resp).ok());
}

TEST_F(OpsTest, MetricsAreServedOverHttp) {
  AgentOptions o;
  o.metrics_listen = "127.0.0.1:0";
  StartAgent(o);
  ASSERT_NE(agent_->metrics_port(), 0);
  walship::v1::HandshakeResponse resp;
  ASSERT_TRUE(Handshake("r1", &resp).ok());
  std::string reply = HttpGet(agent_->metrics_port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "text/plain; version=0.0.4")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "# TYPE walship_agent_bytes_shipped_total counter"))
      << reply;
  // r1 handshook but never connected: it lags by every shippable byte.
  EXPECT_TRUE(absl::StrContains(reply, "walship_agent_replica_lag_bytes{replica=\"r1\"} 10007"))
      << reply;
  EXPECT_TRUE(absl::StrContains(reply, "walship_agent_source_bytes 10007")) << reply;
}

// A source that failed (here a segment shrank: the directory is not
// append-only) cannot vouch for its bytes: the health check says so, and so
// do the metrics (walship_agent_source_up, walship_agent_replica_stalled).
TEST_F(OpsTest, AFailedSourceIsNotServing) {
  AgentOptions o;
  o.metrics_listen = "127.0.0.1:0";
  StartAgent(o);
  walship::v1::HandshakeResponse resp;
  ASSERT_TRUE(Handshake("r1", &resp).ok());
  testing::WriteFile(wal_ + "/seg-001", std::string(10, 'a'));
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckResponse::ServingStatus status =
      grpc::health::v1::HealthCheckResponse::SERVING;
  for (int i = 0; i < 100 && status == grpc::health::v1::HealthCheckResponse::SERVING; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("walship.v1.Control");
    grpc::health::v1::HealthCheckResponse r;
    grpc::ClientContext ctx;
    ASSERT_TRUE(health->Check(&ctx, req, &r).ok());
    status = r.status();
  }
  EXPECT_EQ(status, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  std::string reply = HttpGet(agent_->metrics_port(), "/metrics");
  EXPECT_TRUE(absl::StrContains(reply, "walship_agent_source_up 0")) << reply;
  EXPECT_TRUE(absl::StrContains(
      reply, "walship_agent_replica_stalled{replica=\"r1\",reason=\"source_failed\"} 1"))
      << reply;
}

}  // namespace
}  // namespace walship::agent
