// WAL fetched over the network (replica/serve.h, replica/fetch.h): the
// server serves only what passes restore's checks, and the client accepts
// only bytes that match the replica's record, whatever the server sends.
#include "replica/fetch.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "replica/restore.h"
#include "replica/serve.h"
#include "replica/state_store.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

using testing::ReadFile;

constexpr char kSeg[] = "000000010000000000000003";
constexpr char kOpen[] = "000000010000000000000007";

void Sum(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/walship.sums", std::ios::app)
      << SegmentSumLine(name, bytes.size(), wire::Crc32c(bytes.data(), bytes.size()));
}

// A PostgreSQL 15 long page header for the first page of a 1 MiB segment.
std::string FirstPage(uint64_t pageaddr) {
  std::string p(8192, '\0');
  auto put = [&](size_t off, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[off + i] = static_cast<char>(v >> (8 * i));
  };
  put(0, 0xD110, 2);             // xlp_magic
  put(2, 0x0002, 2);             // xlp_info: XLP_LONG_HEADER
  put(4, 1, 4);                  // xlp_tli
  put(8, pageaddr, 8);           // xlp_pageaddr
  put(24, 7151234567890ull, 8);  // xlp_sysid
  put(32, 1u << 20, 4);          // xlp_seg_size
  put(36, 8192, 4);              // xlp_xlog_blcksz
  for (size_t i = 40; i < p.size(); ++i) p[i] = static_cast<char>(i * 7);
  return p;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::unique_ptr<v1::WalServe::StubInterface> Stub(uint16_t port) {
  TlsOptions tls;
  tls.insecure = true;
  auto stub = MakeWalServeStub(sys::DefaultSysCalls(), DefaultClock(), absl::StrCat("127.0.0.1:", port), tls);
  EXPECT_TRUE(stub.ok()) << stub.status();
  return std::move(*stub);
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

class FetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTempDir("dest");
    pg_wal_ = testing::FreshTempDir("pg_wal");
    server_ = std::make_unique<WalServer>(sys::DefaultSysCalls(), dir_, &metrics_);
    TlsOptions tls;
    tls.insecure = true;
    ASSERT_TRUE(server_->Start("127.0.0.1:0", tls).ok());
    stub_ = Stub(server_->port());
  }
  absl::StatusOr<FetchedFile> Fetch(const std::string& name) {
    return FetchWalFile(sys::DefaultSysCalls(), *stub_, name, pg_wal_ + "/" + name, Soon(),
                        /*durable=*/true);
  }
  std::string dir_, pg_wal_;
  MetricsRegistry metrics_;
  std::unique_ptr<WalServer> server_;
  std::unique_ptr<v1::WalServe::StubInterface> stub_;
};

TEST_F(FetchTest, ACompleteSegmentArrivesWholeAndVerified) {
  std::string seg(3 << 20, '\0');  // three chunks of the stream
  for (size_t i = 0; i < seg.size(); ++i) seg[i] = static_cast<char>(i * 31 + i / 4096);
  testing::WriteFile(dir_ + "/" + kSeg, seg);
  Sum(dir_, kSeg, seg);
  auto got = Fetch(kSeg);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size, seg.size());
  EXPECT_EQ(got->verified, seg.size());
  EXPECT_EQ(got->pad, 0u);
  EXPECT_TRUE(got->complete);
  EXPECT_TRUE(ReadFile(pg_wal_ + "/" + kSeg) == seg);
  EXPECT_FALSE(Exists(pg_wal_ + "/" + kSeg + ".walship-fetch"));
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("walship_replica_wal_fetches_total{result=\"served\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("walship_replica_wal_fetched_bytes_total 3145728"), std::string::npos)
      << text;
}

TEST_F(FetchTest, ACopyThatFailsItsSumsIsRefusedAndNothingIsWritten) {
  std::string seg(1 << 20, 'w');
  testing::WriteFile(dir_ + "/" + kSeg, seg);
  Sum(dir_, kSeg, seg);
  seg[12345] = 'X';
  testing::WriteFile(dir_ + "/" + kSeg, seg);
  auto got = Fetch(kSeg);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("CRC32C"), absl::string_view::npos) << got.status();
  EXPECT_FALSE(Exists(pg_wal_ + "/" + kSeg));
  EXPECT_FALSE(Exists(pg_wal_ + "/" + kSeg + ".walship-fetch"));
  EXPECT_NE(metrics_.Render().find("walship_replica_wal_fetches_total{result=\"refused\"} 1"),
            std::string::npos)
      << metrics_.Render();
}

TEST_F(FetchTest, UnknownAndHostileNamesAreNotFound) {
  EXPECT_EQ(Fetch("000000010000000000000009").status().code(), absl::StatusCode::kNotFound);
  auto got = FetchWalFile(sys::DefaultSysCalls(), *stub_, "../walship.state",
                          pg_wal_ + "/x", Soon(), false);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_FALSE(Exists(pg_wal_ + "/x"));
}

