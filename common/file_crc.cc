#include "common/file_crc.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"
#include "common/wire/crc32c.h"

namespace walship {
namespace {
// Mapping in windows bounds the address space one call uses, whatever the
// segment size.
constexpr uint64_t kWindow = 8u << 20;
}  // namespace

namespace {

// Calls `visit(bytes, n)` for consecutive pieces of [offset, offset + length)
// of `fd`, read through read-only mappings of at most kWindow bytes.
template <typename Visit>
absl::Status VisitFileRange(sys::SysCalls& sys, int fd, uint64_t offset, uint64_t length,
                            const std::string& context, Visit visit) {
  if (length == 0) return absl::OkStatus();
  struct stat st;
  sys::SysResult r = sys.Fstat(fd, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", context));
  if (static_cast<uint64_t>(st.st_size) < offset + length) {
    return absl::OutOfRangeError(
        absl::StrCat(context, ": range [", offset, ", ", offset + length,
                     ") is past the end of the file (", st.st_size, " bytes)"));
  }
  const uint64_t page = 4096;
  uint64_t pos = offset;
  const uint64_t end = offset + length;
  while (pos < end) {
    uint64_t map_start = pos & ~(page - 1);
    uint64_t map_end = std::min(end, map_start + kWindow);
    size_t map_len = static_cast<size_t>(map_end - map_start);
    void* addr = nullptr;
    // MAP_POPULATE maps the whole window in one call instead of one page
    // fault per 4 KiB page, which otherwise dominates the cost.
    r = sys.Mmap(nullptr, map_len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                 static_cast<off_t>(map_start), &addr);
    if (!r.ok()) {
      return sys::ErrnoToStatus(r.err,
                                absl::StrCat("mmap ", context, " at offset ", map_start));
    }
    const auto* base = static_cast<const uint8_t*>(addr);
    visit(base + (pos - map_start), static_cast<size_t>(map_end - pos));
    sys.Munmap(addr, map_len);
    pos = map_end;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint32_t> Crc32cOfFileRange(sys::SysCalls& sys, int fd, uint64_t offset,
                                           uint64_t length, const std::string& context,
                                           uint32_t seed) {
  uint32_t crc = seed;
  absl::Status s = VisitFileRange(sys, fd, offset, length, context,
                                  [&](const uint8_t* p, size_t n) {
                                    crc = wire::Crc32cExtend(crc, p, n);
                                  });
  if (!s.ok()) return s;
  return crc;
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> Crc32cOfFileRangeTwice(
    sys::SysCalls& sys, int fd, uint64_t offset, uint64_t length, const std::string& context,
    uint32_t seed_a, uint32_t seed_b) {
  // One pass over the bytes; both running CRCs take its result.
  uint32_t a = seed_a, b = seed_b;
  absl::Status s = VisitFileRange(sys, fd, offset, length, context,
                                  [&](const uint8_t* p, size_t n) {
                                    const uint32_t c = wire::Crc32c(p, n);
                                    a = wire::Crc32cCombine(a, c, n);
                                    b = wire::Crc32cCombine(b, c, n);
                                  });
  if (!s.ok()) return s;
  return std::make_pair(a, b);
}

void FileCrcReader::Reset() {
  if (addr_ != nullptr) sys_.Munmap(addr_, len_);
  addr_ = nullptr;
  len_ = 0;
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> FileCrcReader::Twice(
    int fd, uint64_t offset, uint64_t length, const std::string& context, uint32_t seed_a,
    uint32_t seed_b) {
  if (length == 0) return std::make_pair(seed_a, seed_b);
  struct stat st;
  sys::SysResult r = sys_.Fstat(fd, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", context));
  if (static_cast<uint64_t>(st.st_size) < offset + length) {
    return absl::OutOfRangeError(
        absl::StrCat(context, ": range [", offset, ", ", offset + length,
                     ") is past the end of the file (", st.st_size, " bytes)"));
  }
  // A window of whole 2 MiB steps around the range: one mmap per window,
  // and at most a window or two of mapped pages count against RSS, whatever
  // the segment size. Tearing a window down costs about 130 ns per mapped
  // page here (0.5 ms for 16 MiB, in the one thread that must wait for it:
  // at a segment boundary, the shipper or the receiver), so windows stay
  // small enough that no single munmap stalls the stream.
  constexpr uint64_t kStep = 2ull << 20;
  if (addr_ == nullptr || static_cast<uint64_t>(st.st_dev) != dev_ ||
      static_cast<uint64_t>(st.st_ino) != ino_ || offset < start_ ||
      offset + length > start_ + len_) {
    Reset();
    uint64_t start = offset / kStep * kStep;
    uint64_t end = (offset + length + kStep - 1) / kStep * kStep;
    void* addr = nullptr;
    // Mapping past the end of the file is allowed; only touching those pages
    // would fault, and the range checked above never does.
    r = sys_.Mmap(nullptr, static_cast<size_t>(end - start), PROT_READ, MAP_SHARED, fd,
                  static_cast<off_t>(start), &addr);
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("mmap ", context));
    addr_ = addr;
    start_ = start;
    len_ = end - start;
    dev_ = static_cast<uint64_t>(st.st_dev);
    ino_ = static_cast<uint64_t>(st.st_ino);
  }
  const auto* data = static_cast<const uint8_t*>(addr_) + (offset - start_);
  const uint64_t in_page = (offset - start_) & uint64_t{4095};
#ifdef MADV_POPULATE_READ
  // One call maps the range's pages instead of a fault per page; older
  // kernels refuse it and fault as usual.
  madvise(const_cast<uint8_t*>(data - in_page), static_cast<size_t>(length + in_page),
          MADV_POPULATE_READ);
#endif
  // One pass over the bytes; both running CRCs take its result.
  const uint32_t c = wire::Crc32c(data, static_cast<size_t>(length));
  return std::make_pair(wire::Crc32cCombine(seed_a, c, length),
                        wire::Crc32cCombine(seed_b, c, length));
}

}  // namespace walship
