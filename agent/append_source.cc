#include "agent/append_source.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/sqlite/sqlite_wal.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "common/sys/thread_name.h"
#include "common/wire/crc32c.h"
#include "common/wire/segment_name.h"
#include "spdlog/spdlog.h"

namespace walship::agent {
namespace {

bool IsDigit(char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// True when the last kPreallocatedZeroRun bytes of the file's first `size`
// bytes are all zero (one byte read first: usually it is not zero).
// kOutOfRange when the file is shorter than `size` by now.
absl::StatusOr<bool> EndsInZeroRun(sys::SysCalls& sys, int fd, uint64_t size) {
  if (size < kPreallocatedZeroRun) return false;
  char last = 0;
  WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys, fd, &last, 1, static_cast<off_t>(size - 1)));
  if (last != 0) return false;
  std::string buf(kPreallocatedZeroRun, '\0');
  WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys, fd, buf.data(), buf.size(),
                                          static_cast<off_t>(size - buf.size())));
  return std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; });
}

// The offset just past the last non-zero byte among the file's first `end`
// bytes; 0 if they are all zero.
absl::StatusOr<uint64_t> DataEnd(sys::SysCalls& sys, int fd, uint64_t end) {
  std::string buf(kPreallocatedZeroRun, '\0');
  while (end > 0) {
    const uint64_t n = std::min<uint64_t>(end, buf.size());
    WALSHIP_RETURN_IF_ERROR(sys::PreadFully(sys, fd, buf.data(), n, static_cast<off_t>(end - n)));
    for (uint64_t i = n; i > 0; --i) {
      if (buf[i - 1] != 0) return end - n + i;
    }
    end -= n;
  }
  return 0;
}

}  // namespace

std::string NameShape(absl::string_view name) {
  // One N per digit: names whose numbers differ in width (seg-9, seg-10) do
  // not sort in WAL order, so they are two shapes.
  std::string shape(name);
  for (char& c : shape) {
    if (IsDigit(c)) c = 'N';
  }
  return shape;
}

absl::StatusOr<SegmentPattern> SegmentPattern::Compile(const std::string& pattern) {
  if (pattern.empty()) return absl::InvalidArgumentError("the segment pattern is empty");
  try {
    return SegmentPattern(pattern,
                          std::make_shared<const std::regex>(pattern, std::regex::ECMAScript));
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment pattern \"", pattern, "\" is not a valid regular expression: ", e.what()));
  }
}

bool SegmentPattern::Matches(const std::string& name) const {
  return std::regex_match(name, *re_);
}

std::optional<std::string> SegmentPattern::Successor(const std::string& name) const {
  std::smatch m;
  if (!has_sequence() || !std::regex_match(name, m, *re_) || !m[1].matched) {
    return std::nullopt;
  }
  std::string seq = m.str(1);
  if (seq.empty() || !std::all_of(seq.begin(), seq.end(), IsDigit)) return std::nullopt;
  size_t i = seq.size();
  while (i > 0 && seq[i - 1] == '9') seq[--i] = '0';
  if (i == 0) return std::nullopt;  // the increment overflows the width
  ++seq[i - 1];
  const size_t at = static_cast<size_t>(m.position(1));
  std::string next = absl::StrCat(name.substr(0, at), seq, name.substr(at + m.length(1)));
  if (!Matches(next) || !wire::ValidateSegmentName(next).ok()) return std::nullopt;
  return next;
}

absl::StatusOr<std::string> DeriveStreamId(sys::SysCalls& sys,
                                           const std::string& dir,
                                           const std::string& prefix) {
  char real[PATH_MAX];
  sys::SysResult r = sys.Realpath(dir.c_str(), real);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("realpath ", dir));
  struct stat st;
  r = sys.Stat(real, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("stat ", dir));
  char host[256] = {0};
  // Ignored on purpose: a host whose name cannot be read keeps an empty one;
  // the directory's path, device and inode still tell its streams apart.
  (void)sys.Gethostname(host, sizeof(host) - 1);
  std::string key = absl::StrCat(host, "\n", real, "\n", st.st_dev, "\n", st.st_ino);
  uint32_t a = wire::Crc32c(key.data(), key.size());
  uint32_t b = wire::Crc32cExtend(0x9e3779b9u, key.data(), key.size());
  return absl::StrFormat("%s-%08x%08x", prefix, a, b);
}

