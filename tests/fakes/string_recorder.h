// string_recorder.h: the strings a callback under test reported (refusal
// reasons, events), in order.
#ifndef WALSHIP_TESTS_FAKES_STRING_RECORDER_H_
#define WALSHIP_TESTS_FAKES_STRING_RECORDER_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace walship::testing {

// Thread-safe: Add from the code under test's threads, All from the test's.
class StringRecorder {
 public:
  void Add(const std::string& s) {
    absl::MutexLock lock(&mu_);
    recorded_.push_back(s);
  }
  std::vector<std::string> All() const {
    absl::MutexLock lock(&mu_);
    return recorded_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> recorded_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_STRING_RECORDER_H_
