// tls.h: mutual TLS for the gRPC control channel.
//
// Both daemons and walship-status speak gRPC either with mutual TLS (every
// side presents a certificate issued by a CA the other side trusts) or, only
// when asked for with --insecure, in plaintext. Choosing neither is an error:
// a control channel that carries data tokens must not be plaintext by
// accident.
//
// Server side: the TLS handshake requests the client's certificate but leaves
// judging it to ClientCertVerifier, which checks the chain against the CA
// bundle with OpenSSL on every call. A call without a certificate, or with one
// that does not chain to the bundle (other CA, expired, not for client use),
// fails with UNAUTHENTICATED and a message that says why, and the refusal is
// reported through a callback (for a log line and a metric). Letting the TLS
// layer refuse would drop the connection before anything above it could say
// why, which at 3 a.m. reads as a network fault.
//
// Client side: the agent's certificate must chain to --tls-ca and name the
// host dialled (or --tls-server-name).
//
// Files are read at start-up: rotating a certificate means replacing the
// files and restarting the daemon (see README, "Rotating certificates").
//
// Files are read and the key file's mode checked through `sys`; validity
// periods are judged at `clock`'s time (the certificates' own and, on the
// server, the clients'), so a test can move a certificate past its expiry
// with a fake clock. Both must outlive the credentials made with them.
#ifndef WALSHIP_COMMON_TLS_H_
#define WALSHIP_COMMON_TLS_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/sys/syscalls.h"

namespace walship {

struct TlsOptions {
  std::string cert_file;    // PEM certificate chain presented to peers
  std::string key_file;     // PEM private key of cert_file
  std::string ca_file;      // PEM bundle of CAs whose certificates are trusted
  std::string server_name;  // client only: name expected in the agent's certificate
  bool insecure = false;    // plaintext gRPC, chosen explicitly

  // kInvalidArgument, naming the flags, unless exactly one of "all three
  // files" and `insecure` is chosen.
  absl::Status Validate() const;
};

// Registers --tls-cert, --tls-key, --tls-ca and --insecure (and, for
// clients, --tls-server-name) writing into `tls`.
void RegisterTlsFlags(FlagSet& flags, TlsOptions* tls, bool client);

// Why a call was refused: `reason` is a short metric label
// (no_client_certificate, untrusted_certificate), `detail` a sentence for the
// log.
using RefusalCallback =
    std::function<void(const std::string& reason, const std::string& detail)>;

// Credentials for a server listening with `tls` (Validate()d). With
// insecure, plaintext credentials and a warning in the log. Otherwise the
// files are read and checked (parseable, key matches certificate, within
// its validity period at clock.Now(); a warning when it expires within 14
// days or the key file is readable by group or others) and every call is
// judged by a ClientCertVerifier that reports refusals to `on_refused`.
// Errors name the file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    sys::SysCalls& sys, Clock& clock, const TlsOptions& tls, RefusalCallback on_refused);

// A channel to `target` with `tls` (Validate()d); the same file checks.
// `args`: more channel arguments (channels whose arguments differ never
// share a connection).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    sys::SysCalls& sys, Clock& clock, const std::string& target, const TlsOptions& tls,
    grpc::ChannelArguments args = grpc::ChannelArguments());

// The PEM texts of `tls`'s three files (Validate()d, not insecure), read
// through `sys` and checked as MakeServerCredentials and MakeChannel check
// them (parseable, key matches certificate, valid at clock.Now()). Errors
// are kInvalidArgument naming the flag and file. For other TLS users of the
// same certificates (the data socket, common/net/tls_conn.h).
struct TlsPems {
  std::string cert;  // the chain presented to peers, leaf first
  std::string key;
  std::string ca;
};
absl::StatusOr<TlsPems> LoadTlsPems(sys::SysCalls& sys, Clock& clock, const TlsOptions& tls);

// Names a client certificate vouches for: its subject CN and DNS SANs, as
// the server's auth context reports them. Empty for a plaintext peer.
std::vector<std::string> PeerCertificateNames(const grpc::AuthContext& auth);

// Judges each call's client certificate against a CA bundle. Thread-safe.
class ClientCertVerifier final : public grpc::AuthMetadataProcessor {
 public:
  // kInvalidArgument if `ca_pem` holds no usable certificate. Validity
  // periods are judged at `clock`'s time, which must outlive the verifier.
  static absl::StatusOr<std::shared_ptr<ClientCertVerifier>> Create(
      const std::string& ca_pem, RefusalCallback on_refused, Clock& clock = DefaultClock());
  ~ClientCertVerifier() override;

  // OK, or why `leaf_pem` (with the rest of the chain the peer sent in
  // `chain_pem`, which may be empty) does not chain to the bundle for client
  // use. Empty leaf_pem: no certificate.
  absl::Status Verify(const std::string& leaf_pem, const std::string& chain_pem) const;

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  struct Store;
  ClientCertVerifier(std::unique_ptr<Store> store, RefusalCallback on_refused, Clock& clock);

  const std::unique_ptr<Store> store_;
  const RefusalCallback on_refused_;
  Clock& clock_;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_TLS_H_
