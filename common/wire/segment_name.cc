#include "common/wire/segment_name.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walship::wire {
namespace {

// Quote at most this many bytes of a rejected name in messages.
constexpr size_t kMaxQuotedBytes = 64;

std::string Quote(absl::string_view name) {
  if (name.size() <= kMaxQuotedBytes) {
    return absl::StrCat("\"", absl::CHexEscape(name), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(name.substr(0, kMaxQuotedBytes)),
                      "...\" (", name.size(), " bytes)");
}

bool IsAllowedChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

absl::Status Invalid(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid segment name ", Quote(name), ": ", why));
}

}  // namespace

absl::Status ValidateSegmentName(absl::string_view name) {
  if (name.empty()) return Invalid(name, "empty");
  if (name.size() > kMaxSegmentNameLength) {
    return Invalid(name, absl::StrCat("longer than ", kMaxSegmentNameLength,
                                      " bytes"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsAllowedChar(name[i])) {
      return Invalid(
          name, absl::StrCat("byte ", i, " (\"",
                             absl::CHexEscape(name.substr(i, 1)),
                             "\") is not one of [A-Za-z0-9._-]"));
    }
  }
  if (name[0] == '.') return Invalid(name, "starts with '.'");
  if (absl::StrContains(name, "..")) return Invalid(name, "contains \"..\"");
  if (absl::EndsWith(name, ".partial")) {
    return Invalid(name, "ends in the reserved suffix \".partial\"");
  }
  if (absl::EndsWith(name, ".tmp")) {
    return Invalid(name, "ends in the reserved suffix \".tmp\"");
  }
  if (absl::StartsWith(name, "walship.")) {
    return Invalid(name, "starts with the reserved prefix \"walship.\"");
  }
  return absl::OkStatus();
}

}  // namespace walship::wire
