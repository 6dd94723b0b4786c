// sched_slice.h: a short scheduler slice for the threads a synchronous commit
// waits on.
//
// A commit that waits for walship waits for four wake-ups in a row: the
// agent's source thread (the primary's flush feed), the replica's receiving
// thread (the frame), the agent's control thread (the acknowledgement) and
// the primary's walsender (the status update). On a host whose CPUs are busy,
// as a primary's are under load, each woken thread first waits for a CPU.
// Linux's EEVDF scheduler (6.12 and later) lets a thread of the normal policy
// ask for a shorter slice (`sched_attr.sched_runtime`, 100 µs to 100 ms, the
// default 0.7 ms times a factor for the CPU count): its virtual deadline comes
// sooner, so once woken it may run before a thread with a longer slice has
// used up its own; in exchange it is preempted after a shorter run itself.
// Its share of the CPU does not change (that is the nice value's). The threads
// that ask run a few tens of µs per wake-up, so the shorter run seldom cuts
// them off (more preemptions cost some CPU, docs/benchmarks.md); threads that
// move bulk data (backlogs, zero-filling) do not ask.
//
// The request keeps the thread's policy and nice value (an unprivileged
// thread could not raise its priority back anyway). A thread under a policy
// an operator chose for it (real-time, deadline, SCHED_IDLE) is left alone.
// Threads the thread starts (gRPC's, a session's helpers) run with the
// kernel's default slice: the request sets SCHED_FLAG_RESET_ON_FORK, unless
// the nice value is negative, which that flag would reset in them too.
//
// Thread-safety: each call affects only the calling thread.
#ifndef WALSHIP_COMMON_SCHED_SLICE_H_
#define WALSHIP_COMMON_SCHED_SLICE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/sys/syscalls.h"

namespace walship {

// The range the kernel accepts; a flag outside it is refused
// (ValidateSchedSlice), not clamped behind the operator's back.
inline constexpr absl::Duration kMinSchedSlice = absl::Microseconds(100);
inline constexpr absl::Duration kMaxSchedSlice = absl::Milliseconds(100);

// OK for zero (the kernel's default: nothing is requested) or a slice within
// [kMinSchedSlice, kMaxSchedSlice]; kInvalidArgument naming `flag` otherwise.
absl::Status ValidateSchedSlice(absl::Duration slice, absl::string_view flag);

// Asks the scheduler for `slice` for the calling thread, then reads it back.
// OK when it took effect, and when there was nothing to do (a zero slice, a
// policy other than SCHED_OTHER and SCHED_BATCH). Errors: the syscalls'
// (SysError: kPermissionDenied for EPERM, kInvalidArgument for EINVAL, ...);
// kUnimplemented when the kernel took the request but reports another slice
// (kernels before 6.12 ignore it).
absl::Status RequestThreadSlice(sys::SysCalls& sys, absl::Duration slice);

// RequestThreadSlice for a thread on a commit's path, named `thread` in the
// log: a failure is logged (the first of the process at warning, with what it
// costs, later ones at debug), never returned; the thread runs on with the
// kernel's default slice.
void RequestCommitPathSlice(sys::SysCalls& sys, absl::Duration slice,
                            absl::string_view thread);

}  // namespace walship

#endif  // WALSHIP_COMMON_SCHED_SLICE_H_
