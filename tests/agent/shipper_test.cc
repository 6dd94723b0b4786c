// Shipper over a real loopback TCP connection and real segment files: who
// sends a publication (the publisher's thread inline, or the shipper's own
// thread) and that the replica sees the same frames either way; a segment
// recycled under the shipper is never sent.
#include "agent/shipper.h"

#include <errno.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>

#include <atomic>
#include <map>
#include <optional>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/stream_order.h"
#include "agent/wal_source.h"
#include "common/reason.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/tcp_pair.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

constexpr uint64_t kSegmentBytes = 1u << 20;

// Records which thread each sendfile(2) ran on; can refuse room in the
// socket or fail sendfile on one thread. Counts the calls that ask for a
// file's times (file_util.h: each costs the file's writer).
class ThreadRecordingSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult Fstat(int fd, struct stat* st) override {
    ++time_looks_;
    return RealSysCalls::Fstat(fd, st);
  }
  sys::SysResult Stat(const char* path, struct stat* st) override {
    ++time_looks_;
    return RealSysCalls::Stat(path, st);
  }
  sys::SysResult Lstat(const char* path, struct stat* st) override {
    ++time_looks_;
    return RealSysCalls::Lstat(path, st);
  }
  sys::SysResult Statx(int dirfd, const char* path, int flags, unsigned int mask,
                       struct statx* out) override {
    if ((mask & (STATX_ATIME | STATX_MTIME | STATX_CTIME | STATX_BTIME)) != 0) ++time_looks_;
    return RealSysCalls::Statx(dirfd, path, flags, mask, out);
  }
  sys::SysResult SendFile(int out_fd, int in_fd, off_t* offset, size_t count) override {
    {
      absl::MutexLock lock(&mu_);
      senders_.push_back(std::this_thread::get_id());
      if (fail_on_ == std::this_thread::get_id()) return sys::SysResult{-1, EPIPE};
    }
    return RealSysCalls::SendFile(out_fd, in_fd, offset, count);
  }
  sys::SysResult SendRoom(int fd) override {
    if (no_room_.load()) return sys::SysResult{0, 0};
    return RealSysCalls::SendRoom(fd);
  }
  std::vector<std::thread::id> senders() {
    absl::MutexLock lock(&mu_);
    return senders_;
  }
  void FailOn(std::thread::id t) {
    absl::MutexLock lock(&mu_);
    fail_on_ = t;
  }
  std::atomic<bool> no_room_{false};
  std::atomic<int> time_looks_{0};

 private:
  absl::Mutex mu_;
  std::vector<std::thread::id> senders_ ABSL_GUARDED_BY(mu_);
  std::thread::id fail_on_ ABSL_GUARDED_BY(mu_);
};

class RecordingEvents : public ShipperEvents {
 public:
  void OnCheckpoint(const std::string& segment, uint64_t length, uint32_t crc32c) override {
    absl::MutexLock lock(&mu_);
    checkpoints_.push_back({segment, length, crc32c, {}});
  }
  void OnCheckpointWithPatches(const std::string& segment, uint64_t length, uint32_t crc32c,
                               const std::vector<SegmentPatch>& patches) override {
    absl::MutexLock lock(&mu_);
    checkpoints_.push_back({segment, length, crc32c, patches});
  }
  void OnSent(const Position&, uint64_t, bool) override {}
  struct Checkpoint {
    std::string segment;
    uint64_t length;
    uint32_t crc32c;
    std::vector<SegmentPatch> patches;
  };
  std::vector<Checkpoint> checkpoints() {
    absl::MutexLock lock(&mu_);
    return checkpoints_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Checkpoint> checkpoints_ ABSL_GUARDED_BY(mu_);
};

struct Frame {
  wire::FrameHeader header;
  std::string payload;
};

// A source whose naming rule the test sets (WalSource::Successor).
class FakeSource : public WalSource {
 public:
  absl::Status Start() override { return absl::OkStatus(); }
  void Stop() override {}
  std::string StreamId() const override { return "fake"; }
  std::string FormatName() const override { return "fake"; }
  std::string wal_dir() const override { return ""; }
  std::optional<std::string> Successor(const std::string& name) const override {
    absl::MutexLock lock(&mu_);
    auto it = successors_.find(name);
    if (it == successors_.end()) return std::nullopt;
    return it->second;
  }
  void SetSuccessor(const std::string& name, const std::string& next) {
    absl::MutexLock lock(&mu_);
    successors_[name] = next;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> successors_ ABSL_GUARDED_BY(mu_);
};

class ShipperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTempDir("shipper_test");
    checksums_ = std::make_unique<SegmentChecksums>(sys_, dir_);
    // Two segments of distinct bytes; the catalog says how much may go.
    for (const char* name : {"seg1", "seg2"}) {
      std::string bytes(kSegmentBytes, '\0');
      for (size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<char>((i * 131 + name[3]) & 0xff);
      }
      testing::WriteFile(dir_ + "/" + name, bytes);
      contents_.push_back(std::move(bytes));
    }
    auto pair = testing::LoopbackTcpPair(sys_, /*nonblocking_tx=*/true);
    ASSERT_TRUE(pair.ok()) << pair.status();
    tx_ = std::move(pair->tx);
    rx_ = std::move(pair->rx);
  }

