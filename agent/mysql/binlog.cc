#include "agent/mysql/binlog.h"

#include <array>
#include <cctype>
#include <string>

#include "absl/base/internal/endian.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace walship::agent::mysql {
namespace {

const std::array<uint32_t, 256>& Crc32Table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t Crc32Extend(uint32_t crc, absl::string_view bytes) {
  const auto& t = Crc32Table();
  crc = ~crc;
  for (char ch : bytes) crc = t[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

// "10.11.6-MariaDB-0+deb12u1" -> {10, 11}.
std::pair<int, int> MajorMinor(absl::string_view version) {
  std::vector<absl::string_view> parts = absl::StrSplit(version, absl::MaxSplits('.', 2));
  int major = 0, minor = 0;
  if (parts.size() >= 2) {
    (void)absl::SimpleAtoi(parts[0], &major);
    absl::string_view m = parts[1];
    size_t n = 0;
    while (n < m.size() && std::isdigit(static_cast<unsigned char>(m[n]))) ++n;
    (void)absl::SimpleAtoi(m.substr(0, n), &minor);
  }
  return {major, minor};
}

ContentEnd Held(uint64_t valid, HeldBack why, std::string detail) {
  return ContentEnd{valid, why, std::move(detail)};
}

}  // namespace

uint32_t Crc32(absl::string_view bytes) { return Crc32Extend(0, bytes); }

bool FdeChecksums(absl::string_view fde) {
  constexpr size_t kVersionAt = kHeaderSize + 2;
  if (fde.size() < kVersionAt + 50 + 4 + 1 + kChecksumSize + 1) return false;
  absl::string_view version = fde.substr(kVersionAt, 50);
  version = version.substr(0, version.find('\0'));
  const auto [major, minor] = MajorMinor(version);
  const bool names_alg = major > 5 || (major == 5 && minor >= 6) ||
                         version.find("MariaDB") != absl::string_view::npos;
  if (!names_alg) return false;
  return static_cast<uint8_t>(fde[fde.size() - kChecksumSize - 1]) == 1;
}

std::string SegmentPatternFor(absl::string_view base) {
  if (base.empty()) return "[A-Za-z0-9_.-]+?\\.([0-9]{6,})";
  std::string escaped;
  for (char c : base) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      escaped.push_back('\\');
    }
    escaped.push_back(c);
  }
  return absl::StrCat(escaped, "\\.([0-9]{6,})");
}

