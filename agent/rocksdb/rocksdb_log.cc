#include "agent/rocksdb/rocksdb_log.h"

#include <algorithm>

#include "absl/base/internal/endian.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/wire/crc32c.h"

namespace walship::agent::rocksdb {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

bool AllZero(absl::string_view b) {
  return std::all_of(b.begin(), b.end(), [](char c) { return c == 0; });
}

bool Recyclable(uint8_t type) {
  return type >= kRecyclableFullType && type <= kRecyclableLastType;
}

// Where a scan is: the next physical record, the valid end so far, and
// whether a fragmented record is open.
struct Walk {
  uint64_t pos = 0;
  uint64_t valid = 0;
  bool in_fragment = false;
};

ContentEnd Held(const Walk& w, HeldBack why, std::string detail) {
  return ContentEnd{w.valid, why, std::move(detail)};
}

// Moves `w` past one physical record of `type` at w.pos of `len` bytes, or
// says why the order of fragments is wrong.
std::optional<std::string> Step(Walk& w, uint8_t type, uint64_t len) {
  const uint8_t base = Recyclable(type) ? type - 4 : type;
  const bool starts = base == kFullType || base == kFirstType || type == kSetCompressionType;
  if (starts == w.in_fragment) {
    return absl::StrCat("a record of type ", type,
                        w.in_fragment ? " inside a fragmented record"
                                      : " without the FIRST fragment before it");
  }
  w.pos += len;
  if (base == kFirstType) {
    w.in_fragment = true;
  } else if (base == kLastType || base == kFullType || type == kSetCompressionType) {
    w.in_fragment = false;
    w.valid = w.pos;
  }
  return std::nullopt;
}

}  // namespace

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

std::optional<uint64_t> LogNumber(absl::string_view name) {
  if (!absl::ConsumeSuffix(&name, ".log") || name.empty()) return std::nullopt;
  if (!std::all_of(name.begin(), name.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(name, &n)) return std::nullopt;
  return n;
}

absl::StatusOr<ContentEnd> RocksdbRecordScanner::ScanEnd(const std::string& name,
                                                         SegmentBytes& bytes, uint64_t from) {
  const uint32_t log_number = static_cast<uint32_t>(LogNumber(name).value_or(0));
  Walk w{from, from, false};
  while (true) {
    const uint64_t left = kBlockSize - w.pos % kBlockSize;
    auto hdr = bytes.Read(w.pos, std::min<uint64_t>(left, kRecyclableHeaderSize));
    if (!hdr.ok()) return hdr.status();
    if (hdr->empty()) {
      if (!w.in_fragment) return Held(w, HeldBack::kNone, "");
      return Held(w, HeldBack::kPartialRecord,
                  absl::StrCat("a fragmented record from offset ", w.valid,
                               " has no LAST fragment yet"));
    }
    if (left < kHeaderSize || (left < kRecyclableHeaderSize && AllZero(*hdr))) {
      if (hdr->size() < left) {
        return Held(w, HeldBack::kPartialRecord,
                    absl::StrCat("the trailer of the block at offset ", w.pos,
                                 " ends the file"));
      }
      w.pos += left;  // a block's trailer: records go on at the next block
      continue;
    }
    if (hdr->size() < kHeaderSize) {
      return Held(w, AllZero(*hdr) ? HeldBack::kPreallocated : HeldBack::kPartialRecord,
                  absl::StrCat("part of a header at offset ", w.pos));
    }
    const uint8_t type = static_cast<uint8_t>((*hdr)[6]);
    const uint64_t n = absl::little_endian::Load16(hdr->data() + 4);
    if (type == kZeroType && n == 0) {
      return Held(w, HeldBack::kPreallocated, absl::StrCat("a zero header at offset ", w.pos));
    }
    const uint64_t h = Recyclable(type) ? kRecyclableHeaderSize : kHeaderSize;
    if (h + n > left) {
      return Held(w, HeldBack::kBadChecksum,
                  absl::StrCat("the record at offset ", w.pos, " (", h + n,
                               " bytes) crosses its block's end"));
    }
    if (Recyclable(type) && hdr->size() == kRecyclableHeaderSize &&
        absl::little_endian::Load32(hdr->data() + 7) != log_number) {
      return Held(w, HeldBack::kRecycled,
                  absl::StrCat("the record at offset ", w.pos, " belongs to log ",
                               absl::little_endian::Load32(hdr->data() + 7),
                               ", not to log ", log_number, " (a recycled file's old data)"));
    }
    auto rec = bytes.Read(w.pos, h + n);
    if (!rec.ok()) return rec.status();
    if (rec->size() < h + n) {
      return Held(w, HeldBack::kPartialRecord,
                  absl::StrCat("the record at offset ", w.pos, " ends past the file's ",
                               bytes.size(), " bytes"));
    }
    const uint32_t want = UnmaskCrc(absl::little_endian::Load32(rec->data()));
    const uint32_t got = wire::Crc32c(rec->data() + 6, h + n - 6);
    if (want != got) {
      return Held(w, HeldBack::kBadChecksum,
                  absl::StrFormat("the record at offset %d: crc 0x%08x, its bytes give 0x%08x",
                                  w.pos, want, got));
    }
    if (type > kSetCompressionType) {
      return Held(w, HeldBack::kBadChecksum,
                  absl::StrCat("the record at offset ", w.pos, " has the unknown type ", type));
    }
    if (auto bad = Step(w, type, h + n); bad.has_value()) {
      return Held(w, HeldBack::kBadChecksum, absl::StrCat("at offset ", w.pos, ": ", *bad));
    }
  }
}

}  // namespace walship::agent::rocksdb
