// fake_postgres.h: a PostgreSQL server, as far as libpq's queries need one.
//
// Listens on 127.0.0.1 (port 0, read back) and speaks the frontend/backend
// protocol 3.0 to any number of connections: the startup (no SSL, no GSS,
// trust authentication), simple queries (PQexec) and the extended protocol
// of prepared statements (PQprepare, PQexecPrepared). Every query's text goes
// to the test's `answer` function, which returns the rows (all columns text;
// an empty optional is SQL NULL) or an error, sent as an ERROR message.
// Replication connections are answered the same way (IDENTIFY_SYSTEM goes to
// `answer`), except START_REPLICATION, which the fake takes itself: it
// enters COPY BOTH mode, where the test sends the walsender's messages
// (SendCopyData) and counts the standby status updates the client sends
// back.
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
#include "absl/time/time.h"

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

  // Sends a CopyData message carrying `payload` on the newest connection
  // that started replication; false when there is none (or it is gone).
  bool SendCopyData(const std::string& payload);
  // Standby status updates ('r' CopyData) received so far.
  int status_updates() const;
  // Waits (real time, at most `timeout`) until `n` status updates have
  // arrived; false if they have not by then.
  bool AwaitStatusUpdates(int n, absl::Duration timeout) const;

 private:
  void Accept();
  void Serve(int fd);
  // Serve(): after the startup, one message after another until the end.
  void Converse(int fd);

  const Answer answer_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> servers_ ABSL_GUARDED_BY(mu_);
  int replication_fd_ ABSL_GUARDED_BY(mu_) = -1;
  int status_updates_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_FAKE_POSTGRES_H_
