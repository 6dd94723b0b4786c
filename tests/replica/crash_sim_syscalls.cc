#include "tests/replica/crash_sim_syscalls.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace walship::testing {
namespace {

std::optional<std::string> SmallFileContents(const std::string& path, uint64_t size) {
  if (size > CrashSimSysCalls::kContentBytes) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  // Only the synced bytes (after a failed sync the file holds more).
  return ss.str().substr(0, size);
}

}  // namespace

CrashSimSysCalls::CrashSimSysCalls(std::string root) : root_(std::move(root)) {}

bool CrashSimSysCalls::Tracked(const std::string& path) const {
  return path == root_ || (path.size() > root_.size() &&
                           path.compare(0, root_.size(), root_) == 0 &&
                           path[root_.size()] == '/');
}

void CrashSimSysCalls::Forget(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return;
  auto ino = path_of_ino_.find(it->second.ino);
  if (ino != path_of_ino_.end() && ino->second == path) path_of_ino_.erase(ino);
  files_.erase(it);
}

void CrashSimSysCalls::Reindex() {
  path_of_ino_.clear();
  for (const auto& [path, fs] : files_) path_of_ino_[fs.ino] = path;
}

CrashSimSysCalls::FileState CrashSimSysCalls::DurableState(const std::string& path) {
  // Present before the simulation saw it: fully durable.
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return FileState{};
  FileState fs{static_cast<uint64_t>(st.st_size), true,
               SmallFileContents(path, static_cast<uint64_t>(st.st_size))};
  fs.ino = st.st_ino;
  return fs;
}

sys::SysResult CrashSimSysCalls::Open(const char* path, int flags, mode_t mode) {
  std::string p = path;
  bool existed = access(path, F_OK) == 0;
  sys::SysResult r = RealSysCalls::Open(path, flags, mode);
  if (!r.ok() || !Tracked(p)) return r;
  struct stat st;
  const ino_t ino = fstat(static_cast<int>(r.rc), &st) == 0 ? st.st_ino : 0;
  std::lock_guard<std::mutex> lock(mu_);
  fd_paths_[static_cast<int>(r.rc)] = FdEntry{p, ino};
  if (p == root_ || ino == 0 || !S_ISREG(st.st_mode)) return r;
  auto it = files_.find(p);
  if (!existed) {
    Forget(p);
    files_[p] = FileState{0, false};
  } else if (it == files_.end() || it->second.ino != ino) {
    Forget(p);
    FileState fs = DurableState(p);
    if (fs.ino != ino) return r;  // replaced meanwhile by someone else
    files_[p] = std::move(fs);
  } else if ((flags & O_TRUNC) != 0) {
    // Conservative: the cut is durable at once (no bytes resurface).
    it->second.synced_size = 0;
    if (it->second.synced_content.has_value()) it->second.synced_content->clear();
  }
  files_[p].ino = ino;
  path_of_ino_[ino] = p;
  return r;
}

void CrashSimSysCalls::SyncFd(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fd_paths_.find(fd);
  if (it == fd_paths_.end()) return;
  const std::string& p = it->second.path;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino != it->second.ino) return;
  if (S_ISDIR(st.st_mode)) {
    // Entries in this directory become durable; so do renames into it.
    for (auto& [path, fs] : files_) {
      if (path.compare(0, p.size() + 1, p + "/") == 0) fs.entry_durable = true;
    }
    for (auto& [to, fs] : backups_) ::unlink((to + ".crashsim-old").c_str());
    backups_.clear();
    pending_renames_.clear();
    return;
  }
  // The descriptor's path may be stale after a rename: find the file by inode.
  auto path = path_of_ino_.find(st.st_ino);
  if (path == path_of_ino_.end()) return;
  auto f = files_.find(path->second);
  if (f == files_.end()) return;
  FileState& fs = f->second;
  fs.synced_size = static_cast<uint64_t>(st.st_size);
  if (fs.lost_from.has_value()) fs.synced_size = std::min(fs.synced_size, *fs.lost_from);
  fs.synced_content = SmallFileContents(f->first, fs.synced_size);
}

std::string CrashSimSysCalls::PathOfFd(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fd_paths_.find(fd);
  return it == fd_paths_.end() ? std::string() : it->second.path;
}

std::string CrashSimSysCalls::TrackedPathOfFd(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fd_paths_.find(fd);
  if (it == fd_paths_.end() || it->second.ino != st.st_ino) return "";
  auto path = path_of_ino_.find(st.st_ino);
  return path == path_of_ino_.end() ? std::string() : path->second;
}

size_t CrashSimSysCalls::tracked_files() {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

void CrashSimSysCalls::DieAtNextFdatasyncOf(const std::string& suffix,
                                            const std::string& after) {
  std::lock_guard<std::mutex> lock(mu_);
  die_suffix_ = suffix;
  die_after_ = after;
  after_synced_ = false;
  if (suffix.empty()) die_dir_ = false;
}

void CrashSimSysCalls::DieAtNextDirFsync(const std::string& after) {
  std::lock_guard<std::mutex> lock(mu_);
  die_dir_ = true;
  die_after_ = after;
  after_synced_ = false;
}

namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return !suffix.empty() && s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void CrashSimSysCalls::FailNextFdatasyncOf(const std::string& suffix) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_suffix_ = suffix;
}

