// Copyright walship authors.

#include "common/sys/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walship {
namespace sys {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Logs the durability-relevant calls and fails chosen ones.
class RecordingSysCalls : public RealSysCalls {
 public:
  SysResult Open(const char* path, int flags, mode_t mode) override {
    const SysResult r = RealSysCalls::Open(path, flags, mode);
    if (r.ok()) paths_[r.rc] = path;
    log.push_back(absl::StrCat("open ", Base(path)));
    return r;
  }
  SysResult Fsync(int fd) override {
    log.push_back(absl::StrCat("fsync ", Base(paths_[fd])));
    if (++fsyncs == fail_fsync_number) return SysResult{-1, EIO};
    return RealSysCalls::Fsync(fd);
  }
  SysResult Rename(const char* from, const char* to) override {
    log.push_back(absl::StrCat("rename ", Base(from), " ", Base(to)));
    if (fail_rename) return SysResult{-1, EXDEV};
    return RealSysCalls::Rename(from, to);
  }
  SysResult Unlink(const char* path) override {
    log.push_back(absl::StrCat("unlink ", Base(path)));
    return RealSysCalls::Unlink(path);
  }

  std::vector<std::string> log;
  int fsyncs = 0;
  int fail_fsync_number = 0;  // 1-based; 0 = never.
  bool fail_rename = false;

 private:
  static std::string Base(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  }
  std::map<int64_t, std::string> paths_;
};

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* root = getenv("TEST_TMPDIR");
    std::string templ =
        absl::StrCat(root != nullptr ? root : "/tmp", "/file_util_XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  bool Exists(const std::string& name) const {
    struct stat st;
    return ::stat(Path(name).c_str(), &st) == 0;
  }

  std::string dir_;
  SysCalls& real_ = DefaultSysCalls();
};

TEST_F(FileUtilTest, WriteThenReadRoundTrips) {
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "state", "lsn=42\n").ok());
  absl::StatusOr<std::string> got = ReadFileToString(real_, Path("state"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "lsn=42\n");
  EXPECT_FALSE(Exists("state.tmp"));
}

TEST_F(FileUtilTest, OverwriteReplacesTheWholeFile) {
  ASSERT_TRUE(
      WriteFileAtomically(real_, dir_, "state", "a long old value").ok());
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "state", "new").ok());
  EXPECT_EQ(*ReadFileToString(real_, Path("state")), "new");
}

TEST_F(FileUtilTest, SyncsFileThenRenamesThenSyncsDirectory) {
  RecordingSysCalls sys;
  ASSERT_TRUE(WriteFileAtomically(sys, dir_, "state", "x").ok());
  const std::string base = dir_.substr(dir_.rfind('/') + 1);
  EXPECT_THAT(
      sys.log,
      ElementsAre("open state.tmp", "fsync state.tmp", "rename state.tmp state",
                  absl::StrCat("open ", base), absl::StrCat("fsync ", base)));
}

TEST_F(FileUtilTest, FailedFsyncKeepsOldContentsAndRemovesTemp) {
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "state", "old").ok());
  RecordingSysCalls sys;
  sys.fail_fsync_number = 1;

  const absl::Status s = WriteFileAtomically(sys, dir_, "state", "new");

  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("state.tmp"));
  EXPECT_EQ(*ReadFileToString(real_, Path("state")), "old");
  EXPECT_FALSE(Exists("state.tmp"));
}

TEST_F(FileUtilTest, FailedRenameKeepsOldContentsAndRemovesTemp) {
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "state", "old").ok());
  RecordingSysCalls sys;
  sys.fail_rename = true;

  const absl::Status s = WriteFileAtomically(sys, dir_, "state", "new");

  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(*ReadFileToString(real_, Path("state")), "old");
  EXPECT_FALSE(Exists("state.tmp"));
}

TEST_F(FileUtilTest, FailedDirectorySyncReportsErrorWithNewContents) {
  RecordingSysCalls sys;
  sys.fail_fsync_number = 2;  // The directory's.

  const absl::Status s = WriteFileAtomically(sys, dir_, "state", "new");

  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("fsync directory"));
  EXPECT_EQ(*ReadFileToString(real_, Path("state")), "new");
}

