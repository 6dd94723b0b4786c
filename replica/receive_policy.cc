#include "replica/receive_policy.h"

#include <sys/socket.h>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/wire/frame.h"

namespace walship::replica {

AfterFrame DecideAfterFrame(sys::SysCalls& sys, int sock, uint64_t deferred,
                            uint64_t max_deferred, uint32_t max_payload) {
  const sys::SysResult queued = sys.InputQueued(sock);
  if (!queued.ok()) return AfterFrame::kHandOff;
  if (queued.rc == 0) return AfterFrame::kSyncNow;
  if (static_cast<uint64_t>(queued.rc) < wire::kFrameHeaderSize) return AfterFrame::kHandOff;
  uint8_t raw[wire::kFrameHeaderSize];
  const sys::SysResult peeked = sys.Recv(sock, raw, sizeof(raw), MSG_PEEK | MSG_DONTWAIT);
  if (!peeked.ok() || peeked.rc != static_cast<int64_t>(sizeof(raw))) {
    return AfterFrame::kHandOff;
  }
  absl::StatusOr<wire::FrameHeader> next =
      wire::DecodeFrameHeader(absl::MakeConstSpan(raw, sizeof(raw)), max_payload);
  if (!next.ok() || next->type != wire::FrameType::kData) return AfterFrame::kHandOff;
  if (deferred + next->payload_length > max_deferred) return AfterFrame::kHandOff;
  if (static_cast<uint64_t>(queued.rc) < wire::kFrameHeaderSize + next->payload_length) {
    return AfterFrame::kHandOff;
  }
  return AfterFrame::kReadOn;
}

AfterFrame DecideAfterTlsFrame(sys::SysCalls& sys, int sock, size_t buffered) {
  if (buffered > 0) return AfterFrame::kHandOff;
  const sys::SysResult queued = sys.InputQueued(sock);
  if (queued.ok() && queued.rc == 0) return AfterFrame::kSyncNow;
  return AfterFrame::kHandOff;
}

}  // namespace walship::replica