  void TearDown() override { StopShipper(); }

  void StartShipper(bool inline_sends, Position start = Position{}, uint32_t prefix_crc = 0,
                    std::vector<MutableBits> mutable_bytes = {}) {
    ShipperOptions o;
    o.mutable_bytes = std::move(mutable_bytes);
    o.inline_sends = inline_sends;
    o.idle_wait = absl::Milliseconds(50);
    shipper_ = std::make_unique<Shipper>(sys_, catalog_, order_, *checksums_, dir_, tx_.get(),
                                         start, prefix_crc, o, &events_);
    runner_ = std::thread([this] {
      runner_tid_ = static_cast<pid_t>(syscall(SYS_gettid));
      runner_id_ = std::this_thread::get_id();
      absl::Status s = shipper_->Run(stop_);
      absl::MutexLock lock(&result_mu_);
      result_ = s;
      finished_ = true;
    });
    while (runner_id_ == std::thread::id()) absl::SleepFor(absl::Milliseconds(1));
  }

  void StopShipper() {
    if (!runner_.joinable()) return;
    stop_.store(true);
    runner_.join();
  }

  // The next frame from the replica's side of the socket (5 s at most).
  Frame ReadFrame() {
    Frame f;
    uint8_t raw[wire::kFrameHeaderSize];
    ReadExactly(raw, sizeof(raw));
    auto h = wire::DecodeFrameHeader(absl::MakeConstSpan(raw, sizeof(raw)), 16u << 20);
    EXPECT_TRUE(h.ok()) << h.status();
    if (!h.ok()) return f;
    f.header = *h;
    f.payload.resize(h->payload_length);
    ReadExactly(f.payload.data(), f.payload.size());
    return f;
  }

  void ReadExactly(void* buf, size_t n) {
    size_t got = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (got < n) {
      ASSERT_LT(absl::Now(), deadline) << "no frame";
      pollfd p{rx_.get(), POLLIN, 0};
      (void)sys_.Poll(&p, 1, 100);  // a bounded wait; Recv below tells what came
      sys::SysResult r = sys_.Recv(rx_.get(), static_cast<char*>(buf) + got, n - got,
                                   MSG_DONTWAIT);
      if (r.ok() && r.rc == 0) FAIL() << "socket closed";
      if (r.ok()) got += static_cast<size_t>(r.rc);
    }
  }

  // A DATA frame carrying `n` bytes of `segment` (0 or 1) from `offset`.
  void ExpectData(const Frame& f, int segment, uint64_t offset, uint64_t n) {
    EXPECT_EQ(f.header.type, wire::FrameType::kData);
    EXPECT_EQ(f.header.offset, offset);
    ASSERT_EQ(f.payload.size(), n);
    EXPECT_TRUE(f.payload == contents_[segment].substr(offset, n)) << "payload differs";
    EXPECT_TRUE(wire::VerifyPayload(f.header, absl::MakeConstSpan(
                                                  reinterpret_cast<const uint8_t*>(
                                                      f.payload.data()),
                                                  f.payload.size()))
                    .ok());
  }

