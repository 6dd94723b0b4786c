// data_tls_flag.h: --data-tls, whether the data socket uses TLS.
//
//   --data-tls=on    TLS on the data socket (tls_conn.h) with the control
//                    channel's certificates. Requires them: kInvalidArgument
//                    with --insecure.
//   --data-tls=off   plaintext data socket. With TLS on the control channel
//                    this is logged as a warning at start-up: every byte of
//                    WAL crosses the network readable.
//   (unset)          on whenever the control channel uses TLS, off with
//                    --insecure (which keeps everything plaintext).
// Agent and replica must agree; the handshake checks it (wire_format.md,
// "TLS on the data socket").
#ifndef WALSHIP_COMMON_NET_DATA_TLS_FLAG_H_
#define WALSHIP_COMMON_NET_DATA_TLS_FLAG_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "common/sys/syscalls.h"
#include "common/tls.h"

namespace walship::net {

// Registers --data-tls writing the raw value into `value` ("" when unset).
void RegisterDataTlsFlag(FlagSet& flags, std::string* value);

// True for TLS on the data socket; kInvalidArgument for a value other than
// "", "on" and "off", or "on" with tls.insecure.
absl::StatusOr<bool> ResolveDataTls(const std::string& value, const TlsOptions& tls);

// The start-up line: which path the data socket will use ("ktls" when this
// OpenSSL has kernel TLS and the kernel, asked through `sys`, offers the tls
// ULP; else "userspace"; "off"), and the plaintext warning when the control
// channel is TLS but the data socket is not. `who` is "agent" or "replica".
// Each connection logs the path it actually got.
void LogDataTlsChoice(sys::SysCalls& sys, const char* who, bool data_tls,
                      const TlsOptions& tls);

}  // namespace walship::net

#endif  // WALSHIP_COMMON_NET_DATA_TLS_FLAG_H_
