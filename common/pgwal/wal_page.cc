// PostgreSQL 15 WAL page headers. See wal_page.h.

#include "common/pgwal/wal_page.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/pgwal/wal_names.h"

namespace walship::pg {
namespace {

template <typename T>
T LoadLe(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(p[i]) << (8 * i);
  }
  return v;
}

template <typename T>
void StoreLe(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    p[i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

absl::Status PageError(Lsn pageaddr, PageProblem what, PageProblem* problem,
                       absl::string_view message) {
  if (problem != nullptr) *problem = what;
  return absl::DataLossError(
      absl::StrCat("WAL page at ", FormatLsn(pageaddr), ": ", message));
}

}  // namespace

absl::StatusOr<PageHeader> DecodePageHeader(
    absl::Span<const uint8_t> page_start) {
  if (page_start.size() < kShortPageHeaderSize) {
    return absl::DataLossError(
        absl::StrCat("truncated WAL page header: ", page_start.size(),
                     " bytes, need ", kShortPageHeaderSize));
  }
  const uint8_t* p = page_start.data();
  PageHeader h{};
  h.magic = LoadLe<uint16_t>(p + page_layout::kMagic);
  h.info = LoadLe<uint16_t>(p + page_layout::kInfo);
  h.timeline = LoadLe<uint32_t>(p + page_layout::kTimeline);
  h.pageaddr = LoadLe<uint64_t>(p + page_layout::kPageAddr);
  h.rem_len = LoadLe<uint32_t>(p + page_layout::kRemLen);
  h.is_long = (h.info & kXlpLongHeader) != 0;
  if (h.is_long) {
    if (page_start.size() < kLongPageHeaderSize) {
      return absl::DataLossError(
          absl::StrCat("truncated long WAL page header: ", page_start.size(),
                       " bytes, need ", kLongPageHeaderSize));
    }
    h.system_id = LoadLe<uint64_t>(p + page_layout::kSystemId);
    h.seg_size = LoadLe<uint32_t>(p + page_layout::kSegSize);
    h.block_size = LoadLe<uint32_t>(p + page_layout::kBlockSize);
  }
  return h;
}

void EncodePageHeader(const PageHeader& h, absl::Span<uint8_t> out) {
  const size_t size = PageHeaderSize(h.info);
  std::memset(out.data(), 0, size);
  uint8_t* p = out.data();
  StoreLe<uint16_t>(p + page_layout::kMagic, h.magic);
  StoreLe<uint16_t>(p + page_layout::kInfo, h.info);
  StoreLe<uint32_t>(p + page_layout::kTimeline, h.timeline);
  StoreLe<uint64_t>(p + page_layout::kPageAddr, h.pageaddr);
  StoreLe<uint32_t>(p + page_layout::kRemLen, h.rem_len);
  if (size == kLongPageHeaderSize) {
    StoreLe<uint64_t>(p + page_layout::kSystemId, h.system_id);
    StoreLe<uint32_t>(p + page_layout::kSegSize, h.seg_size);
    StoreLe<uint32_t>(p + page_layout::kBlockSize, h.block_size);
  }
}

absl::Status ValidateExpectations(const WalExpectations& exp) {
  if (!IsValidSegmentSize(exp.segment_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid WAL segment size ", exp.segment_size,
                     ": must be a power of two from 1 MiB to 1 GiB"));
  }
  const uint32_t b = exp.block_size;
  if (b < 1024 || b > 65536 || (b & (b - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid WAL block size ", b,
                     ": must be a power of two from 1 KiB to 64 KiB"));
  }
  return absl::OkStatus();
}

bool LooksZeroed(absl::Span<const uint8_t> page_start) {
  if (page_start.size() < kShortPageHeaderSize) return false;
  for (size_t i = 0; i < kShortPageHeaderSize; ++i) {
    if (page_start[i] != 0) return false;
  }
  return true;
}

absl::Status ValidatePage(absl::Span<const uint8_t> page_start,
                          Lsn expected_pageaddr, const WalExpectations& exp,
                          PageProblem* problem) {
  if (problem != nullptr) *problem = PageProblem::kNone;
  absl::Status valid = ValidateExpectations(exp);
  if (!valid.ok()) return valid;
  if (expected_pageaddr % exp.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page address ", FormatLsn(expected_pageaddr),
                     " is not a multiple of the block size ", exp.block_size));
  }
  const Lsn at = expected_pageaddr;

  if (page_start.size() < kShortPageHeaderSize) {
    return PageError(at, PageProblem::kTruncated, problem,
                     absl::StrCat("truncated page header: ", page_start.size(),
                                  " bytes, need ", kShortPageHeaderSize));
  }
  if (LooksZeroed(page_start)) {
    return PageError(at, PageProblem::kZeroed, problem,
                     "zeroed page (end of WAL)");
  }
  absl::StatusOr<PageHeader> h = DecodePageHeader(page_start);
  if (!h.ok()) {
    return PageError(at, PageProblem::kTruncated, problem,
                     h.status().message());
  }
  if (h->magic != exp.magic) {
    return PageError(at, PageProblem::kBadMagic, problem,
                     absl::StrFormat("invalid magic number %04X, expected %04X",
                                     h->magic, exp.magic));
  }
  if ((h->info & ~kXlpAllFlags) != 0) {
    return PageError(at, PageProblem::kBadInfoBits, problem,
                     absl::StrFormat("invalid info bits %04X", h->info));
  }
  if (h->is_long) {
    if (exp.system_id != 0 && h->system_id != exp.system_id) {
      return PageError(
          at, PageProblem::kOtherSystem, problem,
          absl::StrCat("belongs to another cluster: system identifier ",
                       h->system_id, ", expected ", exp.system_id));
    }
    if (h->seg_size != exp.segment_size) {
      return PageError(
          at, PageProblem::kWrongSegmentSize, problem,
          absl::StrCat("belongs to another cluster: segment size ", h->seg_size,
                       ", expected ", exp.segment_size));
    }
    if (h->block_size != exp.block_size) {
      return PageError(
          at, PageProblem::kWrongBlockSize, problem,
          absl::StrCat("belongs to another cluster: block size ", h->block_size,
                       ", expected ", exp.block_size));
    }
  } else if (at % exp.segment_size == 0) {
    return PageError(
        at, PageProblem::kMissingLongHeader, problem,
        absl::StrFormat("first page of a segment without a long header "
                        "(info bits %04X)",
                        h->info));
  }
  if (h->pageaddr != at) {
    return PageError(
        at, PageProblem::kStaleAddress, problem,
        absl::StrCat("recycled or stale page: page address ",
                     FormatLsn(h->pageaddr), ", expected ", FormatLsn(at)));
  }
  return absl::OkStatus();
}

}  // namespace walship::pg