AppendSource::AppendSource(sys::SysCalls& sys, AppendSourceOptions options,
                           SegmentCatalog& catalog, Clock& clock)
    : clock_(clock), sys_(sys), options_(std::move(options)), catalog_(catalog) {
  if (options_.scanner) scanner_ = options_.scanner();
  if (!options_.segment_pattern.empty()) {
    auto pattern = SegmentPattern::Compile(options_.segment_pattern);
    if (pattern.ok()) {
      pattern_ = *std::move(pattern);
    } else {
      pattern_status_ = pattern.status();
    }
  }
}

AppendSource::~AppendSource() { Stop(); }

std::optional<std::string> AppendSource::Successor(const std::string& name) const {
  if (!pattern_.has_value()) return std::nullopt;
  return pattern_->Successor(name);
}

absl::Status AppendSource::Start() {
  if (!pattern_status_.ok()) return pattern_status_;
  if (options_.stream_id.empty()) {
    auto id = DeriveStreamId(sys_, options_.wal_dir, options_.format_name);
    if (!id.ok()) return id.status();
    stream_id_ = *id;
  } else {
    stream_id_ = options_.stream_id;
  }
  auto watch = sys::DirWatch::Open(sys_, options_.wal_dir,
                                   IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO |
                                       IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF |
                                       IN_MOVE_SELF);
  if (!watch.ok()) return watch.status();
  watch_.emplace(std::move(*watch));
  absl::Status s = Rescan();
  if (!s.ok()) return s;
  if (pattern_.has_value()) {
    std::vector<std::string> shapes;
    for (const auto& [shape, n] : skipped_shapes_) {
      shapes.push_back(absl::StrCat(shape, " (", n, ")"));
    }
    spdlog::info("following the files of {} whose names match the segment pattern {}; "
                 "skipping the others{}{}",
                 options_.wal_dir, pattern_->text(), shapes.empty() ? "" : ": ",
                 absl::StrJoin(shapes, ", "));
  } else if (!shape_.empty()) {
    spdlog::info("following the files of {} named like {} (N: digits)", options_.wal_dir,
                 shape_);
  }
  thread_ = std::thread([this] {
    NameThisThread("ws-source");
    Loop();
  });
  return absl::OkStatus();
}

void AppendSource::Stop() {
  if (stopping_.exchange(true)) return;
  if (watch_.has_value()) watch_->Wake();
  if (thread_.joinable()) thread_.join();
}

void AppendSource::Loop() {
  absl::Time next_rescan = clock_.Now() + options_.rescan_interval;
  while (!stopping_.load()) {
    bool rescan = false;
    bool tail_modified = false;
    // Events are drained in one batch and acted on once: a burst of appends
    // costs one fstat, not one per write.
    watch_->Wait(next_rescan - clock_.Now(), [&](const inotify_event& ev) {
      if (ev.mask & IN_Q_OVERFLOW) {
        rescan = true;
      } else if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        if (!failed_) {
          failed_ = true;
          catalog_.Fail(absl::FailedPreconditionError(
              absl::StrCat("WAL directory ", options_.wal_dir, " was deleted or moved")));
          spdlog::error("WAL directory {} was deleted or moved", options_.wal_dir);
        }
      } else if (ev.mask & IN_MODIFY) {
        if (ev.len > 0 && tail_name_ == ev.name) {
          tail_modified = true;
        } else {
          rescan = true;
        }
      } else {
        rescan = true;
      }
    });
    if (stopping_.load()) break;
    if (clock_.Now() >= next_rescan) rescan = true;
    if (failed_) continue;
    absl::Status s;
    if (rescan) {
      s = Rescan();
      next_rescan = clock_.Now() + options_.rescan_interval;
    } else if (tail_modified) {
      s = RefreshTail();
    }
    if (!s.ok() && !failed_) {
      failed_ = true;
      spdlog::error("WAL source failed: {}", s.ToString());
      catalog_.Fail(s);
    }
  }
}