// The segment being received: its verified bytes, the unverified rest, and
// padding, as restore serves it; Held reports the verified end.
TEST_F(FetchTest, TheSegmentBeingReceivedArrivesPaddedAndHeldReportsItsVerifiedEnd) {
  std::string on_disk = FirstPage(7ull << 20) + std::string(5000, 'u');
  testing::WriteFile(dir_ + "/" + kOpen + ".partial", on_disk);
  std::string seg(1 << 20, 'c');
  testing::WriteFile(dir_ + "/" + kSeg, seg);
  Sum(dir_, kSeg, seg);
  const uint64_t recorded = 8192 + 1000, acked = 8192 + 3000;
  StateStore store(sys::DefaultSysCalls(), dir_);
  ASSERT_TRUE(store.Save(ReplicaState{"pg-7151234567890", Position{kOpen, recorded}, false,
                                      wire::Crc32c(on_disk.data(), recorded)})
                  .ok());
  ProgressFile progress(sys::DefaultSysCalls(), dir_);
  ASSERT_TRUE(progress.Write(ReplicaState{"pg-7151234567890", Position{kOpen, acked}, false,
                                          wire::Crc32c(on_disk.data(), acked)})
                  .ok());
  auto held = FetchHeld(*stub_, Soon());
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->stream_id(), "pg-7151234567890");
  EXPECT_EQ(held->durable().segment(), kOpen);
  EXPECT_EQ(held->durable().offset(), acked);
  EXPECT_FALSE(held->durable_segment_complete());
  EXPECT_EQ(held->segment_size(), 1u << 20);
  ASSERT_EQ(held->files_size(), 1);
  EXPECT_EQ(held->files(0).name(), kSeg);
  EXPECT_EQ(held->files(0).length(), seg.size());

  auto got = Fetch(kOpen);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size, on_disk.size());
  EXPECT_EQ(got->verified, acked);
  EXPECT_EQ(got->pad, (1u << 20) - on_disk.size());
  std::string fetched = ReadFile(pg_wal_ + "/" + kOpen);
  ASSERT_EQ(fetched.size(), 1u << 20);
  EXPECT_TRUE(fetched.substr(0, on_disk.size()) == on_disk);
  EXPECT_EQ(fetched.find_first_not_of('\0', on_disk.size()), std::string::npos);

  // Durable bytes changed on disk: Held and Fetch refuse.
  on_disk[9000] = 'Z';
  testing::WriteFile(dir_ + "/" + kOpen + ".partial", on_disk);
  EXPECT_EQ(FetchHeld(*stub_, Soon()).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Fetch(kOpen).status().code(), absl::StatusCode::kDataLoss);
}

// A server that sends what its script says, whatever the file holds.
class LyingService final : public v1::WalServe::Service {
 public:
  v1::FetchHeader header;
  std::vector<std::string> chunks;
  grpc::Status Fetch(grpc::ServerContext*, const v1::FetchRequest*,
                     grpc::ServerWriter<v1::FetchChunk>* writer) override {
    v1::FetchChunk c;
    *c.mutable_header() = header;
    writer->Write(c);
    for (const std::string& data : chunks) {
      v1::FetchChunk d;
      d.set_data(data);
      writer->Write(d);
    }
    return grpc::Status::OK;
  }
};

class LyingServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = Stub(static_cast<uint16_t>(port));
    target_ = testing::FreshTempDir("pg_wal") + "/" + kSeg;
  }
  void TearDown() override { server_->Shutdown(); }
  absl::Status Fetch() {
    return FetchWalFile(sys::DefaultSysCalls(), *stub_, kSeg, target_, Soon(), true).status();
  }
  void Announce(const std::string& recorded, uint64_t pad = 0) {
    service_.header.set_size(recorded.size());
    service_.header.set_verified(recorded.size());
    service_.header.set_verified_crc32c(wire::Crc32c(recorded.data(), recorded.size()));
    service_.header.set_pad(pad);
  }
  LyingService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::WalServe::StubInterface> stub_;
  std::string target_;
};

TEST_F(LyingServerTest, BytesThatDoNotMatchTheRecordAreRefused) {
  Announce(std::string(4096, 'a'));
  service_.chunks = {std::string(2048, 'a'), std::string(2047, 'a') + "b"};
  absl::Status s = Fetch();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("CRC32C"), absl::string_view::npos) << s;
  EXPECT_FALSE(Exists(target_));
  EXPECT_FALSE(Exists(target_ + ".walship-fetch"));
}

TEST_F(LyingServerTest, FewerOrMoreBytesThanAnnouncedAreRefused) {
  Announce(std::string(4096, 'a'));
  service_.chunks = {std::string(4000, 'a')};
  absl::Status s = Fetch();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("4000 bytes received, 4096 announced"), absl::string_view::npos)
      << s;
  service_.chunks = {std::string(4096, 'a'), "more"};
  s = Fetch();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_FALSE(Exists(target_));
}

