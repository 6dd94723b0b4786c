#include "common/sys/grpc_polling.h"

#include <cstdlib>

namespace walship {

void PollEachCallsOwnConnections() {
  // Fails only without memory for the environment; gRPC then keeps its
  // default engine, which is correct, only busier.
  (void)setenv("GRPC_POLL_STRATEGY", "poll", /*overwrite=*/0);
}

}  // namespace walship
