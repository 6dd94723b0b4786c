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
  uint32_t a = seed_a, b = seed_b;
  constexpr size_t kPiece = 64 << 10;
  absl::Status s = VisitFileRange(sys, fd, offset, length, context,
                                  [&](const uint8_t* p, size_t n) {
                                    for (size_t done = 0; done < n; done += kPiece) {
                                      size_t m = std::min(kPiece, n - done);
                                      a = wire::Crc32cExtend(a, p + done, m);
                                      b = wire::Crc32cExtend(b, p + done, m);
                                    }
                                  });
  if (!s.ok()) return s;
  return std::make_pair(a, b);
}

}  // namespace walship
