// TLS on the agent's data port (agent/data_port_tls.h) with real sockets,
// real OpenSSL and certificates made by integration/make_test_certs.sh: the
// replica whose certificate obtained the token is admitted; a client
// without a certificate, with another CA's, with another replica's (holding
// a valid token), or speaking plaintext is refused before anything is sent,
// each with its reason, and the refused token stays usable by its replica.
// Also: the connection layer (common/net/tls_conn.h) moves a file byte for
// byte, on the path this kernel allows.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/data_port_tls.h"
#include "agent/data_server.h"
#include "common/net/tls_conn.h"
#include "common/reason.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/sys/unique_fd.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/scripted_syscalls.h"
#include "tests/fakes/string_recorder.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

constexpr char kAdmitted[] = "admitted";
constexpr char kClosed[] = "closed";

// The data port's refusal reasons, as its on_reject callback reports them.
using Rejections = testing::StringRecorder;

// True when the running kernel offers the "tls" ULP (then OpenSSL may hand
// the record layer to it).
bool KernelOffersTls() {
  return absl::StrContains(testing::ReadFile("/proc/sys/net/ipv4/tcp_available_ulp"), "tls");
}

sys::UniqueFd ConnectTo(uint16_t port) {
  sys::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&server), sizeof(server)), 0);
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

class DataPortTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // OpenSSL writes with write(2): a refused client's write must fail with
    // EPIPE, as in the daemons, not kill the test.
    sys::IgnoreSigpipe();
    certs_ = new std::string(testing::FreshTempDir("certs"));
    other_ = new std::string(testing::FreshTempDir("other"));
    for (const std::string* d : {certs_, other_}) {
      std::string cmd =
          absl::StrCat("bash integration/make_test_certs.sh ", *d, " r1 r2 >/dev/null");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
  }

  // `who`'s certificate from `dir`, trusting the cluster's CA.
  static TlsOptions Files(const std::string& dir, const std::string& who) {
    TlsOptions t;
    t.cert_file = absl::StrCat(dir, "/", who, ".pem");
    t.key_file = absl::StrCat(dir, "/", who, ".key");
    t.ca_file = absl::StrCat(*certs_, "/ca.pem");
    return t;
  }
  static std::string Fingerprint(const std::string& dir, const std::string& who) {
    return net::CertificateFingerprint(testing::ReadFile(absl::StrCat(dir, "/", who, ".pem")));
  }

  void StartServer() {
    DataServerOptions o;
    o.listen = HostPort{"127.0.0.1", 0};
    o.on_reject = [this](const std::string& reason) { rejections_.Add(reason); };
    absl::StatusOr<DataPortTls> tls =
        MakeDataPortTls(sys::DefaultSysCalls(), DefaultClock(), Files(*certs_, "agent"), true);
    ASSERT_TRUE(tls.ok()) << tls.status();
    o.tls = *tls;
    // Stands in for the shipper: one byte, inside TLS, tells the client it
    // was admitted.
    ShipperRunner runner = [](int, net::DataConn* conn, const std::string&, const ShipStart&,
                              ShipperEvents*, const std::atomic<bool>&) {
      if (conn == nullptr) return absl::InternalError("no TLS session");
      sys::TransferOptions io;
      return conn->SendFully("G", 1, false, io);
    };
    server_ = std::make_unique<DataServer>(sys::DefaultSysCalls(), std::move(o), registry_,
                                           std::move(runner));
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
    registry_.CloseAll();
  }

  // A session whose handshake was made with r1's certificate.
  std::string NewHello(std::shared_ptr<ReplicaSession>* session = nullptr) {
    std::string token;
    auto s = registry_.Create("r1", ShipStart{Position{"seg-001", 0}, 0}, "zerocopy",
                              absl::Seconds(30), &token);
    s->BindIdentity(Fingerprint(*certs_, "r1"));
    if (session != nullptr) *session = s;
    return wire::EncodeFrame(wire::FrameType::kHello, s->id(), 0, token);
  }

  // Connects as walship-replica does with `tls`, sends `hello`, and says
  // whether the shipper's byte came back.
  std::string TryAs(const TlsOptions& tls, const std::string& hello) {
    sys::UniqueFd fd = ConnectTo(server_->port());
    auto ctx = net::DataTlsContext::ForClient(sys::DefaultSysCalls(), DefaultClock(), tls);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    sys::TransferOptions io;
    io.io_timeout = absl::Seconds(10);
    auto conn = net::TlsConn::Connect(sys::DefaultSysCalls(), *ctx, fd.get(), "127.0.0.1", io);
    if (!conn.ok()) return absl::StrCat("handshake: ", conn.status().ToString());
    if (!(*conn)->SendFully(hello.data(), hello.size(), false, io).ok()) return kClosed;
    char c = 0;
    absl::Status s = (*conn)->ReadFully(&c, 1, io);
    if (s.ok() && c == 'G') return kAdmitted;
    return kClosed;
  }

  // Plain OpenSSL without a client certificate (walship cannot be made to
  // do that).
  std::string TryWithoutCertificate(const std::string& hello) {
    sys::UniqueFd fd = ConnectTo(server_->port());
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd.get());
    std::string out = kClosed;
    if (SSL_connect(ssl) == 1 &&
        SSL_write(ssl, hello.data(), static_cast<int>(hello.size())) > 0) {
      char c = 0;
      if (SSL_read(ssl, &c, 1) == 1 && c == 'G') out = kAdmitted;
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return out;
  }

  static std::string* certs_;
  static std::string* other_;
  SessionRegistry registry_{sys::DefaultSysCalls()};
  Rejections rejections_;
  std::unique_ptr<DataServer> server_;
};

