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

}  // namespace walship

#endif  // WALSHIP_COMMON_DAEMON_H_
