#include "common/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/sys/file_util.h"
#include "common/sys/syscalls.h"
#include "spdlog/spdlog.h"

namespace walship {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using StackPtr = std::unique_ptr<STACK_OF(X509), StackFree>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in a PEM text, in order.
std::vector<X509Ptr> ReadCerts(const std::string& pem) {
  std::vector<X509Ptr> out;
  BioPtr bio = MemBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    out.emplace_back(x);
  }
  ERR_clear_error();  // the read that ends the loop leaves "no start line"
  return out;
}

std::string SubjectOf(X509* x) {
  char buf[512];
  X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof buf);
  return buf;
}

absl::StatusOr<std::string> ReadPemFile(sys::SysCalls& sys, const std::string& flag,
                                        const std::string& path) {
  auto text = sys::ReadFileToString(sys, path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": ", text.status().message()));
  }
  return text;
}

struct Pems {
  std::string cert, key, ca;
};

// Reads the three files and checks what a TLS handshake would otherwise
// report only as an opaque failure: each parses, the key belongs to the
// certificate, the certificate is within its validity period at `clock`'s
// time.
absl::StatusOr<Pems> LoadPems(sys::SysCalls& sys, Clock& clock, const TlsOptions& tls) {
  Pems p;
  auto cert = ReadPemFile(sys, "tls-cert", tls.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile(sys, "tls-key", tls.key_file);
  if (!key.ok()) return key.status();
  auto ca = ReadPemFile(sys, "tls-ca", tls.ca_file);
  if (!ca.ok()) return ca.status();
  p.cert = *std::move(cert);
  p.key = *std::move(key);
  p.ca = *std::move(ca);

  std::vector<X509Ptr> chain = ReadCerts(p.cert);
  if (chain.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert=", tls.cert_file, ": no PEM certificate in the file"));
  }
  if (ReadCerts(p.ca).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca=", tls.ca_file, ": no PEM certificate in the file"));
  }
  BioPtr kb = MemBio(p.key);
  PkeyPtr pkey(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!pkey) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key=", tls.key_file, ": no unencrypted PEM private key in the file"));
  }
  if (X509_check_private_key(chain[0].get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls-key=", tls.key_file,
                                                   " does not belong to --tls-cert=",
                                                   tls.cert_file));
  }
  X509* leaf = chain[0].get();
  time_t now = absl::ToTimeT(clock.Now());
  if (X509_cmp_time(X509_get0_notAfter(leaf), &now) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert=", tls.cert_file, ": certificate ", SubjectOf(leaf), " has expired"));
  }
  if (X509_cmp_time(X509_get0_notBefore(leaf), &now) >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert=", tls.cert_file,
                                                   ": certificate ", SubjectOf(leaf),
                                                   " is not valid yet"));
  }
  time_t soon = now + 14 * 24 * 3600;
  if (X509_cmp_time(X509_get0_notAfter(leaf), &soon) <= 0) {
    spdlog::warn("--tls-cert={}: certificate {} expires within 14 days; rotate it",
                 tls.cert_file, SubjectOf(leaf));
  }
  struct stat st;
  if (sys.Stat(tls.key_file.c_str(), &st).ok() && (st.st_mode & 077) != 0) {
    spdlog::warn("--tls-key={} is readable by group or others (mode {:o}); chmod 600 it",
                 tls.key_file, st.st_mode & 0777);
  }
  return p;
}

}  // namespace

absl::Status TlsOptions::Validate() const {
  const bool any = !cert_file.empty() || !key_file.empty() || !ca_file.empty();
  if (insecure && any) {
    return absl::InvalidArgumentError(
        "--insecure contradicts --tls-cert/--tls-key/--tls-ca; choose one");
  }
  if (insecure) return absl::OkStatus();
  if (!any) {
    return absl::InvalidArgumentError(
        "the gRPC control channel needs --tls-cert, --tls-key and --tls-ca for mutual "
        "TLS, or --insecure to run it in plaintext");
  }
  std::vector<std::string> missing;
  if (cert_file.empty()) missing.push_back("--tls-cert");
  if (key_file.empty()) missing.push_back("--tls-key");
  if (ca_file.empty()) missing.push_back("--tls-ca");
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mutual TLS needs ", absl::StrJoin(missing, ", "), " as well"));
  }
  return absl::OkStatus();
}