std::string* DataPortTlsTest::certs_ = nullptr;
std::string* DataPortTlsTest::other_ = nullptr;

using Reasons = std::vector<std::string>;

TEST_F(DataPortTlsTest, AdmitsTheReplicaWhoseCertificateGotTheToken) {
  StartServer();
  std::shared_ptr<ReplicaSession> session;
  const std::string hello = NewHello(&session);
  EXPECT_EQ(TryAs(Files(*certs_, "r1"), hello), kAdmitted);
  EXPECT_EQ(rejections_.All(), Reasons{});
  EXPECT_EQ(session->Snapshot().data_path(), KernelOffersTls() ? "ktls" : "userspace");
}

TEST_F(DataPortTlsTest, TokenPresentedOverAnotherReplicasIdentityIsRefusedAndKept) {
  StartServer();
  const std::string hello = NewHello();  // r1's token
  EXPECT_EQ(TryAs(Files(*certs_, "r2"), hello), kClosed);
  EXPECT_EQ(rejections_.All(), Reasons{"wrong_identity"});
  // Not consumed: r1 still gets in with it.
  EXPECT_EQ(TryAs(Files(*certs_, "r1"), hello), kAdmitted);
}

TEST_F(DataPortTlsTest, ClientWithoutCertificateIsRefused) {
  StartServer();
  const std::string hello = NewHello();
  EXPECT_EQ(TryWithoutCertificate(hello), kClosed);
  EXPECT_EQ(rejections_.All(), Reasons{"no_client_certificate"});
  EXPECT_EQ(TryAs(Files(*certs_, "r1"), hello), kAdmitted);
}

TEST_F(DataPortTlsTest, CertificateFromAnotherCaIsRefused) {
  StartServer();
  const std::string hello = NewHello();
  EXPECT_EQ(TryAs(Files(*other_, "r1"), hello), kClosed);
  EXPECT_EQ(rejections_.All(), Reasons{"untrusted_certificate"});
}

TEST_F(DataPortTlsTest, PlaintextHelloIsRefused) {
  StartServer();
  const std::string hello = NewHello();
  sys::UniqueFd fd = ConnectTo(server_->port());
  ASSERT_EQ(::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(hello.size()));
  char c;
  EXPECT_LE(::recv(fd.get(), &c, 1, 0), 0);
  EXPECT_EQ(rejections_.All(), Reasons{"tls_handshake"});
}

// A loopback TCP listener on an ephemeral port.
struct Listener {
  sys::UniqueFd fd;
  uint16_t port = 0;
};