TEST_F(FileUtilTest, LeftoverTempFromACrashIsOverwritten) {
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "junk", "garbage garbage").ok());
  ASSERT_EQ(::rename(Path("junk").c_str(), Path("state.tmp").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "state", "ok").ok());
  EXPECT_EQ(*ReadFileToString(real_, Path("state")), "ok");
}

TEST_F(FileUtilTest, NameWithSlashIsInvalidArgument) {
  EXPECT_EQ(WriteFileAtomically(real_, dir_, "a/b", "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteFileAtomically(real_, dir_, "", "x").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FileUtilTest, MissingFileIsNotFound) {
  const absl::StatusOr<std::string> got =
      ReadFileToString(real_, Path("absent"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(Path("absent")));
}

TEST_F(FileUtilTest, ReadsFilesLargerThanOneChunk) {
  std::string big(300 * 1024 + 17, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "big", big).ok());
  EXPECT_TRUE(*ReadFileToString(real_, Path("big")) == big);
}

TEST_F(FileUtilTest, OpenFileAddsCloexec) {
  absl::StatusOr<UniqueFd> fd =
      OpenFile(real_, Path("f"), O_RDWR | O_CREAT, 0600);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC);
}

TEST_F(FileUtilTest, OpenFileMissingIsNotFound) {
  EXPECT_EQ(OpenFile(real_, Path("nope"), O_RDONLY).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FileUtilTest, OpenRegularFileRefusesLinksAndOtherFiles) {
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "target", "secret").ok());
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(real_, Path("target"));
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC);

  ASSERT_EQ(::symlink(Path("target").c_str(), Path("link").c_str()), 0);
  absl::Status s = OpenRegularFile(real_, Path("link")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr(Path("link") + " is a symbolic link"));

  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);  // must not block
  s = OpenRegularFile(real_, Path("fifo")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("not a regular file"));

  EXPECT_EQ(OpenRegularFile(real_, Path("nope")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FileUtilTest, FsyncDir) {
  EXPECT_TRUE(FsyncDir(real_, dir_).ok());
  EXPECT_EQ(FsyncDir(real_, Path("nope")).code(), absl::StatusCode::kNotFound);
}

// Records the mask of each statx; answers `no_statx` when told to, as a
// kernel older than statx(2) (ENOSYS) or a seccomp filter (EPERM) would.
class StatxRecordingSysCalls : public RealSysCalls {
 public:
  SysResult Statx(int dirfd, const char* path, int flags, unsigned int mask,
                  struct statx* out) override {
    masks.push_back(mask);
    if (no_statx != 0) return SysResult{-1, no_statx};
    return RealSysCalls::Statx(dirfd, path, flags, mask, out);
  }
  SysResult Fstat(int fd, struct stat* st) override {
    ++fstats;
    return RealSysCalls::Fstat(fd, st);
  }
  SysResult Lstat(const char* path, struct stat* st) override {
    ++lstats;
    return RealSysCalls::Lstat(path, st);
  }

  std::vector<unsigned int> masks;
  int no_statx = 0;
  int fstats = 0;
  int lstats = 0;
};

void ExpectSameFacts(const FileFacts& f, const struct stat& st) {
  EXPECT_EQ(f.dev, st.st_dev);
  EXPECT_EQ(f.ino, st.st_ino);
  EXPECT_EQ(f.mode, st.st_mode);
  EXPECT_EQ(f.nlink, st.st_nlink);
  EXPECT_EQ(f.size, static_cast<uint64_t>(st.st_size));
}

TEST_F(FileUtilTest, DescribeNeverAsksForTimes) {
  ASSERT_TRUE(WriteFileAtomically(real_, dir_, "seg", "twelve bytes").ok());
  ASSERT_EQ(::link(Path("seg").c_str(), Path("seg2").c_str()), 0);
  ASSERT_EQ(::symlink(Path("seg").c_str(), Path("link").c_str()), 0);
  struct stat want, link_want;
  ASSERT_EQ(::stat(Path("seg").c_str(), &want), 0);
  ASSERT_EQ(::lstat(Path("link").c_str(), &link_want), 0);
  absl::StatusOr<UniqueFd> fd = OpenFile(real_, Path("seg"), O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status();

  for (int no_statx : {0, ENOSYS, EPERM}) {
    SCOPED_TRACE(no_statx != 0 ? absl::StrCat("statx answers ", no_statx) : "statx");
    StatxRecordingSysCalls sys;
    sys.no_statx = no_statx;
    FileFacts by_fd, by_path, of_link;
    ASSERT_TRUE(DescribeFd(sys, fd->get(), &by_fd).ok());
    ASSERT_TRUE(DescribePath(sys, Path("seg"), &by_path).ok());
    ASSERT_TRUE(DescribePath(sys, Path("link"), &of_link).ok());
    ExpectSameFacts(by_fd, want);
    ExpectSameFacts(by_path, want);
    EXPECT_EQ(by_fd.nlink, 2u);
    EXPECT_EQ(by_fd.size, 12u);
    ExpectSameFacts(of_link, link_want);  // the link itself, not followed
    EXPECT_TRUE(S_ISLNK(of_link.mode));
    ASSERT_EQ(sys.masks.size(), 3u);
    for (unsigned int mask : sys.masks) {
      EXPECT_EQ(mask & (STATX_ATIME | STATX_MTIME | STATX_CTIME | STATX_BTIME), 0u) << mask;
    }
    // The times are asked for only where statx is missing.
    EXPECT_EQ(sys.fstats, no_statx != 0 ? 1 : 0);
    EXPECT_EQ(sys.lstats, no_statx != 0 ? 2 : 0);
  }

  StatxRecordingSysCalls sys;
  FileFacts none;
  const SysResult r = DescribePath(sys, Path("nope"), &none);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.err, ENOENT);
}

// Counts getdents64 calls and fails the chosen one with EIO.
class DirReadingSysCalls : public RealSysCalls {
 public:
  SysResult Getdents64(int fd, void* buf, size_t n) override {
    if (++calls == fail_call) return SysResult{-1, EIO};
    return RealSysCalls::Getdents64(fd, buf, n);
  }
  int calls = 0;
  int fail_call = 0;  // 1-based; 0 = never.
};

TEST_F(FileUtilTest, ListDirectoryNamesEveryEntryOnceAcrossReads) {
  std::set<std::string> want;
  for (int i = 0; i < 1000; ++i) {  // ~70 KiB of records: several reads
    const std::string name = absl::StrCat("segment-with-a-long-name-", 100000 + i);
    ASSERT_TRUE(WriteFileAtomically(real_, dir_, name, "").ok());
    want.insert(name);
  }
  DirReadingSysCalls sys;
  absl::StatusOr<std::vector<std::string>> got = ListDirectory(sys, dir_, "WAL directory");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), want.size());  // no ".", "..", nor a name twice
  EXPECT_EQ(std::set<std::string>(got->begin(), got->end()), want);
  EXPECT_GT(sys.calls, 2);  // the last read returns 0
}

TEST_F(FileUtilTest, ListDirectoryReportsAFailedReadAndAMissingDirectory) {
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(
        WriteFileAtomically(real_, dir_, absl::StrCat("segment-with-a-long-name-", i), "").ok());
  }
  DirReadingSysCalls sys;
  sys.fail_call = 2;  // a listing cut short is an error, never a shorter list
  absl::Status s = ListDirectory(sys, dir_, "WAL directory").status();
  EXPECT_EQ(s.code(), ErrnoToStatus(EIO, "x").code()) << s;
  EXPECT_THAT(s.message(), HasSubstr("read WAL directory " + dir_));

  s = ListDirectory(real_, Path("nope"), "destination").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("open destination " + Path("nope")));
}

}  // namespace
}  // namespace sys
}  // namespace walship
