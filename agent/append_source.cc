#include "agent/append_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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
  sys::SysResult r = sys_.InotifyInit1(IN_CLOEXEC | IN_NONBLOCK);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "inotify_init1");
  inotify_.reset(static_cast<int>(r.rc));
  r = sys_.InotifyAddWatch(inotify_.get(), options_.wal_dir.c_str(),
                           IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO |
                               IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF |
                               IN_MOVE_SELF | IN_ONLYDIR);
  if (!r.ok()) {
    return sys::ErrnoToStatus(r.err, absl::StrCat("watch WAL directory ", options_.wal_dir));
  }
  int fds[2];
  r = sys_.Pipe2(fds, O_CLOEXEC | O_NONBLOCK);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "pipe2");
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
  absl::Status s = Rescan();
  if (!s.ok()) return s;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void AppendSource::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_write_.valid()) {
    char c = 1;
    sys_.Write(wake_write_.get(), &c, 1);
  }
  if (thread_.joinable()) thread_.join();
}

void AppendSource::Loop() {
  absl::Time next_rescan = absl::Now() + options_.rescan_interval;
  std::vector<char> buf(64 * 1024);
  while (!stopping_.load()) {
    pollfd pfds[2] = {{inotify_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    int timeout_ms = static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(next_rescan - absl::Now())));
    sys_.Poll(pfds, 2, timeout_ms);
    if (stopping_.load()) break;
    bool rescan = absl::Now() >= next_rescan;
    bool tail_modified = false;
    // Drain every queued event, then act once: a burst of appends costs one
    // fstat, not one per write.
    for (;;) {
      sys::SysResult r = sys_.Read(inotify_.get(), buf.data(), buf.size());
      if (!r.ok() || r.rc <= 0) break;
      for (size_t off = 0; off < static_cast<size_t>(r.rc);) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf.data() + off);
        off += sizeof(inotify_event) + ev->len;
        if (ev->mask & IN_Q_OVERFLOW) {
          rescan = true;
        } else if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
          if (!failed_) {
            failed_ = true;
            catalog_.Fail(absl::FailedPreconditionError(absl::StrCat(
                "WAL directory ", options_.wal_dir, " was deleted or moved")));
            spdlog::error("WAL directory {} was deleted or moved", options_.wal_dir);
          }
        } else if (ev->mask & IN_MODIFY) {
          if (ev->len > 0 && tail_name_ == ev->name) {
            tail_modified = true;
          } else {
            rescan = true;
          }
        } else {
          rescan = true;
        }
      }
    }
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
