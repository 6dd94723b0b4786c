// PostmasterWatch says "gone" only on positive evidence: --pg-data checked
// against the cluster, the postmaster verified as the parent of the agent's
// backend, and then that postmaster exited. Every other case is doubt.
// Process entries come from a /proc built in a temp dir.
#include "agent/postgres/postmaster_watch.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sys/syscalls.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

using State = PostmasterWatch::State;

constexpr int kPostmaster = 4242;
constexpr int kBackend = 5151;

// A data directory, its pg_wal and a /proc holding a postmaster and one
// backend of it.
class PostmasterWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTempDir(absl::StrCat(
        "postmaster_watch_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    pg_data_ = root_ + "/pgdata";
    proc_ = root_ + "/proc";
    ASSERT_EQ(mkdir(pg_data_.c_str(), 0700), 0);
    ASSERT_EQ(mkdir((pg_data_ + "/pg_wal").c_str(), 0700), 0);
    ASSERT_EQ(mkdir(proc_.c_str(), 0755), 0);
    WriteLockFile(kPostmaster);
    AddProcess(kPostmaster, 1, pg_data_, 'S', 1000);
    AddProcess(kBackend, kPostmaster, pg_data_, 'S', 2000);
  }

  void WriteLockFile(int pid) {
    testing::WriteFile(pg_data_ + "/postmaster.pid",
                       absl::StrCat(pid, "\n", pg_data_, "\n1700000000\n5432\n/tmp\n\n"
                                    "  5432001         0\nready   \n"));
  }

  // /proc/PID/{status,stat,cwd} of a process whose parent is `ppid`.
  void AddProcess(int pid, int ppid, const std::string& cwd, char state, uint64_t start) {
    const std::string dir = absl::StrCat(proc_, "/", pid);
    mkdir(dir.c_str(), 0755);
    testing::WriteFile(dir + "/status",
                       absl::StrCat("Name:\tpostgres\nState:\t", std::string(1, state),
                                    "\nTgid:\t", pid, "\nPid:\t", pid, "\nPPid:\t", ppid, "\n"));
    WriteStat(pid, state, start);
    unlink((dir + "/cwd").c_str());
    ASSERT_EQ(symlink(cwd.c_str(), (dir + "/cwd").c_str()), 0);
  }

  // Fields 1-22 of proc(5); the command name holds a space and a ')'.
  void WriteStat(int pid, char state, uint64_t start) {
    std::vector<std::string> f = {std::string(1, state)};
    for (int i = 4; i <= 21; ++i) f.push_back(std::to_string(i));
    f.push_back(std::to_string(start));
    testing::WriteFile(absl::StrCat(proc_, "/", pid, "/stat"),
                       absl::StrCat(pid, " (post gres)) ", absl::StrJoin(f, " "), " 0 0\n"));
  }

  void RemoveProcess(int pid) {
    const std::string dir = absl::StrCat(proc_, "/", pid);
    for (const char* e : {"status", "stat", "cwd"}) unlink((dir + "/" + e).c_str());
    rmdir(dir.c_str());
  }

  PostmasterWatch Watch() { return PostmasterWatch(sys::DefaultSysCalls(), pg_data_, proc_); }

  std::string root_, pg_data_, proc_;
};

TEST_F(PostmasterWatchTest, WithoutPgDataEveryCheckIsDoubt) {
  PostmasterWatch watch(sys::DefaultSysCalls(), "", proc_);
  EXPECT_FALSE(watch.enabled());
  RemoveProcess(kPostmaster);  // even a postmaster that is gone
  PostmasterWatch::Evidence e = watch.Check();
  EXPECT_EQ(e.state, State::kDoubt);
  EXPECT_TRUE(absl::StrContains(e.why, "no --pg-data")) << e.why;
}