  void Publish(uint64_t seg1, bool seg1_complete = false, uint64_t seg2 = 0) {
    std::vector<SegmentInfo> segs = {{"seg1", seg1, seg1_complete}};
    if (seg1_complete) segs.push_back({"seg2", seg2, false});
    catalog_.Publish(std::move(segs));
  }

  // Publishes seg1 up to `first` bytes and reads the SEGMENT and DATA frames
  // Run()'s thread sends for it (a new segment is always its job).
  void EnterFirstSegment(uint64_t first) {
    Publish(first);
    Frame seg = ReadFrame();
    EXPECT_EQ(seg.header.type, wire::FrameType::kSegment);
    EXPECT_EQ(seg.payload, "seg1");
    ExpectData(ReadFrame(), 0, 0, first);
  }

  // Times Run()'s thread went to sleep and was woken, from /proc.
  int64_t RunnerSleeps() {
    std::string status = testing::ReadFile(
        absl::StrCat("/proc/self/task/", runner_tid_.load(), "/status"));
    const std::string key = "voluntary_ctxt_switches:";
    size_t at = status.find(key);
    if (at == std::string::npos) return -1;
    return std::strtoll(status.c_str() + at + key.size(), nullptr, 10);
  }

  // After EnterFirstSegment(4096): five 4 KiB appends, each published after
  // a pause and every one sent by Run()'s thread.
  void ExpectFiveAppendsSentByRunsThread() {
    for (uint64_t end = 4096; end < 4096 * 6; end += 4096) {
      absl::SleepFor(absl::Milliseconds(2));
      Publish(end + 4096);
      ExpectData(ReadFrame(), 0, end, 4096);
    }
    EXPECT_EQ(SentBy(std::this_thread::get_id()), 0u);
    EXPECT_EQ(SentBy(runner_id_), 6u);
  }

  // After EnterFirstSegment(4096): twenty 4 KiB appends go out without a
  // call that asks for a file's times.
  void ExpectTwentyAppendsSentWithoutATimeLook() {
    EnterFirstSegment(4096);
    sys_.time_looks_.store(0);
    for (uint64_t end = 4096; end < 4096 * 21; end += 4096) {
      absl::SleepFor(absl::Milliseconds(1));
      Publish(end + 4096);
      ExpectData(ReadFrame(), 0, end, 4096);
    }
    EXPECT_EQ(sys_.time_looks_.load(), 0) << "calls that asked for a file's times in 20 frames";
  }

