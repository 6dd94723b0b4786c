#include "common/net/data_tls_flag.h"

#include "absl/strings/str_cat.h"
#include "common/net/tls_conn.h"
#include "spdlog/spdlog.h"

namespace walship::net {

void RegisterDataTlsFlag(FlagSet& flags, std::string* value) {
  flags.String("data-tls", value,
               "on: the data socket (WAL bytes) uses TLS with the --tls-* certificates, "
               "mutual; kernel TLS with SSL_sendfile/splice (zero copy) when the kernel offers "
               "the tls ULP, otherwise TLS in user space (a copy through one buffer). off: the "
               "data socket is plaintext (a warning when the control channel is TLS). Default: "
               "on unless --insecure. Agent and replica must agree (refused at handshake).");
}

absl::StatusOr<bool> ResolveDataTls(const std::string& value, const TlsOptions& tls) {
  if (value.empty()) return !tls.insecure;
  if (value == "off") return false;
  if (value != "on") {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-tls must be on or off, not \"", value, "\""));
  }
  if (tls.insecure) {
    return absl::InvalidArgumentError(
        "--data-tls=on needs the --tls-cert, --tls-key and --tls-ca certificates; "
        "--insecure keeps everything plaintext");
  }
  return true;
}

void LogDataTlsChoice(sys::SysCalls& sys, const char* who, bool data_tls,
                      const TlsOptions& tls) {
  if (data_tls) {
    const bool kernel = OpenSslHasKtls() && KernelOffersTlsUlp(sys);
    spdlog::info("{}: data socket TLS on (mutual, the --tls-* certificates), path {}", who,
                 kernel ? "ktls (kernel TLS: SSL_sendfile / splice, zero copy)"
                        : absl::StrCat("userspace (TLS through one buffer: ",
                                       OpenSslHasKtls() ? "the kernel offers no tls ULP"
                                                        : "OpenSSL built without kernel TLS",
                                       ")"));
  } else if (!tls.insecure) {
    spdlog::warn("{}: --data-tls=off: the control channel uses TLS but the data socket is "
                 "plaintext: every WAL byte crosses the network readable by anyone on the path",
                 who);
  } else {
    spdlog::info("{}: data socket plaintext (--insecure)", who);
  }
}

}  // namespace walship::net
