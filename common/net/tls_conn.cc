#include "common/net/tls_conn.h"

#include <arpa/inet.h>
#include <cerrno>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net/tls_bio.h"
#include "common/net/tls_records.h"
#include "common/sys/file_util.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"

namespace walship::net {
namespace {

constexpr size_t kBufferBytes = 256u << 10;
constexpr size_t kPipeBytes = 1u << 20;
constexpr size_t kReadAheadBytes = 256u << 10;
// AES-GCM first: the cheapest on CPUs with AES instructions, and what
// kernel TLS offloads.
constexpr char kTls13Suites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

std::vector<X509Ptr> ReadCerts(const std::string& pem) {
  std::vector<X509Ptr> out;
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // the read that ends the loop leaves "no start line"
  return out;
}

std::string PemOf(X509* x) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), x) != 1) return "";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// The newest OpenSSL error as text ("" when the queue is empty), and clears
// the queue.
std::string OpenSslError() {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return "";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Sets the options both ends share; the context is freed on failure.
absl::StatusOr<SSL_CTX*> NewContext(const SSL_METHOD* method, const TlsPems& pems) {
  SSL_CTX* ctx = SSL_CTX_new(method);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslError());
  auto fail = [ctx](const std::string& what) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat("data socket TLS: ", what, ": ",
                                                   OpenSslError()));
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (SSL_CTX_set_ciphersuites(ctx, kTls13Suites) != 1) return fail("TLS 1.3 suites");
  std::vector<X509Ptr> chain = ReadCerts(pems.cert);
  if (chain.empty() || SSL_CTX_use_certificate(ctx, chain[0].get()) != 1) {
    return fail("--tls-cert");
  }
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) return fail("--tls-cert chain");
  }
  BioPtr kb(BIO_new_mem_buf(pems.key.data(), static_cast<int>(pems.key.size())));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr);
  const bool key_ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
                      SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  if (!key_ok) return fail("--tls-key");
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (X509Ptr& ca : ReadCerts(pems.ca)) {
    if (X509_STORE_add_cert(store, ca.get()) != 1) ERR_clear_error();  // a duplicate
  }
  return ctx;
}

// The server asks for a client certificate and accepts whatever arrives:
// the caller judges it after the handshake (ClientCertVerifier), so that a
// refusal can be logged and counted with its reason.
int AcceptAnyCertificate(int /*preverify_ok*/, X509_STORE_CTX* /*ctx*/) { return 1; }

int PollTimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))),
                        INT32_MAX));
}

// The key-log callback of both ends: keeps the server's first application
// traffic secret (hex) in the string the SSL object's app data points to,
// for walship's record layer after the handshake (tls_records.h). Nothing
// is logged.
void KeepServerSecret(const SSL* ssl, const char* line) {
  constexpr absl::string_view kLabel = "SERVER_TRAFFIC_SECRET_0 ";
  auto* keep = static_cast<std::string*>(SSL_get_ex_data(ssl, 0));
  const absl::string_view l(line);
  if (keep == nullptr || !absl::StartsWith(l, kLabel)) return;
  const size_t at = l.rfind(' ');
  const absl::string_view hex = l.substr(at + 1);
  keep->assign(hex.data(), hex.size());
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

// ---- DataTlsContext ----

absl::StatusOr<std::shared_ptr<DataTlsContext>> DataTlsContext::ForServer(
    sys::SysCalls& sys, Clock& clock, const TlsOptions& tls) {
  WALSHIP_ASSIGN_OR_RETURN(TlsPems pems, LoadTlsPems(sys, clock, tls));
  WALSHIP_ASSIGN_OR_RETURN(SSL_CTX * ctx, NewContext(TLS_server_method(), pems));
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, AcceptAnyCertificate);
  SSL_CTX_set_keylog_callback(ctx, KeepServerSecret);
  return std::shared_ptr<DataTlsContext>(new DataTlsContext(ctx, true, ""));
}

absl::StatusOr<std::shared_ptr<DataTlsContext>> DataTlsContext::ForClient(
    sys::SysCalls& sys, Clock& clock, const TlsOptions& tls) {
  WALSHIP_ASSIGN_OR_RETURN(TlsPems pems, LoadTlsPems(sys, clock, tls));
  WALSHIP_ASSIGN_OR_RETURN(SSL_CTX * ctx, NewContext(TLS_client_method(), pems));
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_keylog_callback(ctx, KeepServerSecret);
  return std::shared_ptr<DataTlsContext>(new DataTlsContext(ctx, false, tls.server_name));
}