  // Run()'s result once it returned on its own (5 s at most).
  absl::Status WaitForRun() {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    for (;;) {
      {
        absl::MutexLock lock(&result_mu_);
        if (finished_) return result_;
      }
      if (absl::Now() > deadline) return absl::DeadlineExceededError("Run() did not return");
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

  // PostgreSQL recycles a segment by renaming it, then overwrites it; here
  // another file takes the name at once, holding other bytes.
  void RecycleFirstSegment() {
    ASSERT_EQ(rename((dir_ + "/seg1").c_str(), (dir_ + "/seg9").c_str()), 0);
    testing::WriteFile(dir_ + "/seg1", std::string(kSegmentBytes, '\x5a'));
  }

  // After the first 4 KiB of seg1 went out, seg1 is recycled and 4 KiB more
  // are published.
  void ExpectRecycledSegmentNotSent() {
    EnterFirstSegment(4096);
    RecycleFirstSegment();
    absl::SleepFor(absl::Milliseconds(2));
    Publish(8192);
    absl::Status s = WaitForRun();
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_NE(s.ToString().find("seg1 was recycled or replaced while being shipped"),
              std::string::npos)
        << s;
    ExpectNoMoreBytes();
  }

  // Nothing more arrives on the replica's side within 200 ms.
  void ExpectNoMoreBytes() {
    pollfd p{rx_.get(), POLLIN, 0};
    (void)sys_.Poll(&p, 1, 200);  // a bounded wait; Recv below tells what came
    char c;
    sys::SysResult r = sys_.Recv(rx_.get(), &c, 1, MSG_DONTWAIT | MSG_PEEK);
    EXPECT_FALSE(r.ok() && r.rc > 0) << "bytes were sent after the segment was recycled";
  }

  size_t SentBy(std::thread::id t) {
    size_t n = 0;
    for (std::thread::id x : sys_.senders()) n += x == t;
    return n;
  }

  ThreadRecordingSysCalls sys_;
  std::string dir_;
  std::vector<std::string> contents_;
  SegmentCatalog catalog_;
  FakeSource source_;
  StreamOrder order_{source_, catalog_};
  std::unique_ptr<SegmentChecksums> checksums_;
  RecordingEvents events_;
  sys::UniqueFd tx_, rx_;
  std::unique_ptr<Shipper> shipper_;
  std::atomic<bool> stop_{false};
  std::thread runner_;
  std::atomic<std::thread::id> runner_id_{};
  std::atomic<pid_t> runner_tid_{0};
  absl::Mutex result_mu_;
  absl::Status result_ ABSL_GUARDED_BY(result_mu_);
  bool finished_ ABSL_GUARDED_BY(result_mu_) = false;
};

TEST_F(ShipperTest, AppendsToTheEnteredSegmentGoOutOnThePublishersThread) {
  StartShipper(/*inline_sends=*/true);
  EnterFirstSegment(4096);
  EXPECT_EQ(SentBy(runner_id_), 1u);
  absl::SleepFor(absl::Milliseconds(2));
  const int64_t sleeps_before = RunnerSleeps();
  ASSERT_GE(sleeps_before, 0);
  uint64_t end = 4096;
  for (int i = 0; i < 50; ++i) {
    // Time for Run()'s thread to let go of the shipping state.
    absl::SleepFor(absl::Milliseconds(2));
    const uint64_t n = 512 + 97 * static_cast<uint64_t>(i);
    Publish(end + n);
    ExpectData(ReadFrame(), 0, end, n);
    end += n;
  }
  // Run()'s thread slept through them: woken only by its idle timeout
  // (50 ms) in the 100-odd ms they took, not once per publication.
  const int64_t woken = RunnerSleeps() - sleeps_before;
  EXPECT_LT(woken, 25) << "Run()'s thread was woken for inline publications";
  const size_t inline_sends = SentBy(std::this_thread::get_id());
  EXPECT_GE(inline_sends, 45u) << "of 50 publications";
  EXPECT_EQ(inline_sends + SentBy(runner_id_), 51u);
}

// Each frame checks that the segment's name still points at the file
// shipped; asking for the file's times there would make each of the
// database's next writes take a fine-grained timestamp, and its next
// fdatasync write the inode too (integration/drill/pg_source_times_test.py).
TEST_F(ShipperTest, ShippingAppendsNeverAsksForTheSegmentsTimes) {
  StartShipper(/*inline_sends=*/true);
  ExpectTwentyAppendsSentWithoutATimeLook();
}

TEST_F(ShipperTest, ShippingAppendsFromRunsThreadNeverAsksForTheSegmentsTimes) {
  StartShipper(/*inline_sends=*/false);
  ExpectTwentyAppendsSentWithoutATimeLook();
}

TEST_F(ShipperTest, WithoutRoomInTheSocketRunsThreadSends) {
  StartShipper(/*inline_sends=*/true);
  EnterFirstSegment(4096);
  sys_.no_room_.store(true);
  ExpectFiveAppendsSentByRunsThread();
}

TEST_F(ShipperTest, ABacklogIsRunsThreads) {
  StartShipper(/*inline_sends=*/true);
  EnterFirstSegment(4096);
  absl::SleepFor(absl::Milliseconds(2));
  const uint64_t n = Shipper::kMaxInlineBytes + 1;
  Publish(4096 + n);
  ExpectData(ReadFrame(), 0, 4096, n);
  EXPECT_EQ(SentBy(std::this_thread::get_id()), 0u);
}

TEST_F(ShipperTest, WithInlineSendsOffOnlyRunsThreadSends) {
  StartShipper(/*inline_sends=*/false);
  EnterFirstSegment(4096);
  ExpectFiveAppendsSentByRunsThread();
}

TEST_F(ShipperTest, AFailedInlineSendEndsRunWithItsError) {
  StartShipper(/*inline_sends=*/true);
  EnterFirstSegment(4096);
  sys_.FailOn(std::this_thread::get_id());
  absl::SleepFor(absl::Milliseconds(2));
  Publish(8192);
  ASSERT_EQ(SentBy(std::this_thread::get_id()), 1u) << "the publication went inline";
  // Run()'s thread wakes for it and returns the error, without being stopped.
  absl::Status s = WaitForRun();
  ASSERT_FALSE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("sendfile"), std::string::npos) << s;
}

// A segment recycled under the shipper: the bytes it would send now belong
// to another file. Whichever thread sends, nothing of them goes out and Run()
// ends with an error that says so (the session restarts and resumes from the
// replica's durable position).
TEST_F(ShipperTest, ASegmentRecycledUnderTheShipperIsNotSent) {
  StartShipper(/*inline_sends=*/false);
  ExpectRecycledSegmentNotSent();
}

TEST_F(ShipperTest, ASegmentRecycledUnderTheShipperIsNotSentWithInlineSendsOn) {
  StartShipper(/*inline_sends=*/true);
  ExpectRecycledSegmentNotSent();
}

TEST_F(ShipperTest, ASegmentsEndAndTheNextOneAreRunsThreads) {
  StartShipper(/*inline_sends=*/true);
  EnterFirstSegment(4096);
  absl::SleepFor(absl::Milliseconds(2));
  // The rest of seg1 fits inline; its checkpoint and seg2 are Run()'s.
  const uint64_t tail = 64 << 10;
  Publish(4096 + tail);
  ExpectData(ReadFrame(), 0, 4096, tail);
  absl::SleepFor(absl::Milliseconds(2));
  const uint64_t seg1 = 4096 + tail;
  Publish(seg1, /*seg1_complete=*/true, 1000);
  Frame seg = ReadFrame();
  EXPECT_EQ(seg.header.type, wire::FrameType::kSegment);
  EXPECT_EQ(seg.payload, "seg2");
  ExpectData(ReadFrame(), 1, 0, 1000);
  std::vector<RecordingEvents::Checkpoint> cps = events_.checkpoints();
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_EQ(cps[0].segment, "seg1");
  EXPECT_EQ(cps[0].length, seg1);
  EXPECT_EQ(cps[0].crc32c, wire::Crc32c(contents_[0].data(), seg1));
  EXPECT_EQ(SentBy(std::this_thread::get_id()), 1u);  // seg1's tail
}

// A segment the catalog published and the source then removed, before the
// shipper reached it: moving from seg1 to seg3 would skip it. The step is a
// gap naming seg2, and nothing of seg3 goes out.
TEST_F(ShipperTest, ASegmentRemovedBeforeItWasShippedIsAGapNotSkipped) {
  testing::WriteFile(dir_ + "/seg3", std::string(1000, 'c'));
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", kSegmentBytes, true},
                    {"seg3", 1000, false}});
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg3", 1000, false}});
  StartShipper(/*inline_sends=*/false);
  absl::Status s = WaitForRun();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kGap) << s;
  EXPECT_NE(s.ToString().find("segment seg2 (after seg1"), std::string::npos) << s;
  // seg1 went out whole and was checkpointed; seg3 was never entered.
  std::vector<RecordingEvents::Checkpoint> cps = events_.checkpoints();
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_EQ(cps[0].segment, "seg1");
  Frame seg = ReadFrame();
  EXPECT_EQ(seg.payload, "seg1");
  for (uint64_t got = 0; got < kSegmentBytes;) got += ReadFrame().payload.size();
  ExpectNoMoreBytes();
}

