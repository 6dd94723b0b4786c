// pg_client.h: a minimal libpq connection for the agent's PostgreSQL source.
//
// Runs short text-mode queries and returns rows of strings. Every failure is
// a Status naming the query: kUnavailable when the server cannot be reached
// or the connection broke (the caller reconnects), kFailedPrecondition when
// the server answers with an error (e.g. it is in recovery).
//
// Thread-compatible: one thread uses a PgClient at a time.
#ifndef WALSHIP_AGENT_POSTGRES_PG_CLIENT_H_
#define WALSHIP_AGENT_POSTGRES_PG_CLIENT_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct pg_conn;
struct pg_result;

namespace walship::agent {

class PgClient {
 public:
  explicit PgClient(std::string conninfo);
  ~PgClient();
  PgClient(const PgClient&) = delete;
  PgClient& operator=(const PgClient&) = delete;

  // Connects if not connected (connect_timeout 5 s unless the conninfo says
  // otherwise).
  absl::Status Connect();
  bool connected() const { return conn_ != nullptr; }
  void Disconnect();

  using Rows = std::vector<std::vector<std::string>>;
  // Runs `sql` (no parameters), connecting first if needed.
  absl::StatusOr<Rows> Query(const std::string& sql);
  // The same for a query asked again and again: the server parses and plans
  // `sql` once per connection (a prepared statement called `name`, made on
  // first use after each connect) instead of on every call.
  absl::StatusOr<Rows> QueryPrepared(const std::string& name, const std::string& sql);

 private:
  // Rows of `res` (which it frees), or the failure of `what`.
  absl::StatusOr<Rows> Collect(struct pg_result* res, const std::string& what);

  const std::string conninfo_;
  pg_conn* conn_ = nullptr;
  // Statements prepared on conn_.
  std::set<std::string> prepared_;
};

// Quotes `s` as an SQL string literal.
std::string SqlLiteral(const std::string& s);

// libpq's message (PQerrorMessage, PQresultErrorMessage) without the
// trailing newline and spaces, for a one-line log or Status. Null is "".
std::string PgMessageText(const char* message);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_PG_CLIENT_H_
