// PostgresSource, its timeline side: the ancestry of the current timeline
// (from its history file), the page validation of the segment being written,
// the segment list the catalog publishes, and the questions a replica's
// position raises about timelines (RedirectMissing, Successor). The loop,
// the flush-position follower and the crash rule are in postgres_source.cc.

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/postgres/postgres_source.h"
#include "common/file_crc.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "spdlog/spdlog.h"

namespace walship::agent {
namespace {

bool SameSegments(const std::vector<SegmentInfo>& a, const std::vector<SegmentInfo>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].shippable != b[i].shippable ||
        a[i].complete != b[i].complete) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<PostgresSource::TimelineRange>> PostgresSource::Ancestry(
    uint32_t timeline, pg::Lsn flush) {
  std::vector<TimelineRange> ranges;
  pg::Lsn begin = 0;
  if (timeline > 1) {
    std::string path = absl::StrCat(options_.wal_dir, "/", pg::HistoryFileName(timeline));
    auto text = sys::ReadFileToString(sys_, path);
    if (!text.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "timeline ", timeline, " has no history file ", path, ": ", text.status().message()));
    }
    WALSHIP_ASSIGN_OR_RETURN(std::vector<pg::TimelineSwitch> switches,
                             pg::ParseHistoryFile(*text));
    for (const pg::TimelineSwitch& s : switches) {
      ranges.push_back(TimelineRange{s.parent_timeline, begin, s.switch_lsn});
      begin = s.switch_lsn;
    }
  }
  ranges.push_back(TimelineRange{timeline, begin, flush});
  return ranges;
}

uint64_t PostgresSource::ValidatePages(const std::string& name, pg::Lsn seg_start,
                                       uint64_t from, uint64_t to) {
  if (from >= to) return from;
  if (validate_name_ != name || !validate_fd_.valid()) {
    auto fd = sys::OpenRegularFile(sys_, absl::StrCat(options_.wal_dir, "/", name));
    if (!fd.ok()) return from;
    validate_fd_ = *std::move(fd);
    validate_name_ = name;
  }
  const sys::UniqueFd* fd = &validate_fd_;
  const uint64_t block = exp_.block_size;
  // Pages starting before `from` were checked by an earlier call.
  uint64_t page = (from + block - 1) / block * block;
  uint8_t header[pg::kLongPageHeaderSize];
  for (; page < to; page += block) {
    absl::Status s = sys::PreadFully(sys_, fd->get(), header, sizeof(header),
                                     static_cast<off_t>(page));
    if (s.ok()) {
      s = pg::ValidatePage(absl::MakeConstSpan(header, sizeof(header)), seg_start + page, exp_);
    }
    if (!s.ok() && page > 0 && pg::LooksZeroed(absl::MakeConstSpan(header, sizeof(header)))) {
      // After an XLOG_SWITCH record PostgreSQL writes the rest of the
      // segment as whole zero pages, headers included, and flushes them. A
      // page that is entirely zero below the flush position is such
      // padding; anything else in a page without a valid header is not.
      std::vector<uint8_t> whole(block);
      if (sys::PreadFully(sys_, fd->get(), whole.data(), whole.size(),
                          static_cast<off_t>(page))
              .ok() &&
          std::all_of(whole.begin(), whole.end(), [](uint8_t b) { return b == 0; })) {
        continue;
      }
    }
    if (!s.ok()) {
      std::string msg = absl::StrCat("not shipping ", name, " from offset ", page, ": ",
                                     s.message());
      if (msg != last_page_error_) {
        spdlog::error("{}", msg);
        last_page_error_ = msg;
      }
      return page;
    }
  }
  return to;
}

