// daemon.h: process set-up shared by the walship daemons.
#ifndef WALSHIP_COMMON_DAEMON_H_
#define WALSHIP_COMMON_DAEMON_H_

#include <signal.h>

namespace walship {

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it
// starts afterwards, and ignores SIGPIPE (a closed peer is an EPIPE status,
// not a crash). Returns the blocked set: one thread takes the signals
// synchronously with sigwait() and starts an orderly shutdown. Call from
// main() before starting any thread.
sigset_t PrepareDaemonSignals();

// Turns off absl::Mutex's deadlock detection, which a library built without
// NDEBUG runs on every lock: a global graph update per acquisition, measured
// at a few percent of a daemon's CPU under a commit-by-commit load. Lock
// order stays checked in the unit tests, which do not call this. Call from
// main() before starting any thread.
void PrepareDaemonRuntime();

}  // namespace walship

#endif  // WALSHIP_COMMON_DAEMON_H_
