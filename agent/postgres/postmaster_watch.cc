#include "agent/postgres/postmaster_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/sys/errors.h"
#include "common/sys/unique_fd.h"

namespace walship::agent {
namespace {

// postmaster.pid and /proc entries are a few hundred bytes.
constexpr size_t kMaxFileBytes = 64 * 1024;

std::string ErrText(int err, const std::string& what) {
  return std::string(sys::ErrnoToStatus(err, what).message());
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

PostmasterWatch::PostmasterWatch(sys::SysCalls& sys, std::string pg_data, std::string proc_root)
    : sys_(sys), pg_data_(std::move(pg_data)), proc_root_(std::move(proc_root)) {}

PostmasterWatch::FileText PostmasterWatch::Read(const std::string& path) const {
  FileText out;
  sys::SysResult r = sys_.Open(path.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (!r.ok()) {
    out.err = r.err;
    return out;
  }
  sys::UniqueFd fd(static_cast<int>(r.rc));
  char chunk[4096];
  while (out.text.size() < kMaxFileBytes) {
    r = sys_.Read(fd.get(), chunk, sizeof(chunk));
    if (!r.ok() && r.err == EINTR) continue;
    if (!r.ok()) {
      out.err = r.err;  // ESRCH: a /proc entry whose process has exited
      out.text.clear();
      return out;
    }
    if (r.rc == 0) break;
    out.text.append(chunk, static_cast<size_t>(r.rc));
  }
  return out;
}

std::string PostmasterWatch::Proc(int pid, const char* entry) const {
  return absl::StrCat(proc_root_, "/", pid, "/", entry);
}

bool PostmasterWatch::Stopping() const {
  if (!enabled()) return false;
  FileText f = Read(pg_data_ + "/postmaster.pid");
  if (f.err != 0) return false;
  std::vector<absl::string_view> lines = absl::StrSplit(f.text, '\n');
  // LOCK_FILE_LINE_PM_STATUS (pidfile.h): PM_STATUS_STOPPING.
  return lines.size() > 7 && absl::StripAsciiWhitespace(lines[7]) == "stopping";
}

int PostmasterWatch::LockFilePid(std::string* why) const {
  const std::string path = pg_data_ + "/postmaster.pid";
  FileText f = Read(path);
  if (f.err == ENOENT) {
    *why = absl::StrCat("no postmaster.pid in ", pg_data_,
                        " (PostgreSQL was shut down, or has not started yet)");
    return 0;
  }
  if (f.err != 0) {
    *why = ErrText(f.err, absl::StrCat("read ", path));
    return 0;
  }
  absl::string_view line = f.text;
  const std::string first(absl::StripAsciiWhitespace(line.substr(0, line.find('\n'))));
  int pid = 0;
  // A standalone backend (postgres --single) writes its PID negated.
  if (!absl::SimpleAtoi(first, &pid) || pid <= 0) {
    *why = absl::StrCat(path, " names no postmaster PID (first line '", first, "')");
    return 0;
  }
  return pid;
}

bool PostmasterWatch::ParseProcStat(const std::string& text, ProcStat* out) {
  // "PID (COMMAND) STATE PPID ..."; COMMAND may hold spaces and parentheses.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text).substr(close + 1), ' ', absl::SkipEmpty());
  // Fields 3 (state) and 22 (start time, in clock ticks since boot) of proc(5).
  if (fields.size() < 20 || fields[0].size() != 1) return false;
  out->state = fields[0][0];
  return absl::SimpleAtoi(fields[19], &out->start_time);
}

absl::Status PostmasterWatch::CheckDataDirectory(const std::string& data_directory,
                                                 const std::string& wal_dir) const {
  struct stat ours, theirs, pg_wal, given;
  if (sys::SysResult r = sys_.Stat(pg_data_.c_str(), &ours); !r.ok()) {
    return absl::FailedPreconditionError(ErrText(r.err, absl::StrCat("--pg-data ", pg_data_)));
  }
  if (sys::SysResult r = sys_.Stat(data_directory.c_str(), &theirs); !r.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--pg-data ", pg_data_, " cannot be checked: the cluster reports data_directory ",
        data_directory, ", which the agent cannot examine (",
        ErrText(r.err, "stat"), "); leave --pg-data out to run without the crash rule"));
  }
  if (!SameFile(ours, theirs)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--pg-data ", pg_data_, " is not the data directory of the cluster the agent queries (",
        "it reports data_directory ", data_directory, ")"));
  }
  const std::string expected = pg_data_ + "/pg_wal";
  if (sys::SysResult r = sys_.Stat(expected.c_str(), &pg_wal); !r.ok()) {
    return absl::FailedPreconditionError(ErrText(r.err, absl::StrCat("stat ", expected)));
  }
  if (sys::SysResult r = sys_.Stat(wal_dir.c_str(), &given); !r.ok()) {
    return absl::FailedPreconditionError(ErrText(r.err, absl::StrCat("--wal-dir ", wal_dir)));
  }
  if (!SameFile(pg_wal, given)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--wal-dir ", wal_dir, " is not the pg_wal of --pg-data ", pg_data_, " (", expected,
        " is another directory)"));
  }
  return absl::OkStatus();
}