absl::Status AppendSource::Rescan() {
  WALSHIP_ASSIGN_OR_RETURN(auto sizes, ListSegments());
  return PublishChecked(std::move(sizes));
}

absl::StatusOr<std::map<std::string, uint64_t>> AppendSource::ListSegments() {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           sys::ListDirectory(sys_, options_.wal_dir, "WAL directory"));
  std::map<std::string, uint64_t> sizes;
  std::map<std::string, std::vector<std::string>> by_shape;
  std::set<std::string> seen;
  absl::Status unshippable;
  skipped_shapes_.clear();
  for (const std::string& name : names) {
    if (name.empty() || name[0] == '.') continue;
    seen.insert(name);
    std::string path = absl::StrCat(options_.wal_dir, "/", name);
    sys::FileFacts st;  // every scan: never the times (file_util.h)
    if (!sys::DescribePath(sys_, path, &st).ok()) continue;  // deleted since readdir
    if (S_ISLNK(st.mode)) {
      NoteOnce(name, true, absl::StrCat(path, " is a symbolic link: not followed (only "
                                              "regular files are segments)"));
      continue;
    }
    if (!S_ISREG(st.mode)) {
      NoteOnce(name, false, absl::StrCat(path, " is not a regular file: skipped"));
      continue;
    }
    absl::Status valid = wire::ValidateSegmentName(name);
    if (pattern_.has_value()) {
      if (!pattern_->Matches(name)) {
        ++skipped_shapes_[NameShape(name)];
        NoteOnce(name, false, absl::StrCat(path, " does not match the segment pattern ",
                                           pattern_->text(), ": skipped"));
        continue;
      }
      if (!valid.ok()) {
        unshippable = absl::FailedPreconditionError(
            absl::StrCat(path, " matches the segment pattern ", pattern_->text(),
                         " but cannot be shipped: ", valid.message()));
        continue;
      }
    } else if (!valid.ok()) {
      NoteOnce(name, false, absl::StrCat(path, " is not a segment: ", valid.message()));
      continue;
    } else {
      by_shape[NameShape(name)].push_back(name);
    }
    sizes[name] = st.size;
  }
  for (auto it = noted_.begin(); it != noted_.end();) {
    it = seen.count(*it) ? std::next(it) : noted_.erase(it);
  }
  if (!unshippable.ok()) return unshippable;
  WALSHIP_RETURN_IF_ERROR(ListArchive(sizes));
  if (!pattern_.has_value()) WALSHIP_RETURN_IF_ERROR(CheckShapes(by_shape));
  return sizes;
}

absl::Status AppendSource::ListArchive(std::map<std::string, uint64_t>& sizes) {
  archived_.clear();
  if (options_.archive_subdir.empty() || !pattern_.has_value()) return absl::OkStatus();
  const std::string dir = absl::StrCat(options_.wal_dir, "/", options_.archive_subdir);
  absl::StatusOr<std::vector<std::string>> names =
      sys::ListDirectory(sys_, dir, "WAL archive directory");
  if (absl::IsNotFound(names.status())) return absl::OkStatus();  // none (yet)
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (name.empty() || name[0] == '.' || sizes.count(name) != 0) continue;
    if (!pattern_->Matches(name) || !wire::ValidateSegmentName(name).ok()) continue;
    sys::FileFacts st;
    const std::string path = absl::StrCat(dir, "/", name);
    if (!sys::DescribePath(sys_, path, &st).ok() || !S_ISREG(st.mode)) continue;
    sizes[name] = st.size;
    archived_.insert(name);
  }
  return absl::OkStatus();
}

std::string AppendSource::PathOf(const std::string& name) const {
  if (archived_.count(name) != 0) {
    return absl::StrCat(options_.wal_dir, "/", options_.archive_subdir, "/", name);
  }
  return absl::StrCat(options_.wal_dir, "/", name);
}

