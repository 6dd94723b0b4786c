// crash_sim_syscalls.h: simulates a machine crash by dropping what was not
// made durable (after leveldb's fault_injection_test).
//
// Decorates RealSysCalls for files under one root directory and remembers,
// per path, how many bytes the last fdatasync/fsync covered and which
// creations and renames a directory fsync has made durable. Crash() then
// rewrites the real directory into what a power loss could leave: every file
// truncated to its synced size, files whose creation was never made durable
// by a directory fsync removed, and renames not followed by a directory fsync
// undone (newest first).
//
// Simplifications, all conservative: unsynced bytes are dropped entirely
// (never half-kept), directory entries are durable only after an fsync of
// that directory, and a cut (ftruncate, O_TRUNC) is durable at once. Files it
// first meets already present (opened or renamed, never created through it)
// are taken as fully durable. Unlink is durable at once and the file leaves
// its maps. Files are found by inode (one fstat per sync, whatever the number
// of files), on one file system.
//
// Thread-safety: every method may be called from any thread (one mutex);
// Crash() must not run concurrently with calls that change files (a caller
// that keeps running threads, like the chaos fault layer, stops them first).
#ifndef WALSHIP_TESTS_REPLICA_CRASH_SIM_SYSCALLS_H_
#define WALSHIP_TESTS_REPLICA_CRASH_SIM_SYSCALLS_H_

#include <sys/types.h>

#include <condition_variable>
#include <map>
#include <optional>
#include <mutex>
#include <string>
#include <vector>

#include "common/sys/syscalls.h"

namespace walship::testing {

class CrashSimSysCalls : public sys::RealSysCalls {
 public:
  explicit CrashSimSysCalls(std::string root);

  sys::SysResult Open(const char* path, int flags, mode_t mode) override;
  sys::SysResult Fdatasync(int fd) override;
  sys::SysResult Fsync(int fd) override;
  sys::SysResult Rename(const char* from, const char* to) override;
  sys::SysResult Unlink(const char* path) override;
  sys::SysResult Ftruncate(int fd, off_t len) override;

  // Applies the crash to the real files. Open descriptors must be closed by
  // the caller first (the writer objects are destroyed). Small files (at
  // most kContentBytes when last synced) also lose in-place overwrites made
  // since: with tear == 0 they return to their synced contents; otherwise
  // the first `tear` changed bytes of the new contents survive and the rest
  // revert (a write torn by the crash; tear past the change keeps it all).
  void Crash(uint64_t tear = 0);

  // The path of the regular file under the root that `fd` refers to now
  // (after renames), or "" if `fd` is not such a file (a socket, a pipe, a
  // reused descriptor, a file outside the root or one since unlinked).
  std::string TrackedPathOfFd(int fd);
  // Files it currently tracks (bounded by what exists under the root).
  size_t tracked_files();

  // The next Fdatasync of a file whose path ends in `suffix` fails with EIO
  // without syncing: the machine "dies" inside it, and every later
  // Fdatasync or Fsync fails the same way until Crash(). The caller then
  // destroys its objects and calls Crash(). With `after`, the dying call
  // first waits (up to 50 ms) until an Fdatasync of a file ending in
  // `after` has completed: "that one reached the disk, this one did not".
  // An empty `suffix` disarms (this and DieAtNextDirFsync).
  void DieAtNextFdatasyncOf(const std::string& suffix, const std::string& after = "");
  // The same, for the next fsync of the root directory itself.
  void DieAtNextDirFsync(const std::string& after = "");
  // The next Fdatasync of a file whose path ends in `suffix` fails once with
  // EIO, and the machine lives on, as Linux does after a writeback error: the
  // bytes the file held past its last sync are lost for good. A later
  // Fdatasync of it succeeds but makes nothing past that point durable until
  // the file is truncated back to it (Crash() then drops them), while reads
  // still return them (the page cache keeps the pages).
  void FailNextFdatasyncOf(const std::string& suffix);
  // Ends a DieAt... death without a power loss: a process that crashed and
  // restarts on a machine that kept running (the page cache, and so every
  // write, survives; nothing more becomes durable).
  void Revive() {
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = false;
  }
  // Machine deaths so far inside a directory fsync.
  int dir_fsync_deaths() {
    std::lock_guard<std::mutex> lock(mu_);
    return dir_fsync_deaths_;
  }

  static constexpr uint64_t kContentBytes = 64 << 10;

 protected:
  // The path a tracked descriptor was opened with ("" if untracked).
  std::string PathOfFd(int fd);

 private:
  struct FileState {
    uint64_t synced_size = 0;
    bool entry_durable = false;
    // Contents at the last sync, kept for small files only.
    std::optional<std::string> synced_content;
    // After a failed sync (FailNextFdatasyncOf): nothing from here on
    // becomes durable until the file is cut back to it.
    std::optional<uint64_t> lost_from;
    ino_t ino = 0;
  };
  struct FdEntry {
    std::string path;  // as opened
    ino_t ino = 0;     // tells a reused descriptor number from this one
  };
  bool Tracked(const std::string& path) const;
  void SyncFd(int fd);
  // Drops `path` from files_ and its inode index (mu_ held).
  void Forget(const std::string& path);
  // Rebuilds path_of_ino_ from files_ (mu_ held).
  void Reindex();
  // The state of a file found already present: durable as it is.
  static FileState DurableState(const std::string& path);

  const std::string root_;
  std::mutex mu_;
  std::map<int, FdEntry> fd_paths_;
  std::map<std::string, FileState> files_;
  // The current path of each tracked file, by inode.
  std::map<ino_t, std::string> path_of_ino_;
  std::vector<std::pair<std::string, std::string>> pending_renames_;
  // Rename targets that were overwritten, by target path, with their state.
  std::map<std::string, FileState> backups_;
  std::string die_suffix_;
  std::string fail_suffix_;
  std::string die_after_;
  bool after_synced_ = false;
  bool die_dir_ = false;
  int dir_fsync_deaths_ = 0;
  bool dead_ = false;
  std::condition_variable after_cv_;
};

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_REPLICA_CRASH_SIM_SYSCALLS_H_
