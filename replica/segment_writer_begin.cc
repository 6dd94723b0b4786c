// SegmentWriter: opening a segment (BeginSegment) and the pre-sized live
// tail (NoteCaughtUp, spare_segment.h).
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/file_crc.h"
#include "common/pgwal/wal_page.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"
#include "common/wire/segment_name.h"
#include "replica/segment_writer.h"
#include "spdlog/spdlog.h"

namespace walship::replica {

absl::Status SegmentWriter::BeginSegment(const std::string& name, uint64_t handle,
                                         uint64_t start_offset) {
  WALSHIP_RETURN_IF_ERROR(wire::ValidateSegmentName(name));
  {
    absl::MutexLock lock(&mu_);
    if (tail_.has_value()) {
      return absl::FailedPreconditionError(
          "internal: the recovered tail was neither confirmed nor discarded");
    }
    if (handle <= handle_) {
      return absl::DataLossError(absl::StrCat("SEGMENT handle ", handle,
                                              " does not increase (last ", handle_, ")"));
    }
    if (name < last_begun_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "agent went backwards: segment ", name, " after ", last_begun_));
    }
    if (durable_.complete && name == durable_.position.segment) {
      if (start_offset != durable_.position.offset) {
        return WithReason(absl::FailedPreconditionError(absl::StrCat(
            "divergent history: ", name, " is complete here at ",
            durable_.position.offset, " bytes but the agent resumes it at ", start_offset)), Reason::kDivergent);
      }
      handle_ = handle;
      handle_complete_ = true;
      last_begun_ = name;
      return absl::OkStatus();
    }
    if (!open_.empty() && open_.back().name == name) {
      return absl::DataLossError(absl::StrCat("segment ", name, " announced twice"));
    }
  }
  // File I/O without the lock: the flusher finalizes older segments
  // meanwhile, and only this (receiver) thread adds segments.
  const std::string path = PathOf(name, true);
  WALSHIP_ASSIGN_OR_RETURN(const bool presized, TakeSpare(path, start_offset));
  sys::SysResult r = sys_.Open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("open ", path));
  auto fd = std::make_shared<sys::UniqueFd>(static_cast<int>(r.rc));
  WALSHIP_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(sys_, fd->get(), path));
  DurablePoint durable;
  {
    absl::MutexLock lock(&mu_);
    durable = durable_;
  }
  // What the file holds is never its length (disk_format.md section 8): a
  // spare holds nothing yet; the segment we resume in holds the durable
  // point's bytes (recovery cut off or kept as the confirmed tail whatever
  // lay past them, and only zeros may follow).
  uint64_t held = presized ? 0 : size;
  const bool resumed = name == durable.position.segment && !durable.complete;
  if (resumed) {
    if (size < durable.position.offset) {
      return absl::DataLossError(absl::StrCat("durable at ", durable.position.ToString(),
                                              " but ", path, " holds only ", size, " bytes"));
    }
    held = durable.position.offset;
  }
  if (start_offset > held) {
    return absl::OutOfRangeError(absl::StrCat("gap: agent starts ", name, " at ",
                                            start_offset, " but only ", held,
                                            " bytes are on disk"));
  }
  Segment seg;
  seg.name = name;
  seg.written = held;
  if (held > 0) {
    WALSHIP_ASSIGN_OR_RETURN(seg.written_crc, Crc32cOfFileRange(sys_, fd->get(), 0, held, path));
  }
  seg.fd = std::move(fd);
  absl::MutexLock lock(&mu_);
  if (resumed) {
    seg.flushed = held;
    seg.flushed_crc = seg.written_crc;
  }
  // Only the segment we resume in is known to have a durable entry.
  seg.entry_durable = name == durable_.position.segment;
  handle_ = handle;
  handle_complete_ = false;
  open_.push_back(std::move(seg));
  last_begun_ = name;
  // The new directory entry must be durable before any byte in it is
  // acknowledged; the flusher's next Flush() fsyncs the directory, off the
  // receive path.
  dir_sync_needed_ = true;
  return absl::OkStatus();
}

// A segment begun at offset 0 while the stream is live (the receiver found
// the socket empty at least once since the last segment began) takes the
// spare, if one is ready and nothing has that name yet. During catch-up of
// a backlog segments grow from empty: no byte is written twice.
absl::StatusOr<bool> SegmentWriter::TakeSpare(const std::string& path, uint64_t start_offset) {
  const bool live = caught_up_;
  caught_up_ = false;
  if (!live || start_offset != 0 || spare_ == nullptr || !spare_->ready(segment_size_)) {
    return false;
  }
  struct stat st;
  sys::SysResult r = sys_.Stat(path.c_str(), &st);
  if (r.ok()) return false;
  if (r.err != ENOENT) return sys::ErrnoToStatus(r.err, absl::StrCat("stat ", path));
  return spare_->Take(segment_size_, path);
}

void SegmentWriter::NoteCaughtUp() {
  if (!options_.presize_segments) return;
  caught_up_ = true;
  if (segment_size_ == 0) segment_size_ = options_.segment_size;
  if (segment_size_ == 0) segment_size_ = LearnSegmentSize();
  if (segment_size_ == 0) return;
  if (spare_ == nullptr) {
    spare_ = std::make_unique<SpareSegment>(sys_, dir_, clock_, options_.on_spare_prepared);
  }
  spare_->Request(segment_size_);
}

bool SegmentWriter::WaitForSpare(absl::Duration timeout) {
  return spare_ != nullptr && spare_->WaitReady(segment_size_, timeout);
}

// PostgreSQL WAL only: the size its segment's first (long) page header
// names, when the segment being received has a PostgreSQL name and holds
// that header. 0 otherwise (the stream's files just grow).
uint64_t SegmentWriter::LearnSegmentSize() {
  std::shared_ptr<sys::UniqueFd> fd;
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    if (open_.empty() || open_.back().written < pg::kLongPageHeaderSize ||
        open_.back().name == size_probed_) {
      return 0;
    }
    fd = open_.back().fd;
    name = open_.back().name;
  }
  // Once per segment: a stream without such headers (the append format) is
  // not asked again on every sync.
  size_probed_ = name;
  const uint64_t size = PgSegmentSizeOf(sys_, fd->get(), name);
  if (size != 0) {
    spdlog::info("segments are {} bytes (first page header of {}): new live segments are "
                 "zero-filled to that size in advance", size, name);
  }
  return size;
}

}  // namespace walship::replica
