// fake_postgres.h: a PostgreSQL server, as far as libpq's queries need one.
//
// Listens on 127.0.0.1 (port 0, read back) and speaks the frontend/backend
// protocol 3.0 to any number of connections: the startup (no SSL, no GSS,
// trust authentication), simple queries (PQexec) and the extended protocol
// of prepared statements (PQprepare, PQexecPrepared). Every query's text goes
// to the test's `answer` function, which returns the rows (all columns text;
// an empty optional is SQL NULL) or an error, sent as an ERROR message. The
// replication protocol (COPY BOTH) is not spoken: a flush feed asked for
// gets an error from `answer` like any other query.
//
// Thread-safety: one thread per connection; `answer` is called from them and
// must be thread-safe. The destructor closes every connection and joins.
#ifndef WALSHIP_TESTS_FAKES_FAKE_POSTGRES_H_
#define WALSHIP_TESTS_FAKES_FAKE_POSTGRES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace walship::testing {

class FakePostgres {
 public:
  using Row = std::vector<std::optional<std::string>>;
  using Answer = std::function<absl::StatusOr<std::vector<Row>>(const std::string& sql)>;

  explicit FakePostgres(Answer answer);
  ~FakePostgres();
  FakePostgres(const FakePostgres&) = delete;
  FakePostgres& operator=(const FakePostgres&) = delete;

  // A libpq connection string reaching this server.
  std::string conninfo() const;
  uint16_t port() const { return port_; }

 private:
  void Accept();
  void Serve(int fd);

  const Answer answer_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> servers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_FAKE_POSTGRES_H_