DataTlsContext::~DataTlsContext() { SSL_CTX_free(ctx_); }

bool KernelOffersTlsUlp(sys::SysCalls& sys) {
  absl::StatusOr<std::string> ulps =
      sys::ReadFileToString(sys, "/proc/sys/net/ipv4/tcp_available_ulp");
  if (!ulps.ok()) return false;
  for (absl::string_view ulp : absl::StrSplit(*ulps, absl::ByAnyChar(" \n"))) {
    if (ulp == "tls") return true;
  }
  return false;
}

bool OpenSslHasKtls() {
#ifdef OPENSSL_NO_KTLS
  return false;
#else
  return true;
#endif
}

std::string CertificateFingerprint(const std::string& pem) {
  std::vector<X509Ptr> certs = ReadCerts(pem);
  if (certs.empty()) return "";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(certs[0].get(), EVP_sha256(), md, &len) != 1) {
    ERR_clear_error();
    return "";
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

// ---- TlsConn: set-up ----

TlsConn::TlsConn(sys::SysCalls& sys, std::shared_ptr<DataTlsContext> ctx, SSL* ssl, int fd)
    : sys_(sys), ctx_(std::move(ctx)), ssl_(ssl), fd_(fd) {}

TlsConn::~TlsConn() {
  SSL_free(ssl_);
  OPENSSL_cleanse(server_secret_.data(), server_secret_.size());
}

absl::StatusOr<std::unique_ptr<TlsConn>> TlsConn::Server(sys::SysCalls& sys,
                                                         std::shared_ptr<DataTlsContext> ctx,
                                                         int fd) {
  SSL* ssl = SSL_new(ctx->get());
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::InternalError("SSL_new for the data socket: " + OpenSslError());
  }
  SSL_set_accept_state(ssl);
  std::unique_ptr<TlsConn> conn(new TlsConn(sys, std::move(ctx), ssl, fd));
  SSL_set_app_data(ssl, &conn->server_secret_);
  return conn;
}

absl::StatusOr<std::unique_ptr<TlsConn>> TlsConn::Connect(sys::SysCalls& sys,
                                                          std::shared_ptr<DataTlsContext> ctx,
                                                          int fd, const std::string& host,
                                                          const sys::TransferOptions& io) {
  const std::string name = ctx->server_name().empty() ? host : ctx->server_name();
  SSL* ssl = SSL_new(ctx->get());
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::InternalError("SSL_new for the data socket: " + OpenSslError());
  }
  std::unique_ptr<TlsConn> conn(new TlsConn(sys, std::move(ctx), ssl, fd));
  SSL_set_app_data(ssl, &conn->server_secret_);
  bool named;
  if (IsIpAddress(name)) {
    named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
  } else {
    named = SSL_set_tlsext_host_name(ssl, name.c_str()) == 1 && SSL_set1_host(ssl, name.c_str()) == 1;
  }
  if (!named) {
    return absl::InvalidArgumentError(
        absl::StrCat("data socket TLS: cannot expect the name ", name, ": ", OpenSslError()));
  }
  absl::StatusOr<size_t> done =
      conn->Retry("TLS handshake with the agent", io, [&] { return SSL_connect(ssl); });
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return absl::UnauthenticatedError(absl::StrCat(
        "data socket: the agent's certificate is not accepted for ", name, ": ",
        X509_verify_cert_error_string(verify),
        " (it must chain to --tls-ca and name the host dialled or --tls-server-name)"));
  }
  if (!done.ok()) return done.status();
  if (*done == 0) return absl::UnavailableError("the agent closed the data socket in the TLS handshake");
  conn->ChoosePath();
  return conn;
}

