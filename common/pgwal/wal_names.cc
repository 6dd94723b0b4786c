// PostgreSQL WAL names and LSNs. See wal_names.h.

#include "common/pgwal/wal_names.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace walship::pg {
namespace {

// Value of one hex digit, or -1. `upper_only` rejects 'a'..'f'.
int HexValue(char c, bool upper_only) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (!upper_only && c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Parses 1..8 hex digits (the whole of `s`) into *out.
bool ParseHex32(absl::string_view s, bool upper_only, uint32_t* out) {
  if (s.empty() || s.size() > 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    const int d = HexValue(c, upper_only);
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

uint64_t SegmentsPerXLogId(uint64_t segment_size) {
  return (uint64_t{1} << 32) / segment_size;
}

// C-escaped, length-limited quote of untrusted input for messages.
std::string Quote(absl::string_view s) {
  constexpr size_t kMaxQuoted = 64;
  if (s.size() <= kMaxQuoted) return absl::StrCat("\"", absl::CEscape(s), "\"");
  return absl::StrCat("\"", absl::CEscape(s.substr(0, kMaxQuoted)), "...\" (",
                      s.size(), " bytes)");
}

bool IsHistoryWhitespace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

bool IsValidSegmentSize(uint64_t size) {
  return size >= kMinSegmentSize && size <= kMaxSegmentSize &&
         (size & (size - 1)) == 0;
}

absl::StatusOr<Lsn> ParseLsn(absl::string_view text) {
  const size_t slash = text.find('/');
  uint32_t hi = 0;
  uint32_t lo = 0;
  if (slash == absl::string_view::npos ||
      !ParseHex32(text.substr(0, slash), /*upper_only=*/false, &hi) ||
      !ParseHex32(text.substr(slash + 1), /*upper_only=*/false, &lo)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid LSN ", Quote(text),
                     ": expected 1-8 hex digits, '/', 1-8 hex digits "
                     "(like \"16/B374D848\")"));
  }
  return (static_cast<Lsn>(hi) << 32) | lo;
}

std::string FormatLsn(Lsn lsn) {
  return absl::StrFormat("%X/%X", static_cast<uint32_t>(lsn >> 32),
                         static_cast<uint32_t>(lsn));
}

absl::StatusOr<SegmentId> ParseSegmentName(absl::string_view name,
                                           uint64_t segment_size) {
  if (!IsValidSegmentSize(segment_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid WAL segment size ", segment_size,
                     ": must be a power of two from 1 MiB to 1 GiB"));
  }
  if (name.size() != kSegmentNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid WAL segment name ", Quote(name), ": ",
                     name.size(), " characters, expected 24"));
  }
  uint32_t parts[3];
  for (int i = 0; i < 3; ++i) {
    if (!ParseHex32(name.substr(8 * i, 8), /*upper_only=*/true, &parts[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid WAL segment name ", Quote(name),
                       ": expected 24 uppercase hexadecimal digits [0-9A-F]"));
    }
  }
  if (parts[0] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid WAL segment name ", Quote(name), ": timeline 0 is invalid"));
  }
  const uint64_t per_id = SegmentsPerXLogId(segment_size);
  if (parts[2] >= per_id) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid WAL segment name %s: segment part %08X is out of range for "
        "%d-byte segments (must be below %X)",
        Quote(name), parts[2], segment_size, per_id));
  }
  return SegmentId{parts[0], static_cast<uint64_t>(parts[1]) * per_id +
                                 static_cast<uint64_t>(parts[2])};
}

std::string SegmentName(uint32_t timeline, uint64_t segno,
                        uint64_t segment_size) {
  const uint64_t per_id = SegmentsPerXLogId(segment_size);
  return absl::StrFormat("%08X%08X%08X", timeline,
                         static_cast<uint32_t>(segno / per_id),
                         static_cast<uint32_t>(segno % per_id));
}

Lsn SegmentStartLsn(uint64_t segno, uint64_t segment_size) {
  return segno * segment_size;
}

uint64_t SegmentOfLsn(Lsn lsn, uint64_t segment_size) {
  return lsn / segment_size;
}

bool ParseHistoryFileName(absl::string_view name, uint32_t* timeline) {
  constexpr absl::string_view kSuffix = ".history";
  if (name.size() != 8 + kSuffix.size() || name.substr(8) != kSuffix) {
    return false;
  }
  uint32_t tli = 0;
  if (!ParseHex32(name.substr(0, 8), /*upper_only=*/true, &tli) || tli == 0) {
    return false;
  }
  *timeline = tli;
  return true;
}

std::string HistoryFileName(uint32_t timeline) {
  return absl::StrFormat("%08X.history", timeline);
}

absl::StatusOr<std::vector<TimelineSwitch>> ParseHistoryFile(
    absl::string_view content) {
  std::vector<TimelineSwitch> result;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    ++line_no;
    size_t pos = 0;
    while (pos < line.size() && IsHistoryWhitespace(line[pos])) ++pos;
    if (pos == line.size() || line[pos] == '#') continue;

    auto syntax_error = [&](absl::string_view what) {
      return absl::DataLossError(
          absl::StrCat("syntax error in timeline history file, line ", line_no,
                       " ", Quote(line), ": ", what));
    };

    // Timeline ID: decimal digits.
    const size_t tli_begin = pos;
    uint64_t tli = 0;
    while (pos < line.size() && absl::ascii_isdigit(line[pos])) {
      tli = tli * 10 + static_cast<uint64_t>(line[pos] - '0');
      if (tli > UINT32_MAX) return syntax_error("timeline ID out of range");
      ++pos;
    }
    if (pos == tli_begin) return syntax_error("expected a numeric timeline ID");
    if (tli == 0) return syntax_error("timeline ID 0 is invalid");
    if (pos < line.size() && !IsHistoryWhitespace(line[pos])) {
      return syntax_error("expected a numeric timeline ID");
    }

    // Switch point: whitespace, then an LSN up to the next whitespace.
    while (pos < line.size() && IsHistoryWhitespace(line[pos])) ++pos;
    size_t lsn_end = pos;
    while (lsn_end < line.size() && !IsHistoryWhitespace(line[lsn_end])) {
      ++lsn_end;
    }
    absl::StatusOr<Lsn> lsn = ParseLsn(line.substr(pos, lsn_end - pos));
    if (pos == lsn_end || !lsn.ok()) {
      return syntax_error("expected a write-ahead log switch point location");
    }
    // The rest of the line is the free-text reason; ignored.

    if (!result.empty() && tli <= result.back().parent_timeline) {
      return absl::DataLossError(
          absl::StrCat("invalid timeline history file, line ", line_no, " ",
                       Quote(line), ": timeline IDs must increase (", tli,
                       " after ", result.back().parent_timeline, ")"));
    }
    result.push_back(TimelineSwitch{static_cast<uint32_t>(tli), *lsn});
  }
  return result;
}

}  // namespace walship::pg
