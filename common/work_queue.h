// work_queue.h: closures run in the order they were posted, on a fixed set
// of threads of our own.
//
// For work that must not run on the thread that posts it: the agent's
// control server serves every call from one completion-queue thread, and a
// handshake that reads a segment from disk would hold up every replica's
// acknowledgements behind it.
//
// Thread-safety: all methods are thread-safe.
#ifndef WALSHIP_COMMON_WORK_QUEUE_H_
#define WALSHIP_COMMON_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace walship {

class WorkQueue {
 public:
  // Starts `threads` (at least one) threads, each named `thread_name`.
  WorkQueue(std::string thread_name, int threads);
  ~WorkQueue();  // Stop()

  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `fn`; false (and `fn` dropped) once Stop() has begun.
  bool Post(std::function<void()> fn);
  // Refuses new work, runs what is queued, joins the threads. Idempotent.
  void Stop();

 private:
  void Run();

  const std::string thread_name_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // Stop() may race with itself
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace walship

#endif  // WALSHIP_COMMON_WORK_QUEUE_H_