SegmentLocator AppendSource::Segments() const {
  if (options_.archive_subdir.empty()) return SegmentLocator(options_.wal_dir);
  return SegmentLocator(std::vector<std::string>{
      options_.wal_dir, absl::StrCat(options_.wal_dir, "/", options_.archive_subdir)});
}

absl::Status AppendSource::CheckShapes(
    const std::map<std::string, std::vector<std::string>>& by_shape) {
  if (by_shape.empty()) return absl::OkStatus();
  if (by_shape.size() == 1 && (shape_.empty() || by_shape.begin()->first == shape_)) {
    shape_ = by_shape.begin()->first;
    return absl::OkStatus();
  }
  std::vector<std::string> shapes;
  if (!shape_.empty() && by_shape.count(shape_) == 0) {
    shapes.push_back(absl::StrCat(shape_, " (followed so far; no such file now)"));
  }
  for (const auto& [shape, names] : by_shape) {
    const std::string& example = *std::min_element(names.begin(), names.end());
    shapes.push_back(absl::StrCat(shape, " (", names.size(), names.size() == 1 ? " file" : " files",
                                  example == shape ? "" : absl::StrCat(", e.g. ", example),
                                  shape == shape_ ? "; followed so far" : "", ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the WAL directory ", options_.wal_dir, " holds files whose names have ", shapes.size(),
      " shapes (N: digits): ", absl::StrJoin(shapes, ", "),
      "; which of them are segments is not clear: give a segment pattern "
      "(--segment-pattern=REGEX) that only the segments' names match"));
}

void AppendSource::NoteOnce(const std::string& name, bool warn, const std::string& what) {
  if (!noted_.insert(name).second) return;
  if (warn) {
    spdlog::warn("{}", what);
  } else {
    spdlog::debug("{}", what);
  }
}

absl::Status AppendSource::RefreshTail() {
  if (!tail_fd_.valid() || !held_open_.empty()) return Rescan();
  sys::FileFacts st;  // every poll: never the times (file_util.h)
  sys::SysResult r = sys::DescribeFd(sys_, tail_fd_.get(), &st);
  if (!r.ok() || st.nlink == 0) return Rescan();
  std::map<std::string, uint64_t> sizes = scanner_ ? seen_sizes_ : published_;
  sizes[tail_name_] = st.size;
  return PublishChecked(std::move(sizes), /*tail_sized_by_fd=*/true);
}

absl::Status AppendSource::CheckAppendOnly(const std::map<std::string, uint64_t>& sizes) const {
  for (const auto& [name, size] : sizes) {
    auto it = published_.find(name);
    if (it == published_.end()) continue;
    if (size < it->second) {
      return absl::DataLossError(absl::StrCat(
          "segment ", name, " in ", options_.wal_dir, " shrank from ", it->second,
          " to ", size, " bytes: the directory is not append-only"));
    }
    bool was_complete = name < published_tail_;
    if (scanner_) {
      auto seen = seen_sizes_.find(name);
      if (was_complete && seen != seen_sizes_.end() && size != seen->second) {
        return absl::DataLossError(absl::StrCat(
            "segment ", name, " in ", options_.wal_dir, " changed size from ", seen->second,
            " to ", size, " bytes after a later segment appeared: a complete segment must "
            "not change"));
      }
      continue;
    }
    if (was_complete && size != it->second) {
      return absl::DataLossError(absl::StrCat(
          "segment ", name, " grew from ", it->second, " to ", size,
          " bytes after a later segment appeared: the directory is not append-only"));
    }
  }
  return absl::OkStatus();
}

absl::Status AppendSource::HoldUnclosed(std::map<std::string, uint64_t>& sizes) {
  const std::string was = held_open_;
  held_open_.clear();
  for (auto it = sizes.begin(); it != sizes.end() && std::next(it) != sizes.end(); ++it) {
    const std::string& name = it->first;
    if (name < published_tail_ && published_.count(name) != 0) continue;  // complete already
    absl::StatusOr<sys::UniqueFd> fd = sys::OpenRegularFile(sys_, PathOf(name));
    if (!fd.ok()) continue;  // gone since it was listed: the next scan tells
    SegmentBytes bytes(sys_, fd->get(), it->second, 4096);
    std::vector<std::string> later;
    for (auto l = std::next(it); l != sizes.end(); ++l) later.push_back(l->first);
    const HeadReader head = [this](const std::string& n,
                                   size_t len) -> absl::StatusOr<std::string> {
      WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd f, sys::OpenRegularFile(sys_, PathOf(n)));
      sys::FileFacts st;
      if (sys::SysResult r = sys::DescribeFd(sys_, f.get(), &st); !r.ok()) {
        return sys::ErrnoToStatus(r.err, absl::StrCat("statx ", PathOf(n)));
      }
      SegmentBytes b(sys_, f.get(), st.size, len);
      WALSHIP_ASSIGN_OR_RETURN(absl::string_view v, b.Read(0, len));
      return std::string(v);
    };
    WALSHIP_ASSIGN_OR_RETURN(bool may, scanner_->MayComplete(name, bytes, later, head));
    if (may) continue;
    if (was != name) {
      spdlog::info("segment {}: later segments exist, but it is not complete until the "
                   "database has finished rewriting it in place; {} later segment(s) not "
                   "shown yet",
                   PathOf(name), later.size());
    }
    held_open_ = name;
    sizes.erase(std::next(it), sizes.end());
    break;
  }
  return absl::OkStatus();
}