absl::Status PostgresSource::Publish(uint32_t timeline, pg::Lsn flush) {
  // A rescan once a second regardless, in case an event was missed.
  const bool rescan = dir_changed_ || clock_.Now() - last_scan_ > absl::Seconds(1);
  if (!rescan && published_all_ && timeline == published_timeline_ &&
      flush == published_flush_) {
    return absl::OkStatus();
  }
  if (rescan) {
    dir_changed_ = false;  // events from here on count for the next poll
    last_scan_ = clock_.Now();
    WALSHIP_ASSIGN_OR_RETURN(names_,
                             sys::ListDirectory(sys_, options_.wal_dir, "WAL directory"));
    std::sort(names_.begin(), names_.end());
    ancestry_.reset();
    validate_name_.clear();  // the name may now be another (recycled) file
    validate_fd_.reset();
  }
  if (!ancestry_.has_value() || ancestry_->empty() || ancestry_->back().timeline != timeline) {
    WALSHIP_ASSIGN_OR_RETURN(std::vector<TimelineRange> a, Ancestry(timeline, flush));
    ancestry_ = std::move(a);
  }
  std::vector<TimelineRange> ranges = *ancestry_;
  ranges.back().end = flush;  // the current timeline runs to the flush position
  {
    absl::MutexLock lock(&mu_);
    ranges_ = ranges;
  }
  const uint64_t seg_size = exp_.segment_size;
  std::vector<SegmentInfo> segs;
  const std::vector<std::string>& names = names_;
  bool all = true;
  for (const std::string& name : names) {
    uint32_t htli = 0;
    if (pg::ParseHistoryFileName(name, &htli)) {
      bool ours = false;
      for (const TimelineRange& r : ranges) ours |= (r.timeline == htli && htli > 1);
      if (!ours) continue;
      struct stat st;
      if (!sys_.Stat(absl::StrCat(options_.wal_dir, "/", name).c_str(), &st).ok()) continue;
      segs.push_back(SegmentInfo{name, static_cast<uint64_t>(st.st_size), true});
      continue;
    }
    auto id = pg::ParseSegmentName(name, seg_size);
    if (!id.ok()) continue;
    const TimelineRange* range = nullptr;
    for (const TimelineRange& r : ranges) {
      if (r.timeline == id->timeline) range = &r;
    }
    if (range == nullptr) continue;
    const pg::Lsn start = pg::SegmentStartLsn(id->segno, seg_size);
    if (start >= range->end) continue;  // future or recycled: never read
    uint64_t want;
    bool complete;
    if (start + seg_size <= range->end) {
      want = seg_size;
      complete = true;
    } else if (range->timeline == timeline) {
      want = range->end - start;
      complete = false;
    } else {
      continue;  // an ancestor's switch segment: superseded by the successor
    }
    uint64_t& checked = validated_[name];
    checked = ValidatePages(name, start, checked, want);
    uint64_t shippable = std::min(checked, want);
    all &= shippable == want;
    segs.push_back(SegmentInfo{name, shippable, complete && shippable == want});
  }
  // Forget validation state of files that are gone.
  for (auto it = validated_.begin(); it != validated_.end();) {
    if (!std::binary_search(names.begin(), names.end(), it->first)) {
      it = validated_.erase(it);
    } else {
      ++it;
    }
  }
  CatalogSnapshot current = catalog_.Get();
  if (!SameSegments(*current.segments, segs)) catalog_.Publish(std::move(segs));
  published_timeline_ = timeline;
  published_flush_ = flush;
  published_all_ = all;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Position>> PostgresSource::RedirectMissing(
    const Position& durable, uint32_t prefix_crc32c) const {
  const uint64_t seg_size = exp_.segment_size;
  std::vector<TimelineRange> ranges;
  {
    absl::MutexLock lock(&mu_);
    ranges = ranges_;
  }
  if (ranges.empty()) return std::optional<Position>();
  uint32_t history = 0;
  auto id = pg::ParseSegmentName(durable.segment, seg_size);
  const bool is_history = !id.ok() && pg::ParseHistoryFileName(durable.segment, &history);
  if (!id.ok() && !is_history) return std::optional<Position>();
  const uint32_t held = is_history ? history : id->timeline;
  if (held > ranges.back().timeline) {
    // Never a byte of this source's own timeline past the point where the
    // replica's history left it: this node was superseded (a stale or
    // demoted primary) or has not caught up (a standby promoted later).
    return WithReason(
        absl::UnavailableError(absl::StrCat(
            "the replica holds timeline ", held, " (", durable.ToString(),
            ") but this source serves timeline ", ranges.back().timeline,
            ", an older one: its node was superseded (a stale or demoted primary); the "
            "replica follows the agent of the newer timeline")),
        Reason::kOlderTimeline);
  }
  if (is_history) return std::optional<Position>();
  const pg::Lsn lsn = pg::SegmentStartLsn(id->segno, seg_size) + durable.offset;
  for (size_t i = 0; i + 1 < ranges.size(); ++i) {
    const TimelineRange& r = ranges[i];
    if (r.timeline != id->timeline) continue;
    if (lsn > r.end) {
      return WithReason(
          absl::FailedPreconditionError(absl::StrCat(
              "divergent history: the replica holds WAL of timeline ", r.timeline, " up to ",
              pg::FormatLsn(lsn), ", past the point ", pg::FormatLsn(r.end),
              " where the primary's history switches to timeline ", ranges[i + 1].timeline)),
          Reason::kDivergent);
    }
    // Only the switch segment itself is superseded (the next timeline's
    // copy of it holds the same bytes up to the switch point); for any
    // other, the WAL up to the switch point is missing: a gap.
    if (r.end % seg_size == 0 || pg::SegmentOfLsn(r.end, seg_size) != id->segno) {
      return std::optional<Position>();
    }
    const std::string copy = pg::SegmentName(ranges[i + 1].timeline, id->segno, seg_size);
    const std::string path = absl::StrCat(options_.wal_dir, "/", copy);
    absl::StatusOr<sys::UniqueFd> fd = sys::OpenRegularFile(sys_, path);
    if (fd.ok()) {
      WALSHIP_ASSIGN_OR_RETURN(uint32_t crc,
                               Crc32cOfFileRange(sys_, fd->get(), 0, durable.offset, path));
      if (crc != prefix_crc32c) {
        return WithReason(absl::FailedPreconditionError(absl::StrFormat(
                              "divergent history: the replica's first %d bytes of %s have "
                              "CRC32C %08x, but timeline %d's copy of them in %s has %08x",
                              durable.offset, durable.segment, prefix_crc32c,
                              ranges[i + 1].timeline, copy, crc)),
                          Reason::kDivergent);
      }
    }
    // Without the copy, shipping finds the next timeline's segment missing
    // after its history file and reports the gap there.
    return std::optional<Position>(Position{pg::HistoryFileName(ranges[i + 1].timeline), 0});
  }
  const uint32_t current = ranges.back().timeline;
  if (id->timeline < current) {
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
                          "divergent history: the replica follows timeline ", id->timeline,
                          ", which is not in the history of the primary's timeline ",
                          current)),
                      Reason::kDivergent);
  }
  return std::optional<Position>();
}

