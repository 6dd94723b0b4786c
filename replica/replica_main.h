// replica_main.h: the whole of the walship-replica daemon's main, as a
// library function, so that a test build can run the real daemon over a
// decorated SysCalls (a fault injector) while walship-replica itself runs it
// over the real one.
//
// ReplicaMain(argc, argv, sys) parses the flags (or the `restore`
// subcommand's), runs the daemon until SIGTERM/SIGINT or a fatal error, and
// returns the process exit status documented in its --help (0 stopped on a
// signal; 1 bad set-up; 3 an operator must act; the restore subcommand's
// 0/1/2). Every file-system call on --dest goes through `sys`, which must
// outlive the call and be safe to use from several threads at once. Call it
// once per process: it installs the daemon's signal handling.
#ifndef WALSHIP_REPLICA_REPLICA_MAIN_H_
#define WALSHIP_REPLICA_REPLICA_MAIN_H_

#include "common/sys/syscalls.h"

namespace walship::replica {

int ReplicaMain(int argc, char** argv, sys::SysCalls& sys);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_REPLICA_MAIN_H_
