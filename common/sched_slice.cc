#include "common/sched_slice.h"

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"
#include "spdlog/spdlog.h"

namespace walship {
namespace {

// `policy` (SCHED_OTHER or SCHED_BATCH) at `nice` with `slice`, keeping
// `flags`. Threads the thread starts get the kernel's defaults back
// (reset-on-fork), unless that would also reset a negative nice value an
// operator gave the process.
sys::SchedAttr NormalPolicy(uint32_t policy, int32_t nice, uint64_t flags,
                            absl::Duration slice) {
  sys::SchedAttr set = {};
  set.size = sizeof(set);
  set.sched_policy = policy;
  set.sched_nice = nice;
  set.sched_flags = flags;
  if (nice >= 0) set.sched_flags |= sys::kSchedFlagResetOnFork;
  set.sched_runtime = static_cast<uint64_t>(absl::ToInt64Nanoseconds(slice));
  return set;
}

}  // namespace

absl::Status ValidateSchedSlice(absl::Duration slice, absl::string_view flag) {
  if (slice == absl::ZeroDuration() ||
      (slice >= kMinSchedSlice && slice <= kMaxSchedSlice)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be 0 (the kernel's default) or between ",
                   absl::ToInt64Microseconds(kMinSchedSlice), " and ",
                   absl::ToInt64Microseconds(kMaxSchedSlice)));
}

absl::Status RequestThreadSlice(sys::SysCalls& sys, absl::Duration slice) {
  if (slice == absl::ZeroDuration()) return absl::OkStatus();
  sys::SchedAttr attr = {};
  sys::SysResult r = sys.SchedGetattr(&attr);
  if (!r.ok()) return sys::SysError(r, "sched_getattr of this thread");
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) {
    return absl::OkStatus();
  }
  // Everything else as it is: the policy, the nice value.
  const sys::SchedAttr set = NormalPolicy(attr.sched_policy, attr.sched_nice,
                                          attr.sched_flags & sys::kSchedFlagResetOnFork, slice);
  const uint64_t want = set.sched_runtime;
  r = sys.SchedSetattr(&set);
  if (!r.ok()) {
    return sys::SysError(r, absl::StrCat("sched_setattr of this thread (slice ",
                                         absl::FormatDuration(slice), ")"));
  }
  attr = {};
  r = sys.SchedGetattr(&attr);
  if (!r.ok()) return sys::SysError(r, "sched_getattr of this thread");
  if (attr.sched_runtime != want) {
    return absl::UnimplementedError(absl::StrCat(
        "the kernel took a slice of ", absl::FormatDuration(slice), " but reports ",
        attr.sched_runtime, " ns (Linux 6.12 and later honour a thread's slice)"));
  }
  return absl::OkStatus();
}

void RequestCommitPathSlice(sys::SysCalls& sys, absl::Duration slice,
                            absl::string_view thread) {
  absl::Status s = RequestThreadSlice(sys, slice);
  if (s.ok()) return;
  const std::string name(thread);  // fmt 9 does not format absl::string_view
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn(
        "{}: cannot shorten the thread's scheduler slice to {} (--sched-slice-us), so it "
        "and the commit-path threads after it keep the kernel's default: on busy CPUs a "
        "synchronous commit may wait longer for them: {}",
        name, absl::FormatDuration(slice), s.ToString());
  } else {
    spdlog::debug("{}: cannot shorten the thread's scheduler slice: {}", name, s.ToString());
  }
}

absl::Status ValidateSchedFifoPriority(int64_t priority, absl::string_view flag) {
  if (priority >= 0 && priority <= kMaxSchedFifoPriority) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag,
                                                 " must be 0 (the normal policy) or between 1 and ",
                                                 kMaxSchedFifoPriority));
}

absl::Status RequestThreadFifo(sys::SysCalls& sys, int priority) {
  sys::SchedAttr set = {};
  set.size = sizeof(set);
  set.sched_policy = SCHED_FIFO;
  set.sched_priority = static_cast<uint32_t>(priority);
  set.sched_flags = sys::kSchedFlagResetOnFork;
  sys::SysResult r = sys.SchedSetattr(&set);
  if (!r.ok()) {
    return sys::SysError(r, absl::StrCat("sched_setattr of this thread (SCHED_FIFO, priority ",
                                         priority, ")"));
  }
  sys::SchedAttr attr = {};
  r = sys.SchedGetattr(&attr);
  if (!r.ok()) return sys::SysError(r, "sched_getattr of this thread");
  if (attr.sched_policy != SCHED_FIFO || attr.sched_priority != set.sched_priority) {
    return absl::InternalError(absl::StrCat("asked for SCHED_FIFO at priority ", priority,
                                            ", the kernel reports policy ", attr.sched_policy,
                                            " at priority ", attr.sched_priority));
  }
  return absl::OkStatus();
}

absl::Status LeaveThreadFifo(sys::SysCalls& sys, absl::Duration slice, int nice) {
  const sys::SchedAttr set = NormalPolicy(SCHED_OTHER, nice, 0, slice);
  sys::SysResult r = sys.SchedSetattr(&set);
  if (!r.ok()) return sys::SysError(r, "sched_setattr of this thread (SCHED_OTHER)");
  return absl::OkStatus();
}

CommitPathThread::CommitPathThread(sys::SysCalls& sys, absl::Duration slice, int fifo_priority,
                                   absl::string_view thread)
    : sys_(sys), slice_(slice), fifo_priority_(fifo_priority), thread_(thread) {}

void CommitPathThread::Start() {
  Live();
  if (!realtime_) RequestCommitPathSlice(sys_, slice_, thread_);
}

void CommitPathThread::Bulk() {
  if (!realtime_) return;
  if (absl::Status s = LeaveThreadFifo(sys_, slice_, nice_); !s.ok()) {
    // Still real-time: the next Bulk() tries again.
    spdlog::warn("{}: cannot leave the real-time policy for a backlog: {}", thread_,
                 s.ToString());
    return;
  }
  realtime_ = false;
}

void CommitPathThread::Live() {
  if (realtime_ || refused_ || fifo_priority_ == 0) return;
  if (!checked_) {
    // The nice value to keep when leaving; a policy an operator chose
    // (chrt) is left alone.
    sys::SchedAttr attr = {};
    sys::SysResult r = sys_.SchedGetattr(&attr);
    if (!r.ok()) return Refused(sys::SysError(r, "sched_getattr of this thread"));
    if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) {
      refused_ = true;
      return;
    }
    nice_ = attr.sched_nice;
    checked_ = true;
  }
  if (absl::Status s = RequestThreadFifo(sys_, fifo_priority_); !s.ok()) return Refused(s);
  realtime_ = true;
}

void CommitPathThread::Refused(const absl::Status& s) {
  refused_ = true;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn(
        "{}: cannot run under the real-time policy SCHED_FIFO at priority {} "
        "(--sched-fifo-priority; needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least that), so "
        "it and the commit-path threads after it use the scheduler slice instead: on busy "
        "CPUs a synchronous commit may wait longer for them: {}",
        thread_, fifo_priority_, s.ToString());
  } else {
    spdlog::debug("{}: cannot run under SCHED_FIFO: {}", thread_, s.ToString());
  }
}

}  // namespace walship
