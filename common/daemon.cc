#include "common/daemon.h"

#include <pthread.h>

#include "absl/synchronization/mutex.h"
#include "common/sys/transfer.h"

namespace walship {

sigset_t PrepareDaemonSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  sys::IgnoreSigpipe();
  return signals;
}

void PrepareDaemonRuntime() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace walship