Listener Listen() {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(lfd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  return Listener{sys::UniqueFd(lfd), ntohs(a.sin_port)};
}

// The agent's end of the connection layer: accepts one connection on
// `listener`, completes the TLS handshake with `tls`, and sends bytes
// [offset, offset + count) of `path` with SendFile; then closes the socket
// (without a close_notify).
void ServeFile(Listener* listener, const TlsOptions& tls, const std::string& path,
               off_t offset, size_t count) {
  sys::SysCalls& sys = sys::DefaultSysCalls();
  sys::TransferOptions io;
  io.io_timeout = absl::Seconds(20);
  sys::UniqueFd fd(::accept4(listener->fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  auto ctx = net::DataTlsContext::ForServer(sys, DefaultClock(), tls);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto conn = net::TlsConn::Server(sys, *ctx, fd.get());
  ASSERT_TRUE(conn.ok());
  bool done = false, want_write = false;
  while (!done) ASSERT_TRUE((*conn)->AcceptStep(&done, &want_write).ok());
  EXPECT_EQ((*conn)->path(),
            KernelOffersTls() ? net::DataPath::kKernelTls : net::DataPath::kUserspaceTls);
  // Userspace TLS 1.3 with AES-GCM: walship's record layer encrypts.
  if (!KernelOffersTls()) {
    EXPECT_TRUE((*conn)->EncryptsRecords()) << (*conn)->Describe();
  }
  sys::UniqueFd src(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE((*conn)->SendFile(src.get(), offset, count, io).ok());
}

std::string WriteRecords(const std::string& dir, size_t at_least) {
  std::string data;
  for (int i = 0; data.size() < at_least; ++i) data += absl::StrCat("record ", i, ";");
  testing::WriteFile(dir + "/src", data);
  return data;
}

TEST_F(DataPortTlsTest, ConnectionLayerMovesAFileByteForByte) {
  // The agent's end (server) sends a file with SendFile; the replica's end
  // lands it with ReceiveToFile.
  const std::string dir = testing::FreshTempDir("files");
  const std::string data = WriteRecords(dir, (3u << 20) + 12345);
  Listener listener = Listen();
  std::thread agent(ServeFile, &listener, Files(*certs_, "agent"), dir + "/src", 100,
                    data.size() - 100);
  sys::UniqueFd fd = ConnectTo(listener.port);
  sys::TransferOptions io;
  io.io_timeout = absl::Seconds(20);
  // The replica's end through a recording seam (nothing scripted: every
  // call is the real one).
  sys::ScriptedSysCalls replica_sys;
  auto ctx = net::DataTlsContext::ForClient(replica_sys, DefaultClock(), Files(*certs_, "r1"));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto conn = net::TlsConn::Connect(replica_sys, *ctx, fd.get(), "127.0.0.1", io);
  ASSERT_TRUE(conn.ok()) << conn.status();
  sys::UniqueFd dst(::open((dir + "/dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  absl::Status got = (*conn)->ReceiveToFile(dst.get(), 7, data.size() - 100, io);
  agent.join();
  ASSERT_TRUE(got.ok()) << got;
  EXPECT_EQ(testing::ReadFile(dir + "/dst").substr(7), data.substr(100));
  if (!KernelOffersTls()) {
    // Userspace TLS 1.3 with AES-GCM: walship's record layer reads
    // (common/net/tls_records.h), not OpenSSL's.
    EXPECT_TRUE((*conn)->DecryptsRecords()) << (*conn)->Describe();
    // After the handshake the socket is read through the seam, a buffer at
    // a time, not by OpenSSL.
    size_t socket_reads = 0;
    for (const auto& c : replica_sys.calls(sys::ScriptedSysCalls::Op::kRead)) {
      if (c.fd == fd.get()) {
        ++socket_reads;
        EXPECT_EQ(c.len, 256u << 10);
      }
    }
    EXPECT_GT(socket_reads, 0u);
  }
}

TEST_F(DataPortTlsTest, ConnectionLayerReportsAPeerGoneMidStreamAsUnavailable) {
  // The agent's end sends 1 MiB and closes the socket without a
  // close_notify; the replica's end expected 2 MiB. It must end with
  // kUnavailable once the bytes run out, not wait for its I/O timeout.
  const std::string dir = testing::FreshTempDir("cut");
  const std::string data = WriteRecords(dir, 1u << 20);
  Listener listener = Listen();
  std::thread agent(ServeFile, &listener, Files(*certs_, "agent"), dir + "/src", 0, 1u << 20);
  sys::UniqueFd fd = ConnectTo(listener.port);
  sys::TransferOptions io;
  io.io_timeout = absl::Seconds(60);
  auto ctx = net::DataTlsContext::ForClient(sys::DefaultSysCalls(), DefaultClock(),
                                            Files(*certs_, "r1"));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto conn = net::TlsConn::Connect(sys::DefaultSysCalls(), *ctx, fd.get(), "127.0.0.1", io);
  ASSERT_TRUE(conn.ok()) << conn.status();
  sys::UniqueFd dst(::open((dir + "/dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  absl::Status got = (*conn)->ReceiveToFile(dst.get(), 0, 2u << 20, io);
  agent.join();
  EXPECT_EQ(got.code(), absl::StatusCode::kUnavailable) << got;
  EXPECT_EQ(got.message().find("timed out"), absl::string_view::npos) << got;
  // What arrived before the cut was landed byte for byte.
  EXPECT_EQ(testing::ReadFile(dir + "/dst").substr(0, 1u << 20), data.substr(0, 1u << 20));
}

TEST(DataTlsChoiceTest, AgreementPassesAndEveryMismatchIsAFailedPreconditionWithItsReason) {
  EXPECT_TRUE(CheckDataTlsChoice(true, walship::v1::DATA_TLS_ON).ok());
  EXPECT_TRUE(CheckDataTlsChoice(false, walship::v1::DATA_TLS_OFF).ok());
  // An older replica (field unset) speaks plaintext.
  EXPECT_TRUE(CheckDataTlsChoice(false, walship::v1::DATA_TLS_UNSPECIFIED).ok());
  for (auto [agent_on, asked, says] :
       {std::make_tuple(true, walship::v1::DATA_TLS_OFF, "--data-tls=off"),
        std::make_tuple(true, walship::v1::DATA_TLS_UNSPECIFIED, "too old"),
        std::make_tuple(false, walship::v1::DATA_TLS_ON, "asked for TLS")}) {
    absl::Status s = CheckDataTlsChoice(agent_on, asked);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(ReasonOf(s), Reason::kDataTlsMismatch) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), says)) << s;
  }
}

}  // namespace
}  // namespace walship::agent
