#include "agent/segment_patches.h"

#include <algorithm>

#include "common/status_macros.h"
#include "common/sys/transfer.h"

namespace walship::agent {

absl::StatusOr<bool> MatchesButMutable(sys::SysCalls& sys, int fd, uint64_t begin, uint64_t length, uint32_t file_crc,
                                       uint32_t other_crc,
                                       const std::vector<MutableBits>& bits) {
  if (file_crc == other_crc) return true;
  // The declared bits inside the range, at offsets relative to `begin`.
  std::vector<MutableBits> inside;
  std::vector<char> current;
  for (const MutableBits& b : bits) {
    if (b.offset < begin || b.offset >= begin + length) continue;
    char c = 0;
    WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys, fd, &c, 1, static_cast<off_t>(b.offset)));
    inside.push_back(MutableBits{b.offset - begin, b.mask});
    current.push_back(c);
  }
  if (inside.empty()) return false;
  auto byte_at = [&](uint64_t off) {
    for (size_t i = 0; i < inside.size(); ++i) {
      if (inside[i].offset == off) return static_cast<uint8_t>(current[i]);
    }
    return uint8_t{0};  // never: only declared offsets are read
  };
  const std::vector<uint32_t> alts = MaskedCrcAlternatives(file_crc, length, inside, byte_at);
  return std::find(alts.begin(), alts.end(), other_crc) != alts.end();
}

absl::StatusOr<std::vector<SegmentPatch>> FinalPatches(sys::SysCalls& sys, int fd,
                                                       uint64_t length,
                                                       const std::vector<MutableBits>& bits) {
  std::vector<SegmentPatch> out;
  for (const MutableBits& b : bits) {
    if (b.offset >= length) continue;
    SegmentPatch p;
    p.offset = b.offset;
    p.bytes.resize(1);
    WALSHIP_RETURN_IF_ERROR(
        sys::PreadFully(sys, fd, p.bytes.data(), 1, static_cast<off_t>(b.offset)));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace walship::agent