absl::Status AppendSource::PublishChecked(std::map<std::string, uint64_t> sizes,
                                          bool tail_sized_by_fd) {
  if (scanner_) WALSHIP_RETURN_IF_ERROR(HoldUnclosed(sizes));
  WALSHIP_RETURN_IF_ERROR(CheckAppendOnly(sizes));
  const std::string last = sizes.empty() ? std::string() : sizes.rbegin()->first;
  UpdateTail(last, tail_sized_by_fd);
  // What may be published: new bytes only once they are known to be written.
  std::map<std::string, uint64_t> shippable;
  for (const auto& [name, size] : sizes) {
    auto it = published_.find(name);
    const uint64_t from = it == published_.end() ? 0 : it->second;
    const int fd = tail_sized_by_fd && name == tail_name_ ? tail_fd_.get() : -1;
    if (scanner_) {
      WALSHIP_ASSIGN_OR_RETURN(uint64_t end, ScanValidEnd(name, fd, from, size, name != last));
      shippable[name] = end;
      continue;
    }
    WALSHIP_ASSIGN_OR_RETURN(bool written, CheckWritten(name, fd, from, size, name != last));
    if (written) {
      shippable[name] = size;
    } else if (it != published_.end()) {
      shippable[name] = from;
    }
  }
  if (scanner_) {
    for (auto it = seen_sizes_.begin(); it != seen_sizes_.end();) {
      if (sizes.count(it->first) == 0) scanner_->Forget(it->first);
      it = sizes.count(it->first) ? std::next(it) : seen_sizes_.erase(it);
    }
    for (const auto& [name, size] : sizes) seen_sizes_[name] = size;
  }
  if (shippable == published_ && last == published_tail_ && !published_.empty()) {
    return absl::OkStatus();
  }
  std::vector<SegmentInfo> segs;
  segs.reserve(shippable.size());
  for (const auto& [name, size] : shippable) {
    segs.push_back(SegmentInfo{name, size, name != last});
  }
  published_ = std::move(shippable);
  published_tail_ = last;
  catalog_.Publish(std::move(segs));
  return absl::OkStatus();
}

void AppendSource::UpdateTail(const std::string& last, bool tail_sized_by_fd) {
  if (last == tail_name_ && tail_fd_.valid()) {
    // Still the file of that name (not one renamed over it)?
    sys::FileFacts st;
    if (tail_sized_by_fd || (sys::DescribeFd(sys_, tail_fd_.get(), &st).ok() && st.nlink > 0)) {
      return;
    }
  }
  tail_fd_.reset();
  tail_name_ = last;
  if (last.empty()) return;
  // Not a regular file any more: the next scan logs and skips it.
  auto fd = sys::OpenRegularFile(sys_, PathOf(last));
  if (fd.ok()) tail_fd_ = *std::move(fd);
}

