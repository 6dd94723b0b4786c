// -----------------------------------------------------------------------------
// File: common/wire/crc32c.h
// -----------------------------------------------------------------------------
//
// CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum of iSCSI (RFC 3720 section 12.1) and of the walship wire format
// (common/wire/wire_format.md). Values are the standard ones: initial value
// 0xFFFFFFFF, reflected input and output, final XOR 0xFFFFFFFF, so
// Crc32c("123456789", 9) == 0xE3069283.
//
// On x86-64 CPUs with SSE4.2 the CRC32 instruction is used; the choice is made
// once, at the first call, by asking the CPU. Elsewhere a table-driven
// slicing-by-8 implementation is used. Both give identical results.
//
// Thread-safety: every function here is pure and may be called concurrently.
//
// Example:
//
//   uint32_t crc = walship::wire::Crc32c(header, 16);
//   crc = walship::wire::Crc32cExtend(crc, body, body_len);
//   // crc == Crc32c(header followed by body)

#ifndef WALSHIP_COMMON_WIRE_CRC32C_H_
#define WALSHIP_COMMON_WIRE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace walship::wire {

// Returns the CRC32C of the `n` bytes at `data`. `data` may be null only when
// `n` is 0. No alignment is required. Crc32c(p, 0) == 0.
uint32_t Crc32c(const void* data, size_t n);

// Continues a CRC: given `crc` == Crc32c(a), returns Crc32c(a followed by the
// `n` bytes at `data`). Crc32cExtend(0, data, n) == Crc32c(data, n), and
// Crc32cExtend(crc, p, 0) == crc.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// Given crc1 == Crc32c(a) and crc2 == Crc32c(b) with b `len2` bytes long,
// returns Crc32c(a followed by b) without reading either: lets one pass over
// data feed two running checksums (a frame's and its segment's).
uint32_t Crc32cCombine(uint32_t crc1, uint32_t crc2, uint64_t len2);

namespace internal {

// The portable slicing-by-8 implementation, always available. Same contract
// as Crc32cExtend. Exposed so tests can compare it with the hardware path.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

// True when this CPU supports the SSE4.2 CRC32 instruction and this build has
// the hardware path compiled in.
bool HardwareCrc32cAvailable();

// The hardware implementation. Same contract as Crc32cExtend. Must only be
// called when HardwareCrc32cAvailable() is true.
uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t n);

}  // namespace internal
}  // namespace walship::wire

#endif  // WALSHIP_COMMON_WIRE_CRC32C_H_
