// drill-loader: the failover drill's write load. It records exactly the
// commits the primary acknowledged.
//
// One row per transaction, in autocommit: INSERT INTO <table>(seq) VALUES (n)
// for n = --start-seq, --start-seq + 1, ... Only after the INSERT returned
// PGRES_COMMAND_OK (the COMMIT succeeded; with synchronous_commit=on the
// commit record is flushed on the primary) does the loader append
//
//   A <seq> <ack time, CLOCK_REALTIME nanoseconds>
//
// to --acks, with one write(2) on an O_APPEND descriptor, then asks the
// primary for pg_current_wal_flush_lsn() and appends
//
//   L <seq> <LSN as X/Y>
//
// (an LSN at or past the end of that commit record: the drill uses it to age
// unreplicated commits). A seq whose INSERT failed or whose result never came
// back is never written as acknowledged; the drill treats it as "in flight":
// it may or may not be on a promoted standby.
//
// The loader stops after --seconds, on SIGTERM/SIGINT, or at the first error
// (the drills crash the primary under it: no reconnect). It prints one summary
// line on stdout: "acked N last_seq S stop REASON".
//
// Exit status: 0 stopped by time or signal; 1 bad usage or set-up (could not
// connect or create the table); 2 the connection failed during the load.
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"

namespace {

volatile sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

struct LoaderOptions {
  std::string conninfo;
  std::string acks;
  std::string table = "drill_acks";
  int64_t seconds = 10;
  int64_t start_seq = 1;
  int64_t rate = 0;  // transactions per second; 0 = as fast as possible
  bool create = false;

  absl::Status Validate() const {
    if (conninfo.empty()) return absl::InvalidArgumentError("--conninfo is required");
    if (acks.empty()) return absl::InvalidArgumentError("--acks is required");
    if (seconds <= 0) return absl::InvalidArgumentError("--seconds must be > 0");
    if (start_seq <= 0) return absl::InvalidArgumentError("--start-seq must be > 0");
    if (rate < 0) return absl::InvalidArgumentError("--rate must be >= 0");
    for (char c : table) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      if (!ok) return absl::InvalidArgumentError("--table must match [a-z0-9_]+");
    }
    if (table.empty()) return absl::InvalidArgumentError("--table is empty");
    return absl::OkStatus();
  }
};

int64_t NowNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Appends one whole line; a short write or an error is fatal for the drill's
// record, so it is reported and the loader stops.
bool AppendLine(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "drill-loader: write to acks file: %s\n", strerror(errno));
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool Exec(PGconn* conn, const std::string& sql) {
  PGresult* res = PQexec(conn, sql.c_str());
  bool ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
  if (!ok) std::fprintf(stderr, "drill-loader: %s: %s", sql.c_str(), PQerrorMessage(conn));
  PQclear(res);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  LoaderOptions o;
  walship::FlagSet flags(
      "drill-loader: inserts one row per autocommit transaction and records each\n"
      "acknowledged commit (see integration/drill/README.md).\n"
      "Usage: drill-loader --conninfo=STR --acks=FILE [--seconds=N] [--start-seq=N]\n"
      "Exit status: 0 stopped by time or signal; 1 bad usage or set-up; 2 the\n"
      "connection failed during the load.");
  flags.String("conninfo", &o.conninfo, "libpq connection string of the primary (required).");
  flags.String("acks", &o.acks, "File the acknowledged commits are appended to (required).");
  flags.String("table", &o.table, "Table of (seq bigint primary key).");
  flags.Int("seconds", &o.seconds, "How long to run.");
  flags.Int("start-seq", &o.start_seq, "First sequence number.");
  flags.Int("rate", &o.rate, "Transactions per second; 0 = as fast as possible.");
  flags.Bool("create", &o.create, "CREATE TABLE IF NOT EXISTS first.");
  auto args = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  absl::Status valid = args.ok() ? o.Validate() : args.status();
  if (valid.ok() && !args->empty()) valid = absl::InvalidArgumentError("unexpected argument");
  if (!valid.ok()) {
    std::fprintf(stderr, "drill-loader: %s\n", std::string(valid.message()).c_str());
    return 1;
  }

  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  int fd = open(o.acks.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "drill-loader: open %s: %s\n", o.acks.c_str(), strerror(errno));
    return 1;
  }
  PGconn* conn = PQconnectdb(o.conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::fprintf(stderr, "drill-loader: connect: %s", PQerrorMessage(conn));
    PQfinish(conn);
    close(fd);
    return 1;
  }
  if (o.create &&
      !Exec(conn, absl::StrCat("CREATE TABLE IF NOT EXISTS ", o.table,
                               " (seq bigint PRIMARY KEY, at timestamptz DEFAULT now())"))) {
    PQfinish(conn);
    close(fd);
    return 1;
  }

  const std::string insert = absl::StrCat("INSERT INTO ", o.table, " (seq) VALUES ($1)");
  const int64_t start = NowNs(CLOCK_MONOTONIC);
  const int64_t end = start + o.seconds * 1000000000LL;
  int64_t seq = o.start_seq;
  int64_t acked = 0;
  int64_t last = 0;
  std::string reason = "time";
  int rc = 0;
  while (true) {
    if (g_stop) {
      reason = "signal";
      break;
    }
    int64_t now = NowNs(CLOCK_MONOTONIC);
    if (now >= end) break;
    if (o.rate > 0) {
      int64_t due = start + acked * 1000000000LL / o.rate;
      if (due > now) {
        struct timespec ts = {static_cast<time_t>((due - now) / 1000000000LL),
                              static_cast<long>((due - now) % 1000000000LL)};
        nanosleep(&ts, nullptr);
        continue;
      }
    }
    std::string value = std::to_string(seq);
    const char* params[1] = {value.c_str()};
    PGresult* res = PQexecParams(conn, insert.c_str(), 1, nullptr, params, nullptr, nullptr, 0);
    bool committed = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!committed) {
      std::fprintf(stderr, "drill-loader: seq %lld not acknowledged: %s", (long long)seq,
                   PQerrorMessage(conn));
      reason = "error";
      rc = 2;
      break;
    }
    // Acknowledged: record it before anything else can fail.
    if (!AppendLine(fd, absl::StrCat("A ", seq, " ", NowNs(CLOCK_REALTIME), "\n"))) {
      rc = 1;
      reason = "acks-file";
      break;
    }
    acked++;
    last = seq;
    res = PQexec(conn, "SELECT pg_current_wal_flush_lsn()");
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
      std::string lsn = PQgetvalue(res, 0, 0);
      PQclear(res);
      if (!AppendLine(fd, absl::StrCat("L ", seq, " ", lsn, "\n"))) {
        rc = 1;
        reason = "acks-file";
        break;
      }
    } else {
      std::fprintf(stderr, "drill-loader: flush lsn after seq %lld: %s", (long long)seq,
                   PQerrorMessage(conn));
      PQclear(res);
      reason = "error";
      rc = 2;
      break;
    }
    seq++;
  }
  std::printf("acked %lld last_seq %lld stop %s\n", (long long)acked, (long long)last,
              reason.c_str());
  std::fflush(stdout);
  PQfinish(conn);
  close(fd);
  return rc;
}
