#include "agent/postgres/pg_flush_feed.h"

#include <libpq-fe.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "agent/postgres/pg_client.h"
#include "agent/postgres/pg_stream_protocol.h"

namespace walship::agent {
namespace {

std::string ErrorText(const pg_conn* conn) { return PgMessageText(PQerrorMessage(conn)); }

// The server answered, and said no: an operator must change its
// configuration. Anything else (refused, unreachable, timed out) may pass.
absl::Status ConnectError(const std::string& msg) {
  const bool server_said_no = absl::StrContains(msg, "FATAL") ||
                              absl::StrContains(msg, "ERROR") ||
                              absl::StrContains(msg, "password authentication failed");
  std::string text = absl::StrCat("replication connection: ", msg);
  return server_said_no ? absl::FailedPreconditionError(text) : absl::UnavailableError(text);
}

}  // namespace

PgFlushFeed::PgFlushFeed(PgFlushFeedOptions options)
    : options_(std::move(options)),
      pacer_(options_.status_interval) {}

PgFlushFeed::~PgFlushFeed() { Close(); }

int PgFlushFeed::socket() const { return conn_ != nullptr ? PQsocket(conn_) : -1; }

void PgFlushFeed::set_synchronous(bool synchronous) {
  synchronous_ = synchronous;
  pacer_.set_interval(synchronous ? absl::ZeroDuration() : options_.async_report_interval);
}

int PgFlushFeed::backend_pid() const { return conn_ != nullptr ? PQbackendPID(conn_) : 0; }

void PgFlushFeed::Close() {
  if (conn_ == nullptr) return;
  if (PQstatus(conn_) == CONNECTION_OK && PQputCopyEnd(conn_, nullptr) == 1) PQflush(conn_);
  PQfinish(conn_);
  conn_ = nullptr;
}

absl::Status PgFlushFeed::Fail(absl::Status status) {
  Close();
  failure_ = status;
  return status;
}

absl::Status PgFlushFeed::Start(uint64_t system_id, uint32_t timeline) {
  Close();
  failure_ = absl::OkStatus();
  pacer_ = Pacer<std::pair<pg::Lsn, pg::Lsn>>(options_.status_interval);
  synchronous_ = true;
  // Later keywords override what the expanded conninfo says; the timeout
  // comes first so that the operator's own setting wins.
  const char* keys[] = {"connect_timeout", "dbname", "replication", "application_name",
                        nullptr};
  const char* values[] = {"5", options_.conninfo.c_str(), "true",
                          options_.application_name.c_str(), nullptr};
  pg_conn* c = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (PQstatus(c) != CONNECTION_OK) {
    std::string msg = ErrorText(c);
    PQfinish(c);
    return ConnectError(msg);
  }
  conn_ = c;

  PGresult* res = PQexec(conn_, "IDENTIFY_SYSTEM");
  if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < 3) {
    std::string msg = ErrorText(conn_);
    PQclear(res);
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("replication connection: IDENTIFY_SYSTEM failed: ", msg)));
  }
  uint64_t server_id = 0;
  uint32_t server_tli = 0;
  const bool parsed = absl::SimpleAtoi(PQgetvalue(res, 0, 0), &server_id) &&
                      absl::SimpleAtoi(PQgetvalue(res, 0, 1), &server_tli);
  absl::StatusOr<pg::Lsn> xlogpos = pg::ParseLsn(PQgetvalue(res, 0, 2));
  PQclear(res);
  if (!parsed || !xlogpos.ok()) {
    return Fail(absl::InternalError("replication connection: unparsable IDENTIFY_SYSTEM row"));
  }
  if (server_id != system_id) {
    return Fail(absl::AbortedError(absl::StrCat(
        "replication connection reached cluster ", server_id, ", not ", system_id)));
  }
  if (server_tli != timeline) {
    return Fail(absl::AbortedError(absl::StrCat("replication connection is on timeline ",
                                                server_tli, ", not ", timeline)));
  }
  start_lsn_ = *xlogpos;
  flush_ = start_lsn_;
  const std::string cmd = absl::StrCat("START_REPLICATION PHYSICAL ", pg::FormatLsn(start_lsn_),
                                       " TIMELINE ", timeline);
  res = PQexec(conn_, cmd.c_str());
  if (PQresultStatus(res) != PGRES_COPY_BOTH) {
    std::string msg = ErrorText(conn_);
    PQclear(res);
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("replication connection: ", cmd, ": ", msg)));
  }
  PQclear(res);
  if (PQsetnonblocking(conn_, 1) != 0) {
    return Fail(absl::InternalError("replication connection: cannot make it non-blocking"));
  }
  return absl::OkStatus();
}

absl::StatusOr<pg::Lsn> PgFlushFeed::Drain() {
  if (conn_ == nullptr) {
    return failure_.ok() ? absl::UnavailableError("replication connection is closed")
                         : failure_;
  }
  // A status update the socket could not take at once goes out now.
  if (PQflush(conn_) < 0 || PQconsumeInput(conn_) == 0) {
    return Fail(absl::UnavailableError(
        absl::StrCat("replication connection lost: ", ErrorText(conn_))));
  }
  for (;;) {
    char* buf = nullptr;
    const int n = PQgetCopyData(conn_, &buf, /*async=*/1);
    if (n == 0) break;  // no complete message buffered
    if (n == -1) {
      // The server ended the stream; its reason is in the final result.
      PGresult* res = PQgetResult(conn_);
      std::string msg = PgMessageText(res != nullptr ? PQresultErrorMessage(res) : nullptr);
      PQclear(res);
      return Fail(absl::UnavailableError(absl::StrCat(
          "the server ended replication", msg.empty() ? "" : ": ", msg)));
    }
    if (n < 0) {
      return Fail(absl::UnavailableError(
          absl::StrCat("replication connection lost: ", ErrorText(conn_))));
    }
    absl::StatusOr<pgstream::ServerMessage> m = pgstream::ParseServerMessage(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(buf), static_cast<size_t>(n)));
    PQfreemem(buf);
    if (!m.ok()) return Fail(m.status());
    if (m->wal_end > flush_) flush_ = m->wal_end;
    if (m->reply_requested) pacer_.RequestReply();
  }
  return flush_;
}

absl::Status PgFlushFeed::Report(pg::Lsn write, pg::Lsn flush, absl::Time now) {
  if (conn_ == nullptr) return absl::UnavailableError("replication connection is closed");
  if (!pacer_.ShouldSend({write, flush}, now)) return absl::OkStatus();
  const std::string msg = pgstream::EncodeStandbyStatus(write, flush, /*apply=*/0,
                                                        pgstream::PgTimestamp(now), false);
  if (PQputCopyData(conn_, msg.data(), static_cast<int>(msg.size())) != 1 ||
      PQflush(conn_) < 0) {
    return Fail(absl::UnavailableError(
        absl::StrCat("replication connection: sending a status update: ", ErrorText(conn_))));
  }
  // With a non-blocking connection PQflush may leave bytes queued (1); libpq
  // sends them with the next call, which is soon: every pass of the source
  // thread drains (and so flushes) the connection.
  if (pacer_.Sent({write, flush}, now)) ++reports_paced_;
  ++reports_sent_;
  return absl::OkStatus();
}

}  // namespace walship::agent