absl::Status PostmasterWatch::Verify(int backend_pid) {
  postmaster_pid_ = 0;
  auto disarm = [this](std::string why) {
    disarmed_why_ = std::move(why);
    return absl::FailedPreconditionError(disarmed_why_);
  };
  std::string why;
  const int pid = LockFilePid(&why);
  if (pid == 0) return disarm(why);
  const std::string status_path = Proc(backend_pid, "status");
  FileText status = Read(status_path);
  if (status.err != 0) {
    return disarm(absl::StrCat(
        "the agent's backend (PID ", backend_pid, " as PostgreSQL reports it) is not visible "
        "here (", ErrText(status.err, absl::StrCat("read ", status_path)),
        "): the agent runs in another PID namespace than PostgreSQL"));
  }
  int parent = -1;
  for (absl::string_view line : absl::StrSplit(status.text, '\n')) {
    if (absl::ConsumePrefix(&line, "PPid:")) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &parent)) parent = -1;
    }
  }
  if (parent != pid) {
    return disarm(absl::StrCat(
        "process ", backend_pid, " here (the agent's backend as PostgreSQL reports it) is not "
        "a child of postmaster PID ", pid, " named in ", pg_data_, "/postmaster.pid (its "
        "parent is ", parent, "): the agent runs in another PID namespace than PostgreSQL, or "
        "--pg-conninfo reaches another server"));
  }
  struct stat cwd, ours;
  const std::string cwd_path = Proc(pid, "cwd");
  if (sys::SysResult r = sys_.Stat(cwd_path.c_str(), &cwd); !r.ok()) {
    return disarm(absl::StrCat(
        "cannot see the working directory of postmaster PID ", pid, " (",
        ErrText(r.err, absl::StrCat("stat ", cwd_path)),
        "): run the agent as the cluster's OS user"));
  }
  if (sys::SysResult r = sys_.Stat(pg_data_.c_str(), &ours); !r.ok()) {
    return disarm(ErrText(r.err, absl::StrCat("stat ", pg_data_)));
  }
  if (!SameFile(cwd, ours)) {
    return disarm(absl::StrCat("postmaster PID ", pid, " does not work in ", pg_data_,
                               " (", cwd_path, " is another directory)"));
  }
  const std::string stat_path = Proc(pid, "stat");
  FileText proc_stat = Read(stat_path);
  ProcStat st;
  if (proc_stat.err != 0) {
    return disarm(ErrText(proc_stat.err, absl::StrCat("read ", stat_path)));
  }
  if (!ParseProcStat(proc_stat.text, &st)) {
    return disarm(absl::StrCat("cannot parse ", stat_path, ": '", proc_stat.text, "'"));
  }
  postmaster_pid_ = pid;
  postmaster_start_ = st.start_time;
  disarmed_why_.clear();
  return absl::OkStatus();
}

PostmasterWatch::Evidence PostmasterWatch::Check() const {
  if (!enabled()) {
    return {State::kDoubt,
            "no --pg-data, so the agent cannot tell a crash from a failed query"};
  }
  if (!armed()) return {State::kDoubt, disarmed_why_};
  std::string why;
  const int pid = LockFilePid(&why);
  if (pid == 0) return {State::kDoubt, why};
  const std::string who = absl::StrCat("postmaster PID ", postmaster_pid_, " of ", pg_data_);
  if (pid != postmaster_pid_) {
    return {State::kDoubt, absl::StrCat(pg_data_, "/postmaster.pid names PID ", pid, ", not ",
                                        who, " verified at connect: a new postmaster")};
  }
  const std::string stat_path = Proc(pid, "stat");
  FileText proc_stat = Read(stat_path);
  if (proc_stat.err == ENOENT || proc_stat.err == ESRCH) {
    return {State::kGone, who + " has exited"};
  }
  if (proc_stat.err != 0) {
    return {State::kDoubt, ErrText(proc_stat.err, absl::StrCat("read ", stat_path))};
  }
  ProcStat st;
  if (!ParseProcStat(proc_stat.text, &st)) {
    return {State::kDoubt,
            absl::StrCat("cannot parse ", stat_path, ": '", proc_stat.text, "'")};
  }
  if (st.state == 'Z' || st.state == 'X') {
    return {State::kGone, who + " has exited (not yet reaped by its parent)"};
  }
  if (st.start_time != postmaster_start_) {
    return {State::kGone, who + " has exited (the PID now belongs to another process)"};
  }
  return {State::kRunning, who + " is running"};
}

}  // namespace walship::agent
