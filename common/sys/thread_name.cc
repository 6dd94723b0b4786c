#include "common/sys/thread_name.h"

#include <pthread.h>

#include <string>

namespace walship {

void NameThisThread(absl::string_view name) {
  std::string n(name.substr(0, 15));
  // Only fails for names over 15 bytes, which were cut above; naming is a
  // diagnostic aid, so there is nothing to do on failure anyway.
  (void)pthread_setname_np(pthread_self(), n.c_str());
}

}  // namespace walship