void TlsConn::ChoosePath() {
  const bool kernel = ctx_->server() ? BIO_get_ktls_send(SSL_get_wbio(ssl_))
                                     : BIO_get_ktls_recv(SSL_get_rbio(ssl_));
  path_ = kernel ? DataPath::kKernelTls : DataPath::kUserspaceTls;
  buffer_.resize(kBufferBytes);
  uint16_t suite = 0;
  std::string secret;
  const bool own = TakeSecret(&suite, &secret) && !kernel;
  const auto bytes =
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
  if (kernel) {
    OPENSSL_cleanse(secret.data(), secret.size());
    return;
  }
  if (ctx_->server()) {
    // Userspace TLS on the sending side: records (16 KiB each) are gathered
    // in `gathered_` and sent in one send(2) per buffer (Drain), not one
    // write per record. The socket BIO stays the read side. With walship's
    // record layer, OpenSSL is left a write side that refuses (tls_records.h
    // says why); otherwise it writes its records into `gathered_`.
    std::unique_ptr<RecordWriter> w;
    if (own) {
      absl::StatusOr<std::unique_ptr<RecordWriter>> made =
          RecordWriter::Create(suite, bytes, ctx_->records_per_key());
      if (made.ok()) w = std::move(*made);
    }
    BIO* b = w != nullptr ? NewRefusingBio() : NewGatherBio(&gathered_);
    if (b != nullptr) {
      gathered_.reserve(kBufferBytes + (kBufferBytes >> 4));
      SSL_set0_wbio(ssl_, b);
      gathering_ = true;
      writer_ = std::move(w);
    }
  } else {
    // On the receiving side, records come from a buffer filled by one
    // read(2) at a time (tls_bio.h says why not OpenSSL's read-ahead). The
    // handshake read exactly what it needed (read-ahead is off), so nothing
    // is left behind in the socket BIO being replaced, and no record under
    // the application keys has been read: walship's record layer starts at
    // sequence number 0.
    if (own) {
      absl::StatusOr<std::unique_ptr<RecordReader>> made =
          RecordReader::Create(sys_, fd_, suite, bytes, kReadAheadBytes);
      if (made.ok()) records_ = std::move(*made);
    }
    if (records_ == nullptr) {
      read_ahead_.emplace(sys_, fd_, kReadAheadBytes);
      if (BIO* rb = NewReadAheadBio(&*read_ahead_)) {
        SSL_set0_rbio(ssl_, rb);
      } else {
        read_ahead_.reset();
      }
    }
  }
  OPENSSL_cleanse(secret.data(), secret.size());
}

bool TlsConn::TakeSecret(uint16_t* suite, std::string* secret) {
  const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_);
  const bool usable = SSL_version(ssl_) == TLS1_3_VERSION && cipher != nullptr &&
                      !SSL_has_pending(ssl_) && !server_secret_.empty();
  if (usable) {
    *suite = SSL_CIPHER_get_protocol_id(cipher);
    *secret = absl::HexStringToBytes(server_secret_);
  }
  OPENSSL_cleanse(server_secret_.data(), server_secret_.size());
  server_secret_.clear();
  return usable && (*suite == kTlsAes128GcmSha256 || *suite == kTlsAes256GcmSha384);
}

absl::StatusOr<size_t> TlsConn::ReadRecords(char* buf, size_t count, const char* what,
                                            const sys::TransferOptions& io) {
  for (;;) {
    bool would_block = false;
    WALSHIP_ASSIGN_OR_RETURN(size_t got, records_->Read(buf, count, &would_block));
    if (records_->TakeUpdateRequest()) {
      // The agent updated its keys and asked us to update ours: OpenSSL
      // sends our KeyUpdate before anything else it sends.
      ERR_clear_error();
      if (SSL_key_update(ssl_, SSL_KEY_UPDATE_NOT_REQUESTED) != 1) {
        return absl::InternalError("data socket TLS: SSL_key_update: " + OpenSslError());
      }
    }
    if (!would_block) return got;
    WALSHIP_RETURN_IF_ERROR(Wait(POLLIN, what, io));
  }
}

absl::Status TlsConn::Drain(const sys::TransferOptions& io) {
  if (!gathering_ || gathered_.empty()) return absl::OkStatus();
  absl::Status s = sys::SendFully(sys_, fd_, gathered_.data(), gathered_.size(), 0, io);
  gathered_.clear();  // keeps the allocation, clears nothing
  return s;
}

absl::Status TlsConn::AcceptStep(bool* done, bool* want_write) {
  *done = false;
  *want_write = false;
  ERR_clear_error();
  const int rc = SSL_accept(ssl_);
  if (rc == 1) {
    *done = true;
    ChoosePath();
    return absl::OkStatus();
  }
  const int err = SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ) return absl::OkStatus();
  if (err == SSL_ERROR_WANT_WRITE) {
    *want_write = true;
    return absl::OkStatus();
  }
  return Failure(rc, "TLS handshake");
}

std::string TlsConn::PeerLeafPem() const {
  X509* x = SSL_get1_peer_certificate(ssl_);
  if (x == nullptr) return "";
  std::string pem = PemOf(x);
  X509_free(x);
  return pem;
}

