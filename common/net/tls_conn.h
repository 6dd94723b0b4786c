// tls_conn.h: TLS on the data socket, in user space or in the kernel.
//
// The data socket uses the control channel's certificates (TlsOptions,
// common/tls.h) with mutual TLS:
//   - The agent (server) presents --tls-cert and requests a client
//     certificate, but, as on the control channel, does not let the TLS layer
//     judge it: once the handshake is done, the caller judges the peer's
//     certificate with ClientCertVerifier (same CA bundle, same clock) and
//     compares its fingerprint with the identity that obtained the session's
//     token over gRPC, so each refusal is logged and counted with its reason
//     instead of ending as an opaque handshake failure.
//   - The replica (client) presents its certificate and verifies the agent's:
//     it must chain to --tls-ca and name --tls-server-name, or the host
//     dialled (a DNS name, or an IP address in an IP SAN), as gRPC does.
// TLS 1.2 or 1.3; TLS 1.3 suites AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305,
// in that order; no session tickets or resumption.
//
// Kernel TLS: contexts set SSL_OP_ENABLE_KTLS, so when OpenSSL was built with
// it and the kernel offers the "tls" ULP, OpenSSL hands the record layer to
// the kernel after the handshake. TlsConn asks which directions went to the
// kernel (BIO_get_ktls_send / BIO_get_ktls_recv) and picks its path:
//   agent    kernel send: SSL_sendfile (sendfile(2) from the page cache, the
//            kernel encrypts; zero copy). Otherwise pread into one reused
//            buffer, encrypted into records gathered in memory and sent
//            with one send(2) per buffer: with TLS 1.3 and AES-GCM by
//            walship's own send record layer (tls_records.h), with the
//            secret OpenSSL's key-log callback gives; otherwise by
//            SSL_write.
//   replica  kernel receive: splice(2) socket -> pipe -> file, as on a plain
//            socket. Otherwise, with TLS 1.3 and AES-GCM, walship's own
//            receive record layer (tls_records.h: records read ahead and
//            decrypted straight into one reused buffer, a buffer's worth per
//            pwrite); with TLS 1.2 or ChaCha20, SSL_read through that buffer.
// path() says which (DataPath::kKernelTls or kUserspaceTls); Describe()
// names the record layer.
//
// During the handshake, and wherever kernel TLS takes a direction, OpenSSL
// moves bytes through its own socket BIO (the kernel TLS hand-over needs it),
// and those calls do not go through sys::SysCalls. On the userspace path the
// bulk of the bytes does: the agent's records are sent, and the replica's
// read, by this class (tls_records.h, or OpenSSL through the BIOs of
// tls_bio.h); waiting for readiness, pread/pwrite and splice go through it
// too.
//
// Thread-safety: a DataTlsContext is immutable and shared; a TlsConn is used
// by one thread at a time.
#ifndef WALSHIP_COMMON_NET_TLS_CONN_H_
#define WALSHIP_COMMON_NET_TLS_CONN_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/net/data_conn.h"
#include "common/net/tls_bio.h"
#include "common/net/tls_records.h"
#include "common/sys/pipe.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"

struct ssl_ctx_st;
struct ssl_st;

namespace walship::net {

class DataTlsContext {
 public:
  // For the agent's data port: presents tls.cert_file, requests (and leaves
  // to the caller to judge) a client certificate. Files are read and checked
  // as for the control channel (kInvalidArgument naming the flag).
  static absl::StatusOr<std::shared_ptr<DataTlsContext>> ForServer(sys::SysCalls& sys,
                                                                   Clock& clock,
                                                                   const TlsOptions& tls);
  // For the replica: presents its certificate, trusts tls.ca_file.
  static absl::StatusOr<std::shared_ptr<DataTlsContext>> ForClient(sys::SysCalls& sys,
                                                                   Clock& clock,
                                                                   const TlsOptions& tls);
  ~DataTlsContext();
  DataTlsContext(const DataTlsContext&) = delete;
  DataTlsContext& operator=(const DataTlsContext&) = delete;

  ssl_ctx_st* get() const { return ctx_; }
  bool server() const { return server_; }
  // Empty unless the client's TlsOptions named one (--tls-server-name).
  const std::string& server_name() const { return server_name_; }
  // Records walship's send record layer protects under one key before a
  // KeyUpdate (RecordWriter::kRecordsPerKey). Tests lower it, before the
  // context is shared.
  uint64_t records_per_key() const { return records_per_key_; }
  void set_records_per_key_for_test(uint64_t n) { records_per_key_ = n; }

 private:
  DataTlsContext(ssl_ctx_st* ctx, bool server, std::string server_name)
      : ctx_(ctx), server_(server), server_name_(std::move(server_name)) {}
  ssl_ctx_st* const ctx_;
  const bool server_;
  const std::string server_name_;
  uint64_t records_per_key_ = RecordWriter::kRecordsPerKey;
};

// True when this OpenSSL was built with kernel TLS support (the kernel is
// asked at each handshake).
bool OpenSslHasKtls();
// True when the running kernel lists the "tls" ULP as available
// (/proc/sys/net/ipv4/tcp_available_ulp, read through `sys`).
bool KernelOffersTlsUlp(sys::SysCalls& sys);

// "sha256:" and the lowercase hex SHA-256 of a PEM certificate's DER bytes;
// empty if `pem` holds no certificate.
std::string CertificateFingerprint(const std::string& pem);

class TlsConn final : public DataConn {
 public:
  // The agent's end of an accepted socket (`fd`, borrowed, non-blocking).
  // Drive the handshake with AcceptStep.
  static absl::StatusOr<std::unique_ptr<TlsConn>> Server(sys::SysCalls& sys,
                                                         std::shared_ptr<DataTlsContext> ctx,
                                                         int fd);
  // The replica's end: runs the whole handshake on the connected socket `fd`
  // (borrowed, non-blocking), each wait bounded by io.io_timeout, verifying
  // the agent's certificate for `host` (the context's server name if set).
  // kUnavailable when the agent is not reachable or closes; kUnauthenticated
  // when its certificate is not accepted, or it refuses ours.
  static absl::StatusOr<std::unique_ptr<TlsConn>> Connect(sys::SysCalls& sys,
                                                          std::shared_ptr<DataTlsContext> ctx,
                                                          int fd, const std::string& host,
                                                          const sys::TransferOptions& io);
  ~TlsConn() override;

