// position.h: a position in a WAL stream.
//
// A position is (segment name, byte offset within that segment). Segment
// names sort in WAL order, so positions order by name, then offset. The empty
// segment name is "before the first segment" and sorts first.
#ifndef WALSHIP_COMMON_POSITION_H_
#define WALSHIP_COMMON_POSITION_H_

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace walship {

struct Position {
  std::string segment;
  uint64_t offset = 0;

  std::string ToString() const {
    return segment.empty() ? std::string("(start)")
                           : absl::StrCat(segment, "@", offset);
  }
  friend bool operator<(const Position& a, const Position& b) {
    return std::tie(a.segment, a.offset) < std::tie(b.segment, b.offset);
  }
  friend bool operator==(const Position& a, const Position& b) {
    return a.segment == b.segment && a.offset == b.offset;
  }
  friend bool operator!=(const Position& a, const Position& b) { return !(a == b); }
  friend bool operator<=(const Position& a, const Position& b) { return !(b < a); }
};

}  // namespace walship

#endif  // WALSHIP_COMMON_POSITION_H_
