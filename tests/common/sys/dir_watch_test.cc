// DirWatch against the real kernel: inotify in a temp dir, a pipe as the
// extra descriptor.
#include "common/sys/dir_watch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::sys {
namespace {

class DirWatchTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTempDir("dir_watch_test"); }

  // Appends to `name` in the watched directory.
  void Append(const std::string& name) {
    int fd = ::open((dir_ + "/" + name).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                    0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "x", 1), 1);
    ::close(fd);
  }

  // Masks of the events queued now (a 0 ms wait: inotify queues an event
  // when the change happens, so nothing is missed).
  std::vector<uint32_t> Drain(DirWatch& w) {
    std::vector<uint32_t> masks;
    w.Wait(absl::ZeroDuration(), [&](const inotify_event& ev) { masks.push_back(ev.mask); });
    return masks;
  }

  std::string dir_;
};

TEST_F(DirWatchTest, ExtraDescriptorEndsTheWait) {
  auto w = DirWatch::Open(DefaultSysCalls(), dir_, IN_CREATE);
  ASSERT_TRUE(w.ok()) << w.status();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(::write(p[1], "!", 1), 1);
  const absl::Time start = absl::Now();
  int events = w->Wait(absl::Seconds(60), [](const inotify_event&) {}, p[0]);
  // Without the extra descriptor this waits the full minute.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(events, 0);
  char c;
  EXPECT_EQ(::read(p[0], &c, 1), 1) << "Wait must not read the extra descriptor";
  ::close(p[0]);
  ::close(p[1]);
}

TEST_F(DirWatchTest, WakeEndsTheWaitWithoutEvents) {
  auto w = DirWatch::Open(DefaultSysCalls(), dir_, IN_CREATE);
  ASSERT_TRUE(w.ok()) << w.status();
  w->Wake();
  const absl::Time start = absl::Now();
  EXPECT_EQ(w->Wait(absl::Seconds(60), [](const inotify_event&) {}), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // The wake-up was consumed: the next wait times out.
  EXPECT_EQ(w->Wait(absl::Milliseconds(10), [](const inotify_event&) {}), 0);
}

TEST_F(DirWatchTest, AWaitNeverEndsBeforeItsTimeout) {
  // A caller sleeping until a deadline less than a millisecond away must
  // not be woken before it (and then spin with zero timeouts until it).
  auto w = DirWatch::Open(DefaultSysCalls(), dir_, IN_CREATE);
  ASSERT_TRUE(w.ok()) << w.status();
  for (absl::Duration t : {absl::Microseconds(300), absl::Microseconds(1700)}) {
    const absl::Time start = absl::Now();
    EXPECT_EQ(w->Wait(t, [](const inotify_event&) {}), 0);
    EXPECT_GE(absl::Now() - start, t);
  }
}

TEST_F(DirWatchTest, SetMaskChangesWhichEventsArrive) {
  auto w = DirWatch::Open(DefaultSysCalls(), dir_, IN_CREATE | IN_MODIFY);
  ASSERT_TRUE(w.ok()) << w.status();
  Append("seg");
  std::vector<uint32_t> masks = Drain(*w);
  ASSERT_EQ(masks.size(), 2u);
  EXPECT_TRUE(masks[0] & IN_CREATE);
  EXPECT_TRUE(masks[1] & IN_MODIFY);

  ASSERT_TRUE(w->SetMask(IN_CREATE).ok());
  Append("seg");
  EXPECT_TRUE(Drain(*w).empty()) << "a write is no longer an event";
  Append("seg2");
  masks = Drain(*w);
  ASSERT_EQ(masks.size(), 1u);
  EXPECT_TRUE(masks[0] & IN_CREATE);

  ASSERT_TRUE(w->SetMask(IN_CREATE | IN_MODIFY).ok());
  Append("seg");
  masks = Drain(*w);
  ASSERT_EQ(masks.size(), 1u);
  EXPECT_TRUE(masks[0] & IN_MODIFY);
}

TEST_F(DirWatchTest, SetMaskOnARemovedDirectoryIsAnError) {
  std::string sub = dir_ + "/sub";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  auto w2 = DirWatch::Open(DefaultSysCalls(), sub, IN_CREATE);
  ASSERT_TRUE(w2.ok()) << w2.status();
  ASSERT_EQ(::rmdir(sub.c_str()), 0);
  absl::Status s = w2->SetMask(IN_CREATE | IN_MODIFY);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(sub), std::string::npos) << s;
}

}  // namespace
}  // namespace walship::sys