absl::StatusOr<bool> AppendSource::CheckWritten(const std::string& name, int fd, uint64_t from,
                                                uint64_t size, bool complete) {
  if (size <= from) return true;
  const std::string path = PathOf(name);
  sys::UniqueFd own;
  if (fd < 0) {
    absl::StatusOr<sys::UniqueFd> opened = sys::OpenRegularFile(sys_, path);
    // Gone, or no longer a regular file, since it was listed: the next scan
    // tells.
    if (absl::IsNotFound(opened.status()) || absl::IsFailedPrecondition(opened.status())) {
      return false;
    }
    if (!opened.ok()) return opened.status();
    own = *std::move(opened);
    fd = own.get();
  }
  if (from == 0) WALSHIP_RETURN_IF_ERROR(RefuseSqliteWal(name, fd, size));
  // A hole (sparse, or preallocated and never written) before `size`.
  sys::SysResult hole = sys_.Lseek(fd, static_cast<off_t>(from), SEEK_HOLE);
  if (hole.ok() && static_cast<uint64_t>(hole.rc) < size) {
    return RefusePreallocated(name, fd, from, size, static_cast<uint64_t>(hole.rc), true);
  }
  // ENXIO: shorter than `from` by now; the next look reports the shrink.
  // Other errors: the file system cannot tell; the zeros still can.
  if (!hole.ok() && hole.err == ENXIO) return false;
  absl::StatusOr<bool> zeros = EndsInZeroRun(sys_, fd, size);
  if (zeros.status().code() == absl::StatusCode::kOutOfRange) return false;  // shrank
  if (!zeros.ok()) return zeros.status();
  if (!*zeros) {
    if (zero_tail_.has_value() && zero_tail_->name == name) zero_tail_.reset();
    return true;
  }
  const uint64_t run_from = size - kPreallocatedZeroRun;
  if (complete) return RefusePreallocated(name, fd, from, size, run_from, false);
  const absl::Time now = clock_.Now();
  if (zero_tail_.has_value() && zero_tail_->name == name && zero_tail_->size == size) {
    if (now - zero_tail_->since < options_.zero_tail_grace) return false;
    return RefusePreallocated(name, fd, from, size, run_from, false);
  }
  spdlog::debug("segment {} ends in {} zero bytes at {} bytes: not shipped past {} unless data "
                "follows them within {}",
                path, kPreallocatedZeroRun, size, from,
                absl::FormatDuration(options_.zero_tail_grace));
  zero_tail_ = ZeroTail{name, size, now};
  return false;
}

absl::StatusOr<uint64_t> AppendSource::ScanValidEnd(const std::string& name, int fd,
                                                    uint64_t from, uint64_t size,
                                                    bool complete) {
  // Published complete before: its length is final.
  if (name < published_tail_ && published_.count(name) != 0) return from;
  if (size < from) return from;  // the next look reports the shrink
  const std::string path = PathOf(name);
  sys::UniqueFd own;
  if (fd < 0) {
    absl::StatusOr<sys::UniqueFd> opened = sys::OpenRegularFile(sys_, path);
    if (absl::IsNotFound(opened.status()) || absl::IsFailedPrecondition(opened.status())) {
      return from;  // gone since it was listed: the next scan tells
    }
    if (!opened.ok()) return opened.status();
    own = *std::move(opened);
    fd = own.get();
  }
  SegmentBytes bytes(sys_, fd, size);
  absl::StatusOr<ContentEnd> end = scanner_->ScanEnd(name, bytes, from);
  if (end.status().code() == absl::StatusCode::kOutOfRange) return from;  // shrank
  if (!end.ok()) return end.status();
  const uint64_t valid_end = std::max(end->valid_end, from);
  if (complete) {
    scanner_->Forget(name);
    if (valid_end < size) {
      // A record failing its check in a complete file may be damage, not a
      // torn tail: worth an operator's look.
      spdlog::log(end->held == HeldBack::kBadChecksum ? spdlog::level::warn
                                                      : spdlog::level::info,
                  "segment {} is complete at its valid end, offset {}; its last {} bytes "
                  "({}: {}) are not WAL and are not shipped",
                  path, valid_end, size - valid_end, std::string(HeldBackName(end->held)),
                  end->detail);
    }
    return valid_end;
  }
  absl::MutexLock lock(&held_mu_);
  if (held_.segment != name || held_.reason != end->held) {
    spdlog::debug("segment {}: valid to offset {} of {} bytes{}{}", path, valid_end, size,
                  end->held == HeldBack::kNone ? "" : "; held back: ",
                  end->held == HeldBack::kNone ? "" : end->detail);
  }
  held_ = HeldBackState{name, valid_end, size, end->held};
  return valid_end;
}

