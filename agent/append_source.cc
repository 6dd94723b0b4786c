#include "agent/append_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sys/errors.h"
#include "common/wire/crc32c.h"
#include "common/wire/segment_name.h"
#include "spdlog/spdlog.h"
#include "common/thread_name.h"

namespace walship::agent {

absl::StatusOr<std::string> DeriveStreamId(sys::SysCalls& sys,
                                           const std::string& dir,
                                           const std::string& prefix) {
  char real[PATH_MAX];
  if (realpath(dir.c_str(), real) == nullptr) {
    return sys::ErrnoToStatus(errno, absl::StrCat("realpath ", dir));
  }
  struct stat st;
  sys::SysResult r = sys.Stat(real, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("stat ", dir));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string key = absl::StrCat(host, "\n", real, "\n", st.st_dev, "\n", st.st_ino);
  uint32_t a = wire::Crc32c(key.data(), key.size());
  uint32_t b = wire::Crc32cExtend(0x9e3779b9u, key.data(), key.size());
  return absl::StrFormat("%s-%08x%08x", prefix, a, b);
}

AppendSource::AppendSource(sys::SysCalls& sys, AppendSourceOptions options,
                           SegmentCatalog& catalog)
    : sys_(sys), options_(std::move(options)), catalog_(catalog) {}

AppendSource::~AppendSource() { Stop(); }

absl::Status AppendSource::Start() {
  if (options_.stream_id.empty()) {
    auto id = DeriveStreamId(sys_, options_.wal_dir, "append");
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
  absl::Time next_rescan = absl::Now() + options_.rescan_interval;
  while (!stopping_.load()) {
    bool rescan = false;
    bool tail_modified = false;
    // Events are drained in one batch and acted on once: a burst of appends
    // costs one fstat, not one per write.
    watch_->Wait(next_rescan - absl::Now(), [&](const inotify_event& ev) {
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
    if (absl::Now() >= next_rescan) rescan = true;
    if (failed_) continue;
    absl::Status s;
    if (rescan) {
      s = Rescan();
      next_rescan = absl::Now() + options_.rescan_interval;
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
  DIR* d = opendir(options_.wal_dir.c_str());
  if (d == nullptr) {
    return sys::ErrnoToStatus(errno, absl::StrCat("open WAL directory ", options_.wal_dir));
  }
  std::map<std::string, uint64_t> sizes;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    if (!wire::ValidateSegmentName(name).ok()) continue;
    struct stat st;
    std::string path = absl::StrCat(options_.wal_dir, "/", name);
    sys::SysResult r = sys_.Stat(path.c_str(), &st);
    if (!r.ok()) continue;  // deleted between readdir and stat
    if (!S_ISREG(st.st_mode)) continue;
    sizes[name] = static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return PublishChecked(std::move(sizes));
}

absl::Status AppendSource::RefreshTail() {
  if (!tail_fd_.valid()) return Rescan();
  struct stat st;
  sys::SysResult r = sys_.Fstat(tail_fd_.get(), &st);
  if (!r.ok() || st.st_nlink == 0) return Rescan();
  std::map<std::string, uint64_t> sizes = published_;
  sizes[tail_name_] = static_cast<uint64_t>(st.st_size);
  return PublishChecked(std::move(sizes));
}

absl::Status AppendSource::PublishChecked(std::map<std::string, uint64_t> sizes) {
  std::string last = sizes.empty() ? std::string() : sizes.rbegin()->first;
  for (const auto& [name, size] : sizes) {
    auto it = published_.find(name);
    if (it == published_.end()) continue;
    if (size < it->second) {
      return absl::DataLossError(absl::StrCat(
          "segment ", name, " in ", options_.wal_dir, " shrank from ", it->second,
          " to ", size, " bytes: the directory is not append-only"));
    }
    bool was_complete = name != published_.rbegin()->first;
    if (was_complete && size != it->second) {
      return absl::DataLossError(absl::StrCat(
          "segment ", name, " grew from ", it->second, " to ", size,
          " bytes after a later segment appeared: the directory is not append-only"));
    }
  }
  if (sizes == published_ && !published_.empty()) return absl::OkStatus();
  std::vector<SegmentInfo> segs;
  segs.reserve(sizes.size());
  for (const auto& [name, size] : sizes) {
    segs.push_back(SegmentInfo{name, size, name != last});
  }
  if (last != tail_name_) {
    tail_fd_.reset();
    tail_name_ = last;
    if (!last.empty()) {
      std::string path = absl::StrCat(options_.wal_dir, "/", last);
      sys::SysResult r = sys_.Open(path.c_str(), O_RDONLY | O_CLOEXEC, 0);
      if (r.ok()) tail_fd_.reset(static_cast<int>(r.rc));
    }
  }
  published_ = std::move(sizes);
  catalog_.Publish(std::move(segs));
  return absl::OkStatus();
}

}  // namespace walship::agent
