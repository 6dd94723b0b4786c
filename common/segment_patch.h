// segment_patch.h: bytes a database rewrites in place in a segment it
// already wrote, and the CRC32C arithmetic that lets both ends compare
// copies that differ only there.
//
// Most logs only grow. MariaDB rewrites one bit of a binlog after it wrote
// it: the in-use flag of its format description event, cleared when the
// server closes the binlog. A format declares such bits (MutableBits: a byte
// offset within every segment and a mask of the bits that may change); the
// agent then
//   * accepts a replica's prefix whose CRC32C matches the source's with any
//     combination of the declared bits changed (and nothing else);
//   * when a segment completes, sends the source's final value of every
//     declared byte within it in the Checkpoint (a SegmentPatch), so the
//     replica writes them before checking the segment's length and CRC32C:
//     its copy ends byte-identical to the source's.
// Only declared bits may differ: PatchAllowed() tells a patch that changes
// anything else (never applied).
//
// PatchedCrc32c computes the CRC32C of bytes after a patch from their CRC32C
// before it, reading only the patched bytes (CRC32C is affine: see the .cc).
//
// Thread-safety: functions only.
#ifndef WALSHIP_COMMON_SEGMENT_PATCH_H_
#define WALSHIP_COMMON_SEGMENT_PATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace walship {

// Bits of the byte at `offset` (in every segment of a format) that the
// database may change after it wrote them.
struct MutableBits {
  uint64_t offset = 0;
  uint8_t mask = 0;
};

// Bytes written over a segment's bytes at `offset`.
struct SegmentPatch {
  uint64_t offset = 0;
  std::string bytes;
};

// The most bytes one Checkpoint may patch; a longer patch is refused.
inline constexpr size_t kMaxPatchBytes = 64;

// Given crc == CRC32C of `length` bytes, the CRC32C of the same bytes with
// those at [offset, offset + before.size()) changed from `before` to
// `after` (same size; offset + size <= length).
uint32_t PatchedCrc32c(uint32_t crc, uint64_t length, uint64_t offset, absl::string_view before,
                       absl::string_view after);

// Every CRC32C the `length` bytes could have if any combination of the
// declared bits inside them were flipped, the original first. `byte_at(offset)`
// returns the current byte at `offset` (< length). At most 2^8 alternatives
// (only the first 8 declared bits inside the range are varied).
template <class ReadByte>
std::vector<uint32_t> MaskedCrcAlternatives(uint32_t crc, uint64_t length,
                                            const std::vector<MutableBits>& bits,
                                            ReadByte byte_at) {
  std::vector<uint32_t> out{crc};
  int varied = 0;
  for (const MutableBits& b : bits) {
    if (b.offset >= length) continue;
    const char cur = static_cast<char>(byte_at(b.offset));
    for (int bit = 0; bit < 8 && varied < 8; ++bit) {
      const uint8_t m = static_cast<uint8_t>(1u << bit);
      if ((b.mask & m) == 0) continue;
      ++varied;
      const char flipped = static_cast<char>(static_cast<uint8_t>(cur) ^ m);
      // What flipping the bit changes in any CRC of these `length` bytes.
      const uint32_t delta = PatchedCrc32c(0, length, b.offset, absl::string_view(&cur, 1),
                                           absl::string_view(&flipped, 1));
      const size_t n = out.size();
      for (size_t i = 0; i < n; ++i) out.push_back(out[i] ^ delta);
    }
  }
  return out;
}

// True when writing `patch` over bytes `before` (the same size) changes only
// bits `bits` declares.
bool PatchAllowed(const SegmentPatch& patch, absl::string_view before,
                  const std::vector<MutableBits>& bits);

}  // namespace walship

#endif  // WALSHIP_COMMON_SEGMENT_PATCH_H_
