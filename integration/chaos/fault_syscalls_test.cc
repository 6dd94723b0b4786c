#include "integration/chaos/fault_syscalls.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/sys/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::chaos {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using walship::testing::FreshTempDir;
using walship::testing::ReadFile;
using walship::testing::WriteFile;

using Fired = std::tuple<std::string, FaultKind, std::string>;

off_t SizeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

class FaultSysCallsTest : public ::testing::Test {
 protected:
  FaultSysCallsTest()
      : dir_(FreshTempDir("fault")),
        sys_(dir_, [this](const std::string& id, FaultKind kind, const std::string& path) {
          fired_.emplace_back(id, kind, path);
        }) {}

  sys::UniqueFd Create(const std::string& name) {
    sys::SysResult r =
        sys_.Open((dir_ + "/" + name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EXPECT_TRUE(r.ok()) << r.err;
    return sys::UniqueFd(static_cast<int>(r.rc));
  }
  off_t Size(const std::string& name) { return SizeOf(dir_ + "/" + name); }
  void FsyncRoot() {
    sys::SysResult r = sys_.Open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    ASSERT_TRUE(r.ok());
    sys::UniqueFd d(static_cast<int>(r.rc));
    ASSERT_TRUE(sys_.Fsync(d.get()).ok());
  }

  const std::string dir_;
  std::vector<Fired> fired_;
  FaultSysCalls sys_;
};

TEST_F(FaultSysCallsTest, KindsHaveTheirCommandWords) {
  for (const char* word :
       {"eio-fdatasync", "eio-write", "torn-write", "enospc-write", "power-loss"}) {
    ASSERT_TRUE(ParseFaultKind(word).has_value()) << word;
    EXPECT_STREQ(FaultKindName(*ParseFaultKind(word)), word);
  }
  EXPECT_FALSE(ParseFaultKind("eio").has_value());
}

TEST_F(FaultSysCallsTest, EioWriteFailsTheNextWriteIntoTheRootOnceAndWritesNothing) {
  sys::UniqueFd f = Create("a");
  sys_.Arm("7", FaultKind::kEioWrite);
  sys::SysResult r = sys_.Pwrite(f.get(), "0123456789", 10, 0);
  EXPECT_EQ(r.rc, -1);
  EXPECT_EQ(r.err, EIO);
  EXPECT_EQ(Size("a"), 0);
  EXPECT_THAT(fired_, ElementsAre(Fired{"7", FaultKind::kEioWrite, dir_ + "/a"}));
  EXPECT_EQ(sys_.Pwrite(f.get(), "0123456789", 10, 0).rc, 10);
  EXPECT_EQ(ReadFile(dir_ + "/a"), "0123456789");
}

TEST_F(FaultSysCallsTest, EnospcWriteFailsWriteWithEnospc) {
  sys::UniqueFd f = Create("a");
  sys_.Arm("1", FaultKind::kEnospcWrite);
  sys::SysResult r = sys_.Write(f.get(), "abc", 3);
  EXPECT_EQ(r.rc, -1);
  EXPECT_EQ(r.err, ENOSPC);
  EXPECT_EQ(Size("a"), 0);
  EXPECT_EQ(fired_.size(), 1u);
}

TEST_F(FaultSysCallsTest, TornWriteLeavesHalfAndFails) {
  sys::UniqueFd f = Create("a");
  sys_.Arm("1", FaultKind::kTornWrite);
  sys::SysResult r = sys_.Pwrite(f.get(), "0123456789", 10, 0);
  EXPECT_EQ(r.rc, -1);
  EXPECT_EQ(r.err, EIO);
  EXPECT_EQ(ReadFile(dir_ + "/a"), "01234");
  EXPECT_THAT(fired_, ElementsAre(Fired{"1", FaultKind::kTornWrite, dir_ + "/a"}));
}

TEST_F(FaultSysCallsTest, TornSpliceLeavesHalfInTheFile) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  sys::UniqueFd rd(p[0]), wr(p[1]);
  ASSERT_EQ(::write(wr.get(), "abcdefgh", 8), 8);
  sys::UniqueFd f = Create("a");
  sys_.Arm("1", FaultKind::kTornWrite);
  off_t off = 0;
  sys::SysResult r = sys_.Splice(rd.get(), nullptr, f.get(), &off, 8, 0);
  EXPECT_EQ(r.err, EIO);
  EXPECT_EQ(ReadFile(dir_ + "/a"), "abcd");
}

TEST_F(FaultSysCallsTest, WriteFaultsSkipPipesAndFilesOutsideTheRoot) {
  const std::string other = FreshTempDir("fault-other") + "/b";
  sys::SysResult o = sys_.Open(other.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_TRUE(o.ok());
  sys::UniqueFd outside(static_cast<int>(o.rc));
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  sys::UniqueFd rd(p[0]), wr(p[1]);
  sys_.Arm("1", FaultKind::kEioWrite);
  EXPECT_EQ(sys_.Write(outside.get(), "x", 1).rc, 1);
  EXPECT_EQ(sys_.Write(wr.get(), "x", 1).rc, 1);
  EXPECT_TRUE(fired_.empty());
  sys::UniqueFd f = Create("a");
  EXPECT_EQ(sys_.Write(f.get(), "x", 1).err, EIO);
  EXPECT_EQ(fired_.size(), 1u);
}

TEST_F(FaultSysCallsTest, ASuffixLimitsTheFaultToMatchingFiles) {
  sys::UniqueFd a = Create("walship.state");
  sys::UniqueFd b = Create("seg.partial");
  sys_.Arm("1", FaultKind::kTornWrite, ".partial");
  sys_.Arm("2", FaultKind::kEioFdatasync, ".partial");
  EXPECT_EQ(sys_.Write(a.get(), "ab", 2).rc, 2);
  EXPECT_TRUE(sys_.Fdatasync(a.get()).ok());
  EXPECT_TRUE(fired_.empty());
  EXPECT_EQ(sys_.Write(b.get(), "ab", 2).err, EIO);
  EXPECT_EQ(sys_.Fdatasync(b.get()).err, EIO);
  EXPECT_THAT(fired_, ElementsAre(Fired{"1", FaultKind::kTornWrite, dir_ + "/seg.partial"},
                                  Fired{"2", FaultKind::kEioFdatasync,
                                        dir_ + "/seg.partial"}));
}

TEST_F(FaultSysCallsTest, EioFdatasyncLosesTheUnsyncedBytesForGood) {
  sys::UniqueFd f = Create("a");
  FsyncRoot();
  ASSERT_EQ(sys_.Pwrite(f.get(), "durable.", 8, 0).rc, 8);
  ASSERT_TRUE(sys_.Fdatasync(f.get()).ok());
  ASSERT_EQ(sys_.Pwrite(f.get(), "lost", 4, 8).rc, 4);
  sys_.Arm("3", FaultKind::kEioFdatasync);
  sys::SysResult r = sys_.Fdatasync(f.get());
  EXPECT_EQ(r.err, EIO);
  EXPECT_THAT(fired_, ElementsAre(Fired{"3", FaultKind::kEioFdatasync, dir_ + "/a"}));
  // The process lives on; a later sync succeeds but does not bring them back.
  EXPECT_TRUE(sys_.Fdatasync(f.get()).ok());
  EXPECT_EQ(ReadFile(dir_ + "/a"), "durable.lost");
  sys_.PowerLoss("4");
  EXPECT_EQ(ReadFile(dir_ + "/a"), "durable.");
}

TEST_F(FaultSysCallsTest, PowerLossLeavesOnlyWhatWasDurable) {
  WriteFile(dir_ + "/old", "there before");  // present at start: durable
  sys::UniqueFd a = Create("a");
  sys::UniqueFd r = Create("r.tmp");
  FsyncRoot();
  ASSERT_EQ(sys_.Pwrite(a.get(), "synced", 6, 0).rc, 6);
  ASSERT_TRUE(sys_.Fdatasync(a.get()).ok());
  ASSERT_EQ(sys_.Pwrite(a.get(), "+unsynced", 9, 6).rc, 9);
  ASSERT_EQ(sys_.Pwrite(r.get(), "renamed", 7, 0).rc, 7);
  ASSERT_TRUE(sys_.Fdatasync(r.get()).ok());
  ASSERT_TRUE(sys_.Rename((dir_ + "/r.tmp").c_str(), (dir_ + "/r").c_str()).ok());
  sys::UniqueFd n = Create("new");  // its creation is never made durable
  ASSERT_EQ(sys_.Pwrite(n.get(), "x", 1, 0).rc, 1);
  ASSERT_TRUE(sys_.Fdatasync(n.get()).ok());

  sys_.PowerLoss("9");
  EXPECT_TRUE(sys_.powered_off());
  EXPECT_THAT(fired_, ElementsAre(Fired{"9", FaultKind::kPowerLoss, dir_}));
  EXPECT_EQ(ReadFile(dir_ + "/old"), "there before");
  EXPECT_EQ(ReadFile(dir_ + "/a"), "synced");
  EXPECT_EQ(Size("r"), -1);  // the rename is undone
  EXPECT_EQ(ReadFile(dir_ + "/r.tmp"), "renamed");
  EXPECT_EQ(Size("new"), -1);
}

TEST_F(FaultSysCallsTest, UnlinkedFilesLeaveTheSimulation) {
  for (int i = 0; i < 50; ++i) {
    sys::UniqueFd f = Create("f" + std::to_string(i));
    ASSERT_TRUE(sys_.Fdatasync(f.get()).ok());
  }
  EXPECT_EQ(sys_.tracked_files(), 50u);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(sys_.Unlink((dir_ + "/f" + std::to_string(i)).c_str()).ok());
  }
  EXPECT_EQ(sys_.tracked_files(), 0u);
}

class FaultChannelTest : public ::testing::Test {
 protected:
  FaultChannelTest()
      : dir_(FreshTempDir("fault-dest")),
        cmd_(FreshTempDir("fault-cmd")),
        events_(cmd_),
        sys_(dir_, [this](const std::string& id, FaultKind kind, const std::string& path) {
          events_.Append(id + " fired " + FaultKindName(kind) + " " + path);
        }),
        channel_(cmd_, sys_, events_) {}

