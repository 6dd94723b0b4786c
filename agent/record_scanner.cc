#include "agent/record_scanner.h"

#include <algorithm>

#include "common/status_macros.h"
#include "common/sys/transfer.h"

namespace walship::agent {

absl::string_view HeldBackName(HeldBack reason) {
  switch (reason) {
    case HeldBack::kNone:
      return "none";
    case HeldBack::kPartialRecord:
      return "partial_record";
    case HeldBack::kPreallocated:
      return "preallocated";
    case HeldBack::kRecycled:
      return "recycled";
    case HeldBack::kBadChecksum:
      return "bad_checksum";
  }
  return "unknown";
}

absl::StatusOr<absl::string_view> SegmentBytes::Read(uint64_t offset, size_t n) {
  if (offset >= size_) return absl::string_view();
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  if (offset < buf_at_ || offset + n > buf_at_ + buf_.size()) {
    const size_t len =
        static_cast<size_t>(std::min<uint64_t>(std::max(n, window_), size_ - offset));
    buf_.resize(len);
    buf_at_ = offset;
    absl::Status s = sys::PreadFully(sys_, fd_, buf_.data(), len, static_cast<off_t>(offset));
    if (!s.ok()) {
      buf_.clear();
      return s;
    }
  }
  return absl::string_view(buf_.data() + (offset - buf_at_), n);
}

}  // namespace walship::agent
