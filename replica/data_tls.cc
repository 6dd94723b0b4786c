#include "replica/data_tls.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/net/tls_conn.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace walship::replica {

absl::Status CheckAgentDataTls(bool data_tls_on, walship::v1::DataTls agent_says,
                               const std::string& agent) {
  const bool agent_on = agent_says == walship::v1::DATA_TLS_ON;
  if (agent_on == data_tls_on) return absl::OkStatus();
  if (data_tls_on) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "agent ", agent, " does not run TLS on the data socket (",
            agent_says == walship::v1::DATA_TLS_UNSPECIFIED
                ? "it is too old to know --data-tls"
                : "it has --data-tls=off",
            ") but this replica has --data-tls=on; refusing to receive WAL in plaintext: "
            "give both the same --data-tls")),
        Reason::kDataTlsMismatch);
  }
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        "agent ", agent, " runs TLS on the data socket but this replica has "
                        "--data-tls=off; give both the same --data-tls")),
                    Reason::kDataTlsMismatch);
}

absl::StatusOr<std::unique_ptr<net::DataConn>> OpenDataConn(sys::SysCalls& sys, Clock& clock,
                                                            const ReplicaOptions& options,
                                                            int fd, const std::string& host,
                                                            const sys::TransferOptions& io) {
  if (!options.data_tls_on()) {
    return net::MakePlainConn(sys, fd, options.transport, 256u << 10, options.pipe_bytes);
  }
  // The files are read at every connection, as the control channel's are.
  WALSHIP_ASSIGN_OR_RETURN(std::shared_ptr<net::DataTlsContext> ctx,
                           net::DataTlsContext::ForClient(sys, clock, options.tls));
  WALSHIP_ASSIGN_OR_RETURN(std::unique_ptr<net::TlsConn> conn,
                           net::TlsConn::Connect(sys, std::move(ctx), fd, host, io));
  spdlog::info("data socket to {}: {}, data path {}", host, conn->Describe(),
               net::DataPathName(conn->path()));
  return std::unique_ptr<net::DataConn>(std::move(conn));
}

}  // namespace walship::replica