std::string TlsConn::PeerChainPem() const {
  std::string out;
  STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl_);
  for (int i = 0; chain != nullptr && i < sk_X509_num(chain); ++i) {
    out += PemOf(sk_X509_value(chain, i));
  }
  return out;
}

std::string TlsConn::Describe() const {
  return absl::StrCat(SSL_get_version(ssl_), " ", SSL_get_cipher_name(ssl_),
                      records_ != nullptr   ? ", records decrypted by walship"
                      : writer_ != nullptr ? ", records encrypted by walship"
                                           : "");
}

size_t TlsConn::Buffered() const {
  if (records_ != nullptr) return records_->buffered();
  // Decrypted bytes of the current record, bytes of a record OpenSSL has
  // begun, or bytes read ahead (ciphertext): the socket's queue shows none.
  const size_t pending = static_cast<size_t>(SSL_pending(ssl_)) +
                         (read_ahead_.has_value() ? read_ahead_->buffered() : 0);
  return pending > 0 ? pending : (SSL_has_pending(ssl_) ? 1 : 0);
}

// ---- TlsConn: the I/O loops ----

absl::Status TlsConn::Wait(short events, const char* what, const sys::TransferOptions& io) {
  for (;;) {
    struct pollfd p = {fd_, events, 0};
    sys::SysResult r = sys_.Poll(&p, 1, PollTimeoutMs(io.io_timeout));
    if (!r.ok()) {
      if (r.err == EINTR) continue;
      return sys::ErrnoToStatus(r.err, absl::StrCat(what, ": poll on the data socket"));
    }
    if (r.rc == 0) {
      return absl::UnavailableError(absl::StrCat(what, ": timed out after ",
                                                 absl::FormatDuration(io.io_timeout),
                                                 " waiting for the data socket"));
    }
    return absl::OkStatus();
  }
}

absl::Status TlsConn::Failure(int rc, const char* what) {
  const int saved_errno = errno;
  const int err = SSL_get_error(ssl_, rc);
  std::string detail = OpenSslError();
  if (err == SSL_ERROR_SYSCALL && saved_errno != 0) {
    return sys::ErrnoToStatus(saved_errno, absl::StrCat(what, " on the data socket"));
  }
  if (detail.empty()) detail = "the peer closed the connection";
  return absl::UnavailableError(absl::StrCat(what, " on the data socket failed: ", detail));
}

template <typename Op>
absl::StatusOr<size_t> TlsConn::Retry(const char* what, const sys::TransferOptions& io, Op op) {
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int rc = op();
    if (rc > 0) return static_cast<size_t>(rc);
    const int err = SSL_get_error(ssl_, rc);
    if (err == SSL_ERROR_WANT_READ) {
      WALSHIP_RETURN_IF_ERROR(Wait(POLLIN, what, io));
    } else if (err == SSL_ERROR_WANT_WRITE) {
      WALSHIP_RETURN_IF_ERROR(Wait(POLLOUT, what, io));
    } else if (err == SSL_ERROR_ZERO_RETURN) {
      return 0;
    } else {
      return Failure(rc, what);
    }
  }
}

absl::StatusOr<size_t> TlsConn::ReadSome(void* buf, size_t count) {
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  const int rc = SSL_read_ex(ssl_, buf, count, &got);
  if (rc == 1) return got;
  const int err = SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return 0;
  if (err == SSL_ERROR_ZERO_RETURN) return absl::UnavailableError("closed before sending a frame");
  return Failure(rc, "reading");
}

absl::Status TlsConn::SendFully(const void* buf, size_t count, bool more,
                                const sys::TransferOptions& io) {
  if (writer_ != nullptr) {
    WALSHIP_RETURN_IF_ERROR(writer_->Seal(static_cast<const char*>(buf), count, &gathered_));
    return more ? absl::OkStatus() : Drain(io);
  }
  const char* p = static_cast<const char*>(buf);
  for (size_t done = 0; done < count;) {
    size_t n = 0;
    WALSHIP_ASSIGN_OR_RETURN(size_t ok, Retry("sending", io, [&] {
      return SSL_write_ex(ssl_, p + done, count - done, &n);
    }));
    if (ok == 0) return absl::UnavailableError("the peer closed the TLS stream");
    done += n;
  }
  return more ? absl::OkStatus() : Drain(io);
}

absl::StatusOr<size_t> TlsConn::ReadBlocking(char* buf, size_t count, const char* what,
                                             const sys::TransferOptions& io) {
  if (records_ != nullptr) return ReadRecords(buf, count, what, io);
  size_t n = 0;
  WALSHIP_ASSIGN_OR_RETURN(size_t ok,
                           Retry(what, io, [&] { return SSL_read_ex(ssl_, buf, count, &n); }));
  return ok == 0 ? 0 : n;
}

