// -----------------------------------------------------------------------------
// File: common/wire/segment_name.h
// -----------------------------------------------------------------------------
//
// Validation of WAL segment file names received from outside (a SEGMENT
// frame's payload, a Position in the gRPC control protocol, a state file).
// A name that passes can be joined to a destination directory without
// escaping it and without colliding with the receiver's own temporary files.
//
// A valid segment name:
//   * is 1..255 bytes long;
//   * uses only the characters [A-Za-z0-9._-];
//   * does not start with '.', so it is neither "." nor ".." nor hidden;
//   * does not contain "..";
//   * does not end in ".partial" or ".tmp" (suffixes reserved for files the
//     replica writes before a segment is complete).
//   * does not start with "walship." (the replica's own files beside the
//     segments: walship.state, walship.progress, walship.sums).
//
// Thread-safety: pure function, safe to call concurrently.
//
// Example:
//
//   absl::Status s = walship::wire::ValidateSegmentName(name);
//   if (!s.ok()) return s;  // kInvalidArgument, quotes the offending name

#ifndef WALSHIP_COMMON_WIRE_SEGMENT_NAME_H_
#define WALSHIP_COMMON_WIRE_SEGMENT_NAME_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace walship::wire {

// Longest valid segment name, in bytes (the limit of one path component on
// common Linux file systems, and of a SEGMENT frame's payload).
inline constexpr size_t kMaxSegmentNameLength = 255;

// Returns OK if `name` is a valid segment name (see the file comment), else
// kInvalidArgument whose message says which rule failed and quotes the name
// with non-printable bytes C-escaped (names longer than 64 bytes are quoted
// truncated, with their length).
absl::Status ValidateSegmentName(absl::string_view name);

}  // namespace walship::wire

#endif  // WALSHIP_COMMON_WIRE_SEGMENT_NAME_H_
