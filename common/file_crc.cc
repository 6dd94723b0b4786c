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

absl::StatusOr<uint32_t> Crc32cOfFileRange(sys::SysCalls& sys, int fd,
                                           uint64_t offset, uint64_t length,
                                           const std::string& context,
                                           uint32_t seed) {
  uint32_t crc = seed;
  if (length == 0) return crc;
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
    r = sys.Mmap(nullptr, map_len, PROT_READ, MAP_SHARED, fd,
                 static_cast<off_t>(map_start), &addr);
    if (!r.ok()) {
      return sys::ErrnoToStatus(
          r.err, absl::StrCat("mmap ", context, " at offset ", map_start));
    }
    const auto* base = static_cast<const uint8_t*>(addr);
    crc = wire::Crc32cExtend(crc, base + (pos - map_start), map_end - pos);
    sys.Munmap(addr, map_len);
    pos = map_end;
  }
  return crc;
}

}  // namespace walship
