// sched_slice.h: a short scheduler slice, or the real-time policy, for the
// threads a synchronous commit waits on.
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
// An operator who can grant it (CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least
// the priority) may instead put these threads under the real-time policy
// SCHED_FIFO (`--sched-fifo-priority`): once woken, a thread runs at once,
// before every thread of the normal policy. Their work per wake-up is small;
// the one that may also move a backlog (the replica's receiving thread)
// leaves the real-time policy while it does (CommitPathThread::Bulk), so a
// catch-up never keeps a CPU from the host's other programs.
//
// Thread-safety: each call affects only the calling thread.
#ifndef WALSHIP_COMMON_SCHED_SLICE_H_
#define WALSHIP_COMMON_SCHED_SLICE_H_

#include <cstdint>
#include <string>

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

// SCHED_FIFO's priorities; zero: the normal policy.
inline constexpr int kMaxSchedFifoPriority = 99;

// OK for zero or a priority within [1, kMaxSchedFifoPriority];
// kInvalidArgument naming `flag` otherwise.
absl::Status ValidateSchedFifoPriority(int64_t priority, absl::string_view flag);

// Puts the calling thread under SCHED_FIFO at `priority` (threads it starts
// get the normal policy back: reset-on-fork), then reads it back. Errors: the
// syscalls' (kPermissionDenied without CAP_SYS_NICE or a large enough
// RLIMIT_RTPRIO); kInternal when the kernel reports another policy.
absl::Status RequestThreadFifo(sys::SysCalls& sys, int priority);

// Returns the calling thread from a real-time policy to the normal one at
// `nice` (the value it had before; a real-time thread reports none), with
// `slice` (zero: the kernel's default). Errors: the syscalls'.
absl::Status LeaveThreadFifo(sys::SysCalls& sys, absl::Duration slice, int nice);

// CommitPathThread
//
// How one thread on a commit's path asks to be scheduled: under SCHED_FIFO
// when a priority is set, else with the short slice; and, for a thread that
// may also move bulk data, out of the real-time policy while it does.
// A refusal is logged (the first of the process at warning, with what it
// costs; later ones at debug), never returned: the thread then runs with the
// slice. Thread-compatible: made and used by the thread it schedules.
class CommitPathThread {
 public:
  // `fifo_priority` zero: the slice only. `thread` names it in the log.
  CommitPathThread(sys::SysCalls& sys, absl::Duration slice, int fifo_priority,
                   absl::string_view thread);

  // At the thread's start: Live(), or the slice when that is refused or no
  // priority is set. A thread under a policy an operator chose (chrt) is
  // left alone.
  void Start();

  // Bulk(): the thread is about to move a backlog; it leaves the real-time
  // policy (for the slice) until Live(): it waits for new bytes again.
  // Each makes a system call only when the policy changes.
  void Bulk();
  void Live();

  // Whether the thread runs under SCHED_FIFO now.
  bool realtime() const { return realtime_; }

 private:
  void Refused(const absl::Status& s);

  sys::SysCalls& sys_;
  const absl::Duration slice_;
  const int fifo_priority_;
  const std::string thread_;
  bool realtime_ = false;
  bool refused_ = false;  // the real-time policy: not asked for again
  bool checked_ = false;  // nice_ read, the policy found to be the normal one
  int nice_ = 0;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_SCHED_SLICE_H_
