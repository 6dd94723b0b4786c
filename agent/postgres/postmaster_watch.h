// postmaster_watch.h: positive evidence that a PostgreSQL postmaster is gone.
//
// The crash rule (postgres_source.h) ships the valid WAL past the flush
// position the primary last reported. Fired against a primary that still
// runs, it would ship WAL that is not yet durable there: a failed query (too
// many connections, a terminated backend, a role locked out) must never be
// mistaken for a crash. A PostmasterWatch therefore says "gone" only on
// evidence gathered in three steps; anything short of it is doubt, and under
// doubt the agent waits for PostgreSQL instead of shipping:
//
//   1. At start, CheckDataDirectory(): --pg-data is the directory the cluster
//      reports as `data_directory` (same device and inode as this process
//      sees both paths), and --wal-dir is --pg-data's pg_wal (same device and
//      inode: a pg_wal relocated by a symlink may be given by its real path).
//      A mismatch is a configuration error: the agent refuses to start.
//   2. After each new query connection, Verify(backend_pid): the PID P named
//      on the first line of PGDATA/postmaster.pid is, as this process sees
//      it, the parent of the agent's own backend (PPid in
//      /proc/<backend>/status) and works in the data directory (/proc/P/cwd
//      is --pg-data, which needs the agent to run as the cluster's OS user or
//      as root). So the agent shares the postmaster's PID namespace, and P is
//      the postmaster of the server it queries. P's start time
//      (/proc/P/stat) is kept. Until a verification succeeds the watch is
//      disarmed; a failed one disarms it.
//   3. When a query fails, Check(): kGone only if the watch is armed,
//      postmaster.pid still names P, and P has exited: /proc/P is absent, P
//      is a zombie, or the PID now belongs to a process with another start
//      time. kRunning while P runs. Everything else is kDoubt, with the
//      reason: no --pg-data, disarmed, no postmaster.pid (a clean or
//      immediate shutdown removes it: PostgreSQL's next start replays what
//      is left), an unreadable one, another PID in it (a new postmaster), an
//      unreadable /proc entry.
//
// Example:
//
//   PostmasterWatch watch(sys, "/var/lib/postgresql/15/main");
//   WALSHIP_RETURN_IF_ERROR(watch.CheckDataDirectory(reported_data_directory, wal_dir));
//   if (absl::Status s = watch.Verify(backend_pid); !s.ok()) LOG(s);  // disarmed
//   ...
//   PostmasterWatch::Evidence e = watch.Check();  // after a failed query
//   if (e.state == PostmasterWatch::State::kGone) ApplyCrashRule();
//
// All file access goes through the SysCalls given; `proc_root` ("/proc") is
// where process entries are read, so tests can build one in a directory.
//
// Thread-compatible: one thread uses a watch at a time.
#ifndef WALSHIP_AGENT_POSTGRES_POSTMASTER_WATCH_H_
#define WALSHIP_AGENT_POSTGRES_POSTMASTER_WATCH_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

class PostmasterWatch {
 public:
  enum class State { kRunning, kGone, kDoubt };
  struct Evidence {
    State state;
    // Why, for a log line: "postmaster PID 123 of DIR is running", "... has
    // exited", or the reason for doubt.
    std::string why;
  };

  // `pg_data` as given by --pg-data; empty: every Check() is kDoubt.
  PostmasterWatch(sys::SysCalls& sys, std::string pg_data, std::string proc_root = "/proc");

  bool enabled() const { return !pg_data_.empty(); }
  const std::string& pg_data() const { return pg_data_; }

  // Step 1. `data_directory` as the cluster reports it. kFailedPrecondition
  // naming both paths when pg_data is not that directory, or `wal_dir` is
  // not pg_data's pg_wal, or one of them cannot be examined.
  absl::Status CheckDataDirectory(const std::string& data_directory,
                                  const std::string& wal_dir) const;

  // Step 2, for the backend serving the agent's query connection (its
  // pg_backend_pid()). OK arms the watch for the postmaster found; otherwise
  // kFailedPrecondition saying what did not match, and the watch is
  // disarmed until a later Verify() succeeds.
  absl::Status Verify(int backend_pid);
  bool armed() const { return postmaster_pid_ > 0; }
  // The postmaster the watch is armed for; 0 when disarmed.
  int postmaster_pid() const { return postmaster_pid_; }

  // Step 3. Reads postmaster.pid and /proc/P afresh.
  Evidence Check() const;

  // True while postmaster.pid says the server is shutting down (its status
  // line, the eighth, is "stopping"). False without --pg-data or when the
  // file cannot be read.
  bool Stopping() const;

 private:
  // One small file (postmaster.pid, a /proc entry): its text, or the errno
  // of the open or read that failed.
  struct FileText {
    int err = 0;
    std::string text;
  };
  FileText Read(const std::string& path) const;
  // The PID on the first line of postmaster.pid, or 0 with `*why` set.
  int LockFilePid(std::string* why) const;
  // Fields of /proc/PID/stat after the command name: state and start time.
  struct ProcStat {
    char state = '?';
    uint64_t start_time = 0;
  };
  static bool ParseProcStat(const std::string& text, ProcStat* out);
  std::string Proc(int pid, const char* entry) const;

  sys::SysCalls& sys_;
  const std::string pg_data_;
  const std::string proc_root_;
  int postmaster_pid_ = 0;
  uint64_t postmaster_start_ = 0;
  std::string disarmed_why_ = "the postmaster has not been verified yet";
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_POSTGRES_POSTMASTER_WATCH_H_