void RegisterTlsFlags(FlagSet& flags, TlsOptions* tls, bool client) {
  flags.String("tls-cert", &tls->cert_file,
               "PEM certificate (chain) this side presents on the gRPC control channel; "
               "with --tls-key and --tls-ca turns on mutual TLS.");
  flags.String("tls-key", &tls->key_file, "PEM private key of --tls-cert (keep it mode 600).");
  flags.String("tls-ca", &tls->ca_file,
               client ? "PEM bundle of the CAs the agent's certificate must chain to."
                      : "PEM bundle of the CAs client certificates must chain to; others "
                        "are refused (UNAUTHENTICATED, logged and counted).");
  if (client) {
    flags.String("tls-server-name", &tls->server_name,
                 "Name the agent's certificate must carry; default: the host part of "
                 "--agent.");
  }
  flags.Bool("insecure", &tls->insecure,
             "Run the gRPC control channel in plaintext (no TLS); must be asked for "
             "explicitly and logs a warning.");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    sys::SysCalls& sys, Clock& clock, const TlsOptions& tls, RefusalCallback on_refused) {
  if (absl::Status s = tls.Validate(); !s.ok()) return s;
  if (tls.insecure) {
    spdlog::warn("--insecure: the gRPC control channel is plaintext and unauthenticated; "
                 "anyone who reaches the control port can obtain data tokens");
    return grpc::InsecureServerCredentials();
  }
  auto pems = LoadPems(sys, clock, tls);
  if (!pems.ok()) return pems.status();
  auto verifier = ClientCertVerifier::Create(pems->ca, std::move(on_refused), clock);
  if (!verifier.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca=", tls.ca_file, ": ", verifier.status().message()));
  }
  grpc::SslServerCredentialsOptions opts(
      GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  opts.pem_root_certs = pems->ca;
  opts.pem_key_cert_pairs.push_back({pems->key, pems->cert});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(opts);
  creds->SetAuthMetadataProcessor(*verifier);
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(sys::SysCalls& sys, Clock& clock,
                                                           const std::string& target,
                                                           const TlsOptions& tls,
                                                           grpc::ChannelArguments args) {
  if (absl::Status s = tls.Validate(); !s.ok()) return s;
  if (tls.insecure) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  auto pems = LoadPems(sys, clock, tls);
  if (!pems.ok()) return pems.status();
  grpc::SslCredentialsOptions opts;
  opts.pem_root_certs = pems->ca;
  opts.pem_private_key = pems->key;
  opts.pem_cert_chain = pems->cert;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(opts), args);
}

absl::StatusOr<TlsPems> LoadTlsPems(sys::SysCalls& sys, Clock& clock, const TlsOptions& tls) {
  auto pems = LoadPems(sys, clock, tls);
  if (!pems.ok()) return pems.status();
  return TlsPems{std::move(pems->cert), std::move(pems->key), std::move(pems->ca)};
}

std::vector<std::string> PeerCertificateNames(const grpc::AuthContext& auth) {
  std::vector<std::string> out;
  for (const char* prop : {"x509_common_name", "x509_subject_alternative_name"}) {
    for (const grpc::string_ref& v : auth.FindPropertyValues(prop)) {
      std::string name(v.data(), v.size());
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
  }
  return out;
}

struct ClientCertVerifier::Store {
  X509_STORE* store = nullptr;
  ~Store() { X509_STORE_free(store); }
};

absl::StatusOr<std::shared_ptr<ClientCertVerifier>> ClientCertVerifier::Create(
    const std::string& ca_pem, RefusalCallback on_refused, Clock& clock) {
  std::vector<X509Ptr> cas = ReadCerts(ca_pem);
  if (cas.empty()) return absl::InvalidArgumentError("no PEM certificate in the CA bundle");
  auto store = std::make_unique<Store>();
  store->store = X509_STORE_new();
  for (X509Ptr& ca : cas) {
    if (X509_STORE_add_cert(store->store, ca.get()) != 1) {
      ERR_clear_error();  // a duplicate in the bundle is harmless
    }
  }
  return std::shared_ptr<ClientCertVerifier>(
      new ClientCertVerifier(std::move(store), std::move(on_refused), clock));
}

ClientCertVerifier::ClientCertVerifier(std::unique_ptr<Store> store,
                                       RefusalCallback on_refused, Clock& clock)
    : store_(std::move(store)), on_refused_(std::move(on_refused)), clock_(clock) {}

ClientCertVerifier::~ClientCertVerifier() = default;

absl::Status ClientCertVerifier::Verify(const std::string& leaf_pem,
                                        const std::string& chain_pem) const {
  if (leaf_pem.empty()) {
    return absl::UnauthenticatedError(
        "the client presented no certificate; this agent requires mutual TLS "
        "(--tls-cert/--tls-key on the client)");
  }
  std::vector<X509Ptr> leaf = ReadCerts(leaf_pem);
  if (leaf.empty()) {
    return absl::UnauthenticatedError("the client's certificate could not be parsed");
  }
  StackPtr untrusted(sk_X509_new_null());
  for (X509Ptr& x : ReadCerts(chain_pem)) {
    if (X509_cmp(x.get(), leaf[0].get()) == 0) continue;
    sk_X509_push(untrusted.get(), x.release());
  }
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store_->store, leaf[0].get(),
                                  untrusted.get()) != 1) {
    ERR_clear_error();
    return absl::InternalError("cannot set up certificate verification");
  }
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  X509_STORE_CTX_set_time(ctx.get(), 0, absl::ToTimeT(clock_.Now()));
  const int ok = X509_verify_cert(ctx.get());
  const int err = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  if (ok == 1) return absl::OkStatus();
  return absl::UnauthenticatedError(
      absl::StrCat("the client's certificate ", SubjectOf(leaf[0].get()),
                   " is not accepted: ", X509_verify_cert_error_string(err),
                   " (it must be issued for client use by a CA in --tls-ca)"));
}

grpc::Status ClientCertVerifier::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* /*consumed_auth_metadata*/,
                                         OutputMetadata* /*response_metadata*/) {
  auto first = [&](const char* prop) {
    std::vector<grpc::string_ref> v = context->FindPropertyValues(prop);
    return v.empty() ? std::string() : std::string(v[0].data(), v[0].size());
  };
  const std::string leaf = first("x509_pem_cert");
  absl::Status s = Verify(leaf, first("x509_pem_cert_chain"));
  if (s.ok()) return grpc::Status::OK;
  std::string method;
  if (auto it = auth_metadata.find(":path"); it != auth_metadata.end()) {
    method = std::string(it->second.data(), it->second.size());
  }
  const bool none = leaf.empty();  // Verify's first refusal
  if (on_refused_) {
    on_refused_(none ? "no_client_certificate" : "untrusted_certificate",
                method.empty() ? std::string(s.message())
                               : absl::StrCat(method, ": ", s.message()));
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(s.message()));
}

}  // namespace walship