HeldBackState AppendSource::held_back() const {
  absl::MutexLock lock(&held_mu_);
  return held_;
}

std::optional<SourceHold> AppendSource::Hold() const {
  if (!scanner_) return std::nullopt;
  const HeldBackState h = held_back();
  if (h.segment.empty()) return std::nullopt;
  return SourceHold{h.segment, h.valid_end, h.file_size, std::string(HeldBackName(h.reason))};
}

void AppendSource::DeclareMetrics(MetricsRegistry& metrics) {
  if (!scanner_) return;
  auto valid_end = metrics.Gauge(
      "walship_agent_source_valid_end_bytes",
      "The open segment's valid end: the end of its last complete, valid record (what may "
      "be shipped of it), by segment.");
  auto held = metrics.Gauge(
      "walship_agent_source_held_back_bytes",
      "Bytes of the open segment past its valid end, not shipped, by reason: partial_record "
      "(a record still being written), preallocated (zeros past the data), recycled (an "
      "older log's records), bad_checksum (a record failing its CRC).");
  metrics.AddCollector([this, valid_end, held] {
    const HeldBackState h = held_back();
    valid_end.Clear();
    held.Clear();
    if (h.segment.empty()) return;
    valid_end.Set({{"segment", h.segment}}, static_cast<double>(h.valid_end));
    for (HeldBack r : {HeldBack::kNone, HeldBack::kPartialRecord, HeldBack::kPreallocated,
                       HeldBack::kRecycled, HeldBack::kBadChecksum}) {
      if (r == HeldBack::kNone) continue;
      const double n = r == h.reason ? static_cast<double>(h.file_size - h.valid_end) : 0;
      held.Set({{"reason", std::string(HeldBackName(r))}}, n);
    }
  });
}

absl::Status AppendSource::RefuseSqliteWal(const std::string& name, int fd, uint64_t size) {
  if (!absl::EndsWith(name, "-wal") || size < 4) return absl::OkStatus();
  char head[4];
  if (!sys::PreadFully(sys_, fd, head, sizeof(head), 0).ok()) return absl::OkStatus();
  if (!sqlite::IsSqliteWal(absl::string_view(head, sizeof(head)))) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("segment ", name, " in ", options_.wal_dir,
                                                    " is a SQLite WAL: ",
                                                    sqlite::WhyNotSqliteWal()));
}

absl::Status AppendSource::RefusePreallocated(const std::string& name, int fd, uint64_t from,
                                              uint64_t size, uint64_t unwritten_from,
                                              bool hole) {
  WALSHIP_ASSIGN_OR_RETURN(uint64_t data_end, DataEnd(sys_, fd, unwritten_from));
  std::string why =
      hole ? absl::StrCat("its bytes from offset ", unwritten_from,
                          " were never written (a hole, or a range preallocated with "
                          "fallocate) although the file is ",
                          size, " bytes long")
           : absl::StrCat("it ends in ", size - data_end, " zero bytes, from offset ", data_end,
                          " to its size ", size,
                          ": the zeros of a preallocated file past its written data");
  return absl::FailedPreconditionError(absl::StrCat(
      "segment ", name, " in ", options_.wal_dir, " looks preallocated: ", why,
      "; its data ends at offset ", data_end,
      ". walship ships only files that grow by appends, never a preallocated file's zeros "
      "(writers that preallocate and write in place, as etcd does, are not supported); "
      "nothing of it past offset ",
      from, " was published"));
}

}  // namespace walship::agent