  void Command(const std::string& id, const std::string& text) {
    WriteFile(cmd_ + "/cmd.tmp", text + "\n");
    ASSERT_EQ(::rename((cmd_ + "/cmd.tmp").c_str(), (cmd_ + "/cmd-" + id).c_str()), 0);
  }

  const std::string dir_;
  const std::string cmd_;
  EventLog events_;
  FaultSysCalls sys_;
  FaultChannel channel_;
};

TEST_F(FaultChannelTest, ArmsInIdOrderReportsErrorsAndFires) {
  Command("10", "eio-write .partial");
  Command("2", "bogus");
  Command("3", "power-loss .partial");
  channel_.PollOnce(/*exit_on_power_loss=*/false);
  EXPECT_EQ(SizeOf(cmd_ + "/cmd-10"), -1);
  EXPECT_EQ(SizeOf(cmd_ + "/cmd-2"), -1);
  std::string events = ReadFile(cmd_ + "/events");
  EXPECT_THAT(events, HasSubstr("2 error unknown command 'bogus'"));
  EXPECT_THAT(events, HasSubstr("3 error unknown command 'power-loss .partial'"));
  EXPECT_FALSE(sys_.powered_off());
  EXPECT_LT(events.find("2 error"), events.find("10 armed eio-write .partial\n"));

  sys::SysResult r =
      sys_.Open((dir_ + "/a.partial").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_TRUE(r.ok());
  sys::UniqueFd f(static_cast<int>(r.rc));
  EXPECT_EQ(sys_.Write(f.get(), "x", 1).err, EIO);
  EXPECT_THAT(ReadFile(cmd_ + "/events"),
              HasSubstr("10 fired eio-write " + dir_ + "/a.partial\n"));
}

TEST_F(FaultChannelTest, PowerLossEndsTheProcessWithItsExitCode) {
  Command("1", "power-loss");
  EXPECT_EXIT(channel_.PollOnce(/*exit_on_power_loss=*/true),
              ::testing::ExitedWithCode(kPowerLossExitCode), "");
}

}  // namespace
}  // namespace walship::chaos