// Retention removes the segment a replica is still receiving, and every
// one before it: a gap, typed, so the replica stops naming it (not an
// unexplained refusal).
TEST_F(ShipperTest, TheSegmentBeingShippedRemovedByRetentionIsAGap) {
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", 1000, false}});
  StartShipper(/*inline_sends=*/false);
  EXPECT_EQ(ReadFrame().payload, "seg1");
  testing::WriteFile(dir_ + "/seg3", std::string(10, 'c'));
  catalog_.Publish({{"seg3", 10, false}});
  absl::Status s = WaitForRun();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kGap) << s;
  // seg1 or seg2, wherever the shipper was when they went.
  EXPECT_NE(s.ToString().find("is no longer in the WAL directory (oldest is seg3)"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.message().rfind("gap: segment seg", 0), 0u) << s;
}

// The segment being shipped leaves the directory while later ones stay (a
// PostgreSQL promotion renames the old timeline's last segment to .partial):
// the session ends retryably, so the replica reconnects and the handshake
// decides (continue on the new timeline, or a gap); never a fatal stop.
TEST_F(ShipperTest, TheSegmentBeingShippedLeavingTheDirectoryEndsTheSessionRetryably) {
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", 1000, false}});
  StartShipper(/*inline_sends=*/false);
  EXPECT_EQ(ReadFrame().payload, "seg1");
  for (uint64_t got = 0; got < kSegmentBytes;) got += ReadFrame().payload.size();
  EXPECT_EQ(ReadFrame().payload, "seg2");
  ExpectData(ReadFrame(), 1, 0, 1000);
  testing::WriteFile(dir_ + "/seg3", std::string(10, 'c'));
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg3", 10, false}});
  absl::Status s = WaitForRun();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kSourceChanged) << s;
  EXPECT_NE(s.ToString().find("seg2 left the WAL directory"), std::string::npos) << s;
}

