#include "common/daemon.h"

#include <errno.h>

#include "absl/synchronization/mutex.h"
#include "common/sys/transfer.h"

namespace walship {

sigset_t PrepareDaemonSignals(sys::SysCalls& sys) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // Fails only for an invalid `how`, and SIG_BLOCK is valid.
  (void)sys.PthreadSigmask(SIG_BLOCK, &signals, nullptr);
  sys::IgnoreSigpipe();
  return signals;
}

int WaitForShutdownSignal(sys::SysCalls& sys, const sigset_t& signals) {
  int sig = 0;
  sys::SysResult r;
  do {
    r = sys.Sigwait(&signals, &sig);
  } while (!r.ok() && r.err == EINTR);
  return r.ok() ? sig : 0;
}

void PrepareDaemonRuntime() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace walship
