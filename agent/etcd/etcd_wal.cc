#include "agent/etcd/etcd_wal.h"

#include <algorithm>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/wire/crc32c.h"

namespace walship::agent::etcd {
namespace {

// Reads a protobuf varint at `*p` (advancing it), nullopt when it runs past
// `end` or is longer than 10 bytes.
std::optional<uint64_t> Varint(const char** p, const char* end) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && *p < end; shift += 7) {
    const uint8_t b = static_cast<uint8_t>(*(*p)++);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return std::nullopt;
}

// True when one of the 512-byte file sectors that the frame's record bytes
// [at, at + data.size()) touch holds only zeros (etcd's isTornEntry).
bool TornWrite(uint64_t at, absl::string_view data) {
  size_t cur = 0;
  while (cur < data.size()) {
    const size_t len =
        std::min<size_t>(kSectorBytes - (at % kSectorBytes), data.size() - cur);
    absl::string_view chunk = data.substr(cur, len);
    if (std::all_of(chunk.begin(), chunk.end(), [](char c) { return c == 0; })) return true;
    at += len;
    cur += len;
  }
  return false;
}

ContentEnd EndAt(uint64_t at, HeldBack why, std::string detail) {
  return ContentEnd{at, why, std::move(detail)};
}

}  // namespace

std::optional<Record> DecodeRecord(absl::string_view proto) {
  Record r;
  const char* p = proto.data();
  const char* end = p + proto.size();
  while (p < end) {
    std::optional<uint64_t> key = Varint(&p, end);
    if (!key.has_value() || (*key >> 3) == 0) return std::nullopt;
    const uint64_t field = *key >> 3;
    switch (*key & 7) {
      case 0: {  // varint
        std::optional<uint64_t> v = Varint(&p, end);
        if (!v.has_value()) return std::nullopt;
        if (field == 1) r.type = static_cast<int64_t>(*v);
        if (field == 2) r.crc = static_cast<uint32_t>(*v);
        break;
      }
      case 1:  // fixed64
        if (end - p < 8) return std::nullopt;
        p += 8;
        break;
      case 2: {  // length-delimited
        std::optional<uint64_t> n = Varint(&p, end);
        if (!n.has_value() || *n > static_cast<uint64_t>(end - p)) return std::nullopt;
        if (field == 3) r.data.assign(p, *n);
        p += *n;
        break;
      }
      case 5:  // fixed32
        if (end - p < 4) return std::nullopt;
        p += 4;
        break;
      default:  // groups and invalid wire types
        return std::nullopt;
    }
  }
  return r;
}

void EtcdRecordScanner::Forget(const std::string& name) {
  auto it = chain_.find(name);
  if (it == chain_.end()) return;
  if (name > last_name_) {
    last_name_ = name;
    last_crc_ = it->second.crc;
  }
  chain_.erase(it);
}

absl::StatusOr<ContentEnd> EtcdRecordScanner::ScanEnd(const std::string& name,
                                                      SegmentBytes& bytes, uint64_t from) {
  Chain at;
  auto known = chain_.find(name);
  if (from != 0 && known != chain_.end() && known->second.offset == from) at = known->second;
  // Otherwise from the start: the chain's value at `from` is not known.
  bool first = at.offset == 0;
  ContentEnd result;
  while (true) {
    auto word = bytes.Read(at.offset, 8);
    if (!word.ok()) return word.status();
    if (word->empty()) {
      result = EndAt(at.offset, HeldBack::kNone, "");
      break;
    }
    if (word->size() < 8 || absl::little_endian::Load64(word->data()) == 0) {
      const bool zeros = std::all_of(word->begin(), word->end(), [](char c) { return c == 0; });
      result = EndAt(at.offset, zeros ? HeldBack::kPreallocated : HeldBack::kPartialRecord,
                     absl::StrCat(zeros ? "zero length word" : "part of a length word",
                                  " at offset ", at.offset));
      break;
    }
    const uint64_t word64 = absl::little_endian::Load64(word->data());
    const uint64_t n = word64 & ~(uint64_t{0xff} << 56);
    const uint64_t pad = (word64 >> 63) != 0 ? (word64 >> 56) & 7 : 0;
    if (n >= kMaxRecordBytes - pad) {
      result = EndAt(at.offset, HeldBack::kBadChecksum,
                     absl::StrCat("record length ", n, " at offset ", at.offset,
                                  " is out of range"));
      break;
    }
    auto frame = bytes.Read(at.offset + 8, n + pad);
    if (!frame.ok()) return frame.status();
    if (frame->size() < n + pad) {
      result = EndAt(at.offset, HeldBack::kPartialRecord,
                     absl::StrCat("record of ", n, " bytes at offset ", at.offset,
                                  " ends past the file's ", bytes.size(), " bytes"));
      break;
    }
    const HeldBack bad =
        TornWrite(at.offset + 8, *frame) ? HeldBack::kPartialRecord : HeldBack::kBadChecksum;
    std::optional<Record> rec = DecodeRecord(frame->substr(0, n));
    if (!rec.has_value()) {
      result = EndAt(at.offset, bad,
                     absl::StrCat("record at offset ", at.offset, " does not decode"));
      break;
    }
    // etcd checks a crcType record against the chain unless the chain is at
    // 0; a file's first record continues the previous file's chain, when
    // that file was seen to its end.
    uint32_t crc = rec->crc;
    if (rec->type != kCrcType) {
      crc = wire::Crc32cExtend(at.crc, rec->data.data(), rec->data.size());
    } else if (!first && at.crc != 0) {
      crc = at.crc;
    } else if (first && !last_name_.empty() && last_name_ < name) {
      crc = last_crc_;
    }
    if (rec->crc != crc) {
      result = EndAt(at.offset, bad,
                     absl::StrFormat("record at offset %d: crc 0x%08x, the chain gives 0x%08x",
                                     at.offset, rec->crc, crc));
      break;
    }
    at.crc = crc;
    at.offset += 8 + n + pad;
    first = false;
  }
  chain_[name] = at;
  return result;
}

}  // namespace walship::agent::etcd
