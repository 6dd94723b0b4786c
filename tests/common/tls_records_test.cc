// walship's TLS 1.3 receive record layer (common/net/tls_records.h) against
// a real OpenSSL server, through the replica's connection layer
// (TlsConn::Connect): every suite it takes (and the ones it leaves to
// OpenSSL) delivers the server's bytes exactly; a KeyUpdate mid-stream moves
// its keys on; close_notify ends the stream; a record altered in transit is
// kDataLoss with Reason::kChecksum and none of it lands, and no byte of the
// stream, handshake included, can be flipped unnoticed (seeded). And the
// send record layer (the agent's end) read by a plain OpenSSL client.
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net/tls_conn.h"
#include "common/reason.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::net {
namespace {

std::string Pattern(size_t n) {
  std::string s;
  for (int i = 0; s.size() < n; ++i) s += absl::StrCat("wal ", i, ";");
  s.resize(n);
  return s;
}

// Forwards bytes between two sockets in both directions until both ends
// closed; in the server -> client direction, flips the byte at
// `corrupt_at` (if >= 0) of that stream.
void Relay(int client_side, int server_side, long corrupt_at) {
  long from_server = 0;
  bool open[2] = {true, true};
  char buf[65536];
  while (open[0] || open[1]) {
    pollfd p[2] = {{client_side, static_cast<short>(open[0] ? POLLIN : 0), 0},
                   {server_side, static_cast<short>(open[1] ? POLLIN : 0), 0}};
    if (::poll(p, 2, 20000) <= 0) return;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || (p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
      const int to = i == 0 ? server_side : client_side;
      if (n <= 0) {
        open[i] = false;
        ::shutdown(to, SHUT_WR);
        continue;
      }
      if (i == 1 && corrupt_at >= from_server && corrupt_at < from_server + n) {
        buf[corrupt_at - from_server] ^= 0x20;
      }
      if (i == 1) from_server += n;
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = ::write(to, buf + done, static_cast<size_t>(n - done));
        if (w <= 0) return;
        done += w;
      }
    }
  }
}

class TlsRecordsTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    sys::IgnoreSigpipe();
    certs_ = new std::string(testing::FreshTempDir("certs"));
    const std::string cmd =
        absl::StrCat("bash integration/make_test_certs.sh ", *certs_, " r1 >/dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // `who`'s certificate, trusting the test CA.
  static TlsOptions Files(const std::string& who) {
    TlsOptions t;
    t.cert_file = absl::StrCat(*certs_, "/", who, ".pem");
    t.key_file = absl::StrCat(*certs_, "/", who, ".key");
    t.ca_file = absl::StrCat(*certs_, "/ca.pem");
    return t;
  }

 protected:
  // Runs a blocking OpenSSL server (the agent's data context) on one end of
  // a relay and connects the replica's end to the other: the handshake's
  // status (conn_ set when OK). `configure` sets the server's SSL object up
  // before its handshake; `serve` then talks.
  absl::Status Connect(std::function<void(SSL*)> configure, std::function<void(SSL*)> serve,
                       long corrupt_at = -1) {
    int a[2], b[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) != 0 ||
        ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) != 0) {
      return absl::InternalError("socketpair");
    }
    client_fd_ = sys::UniqueFd(a[0]);
    relay_client_ = sys::UniqueFd(a[1]);
    relay_server_ = sys::UniqueFd(b[0]);
    server_fd_ = sys::UniqueFd(b[1]);
    relay_ = std::thread(Relay, relay_client_.get(), relay_server_.get(), corrupt_at);
    auto sctx = DataTlsContext::ForServer(sys::DefaultSysCalls(), DefaultClock(), Files("agent"));
    if (!sctx.ok()) return sctx.status();
    server_ = std::thread([this, sctx = *sctx, configure, serve] {
      SSL* ssl = SSL_new(sctx->get());
      SSL_set_fd(ssl, server_fd_.get());
      configure(ssl);
      if (SSL_accept(ssl) == 1) serve(ssl);
      SSL_free(ssl);
      ::shutdown(server_fd_.get(), SHUT_RDWR);
    });
    ::fcntl(client_fd_.get(), F_SETFL, O_NONBLOCK);
    auto cctx = DataTlsContext::ForClient(sys::DefaultSysCalls(), DefaultClock(), Files("r1"));
    if (!cctx.ok()) return cctx.status();
    io_.io_timeout = absl::Seconds(20);
    auto conn = TlsConn::Connect(sys::DefaultSysCalls(), *cctx, client_fd_.get(), "127.0.0.1",
                                 io_);
    if (!conn.ok()) return conn.status();
    conn_ = std::move(*conn);
    return absl::OkStatus();
  }
  void Start(std::function<void(SSL*)> configure, std::function<void(SSL*)> serve,
             long corrupt_at = -1) {
    absl::Status s = Connect(std::move(configure), std::move(serve), corrupt_at);
    ASSERT_TRUE(s.ok()) << s;
  }
  // The replica's end goes first; the relay then stops, and the server, if
  // still writing, gets EPIPE.
  void Stop() {
    conn_.reset();
    client_fd_ = sys::UniqueFd();
    if (relay_.joinable()) relay_.join();
    ::shutdown(relay_server_.get(), SHUT_RDWR);
    if (server_.joinable()) server_.join();
  }
  void TearDown() override { Stop(); }

  static std::string* certs_;
  sys::UniqueFd client_fd_, relay_client_, relay_server_, server_fd_;
  std::thread relay_, server_;
  sys::TransferOptions io_;
  std::unique_ptr<TlsConn> conn_;
};