// Where the source's naming rule says what follows, a successor the catalog
// never showed is a gap as well.
TEST_F(ShipperTest, ASuccessorTheSourceNamesButNeverShowedIsAGap) {
  testing::WriteFile(dir_ + "/seg3", std::string(1000, 'c'));
  source_.SetSuccessor("seg1", "seg2");
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg3", 1000, false}});
  StartShipper(/*inline_sends=*/false);
  absl::Status s = WaitForRun();
  EXPECT_EQ(ReasonOf(s), Reason::kGap) << s;
  EXPECT_NE(s.ToString().find("segment seg2 (after seg1, by the source's naming rule)"),
            std::string::npos)
      << s;
}

TEST_F(ShipperTest, AProvenStepGoesOn) {
  source_.SetSuccessor("seg1", "seg2");
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", 1000, false}});
  StartShipper(/*inline_sends=*/false);
  EXPECT_EQ(ReadFrame().payload, "seg1");
  for (uint64_t got = 0; got < kSegmentBytes;) got += ReadFrame().payload.size();
  EXPECT_EQ(ReadFrame().payload, "seg2");
  ExpectData(ReadFrame(), 1, 0, 1000);
}

// Bytes that went out and were then overwritten in the file (a preallocated
// file filled in place, a header flag rewritten on close): the completion
// check finds them and no checkpoint vouches for the old bytes.
TEST_F(ShipperTest, ASegmentRewrittenAfterItsBytesWentOutIsNotCheckpointed) {
  StartShipper(/*inline_sends=*/false);
  EnterFirstSegment(100000);
  std::string changed = contents_[0];
  changed[70000] ^= 0x01;
  testing::WriteFile(dir_ + "/seg1", changed);
  Publish(kSegmentBytes, /*seg1_complete=*/true, 10);
  absl::Status s = WaitForRun();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kSourceFailed) << s;
  EXPECT_NE(s.ToString().find("bytes [65536, 131072) of"), std::string::npos) << s;
  EXPECT_TRUE(events_.checkpoints().empty());
}

// Resumed inside a segment: the prefix the handshake verified is part of
// what the completion check compares.
TEST_F(ShipperTest, AResumedSegmentIsCheckedFromItsVerifiedPrefix) {
  const uint64_t at = 5000;
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", 10, false}});
  StartShipper(/*inline_sends=*/false, Position{"seg1", at},
               wire::Crc32c(contents_[0].data(), at));
  EXPECT_EQ(ReadFrame().payload, "seg1");
  for (uint64_t got = at; got < kSegmentBytes;) got += ReadFrame().payload.size();
  EXPECT_EQ(ReadFrame().payload, "seg2");
  std::vector<RecordingEvents::Checkpoint> cps = events_.checkpoints();
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_EQ(cps[0].crc32c, wire::Crc32c(contents_[0].data(), kSegmentBytes));
}

