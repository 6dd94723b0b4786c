// PrepareDaemonSignals / WaitForShutdownSignal: which signals a daemon
// blocks and how it waits for them, with the signal calls scripted.
#include "common/daemon.h"

#include <errno.h>
#include <signal.h>

#include <deque>
#include <utility>

#include "common/sys/syscalls.h"
#include "gtest/gtest.h"

namespace walship {
namespace {

// Records the mask set with pthread_sigmask (without changing the test's)
// and answers sigwait from a script of {result, signal}.
class SignalSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult PthreadSigmask(int how, const sigset_t* set, sigset_t* old) override {
    how_ = how;
    mask_ = *set;
    if (old != nullptr) sigemptyset(old);
    return {0, 0};
  }
  sys::SysResult Sigwait(const sigset_t* set, int* sig) override {
    ++waits_;
    EXPECT_FALSE(script_.empty()) << "unscripted sigwait";
    if (script_.empty()) return {-1, EINVAL};
    auto [result, signal] = script_.front();
    script_.pop_front();
    if (result.ok()) {
      EXPECT_EQ(sigismember(set, signal), 1) << "waited for a set without " << signal;
      *sig = signal;
    }
    return result;
  }

  int how_ = -1;
  sigset_t mask_;
  int waits_ = 0;
  std::deque<std::pair<sys::SysResult, int>> script_;
};

TEST(DaemonTest, BlocksTermAndIntOnly) {
  SignalSysCalls sys;
  const sigset_t signals = PrepareDaemonSignals(sys);
  EXPECT_EQ(sys.how_, SIG_BLOCK);
  const sigset_t& blocked = sys.mask_;
  for (const sigset_t* set : {&signals, &blocked}) {
    EXPECT_EQ(sigismember(set, SIGTERM), 1);
    EXPECT_EQ(sigismember(set, SIGINT), 1);
    EXPECT_EQ(sigismember(set, SIGPIPE), 0);
    EXPECT_EQ(sigismember(set, SIGHUP), 0);
  }
}

TEST(DaemonTest, WaitRetriesAnInterruptedSigwait) {
  SignalSysCalls sys;
  const sigset_t signals = PrepareDaemonSignals(sys);
  sys.script_ = {{{-1, EINTR}, 0}, {{0, 0}, SIGTERM}};
  EXPECT_EQ(WaitForShutdownSignal(sys, signals), SIGTERM);
  EXPECT_EQ(sys.waits_, 2);
}

TEST(DaemonTest, AFailedWaitReportsNoSignal) {
  SignalSysCalls sys;
  const sigset_t signals = PrepareDaemonSignals(sys);
  sys.script_ = {{{-1, EINVAL}, 0}};
  EXPECT_EQ(WaitForShutdownSignal(sys, signals), 0);
  EXPECT_EQ(sys.waits_, 1);
}

}  // namespace
}  // namespace walship
