// The agent's handshake with --format=mysql-binlog: a replica that does not
// apply in-place patches is refused (patch_unsupported); a replica whose
// held prefix of a binlog differs from the source's only in the in-use flag
// (the server closed the binlog since) is accepted, any other difference is
// divergent.
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/mysql/binlog.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "proto/walship.grpc.pb.h"
#include "tests/agent/mysql/binlog_builder.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent::mysql {
namespace {

using testing::BinlogBuilder;
using walship::v1::HandshakeRequest;
using walship::v1::HandshakeResponse;

class MysqlHandshakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = walship::testing::FreshTempDir("mysql-handshake");
    BinlogBuilder one(true, 1700000000, /*in_use=*/false);  // closed by the server
    for (int i = 0; i < 20; ++i) one.Event(2, 400);
    closed_ = one.bytes();
    BinlogBuilder two(true, 0, true);
    two.Event(2, 100);
    walship::testing::WriteFile(dir_ + "/mysql-bin.000001", closed_);
    walship::testing::WriteFile(dir_ + "/mysql-bin.000002", two.bytes());
    walship::testing::WriteFile(dir_ + "/mysql-bin.index",
                                "./mysql-bin.000001\n./mysql-bin.000002\n");
    AgentOptions o;
    o.wal_dir = dir_;
    o.format = "mysql-binlog";
    o.tls.insecure = true;
    agent_ = std::make_unique<Agent>(sys::DefaultSysCalls(), o);
    ASSERT_TRUE(agent_->Start().ok());
    stub_ = walship::v1::Control::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", agent_->control_port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (agent_) agent_->Shutdown();
  }
  // A replica durable at `held.size()` bytes of mysql-bin.000001 holding `held`.
  absl::Status Handshake(const std::string& held, bool applies_patches) {
    HandshakeRequest r;
    r.set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
    r.set_replica_name("r1");
    r.mutable_durable()->set_segment("mysql-bin.000001");
    r.mutable_durable()->set_offset(held.size());
    r.set_durable_prefix_crc32c(wire::Crc32c(held.data(), held.size()));
    r.set_applies_patches(applies_patches);
    HandshakeResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return FromGrpc(stub_->Handshake(&ctx, r, &resp));
  }

  std::string dir_, closed_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<walship::v1::Control::Stub> stub_;
};

TEST_F(MysqlHandshakeTest, AReplicaThatDoesNotApplyPatchesIsRefused) {
  absl::Status s = Handshake(closed_.substr(0, 1000), /*applies_patches=*/false);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kPatchUnsupported) << s;
}

TEST_F(MysqlHandshakeTest, APrefixDifferingOnlyInTheInUseFlagIsAccepted) {
  std::string shipped = closed_.substr(0, 1000);
  shipped[kInUseFlagOffset] = static_cast<char>(shipped[kInUseFlagOffset] | kInUseFlag);
  absl::Status s = Handshake(shipped, true);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Handshake(closed_.substr(0, 1000), true).ok());
}

TEST_F(MysqlHandshakeTest, AnyOtherDifferenceIsDivergent) {
  for (size_t at : {size_t{20}, size_t{22}, size_t{500}}) {
    std::string other = closed_.substr(0, 1000);
    other[at] = static_cast<char>(other[at] ^ 0x01);
    absl::Status s = Handshake(other, true);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << at << ": " << s;
    EXPECT_EQ(ReasonOf(s), Reason::kDivergent) << at << ": " << s;
  }
}

}  // namespace
}  // namespace walship::agent::mysql
