#include "tests/fakes/fake_postgres.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walship::testing {
namespace {

constexpr int32_t kSslRequest = 80877103;
constexpr int32_t kGssEncRequest = 80877104;

bool ReadAll(int fd, char* buf, size_t n) {
  while (n > 0) {
    const ssize_t r = recv(fd, buf, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    buf += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t w = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

int32_t GetInt32(const char* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return static_cast<int32_t>(ntohl(v));
}

void PutInt32(std::string* out, int32_t v) {
  const uint32_t n = htonl(static_cast<uint32_t>(v));
  out->append(reinterpret_cast<const char*>(&n), 4);
}

void PutInt16(std::string* out, int16_t v) {
  const uint16_t n = htons(static_cast<uint16_t>(v));
  out->append(reinterpret_cast<const char*>(&n), 2);
}

std::string Message(char type, const std::string& body) {
  std::string out(1, type);
  PutInt32(&out, static_cast<int32_t>(body.size() + 4));
  return out + body;
}

std::string Cstr(const std::string& s) { return s + std::string(1, '\0'); }

// Text columns named c0, c1, ...
std::string RowDescription(size_t columns) {
  std::string body;
  PutInt16(&body, static_cast<int16_t>(columns));
  for (size_t i = 0; i < columns; ++i) {
    body += Cstr(absl::StrCat("c", i));
    PutInt32(&body, 0);   // table
    PutInt16(&body, 0);   // column
    PutInt32(&body, 25);  // text
    PutInt16(&body, -1);  // variable length
    PutInt32(&body, -1);  // no modifier
    PutInt16(&body, 0);   // text format
  }
  return Message('T', body);
}

std::string Rows(const std::vector<FakePostgres::Row>& rows) {
  std::string out;
  for (const FakePostgres::Row& row : rows) {
    std::string body;
    PutInt16(&body, static_cast<int16_t>(row.size()));
    for (const auto& v : row) {
      PutInt32(&body, v.has_value() ? static_cast<int32_t>(v->size()) : -1);
      if (v.has_value()) body += *v;
    }
    out += Message('D', body);
  }
  return out + Message('C', Cstr(absl::StrCat("SELECT ", rows.size())));
}

std::string Error(const absl::Status& s) {
  return Message('E', Cstr("SERROR") + Cstr("VERROR") + Cstr("CXX000") +
                          Cstr(absl::StrCat("M", s.message())) + std::string(1, '\0'));
}

std::string Ready() { return Message('Z', "I"); }

size_t Columns(const std::vector<FakePostgres::Row>& rows) {
  return rows.empty() ? 1 : rows.front().size();
}

}  // namespace

FakePostgres::FakePostgres(Answer answer) : answer_(std::move(answer)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      listen(listen_fd_, 16) == 0 &&
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port_ = ntohs(a.sin_port);
  }
  acceptor_ = std::thread([this] { Accept(); });
}

FakePostgres::~FakePostgres() {
  stopping_.store(true);
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  std::vector<std::thread> servers;
  {
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    servers.swap(servers_);
  }
  for (std::thread& t : servers) t.join();
  absl::MutexLock lock(&mu_);
  for (int fd : fds_) close(fd);
}

bool FakePostgres::SendCopyData(const std::string& payload) {
  absl::MutexLock lock(&mu_);
  return replication_fd_ >= 0 && WriteAll(replication_fd_, Message('d', payload));
}

int FakePostgres::status_updates() const {
  absl::MutexLock lock(&mu_);
  return status_updates_;
}

bool FakePostgres::AwaitStatusUpdates(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return status_updates_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
}

std::string FakePostgres::conninfo() const {
  return absl::StrCat("host=127.0.0.1 port=", port_,
                      " user=walship dbname=postgres sslmode=disable gssencmode=disable");
}

void FakePostgres::Accept() {
  while (!stopping_.load()) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    absl::MutexLock lock(&mu_);
    fds_.push_back(fd);
    servers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakePostgres::Serve(int fd) {
  // The startup packet, after any number of SSL or GSS requests (refused).
  for (;;) {
    char len[4];
    if (!ReadAll(fd, len, 4) || GetInt32(len) < 8) return;
    std::string body(static_cast<size_t>(GetInt32(len)) - 4, '\0');
    if (!ReadAll(fd, body.data(), body.size())) return;
    const int32_t code = GetInt32(body.data());
    if (code != kSslRequest && code != kGssEncRequest) break;
    if (!WriteAll(fd, "N")) return;
  }
  std::string hello = Message('R', std::string(4, '\0'));
  for (const auto& [k, v] : std::map<std::string, std::string>{
           {"server_version", "15.0"}, {"server_encoding", "UTF8"},
           {"client_encoding", "UTF8"}, {"standard_conforming_strings", "on"},
           {"integer_datetimes", "on"}, {"DateStyle", "ISO, MDY"}}) {
    hello += Message('S', Cstr(k) + Cstr(v));
  }
  std::string key;
  PutInt32(&key, 4242);
  PutInt32(&key, 1);
  hello += Message('K', key) + Ready();
  if (WriteAll(fd, hello)) Converse(fd);
}

void FakePostgres::Converse(int fd) {
  std::map<std::string, std::string> statements;  // prepared, by name
  std::string portal_sql;
  std::vector<Row> pending;  // the described portal's rows
  bool failed = false;       // extended protocol: skip to Sync after an error
  for (;;) {
    char head[5];
    if (!ReadAll(fd, head, 5) || GetInt32(head + 1) < 4) return;
    std::string body(static_cast<size_t>(GetInt32(head + 1)) - 4, '\0');
    if (!ReadAll(fd, body.data(), body.size())) return;
    std::string out;
    switch (head[0]) {
      case 'Q': {
        if (absl::StartsWith(body, "START_REPLICATION")) {
          std::string both(1, '\0');  // text, no columns
          PutInt16(&both, 0);
          absl::MutexLock lock(&mu_);
          replication_fd_ = fd;
          out = Message('W', both);
          break;
        }
        absl::StatusOr<std::vector<Row>> rows = answer_(body.c_str());
        out = rows.ok() ? RowDescription(Columns(*rows)) + Rows(*rows) : Error(rows.status());
        out += Ready();
        break;
      }
      case 'P': {  // Parse: name, query, parameter types
        const std::string name = body.c_str();
        statements[name] = body.c_str() + name.size() + 1;
        if (!failed) out = Message('1', "");
        break;
      }
      case 'B': {  // Bind: portal, statement, ...
        const std::string portal = body.c_str();
        portal_sql = statements[body.c_str() + portal.size() + 1];
        if (!failed) out = Message('2', "");
        break;
      }
      case 'D': {  // Describe the portal: runs the query
        if (failed) break;
        absl::StatusOr<std::vector<Row>> rows = answer_(portal_sql);
        if (!rows.ok()) {
          failed = true;
          out = Error(rows.status());
        } else {
          pending = *rows;
          out = RowDescription(Columns(pending));
        }
        break;
      }
      case 'E':
        if (!failed) out = Rows(pending);
        break;
      case 'S':
        failed = false;
        out = Ready();
        break;
      case 'd':  // CopyData from a replication client
        if (!body.empty() && body[0] == 'r') {
          absl::MutexLock lock(&mu_);
          ++status_updates_;
        }
        break;
      case 'X':
        return;
      default:  // Flush, and anything else: nothing to say
        break;
    }
    if (!out.empty() && !WriteAll(fd, out)) return;
  }
}

}  // namespace walship::testing