TEST_F(PostmasterWatchTest, AcceptsTheDataDirectoryByAnyPath) {
  const std::string link = root_ + "/link-to-pgdata";
  ASSERT_EQ(symlink(pg_data_.c_str(), link.c_str()), 0);
  PostmasterWatch watch = Watch();
  EXPECT_TRUE(watch.CheckDataDirectory(link, pg_data_ + "/pg_wal").ok());
  EXPECT_TRUE(watch.CheckDataDirectory(pg_data_ + "/", pg_data_ + "/pg_wal/").ok());
}

TEST_F(PostmasterWatchTest, RefusesADirectoryThatIsNotTheClustersDataDirectory) {
  const std::string other = root_ + "/other";
  ASSERT_EQ(mkdir(other.c_str(), 0700), 0);
  absl::Status s = Watch().CheckDataDirectory(other, pg_data_ + "/pg_wal");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "is not the data directory of the cluster"))
      << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), other)) << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), pg_data_)) << s.message();
  // A data_directory this process cannot see is no proof either.
  s = Watch().CheckDataDirectory(root_ + "/absent", pg_data_ + "/pg_wal");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot be checked")) << s.message();
}

TEST_F(PostmasterWatchTest, AcceptsARelocatedPgWalByItsRealPathAndNothingElse) {
  const std::string elsewhere = root_ + "/wal-elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_EQ(rmdir((pg_data_ + "/pg_wal").c_str()), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), (pg_data_ + "/pg_wal").c_str()), 0);
  PostmasterWatch watch = Watch();
  EXPECT_TRUE(watch.CheckDataDirectory(pg_data_, elsewhere).ok());
  EXPECT_TRUE(watch.CheckDataDirectory(pg_data_, pg_data_ + "/pg_wal").ok());
  absl::Status s = watch.CheckDataDirectory(pg_data_, root_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "is not the pg_wal of --pg-data")) << s.message();
}

TEST_F(PostmasterWatchTest, NoEvidenceBeforeTheFirstVerification) {
  PostmasterWatch watch = Watch();
  RemoveProcess(kPostmaster);
  EXPECT_EQ(watch.Check().state, State::kDoubt);
}

TEST_F(PostmasterWatchTest, GoneOnlyOnceTheVerifiedPostmasterHasExited) {
  PostmasterWatch watch = Watch();
  ASSERT_TRUE(watch.Verify(kBackend).ok());
  EXPECT_EQ(watch.postmaster_pid(), kPostmaster);
  PostmasterWatch::Evidence e = watch.Check();
  EXPECT_EQ(e.state, State::kRunning);
  EXPECT_EQ(e.why, absl::StrCat("postmaster PID ", kPostmaster, " of ", pg_data_, " is running"));
  RemoveProcess(kPostmaster);
  e = watch.Check();
  EXPECT_EQ(e.state, State::kGone);
  EXPECT_TRUE(absl::StrContains(e.why, "has exited")) << e.why;
}

TEST_F(PostmasterWatchTest, AZombieOrAReusedPidIsGone) {
  PostmasterWatch watch = Watch();
  ASSERT_TRUE(watch.Verify(kBackend).ok());
  WriteStat(kPostmaster, 'Z', 1000);
  EXPECT_EQ(watch.Check().state, State::kGone);
  WriteStat(kPostmaster, 'S', 1001);  // another process, same PID
  PostmasterWatch::Evidence e = watch.Check();
  EXPECT_EQ(e.state, State::kGone);
  EXPECT_TRUE(absl::StrContains(e.why, "another process")) << e.why;
  WriteStat(kPostmaster, 'R', 1000);
  EXPECT_EQ(watch.Check().state, State::kRunning);
}