sys::SysResult CrashSimSysCalls::Ftruncate(int fd, off_t len) {
  sys::SysResult r = RealSysCalls::Ftruncate(fd, len);
  if (!r.ok()) return r;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fd_paths_.find(fd);
  if (it == fd_paths_.end()) return r;
  auto fs = files_.find(it->second.path);
  if (fs == files_.end() || fs->second.ino != it->second.ino) return r;
  const uint64_t n = static_cast<uint64_t>(len);
  if (fs->second.lost_from.has_value() && n <= *fs->second.lost_from) {
    fs->second.lost_from.reset();
  }
  // Conservative: a cut is durable at once (no bytes past it resurface, and
  // Crash() never extends a file with zeros).
  if (n < fs->second.synced_size) {
    fs->second.synced_size = n;
    if (fs->second.synced_content.has_value()) fs->second.synced_content->resize(n);
  }
  return r;
}

sys::SysResult CrashSimSysCalls::Fdatasync(int fd) {
  std::string path;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (dead_) return {-1, EIO};
    auto it = fd_paths_.find(fd);
    if (it != fd_paths_.end()) path = it->second.path;
    if (EndsWith(path, fail_suffix_)) {
      fail_suffix_.clear();
      auto fs = files_.find(path);
      if (fs != files_.end() && !fs->second.lost_from.has_value()) {
        fs->second.lost_from = fs->second.synced_size;
      }
      return {-1, EIO};
    }
    if (EndsWith(path, die_suffix_)) {
      if (!die_after_.empty()) {
        after_cv_.wait_for(lock, std::chrono::milliseconds(50),
                           [this] { return after_synced_; });
      }
      die_suffix_.clear();
      dead_ = true;
      return {-1, EIO};
    }
  }
  sys::SysResult r = RealSysCalls::Fdatasync(fd);
  if (r.ok()) SyncFd(fd);
  std::lock_guard<std::mutex> lock(mu_);
  if (dead_) return {-1, EIO};  // it died meanwhile: this sync never happened
  if (r.ok() && EndsWith(path, die_after_)) {
    after_synced_ = true;
    after_cv_.notify_all();
  }
  return r;
}

sys::SysResult CrashSimSysCalls::Fsync(int fd) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (dead_) return {-1, EIO};
    auto it = fd_paths_.find(fd);
    if (die_dir_ && it != fd_paths_.end() && it->second.path == root_) {
      if (!die_after_.empty()) {
        after_cv_.wait_for(lock, std::chrono::milliseconds(50),
                           [this] { return after_synced_; });
      }
      die_dir_ = false;
      dead_ = true;
      ++dir_fsync_deaths_;
      return {-1, EIO};
    }
  }
  sys::SysResult r = RealSysCalls::Fsync(fd);
  if (r.ok()) SyncFd(fd);
  return r;
}

sys::SysResult CrashSimSysCalls::Rename(const char* from, const char* to) {
  std::string backup = std::string(to) + ".crashsim-old";
  // Keep the overwritten file reachable so an undone rename restores it.
  bool had_target = Tracked(to) && ::link(to, backup.c_str()) == 0;
  const FileState old_target = had_target ? DurableState(to) : FileState{};
  sys::SysResult r = RealSysCalls::Rename(from, to);
  if (!r.ok() || !Tracked(from)) {
    if (had_target) ::unlink(backup.c_str());
    return r;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  // A file the simulation never saw was there before it started: durable.
  FileState moved = it != files_.end() ? it->second : DurableState(to);
  if (it != files_.end()) files_.erase(it);
  if (had_target) {
    auto t = files_.find(to);
    backups_[to] = t != files_.end() ? t->second : old_target;
  }
  Forget(to);
  files_[to] = moved;
  if (moved.ino != 0) path_of_ino_[moved.ino] = to;
  pending_renames_.push_back({from, to});
  return r;
}

sys::SysResult CrashSimSysCalls::Unlink(const char* path) {
  sys::SysResult r = RealSysCalls::Unlink(path);
  if (r.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    Forget(path);
  }
  return r;
}

void CrashSimSysCalls::Crash(uint64_t tear) {
  std::lock_guard<std::mutex> lock(mu_);
  dead_ = false;
  die_suffix_.clear();
  die_after_.clear();
  die_dir_ = false;
  // Undo renames a directory fsync never made durable, newest first. A
  // rename over an existing file (the state file's temp + rename) reverts to
  // the old contents only if those were kept; we model the common case
  // conservatively: the new name disappears and the old name returns.
  for (auto it = pending_renames_.rbegin(); it != pending_renames_.rend(); ++it) {
    std::rename(it->second.c_str(), it->first.c_str());
    auto fs = files_.find(it->second);
    if (fs != files_.end()) {
      files_[it->first] = fs->second;
      files_.erase(fs);
    }
    auto b = backups_.find(it->second);
    if (b != backups_.end()) {
      std::rename((it->second + ".crashsim-old").c_str(), it->second.c_str());
      files_[it->second] = b->second;
      backups_.erase(b);
    }
  }
  pending_renames_.clear();
  for (auto it = files_.begin(); it != files_.end();) {
    if (!it->second.entry_durable) {
      ::unlink(it->first.c_str());
      it = files_.erase(it);
      continue;
    }
    if (::truncate(it->first.c_str(), static_cast<off_t>(it->second.synced_size)) != 0) {
      // Already gone: nothing to drop.
    }
    if (it->second.synced_content.has_value()) {
      // Undo in-place overwrites that were never synced (tearing them).
      std::string now = SmallFileContents(it->first, kContentBytes).value_or("");
      std::string old = *it->second.synced_content;
      size_t first = 0;
      while (first < old.size() && first < now.size() && old[first] == now[first]) ++first;
      for (size_t i = first; i < old.size() && i < now.size() && i - first < tear; ++i) {
        old[i] = now[i];
      }
      std::ofstream(it->first, std::ios::binary | std::ios::trunc) << old;
    }
    ++it;
  }
  fd_paths_.clear();
  Reindex();
}

}  // namespace walship::testing