absl::StatusOr<size_t> TlsConn::ReadBuffered(char* buf, size_t count) {
  if (records_ != nullptr) {
    bool would_block = false;
    return records_->Read(buf, count, &would_block);
  }
  size_t n = 0;
  ERR_clear_error();
  if (SSL_read_ex(ssl_, buf, count, &n) != 1) {
    ERR_clear_error();  // nothing whole yet: the next ReadBlocking reports errors
    return 0;
  }
  return n;
}

absl::Status TlsConn::ReadFully(void* buf, size_t count, const sys::TransferOptions& io) {
  char* p = static_cast<char*>(buf);
  for (size_t done = 0; done < count;) {
    WALSHIP_ASSIGN_OR_RETURN(size_t n, ReadBlocking(p + done, count - done, "reading", io));
    if (n == 0) {
      if (done == 0) return absl::OutOfRangeError("end of stream");
      return absl::UnavailableError(
          absl::StrCat("peer closed mid-read after ", done, " of ", count, " bytes"));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TlsConn::SendFile(int in_fd, off_t offset, size_t count,
                               const sys::TransferOptions& io) {
  if (path_ == DataPath::kKernelTls) {
    for (size_t done = 0; done < count;) {
      ERR_clear_error();
      const ossl_ssize_t n =
          SSL_sendfile(ssl_, in_fd, offset + static_cast<off_t>(done), count - done, 0);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n == 0) {
        return absl::DataLossError(absl::StrCat("source truncated: file ended at offset ",
                                                offset + static_cast<off_t>(done), ", expected ",
                                                offset + static_cast<off_t>(count)));
      } else if (SSL_get_error(ssl_, static_cast<int>(n)) == SSL_ERROR_WANT_WRITE) {
        WALSHIP_RETURN_IF_ERROR(Wait(POLLOUT, "SSL_sendfile", io));
      } else {
        return Failure(static_cast<int>(n), "SSL_sendfile");
      }
    }
    return absl::OkStatus();
  }
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, buffer_.size());
    const off_t at = offset + static_cast<off_t>(done);
    absl::Status r = sys::PreadFully(sys_, in_fd, buffer_.data(), n, at);
    if (absl::IsOutOfRange(r)) {
      return absl::DataLossError(absl::StrCat("source truncated: ", r.message()));
    }
    WALSHIP_RETURN_IF_ERROR(r);
    WALSHIP_RETURN_IF_ERROR(SendFully(buffer_.data(), n, false, io));
    done += n;
  }
  return Drain(io);  // a header sent with `more` and no payload after it
}

absl::Status TlsConn::ReceiveToFile(int out_fd, off_t out_offset, size_t count,
                                    const sys::TransferOptions& io) {
  size_t done = 0;
  // With kernel receive, only what OpenSSL already holds is copied; the
  // rest is spliced.
  const bool splice = path_ == DataPath::kKernelTls;
  while (done < count && (!splice || Buffered() > 0)) {
    const size_t want = std::min(count - done, splice ? Buffered() : buffer_.size());
    WALSHIP_ASSIGN_OR_RETURN(size_t n, ReadBlocking(buffer_.data(), want, "reading", io));
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("peer closed after ", done, " of ", count, " bytes"));
    }
    // A read returns one record (16 KiB) at a time: take every further
    // record already read ahead, so that one pwrite covers the buffer.
    while (!splice && n < want && Buffered() > 0) {
      WALSHIP_ASSIGN_OR_RETURN(size_t more, ReadBuffered(buffer_.data() + n, want - n));
      if (more == 0) break;
      n += more;
    }
    WALSHIP_RETURN_IF_ERROR(
        sys::PwriteFully(sys_, out_fd, buffer_.data(), n, out_offset + static_cast<off_t>(done)));
    done += n;
  }
  if (done == count) return absl::OkStatus();
  if (!pipe_.has_value()) {
    WALSHIP_ASSIGN_OR_RETURN(sys::Pipe p, sys::Pipe::Create(sys_, kPipeBytes));
    pipe_.emplace(std::move(p));
  }
  absl::Status s = sys::SpliceFully(sys_, fd_, *pipe_, out_fd,
                                    out_offset + static_cast<off_t>(done), count - done, io);
  if (!s.ok()) pipe_.reset();
  return s;
}

}  // namespace walship::net