TEST_F(PostmasterWatchTest, ALockFileMissingOrNamingAnotherPidIsDoubt) {
  PostmasterWatch watch = Watch();
  ASSERT_TRUE(watch.Verify(kBackend).ok());
  RemoveProcess(kPostmaster);
  unlink((pg_data_ + "/postmaster.pid").c_str());
  PostmasterWatch::Evidence e = watch.Check();
  EXPECT_EQ(e.state, State::kDoubt);
  EXPECT_TRUE(absl::StrContains(e.why, "no postmaster.pid")) << e.why;
  WriteLockFile(kPostmaster + 1);  // a new postmaster
  e = watch.Check();
  EXPECT_EQ(e.state, State::kDoubt);
  EXPECT_TRUE(absl::StrContains(e.why, "a new postmaster")) << e.why;
  testing::WriteFile(pg_data_ + "/postmaster.pid", "-4242\n");  // postgres --single
  EXPECT_EQ(watch.Check().state, State::kDoubt);
  testing::WriteFile(pg_data_ + "/postmaster.pid", "");
  EXPECT_EQ(watch.Check().state, State::kDoubt);
}

TEST_F(PostmasterWatchTest, AnUnreadableProcEntryIsDoubt) {
  PostmasterWatch watch = Watch();
  ASSERT_TRUE(watch.Verify(kBackend).ok());
  const std::string stat = absl::StrCat(proc_, "/", kPostmaster, "/stat");
  unlink(stat.c_str());
  ASSERT_EQ(mkdir(stat.c_str(), 0755), 0);  // read(2) fails with EISDIR
  EXPECT_EQ(watch.Check().state, State::kDoubt);
  rmdir(stat.c_str());
  testing::WriteFile(stat, "garbage");
  EXPECT_EQ(watch.Check().state, State::kDoubt);
}

// Open() remembers descriptors of /proc/*/stat; Read() on them fails with
// ESRCH, as for a process that exits while its entry is open.
class ExitingProcess : public sys::RealSysCalls {
 public:
  sys::SysResult Open(const char* path, int flags, mode_t mode) override {
    sys::SysResult r = RealSysCalls::Open(path, flags, mode);
    if (r.ok() && armed && absl::EndsWith(path, "/stat")) {
      stat_fds.insert(static_cast<int>(r.rc));
    }
    return r;
  }
  sys::SysResult Read(int fd, void* buf, size_t n) override {
    if (stat_fds.count(fd) > 0) return {-1, ESRCH};
    return RealSysCalls::Read(fd, buf, n);
  }
  bool armed = false;
  std::set<int> stat_fds;
};

TEST_F(PostmasterWatchTest, AnEntryVanishingWhileReadIsGone) {
  ExitingProcess sys;
  PostmasterWatch watch(sys, pg_data_, proc_);
  ASSERT_TRUE(watch.Verify(kBackend).ok());
  sys.armed = true;
  EXPECT_EQ(watch.Check().state, State::kGone);
}

TEST_F(PostmasterWatchTest, ABackendNotVisibleHereDisarms) {
  PostmasterWatch watch = Watch();
  absl::Status s = watch.Verify(kBackend + 1);  // another PID namespace
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "another PID namespace")) << s.message();
  EXPECT_FALSE(watch.armed());
  RemoveProcess(kPostmaster);
  PostmasterWatch::Evidence e = watch.Check();
  EXPECT_EQ(e.state, State::kDoubt);
  EXPECT_EQ(e.why, s.message());
}

TEST_F(PostmasterWatchTest, ABackendOfAnotherParentDisarms) {
  // In another PID namespace the backend's number may name some other
  // process here, a child of another parent.
  AddProcess(kBackend, 1, "/", 'S', 3000);
  PostmasterWatch watch = Watch();
  absl::Status s = watch.Verify(kBackend);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a child of postmaster PID 4242"))
      << s.message();
  EXPECT_EQ(watch.Check().state, State::kDoubt);
}

TEST_F(PostmasterWatchTest, APostmasterWorkingElsewhereDisarms) {
  // The lock file's PID, seen from here, is a process of another directory
  // (say, PID 1 of another container) that happens to be the backend's parent.
  AddProcess(kPostmaster, 1, root_, 'S', 1000);
  PostmasterWatch watch = Watch();
  absl::Status s = watch.Verify(kBackend);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "does not work in")) << s.message();
  RemoveProcess(kPostmaster);
  EXPECT_EQ(watch.Check().state, State::kDoubt);
}

