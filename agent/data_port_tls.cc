#include "agent/data_port_tls.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/net/data_tls_flag.h"
#include "common/reason.h"
#include "common/status_macros.h"

namespace walship::agent {

absl::StatusOr<DataPortTls> MakeDataPortTls(sys::SysCalls& sys, Clock& clock,
                                            const TlsOptions& tls, bool data_tls_on) {
  net::LogDataTlsChoice(sys, "agent", data_tls_on, tls);
  DataPortTls out;
  if (!data_tls_on) return out;
  WALSHIP_ASSIGN_OR_RETURN(out.context, net::DataTlsContext::ForServer(sys, clock, tls));
  WALSHIP_ASSIGN_OR_RETURN(TlsPems pems, LoadTlsPems(sys, clock, tls));
  WALSHIP_ASSIGN_OR_RETURN(out.verifier, ClientCertVerifier::Create(pems.ca, nullptr, clock));
  return out;
}

absl::Status StartTls(sys::SysCalls& sys, const DataPortTls& tls, PendingHello& p) {
  absl::StatusOr<std::unique_ptr<net::TlsConn>> conn =
      net::TlsConn::Server(sys, tls.context, p.fd.get());
  if (!conn.ok()) {
    p.refusal = "tls_handshake";
    return conn.status();
  }
  p.tls = *std::move(conn);
  return absl::OkStatus();
}

absl::Status AdvanceTls(const DataPortTls& tls, PendingHello& p) {
  bool done = false;
  absl::Status s = p.tls->AcceptStep(&done, &p.want_write);
  if (!s.ok()) {
    p.refusal = "tls_handshake";
    return absl::UnavailableError(absl::StrCat(
        s.message(), " (a plaintext client, or one with --data-tls=off, cannot connect to a "
                     "data port with --data-tls=on)"));
  }
  if (!done) return absl::OkStatus();
  const std::string leaf = p.tls->PeerLeafPem();
  absl::Status v = tls.verifier->Verify(leaf, p.tls->PeerChainPem());
  if (!v.ok()) {
    p.refusal = leaf.empty() ? "no_client_certificate" : "untrusted_certificate";
    return absl::UnauthenticatedError(absl::StrCat("data socket TLS: ", v.message()));
  }
  p.fingerprint = net::CertificateFingerprint(leaf);
  p.tls_ready = true;
  return absl::OkStatus();
}

absl::Status CheckDataTlsChoice(bool data_tls_on, walship::v1::DataTls asked) {
  const bool replica_on = asked == walship::v1::DATA_TLS_ON;
  if (replica_on == data_tls_on) return absl::OkStatus();
  if (data_tls_on) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "this agent runs TLS on the data socket (--data-tls=on) but the replica asked for "
            "plaintext (",
            asked == walship::v1::DATA_TLS_UNSPECIFIED
                ? "a replica too old to know --data-tls"
                : "--data-tls=off",
            "); refusing to ship WAL in plaintext: give both the same --data-tls")),
        Reason::kDataTlsMismatch);
  }
  return WithReason(absl::FailedPreconditionError(
                        "the replica asked for TLS on the data socket (--data-tls=on) but this "
                        "agent runs it plaintext (--data-tls=off or --insecure); give both the "
                        "same --data-tls"),
                    Reason::kDataTlsMismatch);
}

}  // namespace walship::agent
