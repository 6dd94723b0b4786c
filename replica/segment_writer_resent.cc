// SegmentWriter's comparison of resent bytes (segment_writer.h), apart from
// segment_writer.cc for its size.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/transfer.h"
#include "common/wire/crc32c.h"
#include "replica/segment_writer.h"

namespace walship::replica {

absl::Status SegmentWriter::CompareResent(int sock, net::DataConn* tls, const FrameTarget& t,
                                          uint64_t off, uint64_t overlap, uint32_t* crc) {
  if (buffer_.size() < options_.copy_buffer_bytes) buffer_.resize(options_.copy_buffer_bytes);
  std::vector<char> disk(buffer_.size());
  for (uint64_t done = 0; done < overlap;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(overlap - done, buffer_.size()));
    WALSHIP_RETURN_IF_ERROR(tls != nullptr
                                ? tls->ReadFully(buffer_.data(), n, options_.io)
                                : sys::ReadFully(sys_, sock, buffer_.data(), n, options_.io));
    WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys_, t.fd->get(), disk.data(), n, off + done));
    if (std::memcmp(buffer_.data(), disk.data(), n) != 0) {
      size_t at = 0;
      while (buffer_[at] == disk[at]) ++at;
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
          "divergent history: resent bytes of ", t.name, " differ from the replica's at offset ",
          off + done + at, "; refusing to overwrite")), Reason::kDivergent);
    }
    *crc = wire::Crc32cExtend(*crc, buffer_.data(), n);
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace walship::replica
