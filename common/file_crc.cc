#include "common/file_crc.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"
#include "common/wire/crc32c.h"

namespace walship {
namespace {

// Bytes read per pread: small enough to stay in the CPU cache between the
// copy and the CRC, large enough that the syscall is a small part of it.
constexpr size_t kBufferBytes = 256u << 10;

// Returns Crc32c(bytes [offset, offset + length) of `fd`), read through `buf`.
absl::StatusOr<uint32_t> CrcThroughBuffer(sys::SysCalls& sys, int fd, uint64_t offset,
                                          uint64_t length, const std::string& context,
                                          uint8_t* buf) {
  uint32_t crc = 0;
  for (uint64_t pos = offset, end = offset + length; pos < end;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBufferBytes, end - pos));
    // A range past the end of the file ends here as kOutOfRange: no fstat
    // first, it would cost a syscall per frame on both sides.
    if (absl::Status s = sys::PreadFully(sys, fd, buf, n, static_cast<off_t>(pos)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
    }
    crc = wire::Crc32cExtend(crc, buf, n);
    pos += n;
  }
  return crc;
}

}  // namespace

absl::StatusOr<uint32_t> Crc32cOfFileRange(sys::SysCalls& sys, int fd, uint64_t offset,
                                           uint64_t length, const std::string& context,
                                           uint32_t seed) {
  FileCrcReader reader(sys);
  WALSHIP_ASSIGN_OR_RETURN(auto crcs, reader.Twice(fd, offset, length, context, seed, seed));
  return crcs.first;
}

absl::StatusOr<uint64_t> EndOfNonZeroBytes(sys::SysCalls& sys, int fd, uint64_t from,
                                           uint64_t to, const std::string& context) {
  std::vector<char> buf(1u << 16);
  while (to > from) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), to - from));
    absl::Status s = sys::PreadFully(sys, fd, buf.data(), n, to - n);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("read ", context, ": ", s.message()));
    for (size_t i = n; i > 0; --i) {
      if (buf[i - 1] != 0) return to - n + i;
    }
    to -= n;
  }
  return from;
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> Crc32cOfFileRangeTwice(
    sys::SysCalls& sys, int fd, uint64_t offset, uint64_t length, const std::string& context,
    uint32_t seed_a, uint32_t seed_b) {
  FileCrcReader reader(sys);
  return reader.Twice(fd, offset, length, context, seed_a, seed_b);
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> FileCrcReader::Twice(
    int fd, uint64_t offset, uint64_t length, const std::string& context, uint32_t seed_a,
    uint32_t seed_b) {
  if (length == 0) return std::make_pair(seed_a, seed_b);
  if (buf_ == nullptr) buf_.reset(new uint8_t[kBufferBytes]);
  // One pass over the bytes; both running CRCs take its result.
  WALSHIP_ASSIGN_OR_RETURN(uint32_t c,
                           CrcThroughBuffer(sys_, fd, offset, length, context, buf_.get()));
  return std::make_pair(wire::Crc32cCombine(seed_a, c, length),
                        wire::Crc32cCombine(seed_b, c, length));
}

}  // namespace walship