TEST_F(ShipperTest, AResumedSegmentWhosePrefixChangedIsNotCheckpointed) {
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", 10, false}});
  StartShipper(/*inline_sends=*/false, Position{"seg1", 5000},
               wire::Crc32c(contents_[0].data(), 4999));
  absl::Status s = WaitForRun();
  EXPECT_EQ(ReasonOf(s), Reason::kSourceFailed) << s;
  EXPECT_NE(s.ToString().find("bytes [0, 5000) of"), std::string::npos) << s;
  EXPECT_TRUE(events_.checkpoints().empty());
}

// A format that declares the bit (MariaDB's in-use flag): the database
// clears it after the bytes went out; the checkpoint carries its final value.
TEST_F(ShipperTest, ADeclaredBitRewrittenAfterItsBytesWentOutIsPatched) {
  StartShipper(/*inline_sends=*/false, Position{}, 0, {MutableBits{21, 0x01}});
  EnterFirstSegment(100000);  // its first frame, sent from memory, covers byte 21
  std::string closed = contents_[0];
  closed[21] = static_cast<char>(closed[21] ^ 0x01);
  testing::WriteFile(dir_ + "/seg1", closed);
  Publish(kSegmentBytes, /*seg1_complete=*/true, 10);
  for (uint64_t got = 100000; got < kSegmentBytes;) got += ReadFrame().payload.size();
  EXPECT_EQ(ReadFrame().payload, "seg2");
  std::vector<RecordingEvents::Checkpoint> cps = events_.checkpoints();
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_EQ(cps[0].crc32c, wire::Crc32c(closed.data(), closed.size()));
  ASSERT_EQ(cps[0].patches.size(), 1u);
  EXPECT_EQ(cps[0].patches[0].offset, 21u);
  EXPECT_EQ(cps[0].patches[0].bytes, closed.substr(21, 1));
}

TEST_F(ShipperTest, ABitNotDeclaredRewrittenIsStillRefused) {
  StartShipper(/*inline_sends=*/false, Position{}, 0, {MutableBits{21, 0x01}});
  EnterFirstSegment(100000);
  std::string changed = contents_[0];
  changed[21] = static_cast<char>(changed[21] ^ 0x02);
  testing::WriteFile(dir_ + "/seg1", changed);
  Publish(kSegmentBytes, /*seg1_complete=*/true, 10);
  absl::Status s = WaitForRun();
  EXPECT_EQ(ReasonOf(s), Reason::kSourceFailed) << s;
  EXPECT_NE(s.ToString().find("bytes [0, 65536) of"), std::string::npos) << s;
  EXPECT_TRUE(events_.checkpoints().empty());
}

// Resumed inside a segment whose declared bit the replica holds as shipped.
TEST_F(ShipperTest, AResumedPrefixDifferingOnlyInADeclaredBitIsPatched) {
  std::string held = contents_[0];
  held[21] = static_cast<char>(held[21] ^ 0x01);
  catalog_.Publish({{"seg1", kSegmentBytes, true}, {"seg2", 10, false}});
  StartShipper(/*inline_sends=*/false, Position{"seg1", 5000}, wire::Crc32c(held.data(), 5000),
               {MutableBits{21, 0x01}});
  EXPECT_EQ(ReadFrame().payload, "seg1");
  for (uint64_t got = 5000; got < kSegmentBytes;) got += ReadFrame().payload.size();
  EXPECT_EQ(ReadFrame().payload, "seg2");
  std::vector<RecordingEvents::Checkpoint> cps = events_.checkpoints();
  ASSERT_EQ(cps.size(), 1u);
  ASSERT_EQ(cps[0].patches.size(), 1u);
  EXPECT_EQ(cps[0].patches[0].bytes, contents_[0].substr(21, 1));
}

}  // namespace
}  // namespace walship::agent