std::string* TlsRecordsTest::certs_ = nullptr;

// Writes `data` in pieces of varied sizes (records of 1 byte to 16 KiB);
// false when the peer went away first.
bool WriteInPieces(SSL* ssl, const std::string& data) {
  const size_t sizes[] = {24, 1, 16384, 100000, 7, 50000, 16385};
  for (size_t at = 0, i = 0; at < data.size(); ++i) {
    const size_t n = std::min(sizes[i % 7], data.size() - at);
    if (SSL_write(ssl, data.data() + at, static_cast<int>(n)) != static_cast<int>(n)) {
      return false;
    }
    at += n;
  }
  return true;
}

struct Negotiation {
  const char* name;
  int max_version;      // 0: TLS 1.3
  const char* suites;   // TLS 1.3 suites the server allows
  bool walship_reads;   // whose record layer the replica uses
};

class TlsRecordsSuiteTest : public TlsRecordsTest,
                            public ::testing::WithParamInterface<Negotiation> {};

TEST_P(TlsRecordsSuiteTest, DeliversTheServersBytesExactly) {
  const Negotiation n = GetParam();
  const std::string data = Pattern((3u << 20) + 4321);
  Start(
      [n](SSL* ssl) {
        if (n.max_version != 0) SSL_set_max_proto_version(ssl, n.max_version);
        SSL_set_ciphersuites(ssl, n.suites);
      },
      [data](SSL* ssl) { EXPECT_TRUE(WriteInPieces(ssl, data)); });
  EXPECT_EQ(conn_->DecryptsRecords(), n.walship_reads) << conn_->Describe();
  // A frame header's worth, an odd piece, then the rest through the file
  // path, as the replica's session reads.
  std::string head(24, '\0'), odd(16390, '\0');
  ASSERT_TRUE(conn_->ReadFully(head.data(), head.size(), io_).ok());
  ASSERT_TRUE(conn_->ReadFully(odd.data(), odd.size(), io_).ok());
  const std::string dir = testing::FreshTempDir(n.name);
  sys::UniqueFd dst(::open((dir + "/dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  const size_t rest = data.size() - head.size() - odd.size();
  absl::Status s = conn_->ReceiveToFile(dst.get(), 0, rest, io_);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(head + odd + testing::ReadFile(dir + "/dst"), data);
}

INSTANTIATE_TEST_SUITE_P(
    Suites, TlsRecordsSuiteTest,
    ::testing::Values(Negotiation{"aes128", 0, "TLS_AES_128_GCM_SHA256", true},
                      Negotiation{"aes256", 0, "TLS_AES_256_GCM_SHA384", true},
                      Negotiation{"chacha", 0, "TLS_CHACHA20_POLY1305_SHA256", false},
                      Negotiation{"tls12", TLS1_2_VERSION, "TLS_AES_128_GCM_SHA256", false}),
    [](const ::testing::TestParamInfo<Negotiation>& i) { return std::string(i.param.name); });

TEST_F(TlsRecordsTest, KeyUpdateMidStreamMovesTheKeysOn) {
  // The server updates its keys twice, once asking for ours to follow:
  // every byte after each update still arrives, and the server reads what
  // the replica sends afterwards.
  const std::string data = Pattern(2u << 20);
  // Shared with the server thread, which may outlive a failed assertion.
  auto heard = std::make_shared<std::string>();
  Start([](SSL*) {},
        [data, heard](SSL* ssl) {
          const size_t third = data.size() / 3;
          ASSERT_EQ(SSL_write(ssl, data.data(), static_cast<int>(third)), static_cast<int>(third));
          ASSERT_EQ(SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED), 1);
          ASSERT_EQ(SSL_write(ssl, data.data() + third, static_cast<int>(third)),
                    static_cast<int>(third));
          ASSERT_EQ(SSL_key_update(ssl, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
          const int last = static_cast<int>(data.size() - 2 * third);
          ASSERT_EQ(SSL_write(ssl, data.data() + 2 * third, last), last);
          char buf[5];
          if (SSL_read(ssl, buf, sizeof(buf)) == 5) heard->assign(buf, 5);
        });
  ASSERT_TRUE(conn_->DecryptsRecords());
  std::string got(data.size(), '\0');
  absl::Status s = conn_->ReadFully(got.data(), got.size(), io_);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, data);
  ASSERT_TRUE(conn_->SendFully("hello", 5, false, io_).ok());
  server_.join();
  EXPECT_EQ(*heard, "hello");
}

TEST_F(TlsRecordsTest, CloseNotifyEndsTheStream) {
  Start([](SSL*) {},
        [](SSL* ssl) {
          ASSERT_EQ(SSL_write(ssl, "0123456789", 10), 10);
          SSL_shutdown(ssl);
        });
  ASSERT_TRUE(conn_->DecryptsRecords());
  char buf[10];
  ASSERT_TRUE(conn_->ReadFully(buf, sizeof(buf), io_).ok());
  EXPECT_EQ(std::string(buf, 10), "0123456789");
  absl::Status end = conn_->ReadFully(buf, 1, io_);
  EXPECT_EQ(end.code(), absl::StatusCode::kOutOfRange) << end;
}

TEST_F(TlsRecordsTest, RecordAlteredInTransitIsDataLossAndNoneOfItLands) {
  // One bit flipped 1 MiB into the server's stream (well past the
  // handshake): the record holding it fails authentication.
  const std::string data = Pattern(2u << 20);
  Start([](SSL*) {}, [data](SSL* ssl) { WriteInPieces(ssl, data); }, 1L << 20);
  ASSERT_TRUE(conn_->DecryptsRecords());
  const std::string dir = testing::FreshTempDir("altered");
  sys::UniqueFd dst(::open((dir + "/dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  absl::Status s = conn_->ReceiveToFile(dst.get(), 0, data.size(), io_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kChecksum) << s;
  // What landed is an exact prefix, ending before the altered record.
  const std::string landed = testing::ReadFile(dir + "/dst");
  EXPECT_LT(landed.size(), 1u << 20);
  EXPECT_EQ(landed, data.substr(0, landed.size()));
}

// The agent's end (TlsConn::Server, walship's send record layer under TLS
// 1.3 and AES-GCM) read by a plain OpenSSL client: what walship encrypts is
// standard TLS. `max_version` 0: TLS 1.3.
// OpenSSL's message callback: counts the KeyUpdate messages it reads.
void CountKeyUpdates(int write_p, int /*version*/, int content_type, const void* buf, size_t len,
                     SSL* /*ssl*/, void* arg) {
  if (write_p == 0 && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      static_cast<const uint8_t*>(buf)[0] == SSL3_MT_KEY_UPDATE) {
    ++*static_cast<int*>(arg);
  }
}

// Runs the server side of the handshake on non-blocking `fd`, waiting for
// the socket between steps; returns when it is done or failed.
void AcceptOn(TlsConn& conn, int fd) {
  bool done = false, want_write = false;
  while (!done && conn.AcceptStep(&done, &want_write).ok()) {
    pollfd p = {fd, static_cast<short>(want_write ? POLLOUT : POLLIN), 0};
    if (!done) ::poll(&p, 1, 10000);
  }
}

// Sets *key_updates (when given) to the KeyUpdates the client read.
std::string ServeToOpenSslClient(const std::string& dir, int max_version, bool* walship_sent,
                                 uint64_t records_per_key = RecordWriter::kRecordsPerKey,
                                 int* key_updates = nullptr) {
  const std::string data = Pattern((2u << 20) + 999);
  testing::WriteFile(dir + "/src", data);
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  sys::UniqueFd agent_fd(sv[0]), client_fd(sv[1]);
  ::fcntl(agent_fd.get(), F_SETFL, O_NONBLOCK);
  std::string got;
  std::thread client([&] {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (max_version != 0) SSL_CTX_set_max_proto_version(ctx, max_version);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, client_fd.get());
    if (key_updates != nullptr) {
      SSL_set_msg_callback(ssl, CountKeyUpdates);
      SSL_set_msg_callback_arg(ssl, key_updates);
    }
    if (SSL_connect(ssl) == 1) {
      char buf[70000];
      for (int n; (n = SSL_read(ssl, buf, sizeof(buf))) > 0;) got.append(buf, n);
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  });
  sys::SysCalls& sys = sys::DefaultSysCalls();
  auto ctx = DataTlsContext::ForServer(sys, DefaultClock(), TlsRecordsTest::Files("agent"));
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  (*ctx)->set_records_per_key_for_test(records_per_key);
  auto conn = TlsConn::Server(sys, *ctx, agent_fd.get());
  EXPECT_TRUE(conn.ok());
  AcceptOn(**conn, agent_fd.get());
  *walship_sent = (*conn)->EncryptsRecords();
  sys::TransferOptions io;
  io.io_timeout = absl::Seconds(20);
  // A frame header held back (more) and sent with its payload, then the
  // file, as the shipper sends.
  EXPECT_TRUE((*conn)->SendFully(data.data(), 24, /*more=*/true, io).ok());
  sys::UniqueFd src(::open((dir + "/src").c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE((*conn)->SendFile(src.get(), 24, data.size() - 24, io).ok());
  conn->reset();
  agent_fd = sys::UniqueFd();
  client.join();
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
  return got;
}

TEST_F(TlsRecordsTest, TheAgentUpdatesItsKeysAndOpenSslFollows) {
  // A key per 10 records: 2 MiB of WAL is about 130 records, so OpenSSL
  // reads through a dozen KeyUpdates from walship's writer.
  bool walship_sent = false;
  int key_updates = 0;
  ServeToOpenSslClient(testing::FreshTempDir("rekey"), 0, &walship_sent, 10, &key_updates);
  EXPECT_TRUE(walship_sent);
  EXPECT_GE(key_updates, 10);  // 2 MiB: about 130 records
}

TEST_F(TlsRecordsTest, TheReplicaFollowsTheAgentsKeyUpdates) {
  // Both ends walship's, a key per 7 records.
  const std::string data = Pattern((1u << 20) + 77);
  testing::WriteFile(testing::FreshTempDir("rekey2") + "/src", data);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  sys::UniqueFd agent_fd(sv[0]), replica_fd(sv[1]);
  ::fcntl(agent_fd.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(replica_fd.get(), F_SETFL, O_NONBLOCK);
  sys::SysCalls& sys = sys::DefaultSysCalls();
  auto sctx = DataTlsContext::ForServer(sys, DefaultClock(), Files("agent"));
  ASSERT_TRUE(sctx.ok()) << sctx.status();
  (*sctx)->set_records_per_key_for_test(7);
  std::thread agent([&] {
    auto conn = TlsConn::Server(sys, *sctx, agent_fd.get());
    ASSERT_TRUE(conn.ok());
    AcceptOn(**conn, agent_fd.get());
    EXPECT_TRUE((*conn)->EncryptsRecords());
    sys::TransferOptions io;
    io.io_timeout = absl::Seconds(20);
    EXPECT_TRUE((*conn)->SendFully(data.data(), data.size(), false, io).ok());
  });
  auto cctx = DataTlsContext::ForClient(sys, DefaultClock(), Files("r1"));
  ASSERT_TRUE(cctx.ok()) << cctx.status();
  io_.io_timeout = absl::Seconds(20);
  auto conn = TlsConn::Connect(sys, *cctx, replica_fd.get(), "127.0.0.1", io_);
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_TRUE((*conn)->DecryptsRecords());
  std::string got(data.size(), '\0');
  absl::Status s = (*conn)->ReadFully(got.data(), got.size(), io_);
  agent.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(got == data);
}

TEST_F(TlsRecordsTest, WhatTheAgentEncryptsIsReadByOpenSsl) {
  bool walship_sent = false;
  ServeToOpenSslClient(testing::FreshTempDir("agent13"), 0, &walship_sent);
  EXPECT_TRUE(walship_sent);
  ServeToOpenSslClient(testing::FreshTempDir("agent12"), TLS1_2_VERSION, &walship_sent);
  EXPECT_FALSE(walship_sent);  // TLS 1.2: OpenSSL's record layer
}

TEST_F(TlsRecordsTest, NoAlteredByteGoesUnnoticed) {
  // One byte flipped at a seeded random offset of the server's stream, 40
  // times: in the handshake (the first 8 KiB, half of the draws) or
  // anywhere in the records. Each time the replica's end fails, keeping an
  // exact prefix, or (a byte TLS 1.3 says to ignore, such as a plaintext
  // record's legacy version) delivers every byte exactly.
  const std::string data = Pattern(256u << 10);
  // WALSHIP_TLS_FLIP_SEED replays a run.
  const char* given = std::getenv("WALSHIP_TLS_FLIP_SEED");
  const uint32_t seed = given != nullptr ? static_cast<uint32_t>(std::strtoul(given, nullptr, 10))
                                         : static_cast<uint32_t>(::time(nullptr));
  std::cout << "flip seed " << seed << " (replay with WALSHIP_TLS_FLIP_SEED=" << seed << ")\n";
  std::mt19937 rng(seed);
  int caught = 0;
  for (int i = 0; i < 40; ++i) {
    const long span = i % 2 == 0 ? 8192 : static_cast<long>(data.size()) + 8192;
    const long at = std::uniform_int_distribution<long>(0, span - 1)(rng);
    SCOPED_TRACE(absl::StrCat("seed ", seed, ", byte ", at));
    absl::Status s = Connect([](SSL*) {}, [data](SSL* ssl) { WriteInPieces(ssl, data); }, at);
    if (s.ok()) {
      const std::string dir = testing::FreshTempDir("flip");
      sys::UniqueFd dst(::open((dir + "/dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
      s = conn_->ReceiveToFile(dst.get(), 0, data.size(), io_);
      const std::string landed = testing::ReadFile(dir + "/dst");
      if (s.ok()) {
        EXPECT_EQ(landed, data);
      } else {
        EXPECT_EQ(landed, data.substr(0, landed.size()));
        EXPECT_NE(s.code(), absl::StatusCode::kOk);
      }
    }
    if (!s.ok()) ++caught;
    Stop();
  }
  EXPECT_GE(caught, 30) << "seed " << seed;
}

}  // namespace
}  // namespace walship::net
