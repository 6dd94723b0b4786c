#include "common/segment_patch.h"

#include <string>

#include "common/wire/crc32c.h"

namespace walship {

// CRC32C is affine over GF(2): for messages X, Y, Z of one length,
// crc(X ^ Y ^ Z) == crc(X) ^ crc(Y) ^ crc(Z). With D the message that is
// zero but for (before ^ after) at `offset`, and 0 the all-zero message:
//   crc(patched) = crc(original ^ D ^ 0) = crc(original) ^ crc(D) ^ crc(0).
// D and 0 share their zero bytes after the patch, so crc(D) ^ crc(0) is the
// difference of their heads [0, offset + n) carried over the L - offset - n
// zero bytes after it: Crc32cCombine(x, c, m) ^ Crc32cCombine(y, c, m)
// shifts x ^ y over m bytes (any c cancels).
uint32_t PatchedCrc32c(uint32_t crc, uint64_t length, uint64_t offset, absl::string_view before,
                       absl::string_view after) {
  const size_t n = before.size();
  std::string head_d(offset + n, '\0');
  std::string head_0(offset + n, '\0');
  for (size_t i = 0; i < n; ++i) {
    head_d[offset + i] = static_cast<char>(before[i] ^ after[i]);
  }
  const uint64_t rest = length - offset - n;
  const uint32_t d = wire::Crc32cCombine(wire::Crc32c(head_d.data(), head_d.size()), 0, rest);
  const uint32_t z = wire::Crc32cCombine(wire::Crc32c(head_0.data(), head_0.size()), 0, rest);
  return crc ^ d ^ z;
}

bool PatchAllowed(const SegmentPatch& patch, absl::string_view before,
                  const std::vector<MutableBits>& bits) {
  if (before.size() != patch.bytes.size()) return false;
  for (size_t i = 0; i < before.size(); ++i) {
    const uint8_t changed = static_cast<uint8_t>(before[i] ^ patch.bytes[i]);
    if (changed == 0) continue;
    uint8_t allowed = 0;
    for (const MutableBits& b : bits) {
      if (b.offset == patch.offset + i) allowed |= b.mask;
    }
    if ((changed & ~allowed) != 0) return false;
  }
  return true;
}

}  // namespace walship
