// daemon.h: process set-up shared by the walship daemons.
#ifndef WALSHIP_COMMON_DAEMON_H_
#define WALSHIP_COMMON_DAEMON_H_

#include <signal.h>

#include "common/sys/syscalls.h"

namespace walship {

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it
// starts afterwards, and ignores SIGPIPE (a closed peer is an EPIPE status,
// not a crash). Returns the blocked set: one thread takes the signals
// synchronously with WaitForShutdownSignal() and starts an orderly shutdown.
// Call from main() before starting any thread.
sigset_t PrepareDaemonSignals(sys::SysCalls& sys);

// Blocks until one of `signals` (PrepareDaemonSignals()'s set) arrives and
// returns its number (0 if sigwait failed, which it does only for a set it
// cannot wait on).
int WaitForShutdownSignal(sys::SysCalls& sys, const sigset_t& signals);

// Turns off absl::Mutex's deadlock detection, which a library built without
// NDEBUG runs on every lock: a global graph update per acquisition, measured
// at a few percent of a daemon's CPU under a commit-by-commit load. Lock
// order stays checked in the unit tests, which do not call this. Call from
// main() before starting any thread.
void PrepareDaemonRuntime();

}  // namespace walship

#endif  // WALSHIP_COMMON_DAEMON_H_