  // One non-blocking step of the server handshake. OK with *done when it
  // completed; OK without *done when it waits for the peer (*want_write:
  // for the socket to take bytes, else for bytes to arrive); kUnavailable
  // when the peer closed or spoke something other than TLS.
  absl::Status AcceptStep(bool* done, bool* want_write);
  // Non-blocking read after the handshake: the bytes read (> 0), or 0 when
  // none are available yet; kUnavailable when the peer closed.
  absl::StatusOr<size_t> ReadSome(void* buf, size_t count);

  // The peer's certificate (PEM) and the rest of the chain it sent; empty
  // when it sent none.
  std::string PeerLeafPem() const;
  std::string PeerChainPem() const;
  // "TLSv1.3 TLS_AES_128_GCM_SHA256, records decrypted by walship", for log
  // lines.
  std::string Describe() const;
  // True when walship's record layer (tls_records.h) decrypts what arrives
  // (the replica's end) or encrypts what is sent (the agent's end).
  bool DecryptsRecords() const { return records_ != nullptr; }
  bool EncryptsRecords() const { return writer_ != nullptr; }

  int fd() const override { return fd_; }
  DataPath path() const override { return path_; }
  bool zerocopy() const override { return path_ == DataPath::kKernelTls; }
  absl::Status SendFully(const void* buf, size_t count, bool more,
                         const sys::TransferOptions& io) override;
  absl::Status ReadFully(void* buf, size_t count, const sys::TransferOptions& io) override;
  absl::Status SendFile(int in_fd, off_t offset, size_t count,
                        const sys::TransferOptions& io) override;
  absl::Status ReceiveToFile(int out_fd, off_t out_offset, size_t count,
                             const sys::TransferOptions& io) override;
  size_t Buffered() const override;

 private:
  TlsConn(sys::SysCalls& sys, std::shared_ptr<DataTlsContext> ctx, ssl_st* ssl, int fd);
  // After the handshake: which path the kernel allows.
  void ChoosePath();
  // Repeats `op` (an OpenSSL call returning > 0 on progress) until it makes
  // progress, waiting for readiness as it asks. 0: clean end of the TLS
  // stream (close_notify).
  template <typename Op>
  absl::StatusOr<size_t> Retry(const char* what, const sys::TransferOptions& io, Op op);
  absl::Status Wait(short events, const char* what, const sys::TransferOptions& io);
  // The error of a failed OpenSSL call that returned `rc`, with context.
  absl::Status Failure(int rc, const char* what);
  // With gathering_: sends the records gathered so far.
  absl::Status Drain(const sys::TransferOptions& io);
  // TLS 1.3 with AES-GCM and the key-log callback's secret: true with the
  // suite and the secret's bytes (walship's record layer takes over);
  // false when OpenSSL's record layer stays. Clears server_secret_.
  bool TakeSecret(uint16_t* suite, std::string* secret);
  // Through records_: > 0 bytes into `buf`, waiting for the socket as
  // needed; 0 at the end of the stream (close_notify).
  absl::StatusOr<size_t> ReadRecords(char* buf, size_t count, const char* what,
                                     const sys::TransferOptions& io);
  // > 0 bytes into `buf` through whichever record layer reads, waiting for
  // the socket as needed; 0 at the end of the stream (close_notify).
  absl::StatusOr<size_t> ReadBlocking(char* buf, size_t count, const char* what,
                                      const sys::TransferOptions& io);
  // Without waiting: bytes already buffered (0 when nothing whole is);
  // errors of the record layer are returned, OpenSSL's are left to the
  // next ReadBlocking.
  absl::StatusOr<size_t> ReadBuffered(char* buf, size_t count);

  sys::SysCalls& sys_;
  const std::shared_ptr<DataTlsContext> ctx_;
  ssl_st* const ssl_;
  const int fd_;
  DataPath path_ = DataPath::kUserspaceTls;
  // The agent's userspace path writes records into `gathered_` (with TLS
  // 1.3 and AES-GCM walship's writer_, otherwise OpenSSL through a BIO of
  // ours) and sends them itself (through sys), a buffer at a time.
  bool gathering_ = false;
  std::vector<char> gathered_;
  std::unique_ptr<RecordWriter> writer_;
  // The replica's userspace path reads the socket through this (tls_bio.h).
  std::optional<ReadAhead> read_ahead_;
  // Or, with TLS 1.3 and AES-GCM, through walship's record layer, keyed by
  // the secret the key-log callback kept in server_secret_ (hex).
  std::unique_ptr<RecordReader> records_;
  std::string server_secret_;
  std::vector<char> buffer_;
  std::optional<sys::Pipe> pipe_;
};

}  // namespace walship::net

#endif  // WALSHIP_COMMON_NET_TLS_CONN_H_