TEST_F(LyingServerTest, AHeaderThatContradictsItselfIsRefused) {
  service_.header.set_size(10);
  service_.header.set_verified(20);
  service_.chunks = {std::string(10, 'a')};
  EXPECT_EQ(Fetch().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(Exists(target_));
}

TEST_F(LyingServerTest, MatchingBytesAreAcceptedAndPadded) {
  Announce(std::string(4096, 'a'), 100);
  service_.chunks = {std::string(4096, 'a')};
  ASSERT_TRUE(Fetch().ok());
  EXPECT_EQ(ReadFile(target_), std::string(4096, 'a') + std::string(100, '\0'));
}

// restore --from: the first replica that serves wins; unreachable ones are
// passed over; the exit codes are restore's.
TEST_F(FetchTest, RestoreFromAsksEachReplicaInTurnWithRestoresExitCodes) {
  std::string seg(1 << 20, 'w');
  testing::WriteFile(dir_ + "/" + kSeg, seg);
  Sum(dir_, kSeg, seg);
  TlsOptions tls;
  tls.insecure = true;
  // Nobody listens on the first address (a port this test's server held
  // and released).
  uint16_t dead = 0;
  {
    WalServer other(sys::DefaultSysCalls(), dir_);
    ASSERT_TRUE(other.Start("127.0.0.1:0", tls).ok());
    dead = other.port();
  }
  const std::vector<std::string> from = {absl::StrCat("127.0.0.1:", dead),
                                         absl::StrCat("127.0.0.1:", server_->port())};
  const std::string target = pg_wal_ + "/RECOVERYXLOG";
  std::string why;
  EXPECT_EQ(RestoreFrom(sys::DefaultSysCalls(), DefaultClock(), from, tls, kSeg, target, absl::Seconds(30),
                        &why),
            kRestoreServed)
      << why;
  EXPECT_TRUE(ReadFile(target) == seg);
  EXPECT_EQ(RestoreFrom(sys::DefaultSysCalls(), DefaultClock(), from, tls, "000000010000000000000009", target,
                        absl::Seconds(30), &why),
            kRestoreNotFound)
      << why;
  EXPECT_EQ(RestoreFrom(sys::DefaultSysCalls(), DefaultClock(), {from[0]}, tls, kSeg, target,
                        absl::Seconds(30), &why),
            kRestoreNotFound)
      << why;
  seg[7] = 'X';
  testing::WriteFile(dir_ + "/" + kSeg, seg);
  ASSERT_EQ(unlink(target.c_str()), 0);
  EXPECT_EQ(RestoreFrom(sys::DefaultSysCalls(), DefaultClock(), from, tls, kSeg, target, absl::Seconds(30),
                        &why),
            kRestoreRefused)
      << why;
  EXPECT_NE(why.find("CRC32C"), std::string::npos) << why;
  EXPECT_FALSE(Exists(target));
}

// With mutual TLS (the control channel's flags): a replica certificate for
// server and client use serves a client of the cluster CA, and a client of
// another CA is refused.
TEST(FetchTlsTest, ServedOverMutualTlsOnlyToClientsOfTheClusterCa) {
  const std::string certs = testing::FreshTempDir("certs");
  const std::string other = testing::FreshTempDir("other");
  for (const std::string& d : {certs, other}) {
    const std::string cmd = absl::StrCat("bash integration/make_test_certs.sh ", d,
                                         " --serving-replica=r1 operator >/dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  auto files = [&](const std::string& dir, const std::string& who) {
    TlsOptions t;
    t.cert_file = absl::StrCat(dir, "/", who, ".pem");
    t.key_file = absl::StrCat(dir, "/", who, ".key");
    t.ca_file = absl::StrCat(certs, "/ca.pem");
    return t;
  };
  const std::string dir = testing::FreshTempDir("dest");
  std::string seg(1 << 20, 's');
  testing::WriteFile(dir + "/" + kSeg, seg);
  Sum(dir, kSeg, seg);
  WalServer server(sys::DefaultSysCalls(), dir);
  ASSERT_TRUE(server.Start("127.0.0.1:0", files(certs, "r1")).ok());
  const std::string address = absl::StrCat("127.0.0.1:", server.port());
  const std::string target = testing::FreshTempDir("pg_wal") + "/RECOVERYXLOG";
  std::string why;
  EXPECT_EQ(RestoreFrom(sys::DefaultSysCalls(), DefaultClock(), {address}, files(certs, "operator"), kSeg,
                        target, absl::Seconds(30), &why),
            kRestoreServed)
      << why;
  EXPECT_TRUE(ReadFile(target) == seg);
  ASSERT_EQ(unlink(target.c_str()), 0);
  auto stub = MakeWalServeStub(sys::DefaultSysCalls(), DefaultClock(), address, files(other, "operator"));
  ASSERT_TRUE(stub.ok()) << stub.status();
  auto got = FetchWalFile(sys::DefaultSysCalls(), **stub, kSeg, target, Soon(), false);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnauthenticated) << got.status();
  EXPECT_FALSE(Exists(target));
}

}  // namespace
}  // namespace walship::replica