std::optional<std::string> PostgresSource::Successor(const std::string& name) const {
  const uint64_t seg_size = exp_.segment_size;
  absl::MutexLock lock(&mu_);
  uint32_t history = 0;
  if (pg::ParseHistoryFileName(name, &history)) {
    for (const TimelineRange& r : ranges_) {
      if (r.timeline == history) {
        return pg::SegmentName(history, pg::SegmentOfLsn(r.begin, seg_size), seg_size);
      }
    }
    return std::nullopt;
  }
  auto id = pg::ParseSegmentName(name, seg_size);
  if (!id.ok()) return std::nullopt;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const TimelineRange& r = ranges_[i];
    if (r.timeline != id->timeline) continue;
    const uint64_t next = id->segno + 1;
    if (i + 1 == ranges_.size() || pg::SegmentStartLsn(next, seg_size) + seg_size <= r.end) {
      return pg::SegmentName(r.timeline, next, seg_size);
    }
    return pg::HistoryFileName(ranges_[i + 1].timeline);
  }
  return std::nullopt;
}

absl::StatusOr<pg::Lsn> PostgresSource::PositionToLsn(const Position& p) const {
  WALSHIP_ASSIGN_OR_RETURN(pg::SegmentId id, pg::ParseSegmentName(p.segment, exp_.segment_size));
  return pg::SegmentStartLsn(id.segno, exp_.segment_size) + p.offset;
}

}  // namespace walship::agent
