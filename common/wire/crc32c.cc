// CRC32C: a slicing-by-8 table implementation plus the SSE4.2 CRC32
// instruction, selected once at run time. See crc32c.h.

#include "common/wire/crc32c.h"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WALSHIP_CRC32C_HAVE_SSE42_PATH 1
#include <nmmintrin.h>
#else
#define WALSHIP_CRC32C_HAVE_SSE42_PATH 0
#endif

namespace walship::wire {
namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kPolynomial = 0x82F63B78u;

// table[0] is the ordinary byte-at-a-time table. table[k][b] is the CRC
// contribution of byte b followed by k zero bytes, which lets the loop below
// fold eight input bytes with eight independent lookups.
struct SlicingTables {
  uint32_t table[8][256];
};

constexpr SlicingTables MakeSlicingTables() {
  SlicingTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    }
    t.table[0][i] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) {
      const uint32_t prev = t.table[k - 1][i];
      t.table[k][i] = (prev >> 8) ^ t.table[0][prev & 0xFF];
    }
  }
  return t;
}

constexpr SlicingTables kTables = MakeSlicingTables();

// The byte table must be the standard one; spot-check two entries.
static_assert(kTables.table[0][1] == 0xF26B8303u, "CRC32C table is wrong");
static_assert(kTables.table[0][255] == 0xAD7D5351u, "CRC32C table is wrong");

inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// Arithmetic on polynomials mod P, bit-reflected like the CRC (the x^0
// coefficient is the top bit): what a CRC register holds.
constexpr uint32_t kXPow0 = 1u << 31;

// a * b mod P.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = kXPow0; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// kX2n.p[k] = x^(2^k) mod P.
struct X2nTable {
  uint32_t p[32];
};
constexpr X2nTable MakeX2nTable() {
  X2nTable t{};
  uint32_t p = kXPow0 >> 1;  // x^1
  for (int k = 0; k < 32; ++k) {
    t.p[k] = p;
    p = MultModP(p, p);
  }
  return t;
}
constexpr X2nTable kX2n = MakeX2nTable();

// x^(8n) mod P: the operator that appends n zero bytes to a CRC register.
constexpr uint32_t X8nModP(uint64_t n) {
  uint32_t p = kXPow0;
  for (int k = 3; n != 0; n >>= 1, ++k) {
    if (n & 1) p = MultModP(kX2n.p[k & 31], p);
  }
  return p;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  return MultModP(X8nModP(len2), crc1) ^ crc2;
}

namespace internal {

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto& t = kTables.table;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t l = ~crc;
  while (n >= 8) {
    const uint32_t lo = l ^ LoadLe32(p);
    const uint32_t hi = LoadLe32(p + 4);
    l = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^
        t[4][lo >> 24] ^ t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^
        t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    l = t[0][(l ^ *p) & 0xFF] ^ (l >> 8);
    ++p;
    --n;
  }
  return ~l;
}

#if WALSHIP_CRC32C_HAVE_SSE42_PATH

bool HardwareCrc32cAvailable() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

namespace {

// Bytes per lane of the three-lane loop. The CRC32 instruction has a latency
// of three cycles but issues every cycle, so three independent lanes run
// about three times as fast as one; the lanes' CRCs are then joined with
// Crc32cCombine's operator for kLane zero bytes, computed at compile time.
constexpr size_t kLane = 8192;
constexpr uint32_t kShiftLane = X8nModP(kLane);

__attribute__((target("sse4.2"))) uint64_t OneLane(uint64_t l, const uint8_t* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    l = _mm_crc32_u64(l, word);
  }
  return l;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t Crc32cExtendHardware(
    uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t l32 = ~crc;
  // Reach an 8-byte boundary so the wide loads below are aligned.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    l32 = _mm_crc32_u8(l32, *p);
    ++p;
    --n;
  }
  uint64_t l64 = l32;
  while (n >= 3 * kLane) {
    // Registers (not finished CRCs): lane 0 continues l64, lanes 1 and 2
    // start from zero, and appending a lane's bytes to a register is
    // linear, so register(A B) = shift(register(A), |B|) ^ register0(B).
    uint64_t a = l64, b = 0, c = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kLane;
    const uint8_t* pc = p + 2 * kLane;
    for (size_t i = 0; i < kLane; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, pa + i, 8);
      std::memcpy(&wb, pb + i, 8);
      std::memcpy(&wc, pc + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    uint32_t r = MultModP(kShiftLane, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    r = MultModP(kShiftLane, r) ^ static_cast<uint32_t>(c);
    l64 = r;
    p += 3 * kLane;
    n -= 3 * kLane;
  }
  l64 = OneLane(l64, p, n);
  p += n & ~size_t{7};
  n &= 7;
  l32 = static_cast<uint32_t>(l64);
  while (n > 0) {
    l32 = _mm_crc32_u8(l32, *p);
    ++p;
    --n;
  }
  return ~l32;
}

#else  // !WALSHIP_CRC32C_HAVE_SSE42_PATH

bool HardwareCrc32cAvailable() { return false; }

uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t n) {
  return Crc32cExtendPortable(crc, data, n);
}

#endif  // WALSHIP_CRC32C_HAVE_SSE42_PATH

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  // Decided once; the initialization of a function-local static is
  // thread-safe.
  static const bool use_hardware = internal::HardwareCrc32cAvailable();
  return use_hardware ? internal::Crc32cExtendHardware(crc, data, n)
                      : internal::Crc32cExtendPortable(crc, data, n);
}

uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace walship::wire