TEST_F(PostmasterWatchTest, NoLockFileAtVerificationDisarms) {
  unlink((pg_data_ + "/postmaster.pid").c_str());
  PostmasterWatch watch = Watch();
  EXPECT_EQ(watch.Verify(kBackend).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(watch.Check().state, State::kDoubt);
}

TEST_F(PostmasterWatchTest, EachVerificationReplacesTheLast) {
  PostmasterWatch watch = Watch();
  ASSERT_TRUE(watch.Verify(kBackend).ok());
  // A reconnection whose backend is not visible: disarmed, even though the
  // postmaster verified before then exits.
  EXPECT_FALSE(watch.Verify(kBackend + 7).ok());
  RemoveProcess(kPostmaster);
  EXPECT_EQ(watch.Check().state, State::kDoubt);
  // A new postmaster, verified through its own backend: armed for it.
  WriteLockFile(kPostmaster + 1);
  AddProcess(kPostmaster + 1, 1, pg_data_, 'S', 5000);
  AddProcess(kBackend + 1, kPostmaster + 1, pg_data_, 'S', 6000);
  ASSERT_TRUE(watch.Verify(kBackend + 1).ok());
  EXPECT_EQ(watch.postmaster_pid(), kPostmaster + 1);
  EXPECT_EQ(watch.Check().state, State::kRunning);
  RemoveProcess(kPostmaster + 1);
  EXPECT_EQ(watch.Check().state, State::kGone);
}

TEST_F(PostmasterWatchTest, TheRealProcGivesTheSameEvidence) {
  // A child working in pg_data stands in for the postmaster, its own child
  // for the agent's backend; the evidence is read from the real /proc.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t postmaster = fork();
  ASSERT_GE(postmaster, 0);
  if (postmaster == 0) {
    if (chdir(pg_data_.c_str()) != 0) _exit(1);
    const pid_t backend = fork();
    if (backend == 0) {
      for (;;) pause();
    }
    if (write(pipe_fds[1], &backend, sizeof(backend)) != sizeof(backend)) _exit(1);
    for (;;) pause();
  }
  close(pipe_fds[1]);
  pid_t backend = -1;
  ASSERT_EQ(read(pipe_fds[0], &backend, sizeof(backend)), static_cast<ssize_t>(sizeof(backend)));
  close(pipe_fds[0]);
  WriteLockFile(postmaster);
  PostmasterWatch watch(sys::DefaultSysCalls(), pg_data_);
  absl::Status verified = watch.Verify(backend);
  PostmasterWatch::Evidence running = watch.Check();
  kill(postmaster, SIGKILL);
  // Not yet reaped: a zombie.
  for (int i = 0; i < 1000 && watch.Check().why.find("not yet reaped") == std::string::npos;
       ++i) {
    usleep(1000);
  }
  PostmasterWatch::Evidence zombie = watch.Check();
  waitpid(postmaster, nullptr, 0);
  PostmasterWatch::Evidence reaped = watch.Check();
  kill(backend, SIGKILL);  // reparented; its new parent reaps it
  ASSERT_TRUE(verified.ok()) << verified.message();
  EXPECT_EQ(running.state, State::kRunning) << running.why;
  EXPECT_EQ(zombie.state, State::kGone) << zombie.why;
  EXPECT_TRUE(absl::StrContains(zombie.why, "not yet reaped")) << zombie.why;
  EXPECT_EQ(reaped.state, State::kGone) << reaped.why;
  // Seen as another process: not its backend.
  EXPECT_FALSE(watch.Verify(static_cast<int>(getpid())).ok());
}

}  // namespace
}  // namespace walship::agent
