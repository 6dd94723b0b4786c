// Test-only PostgreSQL 15 WAL synthesis. See wal_builder.h.

#include "tests/common/pgwal/wal_builder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/wire/crc32c.h"

namespace walship::pg::testing {
namespace {

// Own little-endian stores and field offsets, deliberately not the ones of
// common/pgwal, so a layout mistake there is not mirrored here.
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

constexpr uint16_t kContRecord = 0x0001;
constexpr uint16_t kLongHeader = 0x0002;
constexpr uint16_t kOverwriteContRecord = 0x0008;
constexpr size_t kShortHeader = 24;
constexpr size_t kLongHeaderSize = 40;
constexpr size_t kXLogRecordSize = 24;

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

}  // namespace

uint32_t RecordCrc(const uint8_t* record, uint32_t total_len) {
  uint32_t crc =
      wire::Crc32c(record + kXLogRecordSize, total_len - kXLogRecordSize);
  return wire::Crc32cExtend(crc, record, 20);
}

WalBuilder::WalBuilder(const WalBuilderOptions& opts, Lsn start, Lsn prev)
    : opts_(opts), insert_(start), last_record_(prev) {}

WalExpectations WalBuilder::expectations() const {
  WalExpectations exp;
  exp.system_id = opts_.system_id;
  exp.segment_size = opts_.segment_size;
  exp.block_size = opts_.block_size;
  exp.magic = opts_.magic;
  return exp;
}

uint8_t* WalBuilder::At(Lsn lsn) {
  const uint64_t segno = lsn / opts_.segment_size;
  std::vector<uint8_t>& seg = segments_[segno];
  if (seg.size() < opts_.segment_size) seg.resize(opts_.segment_size, 0);
  return seg.data() + lsn % opts_.segment_size;
}

void WalBuilder::WritePageHeader(Lsn page, uint32_t rem_len) {
  const bool is_long = page % opts_.segment_size == 0;
  uint16_t info = (is_long ? kLongHeader : 0) |
                  (rem_len > 0 ? kContRecord : 0) | next_page_extra_flags_;
  next_page_extra_flags_ = 0;
  uint8_t* p = At(page);
  std::memset(p, 0, is_long ? kLongHeaderSize : kShortHeader);
  Put16(p + 0, opts_.magic);
  Put16(p + 2, info);
  Put32(p + 4, opts_.timeline);
  Put64(p + 8, page);
  Put32(p + 16, rem_len);
  if (is_long) {
    Put64(p + 24, opts_.system_id);
    Put32(p + 32, static_cast<uint32_t>(opts_.segment_size));
    Put32(p + 36, opts_.block_size);
  }
}

void WalBuilder::WriteRecordBytes(const uint8_t* data, size_t n,
                                  uint64_t remaining) {
  const uint64_t block = opts_.block_size;
  Lsn pos = insert_;
  size_t written = 0;
  while (written < n) {
    if (pos % block == 0) {
      // The record's first bytes never start a page right at its boundary
      // (Append() accounted for the header), so a header written here with
      // bytes already written announces a continuation.
      WritePageHeader(
          pos, written == 0 ? 0 : static_cast<uint32_t>(remaining - written));
      pos += (pos % opts_.segment_size == 0) ? kLongHeaderSize : kShortHeader;
    }
    const size_t chunk = std::min<uint64_t>(n - written, block - pos % block);
    std::memcpy(At(pos), data + written, chunk);
    pos += chunk;
    written += chunk;
  }
  last_record_end_ = pos;
  insert_ = Align8(pos);
}

Lsn WalBuilder::Append(const RecordSpec& spec) {
  const uint64_t block = opts_.block_size;
  // Enter the page first if the insert position is a page boundary.
  if (insert_ % block == 0) {
    WritePageHeader(insert_, 0);
    insert_ +=
        (insert_ % opts_.segment_size == 0) ? kLongHeaderSize : kShortHeader;
  }
  const Lsn rec = insert_;

  std::vector<uint8_t> bytes(spec.total_len, 0);
  uint8_t* h = bytes.data();
  Put32(h + 0, spec.total_len);
  Put32(h + 4, spec.xid);
  Put64(h + 8, spec.prev.value_or(last_record_));
  h[16] = spec.info;
  h[17] = spec.rmid;
  uint32_t x = spec.seed * 2654435761u + static_cast<uint32_t>(rec);
  for (size_t i = kXLogRecordSize; i < bytes.size(); ++i) {
    x = x * 1103515245u + 12345u;
    bytes[i] = static_cast<uint8_t>(x >> 16);
  }
  uint32_t crc = RecordCrc(bytes.data(), spec.total_len);
  if (spec.corrupt_crc) crc ^= 0x5A5A0001u;
  Put32(h + 20, crc);

  WriteRecordBytes(bytes.data(), bytes.size(), bytes.size());
  previous_record_ = last_record_;
  last_record_ = rec;
  return rec;
}

Lsn WalBuilder::AppendSwitch() {
  RecordSpec spec;
  spec.total_len = kXLogRecordSize;
  spec.rmid = 0;     // RM_XLOG_ID
  spec.info = 0x40;  // XLOG_SWITCH
  const Lsn rec = Append(spec);
  const uint64_t seg = opts_.segment_size;
  insert_ = (insert_ + seg - 1) / seg * seg;
  return rec;
}

Lsn WalBuilder::PadTo(Lsn target) {
  const uint64_t block = opts_.block_size;
  Lsn from = insert_;
  if (from % block == 0) {
    from += (from % opts_.segment_size == 0) ? kLongHeaderSize : kShortHeader;
  }
  if (target < from + kXLogRecordSize || target % 8 != 0 ||
      target - from > block - from % block) {
    std::fprintf(stderr, "PadTo(%llu) impossible from %llu\n",
                 static_cast<unsigned long long>(target),
                 static_cast<unsigned long long>(from));
    std::abort();
  }
  return Append(static_cast<uint32_t>(target - from));
}

int WalBuilder::AppendUntil(Lsn lsn, uint32_t len) {
  int n = 0;
  while (insert_ < lsn) {
    RecordSpec spec;
    spec.total_len = len;
    spec.seed = static_cast<uint32_t>(n);
    Append(spec);
    ++n;
  }
  return n;
}

void WalBuilder::AbandonLastRecord(Lsn missing_page) {
  const uint64_t block = opts_.block_size;
  const Lsn zero_to = (last_record_end_ + block - 1) / block * block;
  ZeroRange(missing_page, zero_to);
  last_record_ = previous_record_;
  insert_ = missing_page;
  next_page_extra_flags_ = kOverwriteContRecord;
}

void WalBuilder::ZeroRange(Lsn from, Lsn to) {
  for (Lsn p = from; p < to;) {
    const uint64_t segno = p / opts_.segment_size;
    const uint64_t off = p % opts_.segment_size;
    const uint64_t n = std::min<uint64_t>(to - p, opts_.segment_size - off);
    auto it = segments_.find(segno);
    if (it != segments_.end() && off < it->second.size()) {
      const uint64_t m = std::min<uint64_t>(n, it->second.size() - off);
      std::memset(it->second.data() + off, 0, m);
    }
    p += n;
  }
}

void WalBuilder::TruncateSegment(uint64_t segno, uint64_t size) {
  auto it = segments_.find(segno);
  if (it != segments_.end() && it->second.size() > size) {
    it->second.resize(size);
  }
}

void WalBuilder::ReplaceSegment(uint64_t segno, std::vector<uint8_t> bytes) {
  segments_[segno] = std::move(bytes);
}

void WalBuilder::SetPageInfo(Lsn page, uint16_t set, uint16_t clear) {
  uint8_t* p = At(page);
  uint16_t info = static_cast<uint16_t>(p[2] | (p[3] << 8));
  info = static_cast<uint16_t>((info | set) & ~clear);
  Put16(p + 2, info);
}

void WalBuilder::FixCrc(Lsn rec) {
  uint8_t* p = At(rec);
  const uint32_t total_len = Get32(p);
  Put32(p + 20, RecordCrc(p, total_len));
}

absl::Status WalBuilder::WriteTo(const std::string& dir) const {
  for (const auto& [segno, bytes] : segments_) {
    const std::string path = absl::StrCat(
        dir, "/", SegmentName(opts_.timeline, segno, opts_.segment_size));
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return absl::InternalError("fopen " + path);
    const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    const int rc = std::fclose(f);
    if (n != bytes.size() || rc != 0) {
      return absl::InternalError("write " + path);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MemoryWalBytes::ReadAt(Lsn lsn, uint8_t* buf, size_t n) {
  const uint64_t seg_size = builder_.options().segment_size;
  size_t done = 0;
  while (done < n) {
    const Lsn pos = lsn + done;
    auto it = builder_.segments().find(pos / seg_size);
    if (it == builder_.segments().end()) break;
    const uint64_t off = pos % seg_size;
    const uint64_t want = std::min<uint64_t>(n - done, seg_size - off);
    if (off >= it->second.size()) break;
    const uint64_t got = std::min<uint64_t>(want, it->second.size() - off);
    std::memcpy(buf + done, it->second.data() + off, got);
    done += got;
    if (got < want) break;
  }
  return done;
}

}  // namespace walship::pg::testing
