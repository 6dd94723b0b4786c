#include "common/work_queue.h"

#include <utility>

#include "common/sys/thread_name.h"

namespace walship {

WorkQueue::WorkQueue(std::string thread_name, int threads)
    : thread_name_(std::move(thread_name)) {
  absl::MutexLock lock(&join_mu_);
  for (int i = 0; i < (threads < 1 ? 1 : threads); ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

WorkQueue::~WorkQueue() { Stop(); }

bool WorkQueue::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  queue_.push_back(std::move(fn));
  return true;
}

void WorkQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  absl::MutexLock lock(&join_mu_);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkQueue::Run() {
  NameThisThread(thread_name_);
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, nothing left
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace walship
