// thread_name.h: names the calling thread for top -H, ps -L, gdb and perf.
//
// Every walship thread names itself ("ws-" and its job) as its first
// statement, so an operator looking at a busy daemon sees which part is
// busy. Linux keeps at most 15 bytes; a longer name is cut there.
//
// Thread-safety: affects only the calling thread.
#ifndef WALSHIP_COMMON_SYS_THREAD_NAME_H_
#define WALSHIP_COMMON_SYS_THREAD_NAME_H_

#include "absl/strings/string_view.h"

namespace walship {

void NameThisThread(absl::string_view name);

}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_THREAD_NAME_H_
