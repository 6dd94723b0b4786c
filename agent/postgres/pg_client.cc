#include "agent/postgres/pg_client.h"

#include <libpq-fe.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walship::agent {

PgClient::PgClient(std::string conninfo) : conninfo_(std::move(conninfo)) {}

PgClient::~PgClient() { Disconnect(); }

void PgClient::Disconnect() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
}

absl::Status PgClient::Connect() {
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  Disconnect();
  std::string info = conninfo_;
  if (!absl::StrContains(info, "connect_timeout")) absl::StrAppend(&info, " connect_timeout=5");
  if (!absl::StrContains(info, "application_name")) {
    absl::StrAppend(&info, " application_name=walship-agent");
  }
  pg_conn* c = PQconnectdb(info.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string msg = PgMessageText(PQerrorMessage(c));
    PQfinish(c);
    return absl::UnavailableError(absl::StrCat("cannot connect to PostgreSQL: ", msg));
  }
  conn_ = c;
  return absl::OkStatus();
}

absl::StatusOr<PgClient::Rows> PgClient::Query(const std::string& sql) {
  if (absl::Status s = Connect(); !s.ok()) return s;
  return Collect(PQexec(conn_, sql.c_str()), sql);
}

absl::StatusOr<PgClient::Rows> PgClient::QueryPrepared(const std::string& name,
                                                       const std::string& sql) {
  if (absl::Status s = Connect(); !s.ok()) return s;
  if (prepared_.count(name) == 0) {
    absl::StatusOr<Rows> made = Collect(PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr),
                                        sql);
    if (!made.ok()) return made.status();
    prepared_.insert(name);
  }
  absl::StatusOr<Rows> rows =
      Collect(PQexecPrepared(conn_, name.c_str(), 0, nullptr, nullptr, nullptr, 0), sql);
  // Whatever went wrong, the next call prepares it again: a server that no
  // longer knows the statement (a pooler in between, DISCARD) recovers.
  if (!rows.ok()) prepared_.erase(name);
  return rows;
}

absl::StatusOr<PgClient::Rows> PgClient::Collect(PGresult* res, const std::string& what) {
  ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    std::string msg = PgMessageText(PQerrorMessage(conn_));
    PQclear(res);
    if (PQstatus(conn_) != CONNECTION_OK) {
      Disconnect();
      return absl::UnavailableError(absl::StrCat("PostgreSQL connection lost: ", msg));
    }
    return absl::FailedPreconditionError(absl::StrCat("query \"", what, "\": ", msg));
  }
  Rows rows;
  int n = PQntuples(res), m = PQnfields(res);
  rows.reserve(n);
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> row;
    row.reserve(m);
    for (int j = 0; j < m; ++j) {
      row.push_back(PQgetisnull(res, i, j) ? std::string() : PQgetvalue(res, i, j));
    }
    rows.push_back(std::move(row));
  }
  PQclear(res);
  return rows;
}

std::string PgMessageText(const char* message) {
  std::string msg = message != nullptr ? message : "";
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

std::string SqlLiteral(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  out += "'";
  return out;
}

}  // namespace walship::agent