std::string BaseFromIndex(absl::string_view index) {
  for (absl::string_view line : absl::StrSplit(index, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    const size_t slash = line.rfind('/');
    if (slash != absl::string_view::npos) line.remove_prefix(slash + 1);
    const size_t dot = line.rfind('.');
    if (dot == absl::string_view::npos || dot == 0) continue;
    absl::string_view seq = line.substr(dot + 1);
    if (seq.size() < 6) continue;
    bool digits = true;
    for (char c : seq) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (digits) return std::string(line.substr(0, dot));
  }
  return "";
}

absl::StatusOr<ContentEnd> BinlogScanner::ScanFde(const std::string& name, SegmentBytes& bytes) {
  auto head = bytes.Read(0, kMagicSize + kHeaderSize);
  if (!head.ok()) return head.status();
  const absl::string_view magic(kMagic, kMagicSize);
  if (head->size() < kMagicSize || !absl::StartsWith(*head, magic.substr(0, head->size()))) {
    if (head->size() < kMagicSize && magic.substr(0, head->size()) == *head) {
      return Held(0, HeldBack::kPartialRecord, "the binlog magic is not all there yet");
    }
    return Held(0, HeldBack::kBadChecksum,
                absl::StrCat(name, " does not start with the binlog magic fe 62 69 6e"));
  }
  if (head->size() < kMagicSize + kHeaderSize) {
    return Held(0, HeldBack::kPartialRecord, "the format description event's header");
  }
  const uint8_t type = static_cast<uint8_t>((*head)[kMagicSize + 4]);
  const uint64_t size = absl::little_endian::Load32(head->data() + kMagicSize + 9);
  if (type != kFormatDescriptionEvent || size < kHeaderSize + 57 || size > 4096) {
    return Held(0, HeldBack::kBadChecksum,
                absl::StrCat("the first event (type ", type, ", ", size,
                             " bytes) is not a format description event"));
  }
  auto fde = bytes.Read(kMagicSize, size);
  if (!fde.ok()) return fde.status();
  if (fde->size() < size) {
    return Held(0, HeldBack::kPartialRecord, "the format description event is not all there");
  }
  const bool crc = FdeChecksums(*fde);
  if (crc) {
    // Computed with the in-use flag clear (binlog.h).
    std::string copy(fde->substr(0, size - kChecksumSize));
    copy[17] = static_cast<char>(static_cast<uint8_t>(copy[17]) & ~kInUseFlag);
    const uint32_t want = absl::little_endian::Load32(fde->data() + size - kChecksumSize);
    const uint32_t got = Crc32(copy);
    if (want != got) {
      return Held(0, HeldBack::kBadChecksum,
                  absl::StrFormat("the format description event: CRC-32 %08x, its bytes "
                                  "give %08x",
                                  want, got));
    }
  }
  checksums_[name] = crc;
  return ContentEnd{kMagicSize + size, HeldBack::kNone, ""};
}

absl::StatusOr<ContentEnd> BinlogScanner::ScanEnd(const std::string& name, SegmentBytes& bytes,
                                                  uint64_t from) {
  uint64_t pos = from;
  if (from == 0 || checksums_.count(name) == 0) {
    absl::StatusOr<ContentEnd> fde = ScanFde(name, bytes);
    if (!fde.ok() || fde->held != HeldBack::kNone) return fde;
    pos = std::max(from, fde->valid_end);
  }
  const bool crc = checksums_[name];
  while (true) {
    auto hdr = bytes.Read(pos, kHeaderSize);
    if (!hdr.ok()) return hdr.status();
    if (hdr->empty()) return Held(pos, HeldBack::kNone, "");
    if (hdr->size() < kHeaderSize) {
      return Held(pos, HeldBack::kPartialRecord,
                  absl::StrCat("part of an event header at offset ", pos));
    }
    const uint64_t size = absl::little_endian::Load32(hdr->data() + 9);
    const uint64_t log_pos = absl::little_endian::Load32(hdr->data() + 13);
    if (size < kHeaderSize + (crc ? kChecksumSize : 0) || size > kMaxEventSize) {
      return Held(pos, HeldBack::kBadChecksum,
                  absl::StrCat("the event at offset ", pos, " claims ", size, " bytes"));
    }
    auto ev = bytes.Read(pos, size);
    if (!ev.ok()) return ev.status();
    if (ev->size() < size) {
      return Held(pos, HeldBack::kPartialRecord,
                  absl::StrCat("the event at offset ", pos, " (", size, " bytes) ends past the "
                               "file's ", bytes.size(), " bytes"));
    }
    if (crc) {
      const uint32_t want = absl::little_endian::Load32(ev->data() + size - kChecksumSize);
      const uint32_t got = Crc32(ev->substr(0, size - kChecksumSize));
      if (want != got) {
        return Held(pos, HeldBack::kBadChecksum,
                    absl::StrFormat("the event at offset %d: CRC-32 %08x, its bytes give %08x",
                                    pos, want, got));
      }
    } else if (log_pos != ((pos + size) & 0xffffffffu)) {
      return Held(pos, HeldBack::kBadChecksum,
                  absl::StrCat("the event at offset ", pos, " says it ends at ", log_pos,
                               ", not at ", pos + size));
    }
    pos += size;
  }
}

absl::StatusOr<bool> BinlogScanner::MayComplete(const std::string& name, SegmentBytes& bytes,
                                                const std::vector<std::string>& later,
                                                const HeadReader& head) {
  (void)name;
  auto flags = bytes.Read(kInUseFlagOffset, 1);
  if (!flags.ok()) return flags.status();
  // Not even an FDE: nothing will be rewritten in it.
  if (flags->empty()) return true;
  if ((static_cast<uint8_t>((*flags)[0]) & kInUseFlag) == 0) return true;
  for (const std::string& next : later) {
    absl::StatusOr<std::string> h = head(next, kCreatedOffset + 4);
    if (!h.ok()) return h.status();
    if (h->size() < kCreatedOffset + 4) return false;  // its FDE is still being written
    if (absl::little_endian::Load32(h->data() + kCreatedOffset) != 0) return true;
  }
  return false;
}

}  // namespace walship::agent::mysql
