// transport.h: how a daemon moves payload bytes.
//
// kZeroCopy: sendfile(2) on the agent, splice(2) socket -> pipe -> file on the
// replica; payload never enters user space. kCopy: pread/write and read/pwrite
// through one reused buffer, for kernels or filesystems where sendfile or
// splice misbehave.
#ifndef WALSHIP_COMMON_TRANSPORT_H_
#define WALSHIP_COMMON_TRANSPORT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walship {

enum class Transport { kZeroCopy, kCopy };

// Parses "zerocopy" or "copy"; kInvalidArgument otherwise.
absl::StatusOr<Transport> ParseTransport(absl::string_view text);
const char* TransportName(Transport t);

}  // namespace walship

#endif  // WALSHIP_COMMON_TRANSPORT_H_
