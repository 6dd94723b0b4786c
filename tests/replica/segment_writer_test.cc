// SegmentWriter and StateStore: frame handling, verification, divergence,
// and durability under simulated crashes.
#include "replica/segment_writer.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/pgwal/wal_page.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "replica/state_store.h"
#include "tests/replica/crash_sim_syscalls.h"

namespace walship::replica {
namespace {

using testing::ReadFile;

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A socket pair: tests write payload bytes into `in`, the writer reads `out`.
class Channel {
 public:
  Channel() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    in_ = sys::UniqueFd(fds[0]);
    out_ = sys::UniqueFd(fds[1]);
    int big = 8 << 20;
    setsockopt(in_.get(), SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    setsockopt(out_.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  }
  void Put(const std::string& bytes) {
    ASSERT_EQ(write(in_.get(), bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
  }
  int out() const { return out_.get(); }

 private:
  sys::UniqueFd in_, out_;
};

wire::FrameHeader DataHeader(uint64_t handle, uint64_t offset, const std::string& payload) {
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.segment_id = handle;
  h.offset = offset;
  h.payload_length = static_cast<uint32_t>(payload.size());
  h.payload_crc32c = wire::Crc32c(payload.data(), payload.size());
  return h;
}

// Begins seg-1 (handle 1) holding `a`: its first `synced` bytes flushed,
// the rest written but not yet synced.
void WriteWithUnsyncedTail(SegmentWriter& w, Channel& ch, const std::string& a, size_t synced) {
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  ch.Put(a.substr(0, synced));
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a.substr(0, synced))).ok());
  ASSERT_TRUE(w.Flush().ok());
  ch.Put(a.substr(synced));
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, synced, a.substr(synced))).ok());
}

class SegmentWriterTest : public ::testing::TestWithParam<Transport> {
 protected:
  WriterOptions Options() {
    WriterOptions o;
    o.transport = GetParam();
    o.pipe_bytes = 64 << 10;
    o.copy_buffer_bytes = 16 << 10;
    return o;
  }
  sys::SysCalls& sys_ = sys::DefaultSysCalls();
};

TEST_P(SegmentWriterTest, WritesVerifiesFlushesAndFinalizes) {
  std::string dir = testing::FreshTempDir("basic");
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  std::mt19937_64 rng(1);
  std::string a = RandomBytes(rng, 200000), b = RandomBytes(rng, 1000);
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  ch.Put(a.substr(0, 150000));
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a.substr(0, 150000))).ok());
  ch.Put(a.substr(150000));
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 150000, a.substr(150000))).ok());
  EXPECT_EQ(w.written(), (Position{"seg-1", 200000}));

  auto dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->position, (Position{"seg-1", 200000}));
  EXPECT_FALSE(dp->complete);
  EXPECT_TRUE(Exists(dir + "/seg-1.partial"));

  ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok());
  ch.Put(b);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 0, b)).ok());
  w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
  dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->position, (Position{"seg-2", 1000}));
  EXPECT_EQ(ReadFile(dir + "/seg-1"), a);
  EXPECT_FALSE(Exists(dir + "/seg-1.partial"));
  EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), b);
  char line[64];
  std::snprintf(line, sizeof(line), "seg-1 %zu %08x\n", a.size(), wire::Crc32c(a.data(), a.size()));
  EXPECT_EQ(ReadFile(dir + "/walship.sums"), line);
  EXPECT_EQ(dp->prefix_crc32c, wire::Crc32c(b.data(), b.size()));
  WriterCounters c = w.counters();
  if (GetParam() == Transport::kZeroCopy) {
    EXPECT_EQ(c.bytes_zerocopy, a.size() + b.size());
    EXPECT_EQ(c.bytes_copy, 0u);
  } else {
    EXPECT_EQ(c.bytes_copy, a.size() + b.size());
    EXPECT_EQ(c.bytes_zerocopy, 0u);
  }
}

// Runs a callback inside the next fdatasync of a file ending in `suffix`
// (as the receiver thread would act during the flusher's sync) and counts
// fsyncs of directories, under the crash simulator.
// Runs `during` once, right after the first fdatasync of a file whose path
// ends in `suffix`; counts directory fsyncs. The writer syncs on several
// threads at once, so the hook is taken under a lock.
class DuringSyncSysCalls : public testing::CrashSimSysCalls {
 public:
  using CrashSimSysCalls::CrashSimSysCalls;
  sys::SysResult Fdatasync(int fd) override {
    sys::SysResult r = CrashSimSysCalls::Fdatasync(fd);
    std::function<void()> f;
    {
      std::lock_guard<std::mutex> lock(hook_mu_);
      if (during && absl::EndsWith(PathOfFd(fd), suffix)) f = std::exchange(during, nullptr);
    }
    if (f) f();
    return r;
  }
  sys::SysResult Fsync(int fd) override {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) ++dir_fsyncs;
    return CrashSimSysCalls::Fsync(fd);
  }
  void Arm(std::string s, std::function<void()> f) {
    std::lock_guard<std::mutex> lock(hook_mu_);
    suffix = std::move(s);
    during = std::move(f);
  }
  bool armed() {
    std::lock_guard<std::mutex> lock(hook_mu_);
    return during != nullptr;
  }
  std::atomic<int> dir_fsyncs{0};

 private:
  std::mutex hook_mu_;
  std::string suffix;
  std::function<void()> during;
};

// At a segment boundary the agent announces the next segment while the
// flusher publishes the previous one: the directory fsync that publishes it
// also covers the new entry, so the next segment's first bytes need no
// directory fsync of their own, and a crash right after keeps the file.
TEST_P(SegmentWriterTest, BoundaryFsyncCoversTheSegmentBegunMeanwhile) {
  std::string dir = testing::FreshTempDir("boundary");
  DuringSyncSysCalls sim(dir);
  std::mt19937_64 rng(3);
  std::string a = RandomBytes(rng, 70000), b = RandomBytes(rng, 5000);
  Channel ch;
  {
    SegmentWriter w(sim, dir, Options());
    ASSERT_TRUE(w.Recover(std::nullopt).ok());
    ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
    ASSERT_TRUE(w.Flush().ok());  // seg-1's entry durable
    ch.Put(a);
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a)).ok());
    w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
    sim.Arm("/seg-1.partial", [&] { ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok()); });
    const int before = sim.dir_fsyncs;
    auto dp = w.Flush();
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_FALSE(sim.armed()) << "seg-2 was not begun inside the sync";
    EXPECT_EQ(dp->position, (Position{"seg-1", a.size()}));
    EXPECT_TRUE(dp->complete);
    EXPECT_GT(sim.dir_fsyncs, before);  // the rename (and walship.sums, new here)
    const int published = sim.dir_fsyncs;
    ch.Put(b);
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 0, b)).ok());
    dp = w.Flush();
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_EQ(dp->position, (Position{"seg-2", b.size()}));
    EXPECT_EQ(sim.dir_fsyncs, published) << "seg-2's entry needed a directory fsync of its own";
  }
  sim.Crash();
  EXPECT_EQ(ReadFile(dir + "/seg-1"), a);
  EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), b);
}

// The next segment's first bytes often arrive while the boundary cycle
// syncs the previous segment's tail: they are synced during the directory
// fsync that publishes it, so the same cycle's point already covers them.
TEST_P(SegmentWriterTest, BoundaryCycleAlsoMakesTheNextSegmentsFirstBytesDurable) {
  std::string dir = testing::FreshTempDir("boundary-next");
  DuringSyncSysCalls sim(dir);
  std::mt19937_64 rng(4);
  std::string a = RandomBytes(rng, 70000), b = RandomBytes(rng, 5000);
  Channel ch;
  {
    SegmentWriter w(sim, dir, Options());
    ASSERT_TRUE(w.Recover(std::nullopt).ok());
    WriteWithUnsyncedTail(w, ch, a, 60000);
    w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
    // The tail is left to sync; seg-2 and its bytes arrive inside that.
    ch.Put(b);
    sim.Arm("/seg-1.partial", [&] {
      ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok());
      ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 0, b)).ok());
    });
    auto dp = w.Flush();
    ASSERT_TRUE(dp.ok()) << dp.status();
    ASSERT_FALSE(sim.armed()) << "seg-2 was not begun inside the sync";
    EXPECT_EQ(dp->position, (Position{"seg-2", b.size()}));
    EXPECT_FALSE(dp->complete);
    EXPECT_EQ(dp->prefix_crc32c, wire::Crc32c(b.data(), b.size()));
    EXPECT_FALSE(w.HasUnflushedWork());
  }
  sim.Crash();
  EXPECT_EQ(ReadFile(dir + "/seg-1"), a);
  EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), b);
}

// At a boundary the old segment's tail, the new segment's bytes and the
// checksum line are synced at once, not one after another: here the tail's
// fdatasync does not return before the checksum line's has begun.
class OverlapProbeSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult Fdatasync(int fd) override {
    char buf[4096];
    ssize_t n = readlink(absl::StrCat("/proc/self/fd/", fd).c_str(), buf, sizeof(buf));
    std::string path(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (absl::EndsWith(path, "/walship.sums")) {
      std::lock_guard<std::mutex> lock(mu_);
      sums_started_ = true;
      cv_.notify_all();
    } else if (absl::EndsWith(path, "/seg-1.partial") && armed_) {
      std::unique_lock<std::mutex> lock(mu_);
      // Bounded: a writer that syncs one file after the other lands here
      // with the checksum line not yet begun, and the test fails after 10 s.
      overlapped_ = cv_.wait_for(lock, std::chrono::seconds(10), [this] { return sums_started_; });
    }
    return RealSysCalls::Fdatasync(fd);
  }
  std::atomic<bool> armed_{false};
  bool overlapped() {
    std::lock_guard<std::mutex> lock(mu_);
    return overlapped_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool sums_started_ = false;
  bool overlapped_ = false;
};

TEST_P(SegmentWriterTest, BoundarySyncsRunTogether) {
  std::string dir = testing::FreshTempDir("boundary-overlap");
  OverlapProbeSysCalls sys;
  std::mt19937_64 rng(5);
  std::string a = RandomBytes(rng, 70000), b = RandomBytes(rng, 5000);
  Channel ch;
  SegmentWriter w(sys, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  WriteWithUnsyncedTail(w, ch, a, 60000);
  ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok());
  ch.Put(b);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 0, b)).ok());
  w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
  sys.armed_ = true;
  auto dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_TRUE(sys.overlapped()) << "the checksum line waited for the segment's fdatasync";
  EXPECT_EQ(dp->position, (Position{"seg-2", b.size()}));
  EXPECT_EQ(ReadFile(dir + "/seg-1"), a);
  EXPECT_TRUE(absl::StrContains(ReadFile(dir + "/walship.sums"), "seg-1 70000 "));
}

// Records posix_fadvise calls with the path the descriptor names.
class FadviseRecorder : public sys::RealSysCalls {
 public:
  struct Call {
    std::string path;
    off_t off, len;
    int advice;
  };
  sys::SysResult Fadvise(int fd, off_t off, off_t len, int advice) override {
    char buf[4096];
    ssize_t n = readlink(absl::StrCat("/proc/self/fd/", fd).c_str(), buf, sizeof(buf));
    calls.push_back({std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), off, len, advice});
    return RealSysCalls::Fadvise(fd, off, len, advice);
  }
  std::vector<Call> calls;

  // The calls for the file whose path ends in `suffix`, in order, as long
  // as they are DONTNEED slices each starting where the previous ended:
  // the bytes they cover from offset 0 (-1 when any call breaks that).
  off_t CoveredFromStart(const std::string& suffix) const {
    off_t covered = 0;
    for (const Call& c : calls) {
      if (!absl::EndsWith(c.path, suffix)) continue;
      if (c.advice != POSIX_FADV_DONTNEED || c.off != covered || c.len <= 0) return -1;
      covered += c.len;
    }
    return covered;
  }
};

// Pages of `path` in the page cache.
size_t ResidentPages(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  fstat(fd, &st);
  void* m = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((st.st_size + page - 1) / page);
  EXPECT_EQ(mincore(m, st.st_size, vec.data()), 0);
  munmap(m, st.st_size);
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

TEST_P(SegmentWriterTest, PublishedSegmentsLeaveThePageCache) {
  for (bool drop : {true, false}) {
    SCOPED_TRACE(drop ? "drop_behind" : "keep");
    FadviseRecorder sys;
    std::string dir = testing::FreshTempDir(drop ? "drop" : "keep");
    WriterOptions o = Options();
    o.drop_behind = drop;
    SegmentWriter w(sys, dir, o);
    ASSERT_TRUE(w.Recover(std::nullopt).ok());
    Channel ch;
    std::mt19937_64 rng(7);
    // Over two 1 MiB slices, so the drop is done in three calls.
    std::string a = RandomBytes(rng, (2 << 20) + 300000), b = RandomBytes(rng, 5000);
    ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
    for (size_t off = 0; off < a.size(); off += 60000) {
      std::string part = a.substr(off, 60000);
      ch.Put(part);
      ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, off, part)).ok());
    }
    ASSERT_TRUE(w.Flush().ok());
    w.DropPublishedPages();
    EXPECT_TRUE(sys.calls.empty()) << "durable but not published: pages stay";

    ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok());
    ch.Put(b);
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 0, b)).ok());
    w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
    auto dp = w.Flush();
    ASSERT_TRUE(dp.ok()) << dp.status();
    w.DropPublishedPages();
    ASSERT_EQ(dp->position, (Position{"seg-2", b.size()}));
    struct statfs fs;
    ASSERT_EQ(statfs(dir.c_str(), &fs), 0);
    const bool tmpfs = fs.f_type == TMPFS_MAGIC;  // tmpfs pages are the file: never dropped
    if (drop && !tmpfs) {
      EXPECT_EQ(ResidentPages(dir + "/seg-1"), 0u);
    }
    EXPECT_EQ(ReadFile(dir + "/seg-1"), a);  // dropping loses nothing
    if (!drop) {
      EXPECT_TRUE(sys.calls.empty());
      continue;
    }
    // In slices of at most 1 MiB that cover the whole file.
    ASSERT_EQ(sys.calls.size(), 3u);
    EXPECT_EQ(sys.CoveredFromStart("/seg-1"), static_cast<off_t>(a.size()));
    for (const auto& c : sys.calls) EXPECT_LE(c.len, 1 << 20);
    // The next publication drops only its own segment.
    sys.calls.clear();
    w.AddCheckpoint("seg-2", b.size(), wire::Crc32c(b.data(), b.size()));
    ASSERT_TRUE(w.BeginSegment("seg-3", 3, 0).ok());
    ASSERT_TRUE(w.Flush().ok());
    w.DropPublishedPages();
    if (!tmpfs) {
      EXPECT_EQ(ResidentPages(dir + "/seg-2"), 0u);
    }
    ASSERT_EQ(sys.calls.size(), 1u);
    EXPECT_TRUE(absl::EndsWith(sys.calls[0].path, "/seg-2")) << sys.calls[0].path;
    EXPECT_EQ(sys.CoveredFromStart("/seg-2"), static_cast<off_t>(b.size()));
  }
}

TEST_P(SegmentWriterTest, CorruptPayloadIsDiscarded) {
  std::string dir = testing::FreshTempDir("corrupt");
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  std::string good = "hello, world";
  ch.Put(good);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, good)).ok());
  std::string payload(5000, 'x');
  wire::FrameHeader h = DataHeader(1, good.size(), payload);
  payload[1234] = 'y';  // flipped in transit
  ch.Put(payload);
  absl::Status s = w.WriteData(ch.out(), h);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), good);  // nothing of it kept
  EXPECT_EQ(w.written(), (Position{"seg-1", good.size()}));
}

// Removing a corrupt frame's bytes can fail too: then they may stay on disk
// past what the writer counts, so it is not used again (its status was
// dropped before).
class FailingTruncateSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult Ftruncate(int, off_t) override { return sys::SysResult{-1, EIO}; }
};

TEST_P(SegmentWriterTest, AFailedRemovalOfACorruptFrameIsNotIgnored) {
  std::string dir = testing::FreshTempDir("corrupt-truncate");
  FailingTruncateSysCalls failing;
  SegmentWriter w(failing, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  std::string payload(5000, 'x');
  wire::FrameHeader h = DataHeader(1, 0, payload);
  payload[1234] = 'y';  // flipped in transit
  ch.Put(payload);
  absl::Status s = w.WriteData(ch.out(), h);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "removing the frame's bytes")) << s;
  EXPECT_TRUE(w.sync_failed());
  EXPECT_FALSE(w.Flush().ok());
}

TEST_P(SegmentWriterTest, OverlappingResendIsComparedNotOverwritten) {
  std::string dir = testing::FreshTempDir("overlap");
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  std::string a = "0123456789";
  ch.Put(a);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a)).ok());
  // Same bytes again plus new ones: accepted, only the new bytes appended.
  std::string again = "56789abcde";
  ch.Put(again);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 5, again)).ok());
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), "0123456789abcde");
  // Different bytes over what is on disk: divergence, nothing overwritten.
  std::string diverged = "XYZ";
  ch.Put(diverged);
  absl::Status s = w.WriteData(ch.out(), DataHeader(1, 2, diverged));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), "0123456789abcde");
}

TEST_P(SegmentWriterTest, GapsAndBadFramesAreRejected) {
  std::string dir = testing::FreshTempDir("gaps");
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  EXPECT_EQ(w.BeginSegment("../x", 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Exists(dir + "/../x.partial"));
  // DATA before any SEGMENT.
  EXPECT_EQ(w.WriteData(ch.out(), DataHeader(1, 0, "abc")).code(),
            absl::StatusCode::kDataLoss);
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  // Starting past what is on disk is a gap.
  EXPECT_EQ(w.WriteData(ch.out(), DataHeader(1, 10, "abc")).code(),
            absl::StatusCode::kOutOfRange);
  // A handle that does not match the current segment.
  EXPECT_EQ(w.WriteData(ch.out(), DataHeader(7, 0, "abc")).code(),
            absl::StatusCode::kDataLoss);
  // Handles must increase; names must not go backwards.
  EXPECT_EQ(w.BeginSegment("seg-2", 1, 0).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(w.BeginSegment("seg-0", 2, 0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.BeginSegment("seg-3", 3, 5).code(), absl::StatusCode::kOutOfRange);
}

TEST_P(SegmentWriterTest, CheckpointMismatchIsNotPublished) {
  std::string dir = testing::FreshTempDir("badcheckpoint");
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  std::string a(4096, 'a');
  ch.Put(a);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a)).ok());
  w.AddCheckpoint("seg-1", a.size(), 0xdeadbeef);
  auto dp = w.Flush();
  EXPECT_EQ(dp.status().code(), absl::StatusCode::kFailedPrecondition) << dp.status();
  EXPECT_TRUE(Exists(dir + "/seg-1.partial"));
  EXPECT_FALSE(Exists(dir + "/seg-1"));
  // A checkpoint shorter than what was written is divergence too.
  SegmentWriter w2(sys_, testing::FreshTempDir("shortcheckpoint"), Options());
  ASSERT_TRUE(w2.Recover(std::nullopt).ok());
  ASSERT_TRUE(w2.BeginSegment("seg-1", 1, 0).ok());
  ch.Put(a);
  ASSERT_TRUE(w2.WriteData(ch.out(), DataHeader(1, 0, a)).ok());
  w2.AddCheckpoint("seg-1", 100, 0);
  EXPECT_EQ(w2.Flush().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(SegmentWriterTest, RecoverTruncatesUnacknowledgedAndDetectsLoss) {
  std::string dir = testing::FreshTempDir("recover");
  {
    std::ofstream(dir + "/seg-1", std::ios::binary) << std::string(100, 'a');
    std::ofstream(dir + "/seg-2.partial", std::ios::binary) << std::string(300, 'b');
    std::ofstream(dir + "/seg-3.partial", std::ios::binary) << std::string(10, 'c');
  }
  std::string kept(200, 'b');
  ReplicaState st{"stream", Position{"seg-2", 200}, false,
                  wire::Crc32c(kept.data(), kept.size())};
  SegmentWriter w(sys_, dir, Options());
  auto dp = w.Recover(st);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->position, (Position{"seg-2", 200}));
  EXPECT_EQ(dp->prefix_crc32c, wire::Crc32c(kept.data(), kept.size()));
  EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), kept);  // unacknowledged tail dropped
  EXPECT_FALSE(Exists(dir + "/seg-3.partial"));        // never acknowledged

  ReplicaState ahead{"stream", Position{"seg-2", 500}, false};
  SegmentWriter w2(sys_, dir, Options());
  EXPECT_EQ(w2.Recover(ahead).status().code(), absl::StatusCode::kDataLoss);

  // Durable bytes that changed on disk since they were acknowledged.
  {
    std::ofstream f(dir + "/seg-2.partial", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(10);
    f << 'X';
  }
  SegmentWriter w4(sys_, dir, Options());
  EXPECT_EQ(w4.Recover(st).status().code(), absl::StatusCode::kDataLoss);

  // No state file: resume after the newest complete segment.
  SegmentWriter w3(sys_, dir, Options());
  dp = w3.Recover(std::nullopt);
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(dp->position, (Position{"seg-1", 100}));
  EXPECT_TRUE(dp->complete);
}

TEST_P(SegmentWriterTest, RecoveredTailCountsOnlyOnceConfirmed) {
  std::string dir = testing::FreshTempDir("recover-tail");
  const std::string bytes = std::string(200, 'b') + std::string(100, 't');
  std::ofstream(dir + "/seg-2.partial", std::ios::binary) << bytes;
  ReplicaState st{"stream", Position{"seg-2", 200}, false, wire::Crc32c(bytes.data(), 200)};
  {
    // Kept and confirmed: the durable point moves to the end of the file,
    // and the next frames continue from there.
    SegmentWriter w(sys_, dir, Options());
    auto dp = w.Recover(st, SegmentWriter::Tail::kKeep);
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_EQ(dp->position, (Position{"seg-2", 200}));
    ASSERT_TRUE(w.tail().has_value());
    EXPECT_EQ(w.tail()->position, (Position{"seg-2", 300}));
    EXPECT_EQ(w.tail()->prefix_crc32c, wire::Crc32c(bytes.data(), bytes.size()));
    EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), bytes);
    // Nothing may be received on top of an unresolved tail.
    EXPECT_EQ(w.BeginSegment("seg-2", 1, 300).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(w.ResolveTail(true).ok());
    EXPECT_FALSE(w.tail().has_value());
    auto idle = w.Flush();  // nothing new: the confirmed tail is the durable point
    ASSERT_TRUE(idle.ok()) << idle.status();
    EXPECT_EQ(idle->position, (Position{"seg-2", 300}));
    EXPECT_EQ(idle->prefix_crc32c, wire::Crc32c(bytes.data(), bytes.size()));
    Channel ch;
    ASSERT_TRUE(w.BeginSegment("seg-2", 2, 300).ok());
    const std::string more(50, 'm');
    ch.Put(more);
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 300, more)).ok());
    auto flushed = w.Flush();
    ASSERT_TRUE(flushed.ok()) << flushed.status();
    EXPECT_EQ(flushed->position, (Position{"seg-2", 350}));
    EXPECT_EQ(flushed->prefix_crc32c, wire::Crc32c((bytes + more).data(), 350));
  }
  {
    // Refused: cut back to the recorded point, and frames resume there.
    std::ofstream(dir + "/seg-2.partial", std::ios::binary) << bytes;
    SegmentWriter w(sys_, dir, Options());
    ASSERT_TRUE(w.Recover(st, SegmentWriter::Tail::kKeep).ok());
    ASSERT_TRUE(w.ResolveTail(false).ok());
    EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), bytes.substr(0, 200));
    ASSERT_TRUE(w.BeginSegment("seg-2", 1, 200).ok());
  }
  {
    // No bytes past the record: no tail.
    SegmentWriter w(sys_, dir, Options());
    ASSERT_TRUE(w.Recover(st, SegmentWriter::Tail::kKeep).ok());
    EXPECT_FALSE(w.tail().has_value());
    ASSERT_TRUE(w.BeginSegment("seg-2", 1, 200).ok());
  }
}

// A pre-sized NAME.partial (zero-filled to its segment size in advance,
// spare_segment.h) is longer than its data: its length is not what it
// holds. A restart presents as unconfirmed tail only the bytes up to the
// last non-zero one (never the zeros: an agent would wait for a source
// that never reaches the file's length), and resumes writing at the
// durable point, not at the end of the file.
TEST_P(SegmentWriterTest, PresizedPartialHoldsOnlyItsData) {
  std::string dir = testing::FreshTempDir("presized-resume");
  // PostgreSQL WAL of 1 MiB segments: the size is in the first page header.
  const uint64_t kSegment = 1 << 20;
  const std::string name = "000000010000000000000002";
  std::string data(pg::kLongPageHeaderSize, '\0');
  pg::PageHeader ph{};
  ph.magic = pg::kPg15PageMagic;
  ph.info = pg::kXlpLongHeader;
  ph.timeline = 1;
  ph.pageaddr = 2 * kSegment;
  ph.is_long = true;
  ph.system_id = 7301234567890123456ull;
  ph.seg_size = kSegment;
  ph.block_size = pg::kDefaultBlockSize;
  pg::EncodePageHeader(ph, absl::MakeSpan(reinterpret_cast<uint8_t*>(data.data()), data.size()));
  std::mt19937_64 rng(26);
  data += RandomBytes(rng, 260);
  data.back() = 'z';  // the data's last byte is not zero
  std::string file = data;
  file.resize(kSegment, '\0');
  for (const uint64_t recorded : {uint64_t{200}, uint64_t{300}}) {
    SCOPED_TRACE(recorded);
    std::ofstream(dir + "/" + name + ".partial", std::ios::binary | std::ios::trunc) << file;
    const ReplicaState record{"stream", Position{name, recorded}, false,
                              wire::Crc32c(data.data(), recorded)};
    SegmentWriter w(sys_, dir, Options());
    auto dp = w.Recover(record, SegmentWriter::Tail::kKeep);
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_EQ(dp->position, (Position{name, recorded}));
    if (recorded < data.size()) {
      // The bytes past the record up to the last non-zero one; not the zeros.
      ASSERT_TRUE(w.tail().has_value());
      EXPECT_EQ(w.tail()->position, (Position{name, data.size()}));
      EXPECT_EQ(w.tail()->prefix_crc32c, wire::Crc32c(data.data(), data.size()));
      ASSERT_TRUE(w.ResolveTail(true).ok());
    } else {
      EXPECT_FALSE(w.tail().has_value());
    }
    // Frames continue at the end of the data.
    ASSERT_TRUE(w.BeginSegment(name, 1, data.size()).ok());
    EXPECT_EQ(w.written(), (Position{name, data.size()}));
    Channel ch;
    const std::string more = RandomBytes(rng, 100);
    ch.Put(more);
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, data.size(), more)).ok());
    auto flushed = w.Flush();
    ASSERT_TRUE(flushed.ok()) << flushed.status();
    EXPECT_EQ(flushed->position, (Position{name, data.size() + more.size()}));
    EXPECT_EQ(flushed->prefix_crc32c, wire::Crc32c((data + more).data(), 400));
  }
}

// walship.progress carries recovery past a trailing record only while the
// file still holds the bytes it names (their CRC32C); a claim the file does
// not back (a power loss kept the claim, not the bytes) is ignored, and so
// is one about another segment or stream.
TEST_P(SegmentWriterTest, RecoveryTrustsProgressOnlyWhereTheFileBacksIt) {
  std::string dir = testing::FreshTempDir("recover-progress");
  const std::string bytes = std::string(200, 'r') + std::string(100, 'p') + std::string(50, 'x');
  auto crc = [&](size_t n) { return wire::Crc32c(bytes.data(), n); };
  const ReplicaState record{"stream", Position{"seg-2", 200}, false, crc(200)};
  struct Case {
    std::string what;
    ReplicaState progress;
    Position want;
  } cases[] = {
      {"backed", {"stream", {"seg-2", 300}, false, crc(300)}, {"seg-2", 300}},
      {"bytes differ", {"stream", {"seg-2", 300}, false, crc(300) ^ 1}, {"seg-2", 200}},
      {"past the file", {"stream", {"seg-2", 400}, false, crc(300)}, {"seg-2", 200}},
      {"behind the record", {"stream", {"seg-2", 100}, false, crc(100)}, {"seg-2", 200}},
      {"another stream", {"other", {"seg-2", 300}, false, crc(300)}, {"seg-2", 200}},
      {"another segment", {"stream", {"seg-3", 300}, false, crc(300)}, {"seg-2", 200}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::remove((dir + "/" + kStateFileName).c_str());
    std::ofstream(dir + "/seg-2.partial", std::ios::binary) << bytes;
    StateStore store(sys_, dir);
    ASSERT_TRUE(store.Save(record).ok());
    ProgressFile progress(sys_, dir);
    ASSERT_TRUE(progress.Write(c.progress).ok());
    auto loaded = store.Load();
    ASSERT_TRUE(loaded.ok() && loaded->has_value());
    std::optional<ReplicaState> state = *loaded;
    SegmentWriter w(sys_, dir, Options());
    auto dp = RecoverFromStore(store, w, &state, SegmentWriter::Tail::kKeep);
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_EQ(dp->position, c.want);
    EXPECT_EQ(dp->prefix_crc32c, crc(c.want.offset));
    // Adopted progress is recorded at once; the rest stays a tail to confirm.
    auto again = StateStore(sys_, dir).Load();
    ASSERT_TRUE(again.ok() && again->has_value());
    EXPECT_EQ((*again)->durable, c.want);
    ASSERT_TRUE(w.tail().has_value());
    EXPECT_EQ(w.tail()->position, (Position{"seg-2", 350}));
  }
}

// Only cycles that recovery needs recorded save the record: the first bytes
// of a segment, a publication. The common cycle syncs the data alone.
TEST_P(SegmentWriterTest, CommonCyclesLeaveTheRecordToTheCaller) {
  std::string dir = testing::FreshTempDir("record-cycles");
  std::mt19937_64 rng(9);
  const std::string a = RandomBytes(rng, 3000), b = RandomBytes(rng, 2000);
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  std::vector<Position> saves;
  auto save = [&](const DurablePoint& p) {
    saves.push_back(p.position);
    return absl::OkStatus();
  };
  Channel ch;
  auto put = [&](uint64_t handle, const std::string& bytes, size_t from, size_t to) {
    const std::string part = bytes.substr(from, to - from);
    ch.Put(part);
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(handle, from, part)).ok());
  };
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  put(1, a, 0, 1000);
  ASSERT_TRUE(w.Flush(save).ok());  // the new entry's directory fsync
  put(1, a, 1000, 2000);
  ASSERT_TRUE(w.Flush(save).ok());  // common
  put(1, a, 2000, 3000);
  auto dp = w.Flush(save);  // common
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->position, (Position{"seg-1", 3000}));
  EXPECT_EQ(saves, (std::vector<Position>{{"seg-1", 1000}}));
  w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
  ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok());
  ASSERT_TRUE(w.Flush(save).ok());  // publication
  EXPECT_EQ(saves.size(), 2u);
  EXPECT_TRUE(saves.back() == (Position{"seg-1", 3000}));
  put(2, b, 0, 1000);
  ASSERT_TRUE(w.Flush(save).ok());  // the first bytes of seg-2
  put(2, b, 1000, 2000);
  ASSERT_TRUE(w.Flush(save).ok());  // common
  ASSERT_EQ(saves.size(), 3u);
  EXPECT_EQ(saves.back(), (Position{"seg-2", 1000}));
}

// The boundary cycle saves the record beside the directory fsync that
// publishes a segment: a crash can leave the record past the segment while
// its rename never reached the disk. Its bytes and checksum line did, so
// Recover() finishes the publication; a partial that does not match its
// line is damage, never silently dropped.
TEST_P(SegmentWriterTest, RecoverFinishesAPublicationTheRecordIsPast) {
  std::string dir = testing::FreshTempDir("recover-publish");
  std::mt19937_64 rng(6);
  const std::string a = RandomBytes(rng, 70000), b = RandomBytes(rng, 5000);
  testing::WriteFile(dir + "/seg-1.partial", a);
  testing::WriteFile(dir + "/seg-2.partial", b);
  std::ofstream(dir + "/walship.sums", std::ios::app)
      << SegmentSumLine("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
  const ReplicaState st{"stream", Position{"seg-2", b.size()}, false,
                        wire::Crc32c(b.data(), b.size())};
  {
    SegmentWriter w(sys_, dir, Options());
    auto dp = w.Recover(st);
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_EQ(dp->position, (Position{"seg-2", b.size()}));
    EXPECT_FALSE(dp->complete);
    EXPECT_EQ(ReadFile(dir + "/seg-1"), a);
    EXPECT_FALSE(Exists(dir + "/seg-1.partial"));
    EXPECT_EQ(ReadFile(dir + "/seg-2.partial"), b);
  }
  // The record calls seg-2 complete itself (nothing of seg-3 yet).
  std::ofstream(dir + "/walship.sums", std::ios::app)
      << SegmentSumLine("seg-2", b.size(), wire::Crc32c(b.data(), b.size()));
  {
    SegmentWriter w(sys_, dir, Options());
    auto dp = w.Recover(ReplicaState{"stream", Position{"seg-2", b.size()}, true,
                                     wire::Crc32c(b.data(), b.size())});
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_TRUE(dp->complete);
    EXPECT_EQ(ReadFile(dir + "/seg-2"), b);
  }
  // Damage: seg-3 complete per the record, partial on disk, bytes changed.
  std::string c = RandomBytes(rng, 9000);
  std::ofstream(dir + "/walship.sums", std::ios::app)
      << SegmentSumLine("seg-3", c.size(), wire::Crc32c(c.data(), c.size()));
  c[100] ^= 1;
  testing::WriteFile(dir + "/seg-3.partial", c);
  testing::WriteFile(dir + "/seg-4.partial", b);
  SegmentWriter w(sys_, dir, Options());
  auto dp = w.Recover(ReplicaState{"stream", Position{"seg-4", b.size()}, false,
                                   wire::Crc32c(b.data(), b.size())});
  EXPECT_EQ(dp.status().code(), absl::StatusCode::kDataLoss) << dp.status();
  EXPECT_TRUE(absl::StrContains(dp.status().message(), "seg-3")) << dp.status();
  EXPECT_TRUE(Exists(dir + "/seg-3.partial")) << "damaged bytes kept for the operator";
}

TEST(StateStoreTest, RoundTripAndDamage) {
  std::string dir = testing::FreshTempDir("state");
  StateStore store(sys::DefaultSysCalls(), dir);
  auto none = store.Load();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ReplicaState s{"append-1234", Position{"seg-9", 77}, true, 0xabcdef12};
  ASSERT_TRUE(store.Save(s).ok());
  auto got = store.Load();
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, s);
  std::string text = ReadFile(dir + "/walship.state");
  text[text.find("offset=") + 7] = '8';
  std::ofstream(dir + "/walship.state", std::ios::binary) << text;
  EXPECT_EQ(store.Load().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(StateStore::Decode("garbage").status().code(), absl::StatusCode::kDataLoss);
}

TEST(StateStoreTest, SavesAlternateSlotsInPlace) {
  std::string dir = testing::FreshTempDir("slots");
  StateStore store(sys::DefaultSysCalls(), dir);
  ASSERT_TRUE(store.Load().ok());
  for (uint64_t i = 1; i <= 5; ++i) {
    ReplicaState s{"append-1", Position{"seg-1", i * 100}, false, static_cast<uint32_t>(i)};
    ASSERT_TRUE(store.Save(s).ok());
    std::string file = ReadFile(dir + "/walship.state");
    ASSERT_EQ(file.size(), 2 * StateStore::kSlotBytes);
    // The newest record is in slot (i - 1) % 2, the previous one in the other.
    std::string slot = file.substr(((i - 1) % 2) * StateStore::kSlotBytes,
                                   StateStore::kSlotBytes);
    EXPECT_TRUE(absl::StrContains(slot, absl::StrCat("seq=", i, "\n"))) << i;
    EXPECT_TRUE(absl::StrContains(slot, absl::StrCat("offset=", i * 100, "\n"))) << i;
    StateStore reader(sys::DefaultSysCalls(), dir);
    auto got = reader.Load();
    ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
    EXPECT_EQ(**got, s);
  }
}

TEST(StateStoreTest, ReadsAndUpgradesVersion2) {
  std::string dir = testing::FreshTempDir("v2");
  std::string body =
      "walship-replica-state 2\nstream=append-7\nsegment=seg-3\noffset=42\ncomplete=0\n"
      "prefix_crc=0000abcd\n";
  std::ofstream(dir + "/walship.state", std::ios::binary)
      << body << absl::StrFormat("crc=%08x\n", wire::Crc32c(body.data(), body.size()));
  StateStore store(sys::DefaultSysCalls(), dir);
  auto got = store.Load();
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ(**got, (ReplicaState{"append-7", Position{"seg-3", 42}, false, 0xabcd}));
  ReplicaState next{"append-7", Position{"seg-3", 50}, false, 0x1234};
  ASSERT_TRUE(store.Save(next).ok());
  EXPECT_EQ(ReadFile(dir + "/walship.state").size(), 2 * StateStore::kSlotBytes);
  auto again = StateStore(sys::DefaultSysCalls(), dir).Load();
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ(**again, next);
}

// The machine dies inside the fdatasync of a save: whatever part of the new
// record reached the disk, a restart finds the previous durable position or
// (if all of it landed) the new one; never an error, never anything older.
TEST(StateStoreTest, CrashInsideSaveKeepsTheLastDurablePosition) {
  const ReplicaState older{"s", Position{"seg-1", 100}, false, 1};
  const ReplicaState acked{"s", Position{"seg-1", 200}, false, 2};
  const ReplicaState torn{"s", Position{"seg-2", 300000}, false, 3};
  int saw_new = 0, saw_acked = 0;
  for (uint64_t tear : {0, 1, 10, 40, 80, 120, 160, 4096}) {
    for (int saves_before = 2; saves_before <= 3; ++saves_before) {
      std::string dir = testing::FreshTempDir("tear");
      testing::CrashSimSysCalls sim(dir);
      {
        StateStore store(sim, dir);
        ASSERT_TRUE(store.Load().ok());
        // Leaves `acked` newest in slot 1 (2 saves) or slot 0 (3 saves).
        if (saves_before == 3) {
          ASSERT_TRUE(store.Save(older).ok());
        }
        ASSERT_TRUE(store.Save(older).ok());
        ASSERT_TRUE(store.Save(acked).ok());
        sim.DieAtNextFdatasyncOf("/walship.state");
        EXPECT_FALSE(store.Save(torn).ok());
      }
      sim.Crash(tear);
      auto got = StateStore(sys::DefaultSysCalls(), dir).Load();
      ASSERT_TRUE(got.ok()) << "tear " << tear << ": " << got.status();
      ASSERT_TRUE(got->has_value());
      if (**got == torn) {
        ++saw_new;
      } else {
        EXPECT_EQ(**got, acked) << "tear " << tear;
        ++saw_acked;
      }
    }
  }
  // Both outcomes occur: torn records were rejected, whole ones kept.
  EXPECT_GT(saw_acked, 0);
  EXPECT_GT(saw_new, 0);
}

// Streams random segments through a writer, flushing and persisting like the
// replica (the record saved alongside the syncs of cycles that enter a
// segment or publish one, and lazily otherwise; walship.progress before each
// acknowledgement), and crashes the machine or only the process at random
// points, also inside those syncs after the record reached the disk: after
// every crash the
// recovered durable position is at or after the last acknowledged one, and
// every byte before it equals the source. A power loss takes walship.progress
// (never synced) with it, also when it named acknowledged bytes past the
// record: those come back as a tail the agent confirms.
TEST_P(SegmentWriterTest, SimulatedCrashesNeverLoseAcknowledgedBytes) {
  const uint64_t seed = 20261202 + static_cast<int>(GetParam());
  std::mt19937_64 rng(seed);
  std::printf("crash simulation seed %llu\n", static_cast<unsigned long long>(seed));
  std::string dir = testing::FreshTempDir(GetParam() == Transport::kZeroCopy ? "crash-zc" : "crash-copy");
  testing::CrashSimSysCalls sim(dir);
  // Source: 24 segments of random sizes.
  std::vector<std::pair<std::string, std::string>> source;
  for (int i = 1; i <= 24; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "seg-%02d", i);  // names sort in WAL order
    source.push_back({name,
                      RandomBytes(rng, 20000 + rng() % 200000)});
  }
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i].first == name) return static_cast<int>(i);
    }
    return -1;
  };
  Position acked;
  int crashes = 0;
  bool done = false;
  int died_in_sync = 0, fell_back = 0, kept_tails = 0, from_progress = 0, process_deaths = 0;
  // Machine crashes after which walship.progress claimed acknowledged bytes
  // past the record and was lost (it is never synced): those bytes must come
  // back as a tail the agent confirms.
  int progress_lost_past_record = 0;
  while (!done) {
    StateStore store(sim, dir);
    auto loaded = store.Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    std::optional<ReplicaState> state = *loaded;
    auto w = std::make_unique<SegmentWriter>(sim, dir, Options());
    auto dp = RecoverFromStore(store, *w, &state, SegmentWriter::Tail::kKeep);
    ASSERT_TRUE(dp.ok()) << dp.status();
    if (loaded->has_value() && state->durable < (*loaded)->durable) ++fell_back;
    if (loaded->has_value() && (*loaded)->durable < state->durable) ++from_progress;
    if (std::optional<DurablePoint> tail = w->tail()) {
      // Like the replica: bytes past the record count once the agent's
      // prefix check (here: the source's CRC32C) confirms them, and are
      // recorded before anything else happens.
      const std::string& bytes = source[index_of(tail->position.segment)].second;
      const bool confirmed = tail->position.offset <= bytes.size() &&
                             wire::Crc32c(bytes.data(), tail->position.offset) ==
                                 tail->prefix_crc32c;
      ASSERT_TRUE(w->ResolveTail(confirmed).ok());
      if (confirmed) {
        ++kept_tails;
        *dp = *tail;
        state = ReplicaState{"stream", tail->position, false, tail->prefix_crc32c};
        ASSERT_TRUE(store.Save(*state).ok());
      }
    }
    // Nothing acknowledged is missing.
    ASSERT_TRUE(acked <= dp->position)
        << "acked " << acked.ToString() << " recovered " << dp->position.ToString();
    for (size_t i = 0; i < source.size(); ++i) {
      const auto& [name, bytes] = source[i];
      if (Position{name, 0} < Position{dp->position.segment, 0}) {
        std::string f = ReadFile(dir + "/" + name);
        ASSERT_EQ(f.size(), bytes.size()) << name << " after crash " << crashes;
        ASSERT_TRUE(f == bytes) << name << " after crash " << crashes;
      } else if (name == dp->position.segment) {
        std::string f = ReadFile(dir + "/" + name + (dp->complete ? "" : ".partial"));
        ASSERT_EQ(f.size(), dp->position.offset) << name << " after crash " << crashes;
        ASSERT_TRUE(f == bytes.substr(0, dp->position.offset)) << name;
      }
    }
    // Resume like the agent: from the durable position.
    int seg = dp->position.segment.empty() ? 0 : index_of(dp->position.segment);
    uint64_t off = dp->position.offset;
    if (dp->complete) {
      ++seg;
      off = 0;
    }
    if (seg >= static_cast<int>(source.size())) {
      done = true;
      break;
    }
    Channel ch;
    uint64_t handle = 0;
    // Like the replica: a point already recorded is not saved again, so a
    // record that did not become durable when it should have is not
    // papered over by a later save.
    ReplicaState saved = state.value_or(ReplicaState{"stream", {}, false});
    ProgressFile progress(sim, dir);
    auto save = [&](const DurablePoint& p) -> absl::Status {
      ReplicaState next{"stream", p.position, p.complete, p.prefix_crc32c};
      if (next == saved) return absl::OkStatus();
      absl::Status st = store.Save(next);
      if (st.ok()) saved = next;
      return st;
    };
    bool crashed = false;
    const int died_in_sync_now = died_in_sync;
    for (; seg < static_cast<int>(source.size()) && !crashed; ++seg, off = 0) {
      const auto& [name, bytes] = source[seg];
      ASSERT_TRUE(w->BeginSegment(name, ++handle, off).ok());
      if (off == bytes.size()) {
        // Resumed at the end of a segment not yet published: the agent
        // sends its checkpoint at once.
        w->AddCheckpoint(name, bytes.size(), wire::Crc32c(bytes.data(), bytes.size()));
      }
      while (off < bytes.size()) {
        uint64_t n = std::min<uint64_t>(bytes.size() - off, 1 + rng() % 60000);
        std::string payload = bytes.substr(off, n);
        ch.Put(payload);
        ASSERT_TRUE(w->WriteData(ch.out(), DataHeader(handle, off, payload)).ok());
        off += n;
        if (off == bytes.size()) {
          w->AddCheckpoint(name, bytes.size(), wire::Crc32c(bytes.data(), bytes.size()));
        }
        if (rng() % 3 == 0) {
          // Like the replica's flusher: the record may be saved during the
          // data's fdatasync (overlapped cycle), else after Flush returns.
          // Most deaths come after the record reached the disk: inside a
          // data fdatasync, or inside the directory fsync that publishes a
          // segment (the record is saved beside both).
          // Some die inside the record's own fdatasync once the data's
          // completed: the data then reaches past the durable record.
          const uint64_t how = rng() % 10;
          const bool die = how < 5;
          const std::string after = rng() % 4 ? "/walship.state" : "";
          if (how < 3) sim.DieAtNextFdatasyncOf(".partial", after);
          if (how == 3) sim.DieAtNextDirFsync(after);
          if (how == 4) sim.DieAtNextFdatasyncOf("/walship.state", ".partial");
          // Like the replica: Flush saves the record only where recovery
          // needs it (a new segment, a publication); the recorder saves the
          // newest point now and then; walship.progress is written (never
          // synced) before each acknowledgement.
          auto f = w->Flush(save);
          absl::Status saved_ok = f.status();
          if (f.ok() && rng() % 4 == 0) saved_ok = save(*f);
          if (saved_ok.ok()) {
            ASSERT_TRUE(progress.Write(ReplicaState{"stream", f->position, f->complete,
                                                    f->prefix_crc32c})
                            .ok());
          }
          if (die && !saved_ok.ok()) {
            // The machine went down inside one of the cycle's syncs.
            ++died_in_sync;
            crashed = true;
            break;
          }
          if (die) sim.DieAtNextFdatasyncOf("");
          ASSERT_TRUE(f.ok()) << f.status();
          ASSERT_TRUE(saved_ok.ok()) << saved_ok;
          acked = f->position;  // acknowledged only after the save
        }
        if (rng() % 5 == 0) {
          crashed = true;
          break;
        }
      }
    }
    if (!crashed) {
      auto f = w->Flush();
      ASSERT_TRUE(f.ok()) << f.status();
      ASSERT_TRUE(save(*f).ok());
      acked = f->position;
    }
    w.reset();
    if (crashed && died_in_sync_now == died_in_sync && rng() % 3 == 0) {
      // Only the process died: the page cache keeps every write, and
      // walship.progress says how far the acknowledged bytes reach.
      ++process_deaths;
    } else {
      std::optional<ReplicaState> claimed = ProgressFile::Load(sim, dir);
      absl::StatusOr<std::optional<ReplicaState>> record = StateStore(sim, dir).Load();
      ASSERT_TRUE(record.ok()) << record.status();
      sim.Crash();
      // A power loss takes walship.progress with it.
      EXPECT_FALSE(ProgressFile::Load(sim, dir).has_value());
      if (claimed.has_value() && record->has_value() &&
          (*record)->durable < claimed->durable) {
        ++progress_lost_past_record;
      }
    }
    ++crashes;
  }
  EXPECT_GE(crashes, 5);
  EXPECT_GE(died_in_sync, 1) << "no crash inside an overlapped fdatasync";
  EXPECT_GE(sim.dir_fsync_deaths(), 1) << "no crash inside a publishing directory fsync";
  EXPECT_GE(fell_back, 1) << "no record was ever ahead of its bytes";
  EXPECT_GE(kept_tails, 1) << "no crash ever left confirmed bytes past the record";
  EXPECT_GE(from_progress, 1) << "walship.progress never carried recovery past the record";
  EXPECT_GE(progress_lost_past_record, 1)
      << "no power loss took a walship.progress that reached past the record";
  std::printf("%d crashes (%d of the process only), %d inside a sync (%d of them a directory "
              "fsync), %d fell back to the previous record, %d resumed from walship.progress, "
              "%d kept confirmed bytes past the record, %d power losses took a "
              "walship.progress past the record\n",
              crashes, process_deaths, died_in_sync, sim.dir_fsync_deaths(), fell_back,
              from_progress, kept_tails, progress_lost_past_record);
  for (const auto& [name, bytes] : source) {
    EXPECT_TRUE(ReadFile(dir + "/" + name) == bytes) << name;
  }
}

// Live segments pre-sized from a spare (spare_segment.h) under simulated
// power losses and process deaths: before the spare's fdatasync (the
// machine dies inside it), after it, after the rename into NAME.partial,
// in the middle of a segment, inside the data's and the directory's syncs.
// Segments are small enough (48 KiB) for the simulation to revert unsynced
// overwrites inside a file to what was synced (the spare's zeros). After
// every crash: nothing acknowledged is missing, the recovered point's
// bytes equal the source and only zeros follow them in a pre-sized
// partial, published segments have exactly their length (also those that
// complete short, like a segment cut by a timeline switch), and resuming
// continues the stream. The data holds no zero byte, so the tail recovery
// presents (up to the last non-zero byte) reaches every acknowledged byte.
TEST_P(SegmentWriterTest, SimulatedCrashesWithPresizedSegments) {
  const uint64_t seed = 20261206 + static_cast<int>(GetParam());
  std::mt19937_64 rng(seed);
  std::printf("crash simulation seed %llu\n", static_cast<unsigned long long>(seed));
  const uint64_t kSeg = 48 << 10;
  std::string dir = testing::FreshTempDir(GetParam() == Transport::kZeroCopy ? "presized-zc"
                                                                              : "presized-copy");
  testing::CrashSimSysCalls sim(dir);
  std::vector<std::pair<std::string, std::string>> source;
  for (int i = 1; i <= 40; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "seg-%02d", i);
    std::string bytes = RandomBytes(rng, i % 7 == 0 ? 1000 + rng() % (kSeg - 2000) : kSeg);
    for (char& c : bytes) c = static_cast<char>(c | 1);
    source.push_back({name, bytes});
  }
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i].first == name) return static_cast<int>(i);
    }
    return -1;
  };
  WriterOptions options = Options();
  options.segment_size = kSeg;
  Position acked;
  int crashes = 0, spares_taken = 0, spare_deaths = 0, kept_tails = 0, sync_deaths = 0;
  for (bool done = false; !done;) {
    StateStore store(sim, dir);
    auto loaded = store.Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    std::optional<ReplicaState> state = *loaded;
    auto w = std::make_unique<SegmentWriter>(sim, dir, options);
    auto dp = RecoverFromStore(store, *w, &state, SegmentWriter::Tail::kKeep);
    ASSERT_TRUE(dp.ok()) << dp.status();
    if (std::optional<DurablePoint> tail = w->tail()) {
      const std::string& bytes = source[index_of(tail->position.segment)].second;
      const bool confirmed = tail->position.offset <= bytes.size() &&
                             wire::Crc32c(bytes.data(), tail->position.offset) ==
                                 tail->prefix_crc32c;
      ASSERT_TRUE(w->ResolveTail(confirmed).ok());
      if (confirmed) {
        ++kept_tails;
        *dp = *tail;
        ASSERT_TRUE(store.Save(ReplicaState{"stream", tail->position, false,
                                            tail->prefix_crc32c}).ok());
      }
    }
    ASSERT_TRUE(acked <= dp->position)
        << "acked " << acked.ToString() << " recovered " << dp->position.ToString();
    for (const auto& [name, bytes] : source) {
      if (Position{name, 0} < Position{dp->position.segment, 0} ||
          (name == dp->position.segment && dp->complete)) {
        ASSERT_TRUE(ReadFile(dir + "/" + name) == bytes) << name << " after crash " << crashes;
      } else if (name == dp->position.segment) {
        const std::string f = ReadFile(dir + "/" + name + ".partial");
        const uint64_t at = dp->position.offset;
        ASSERT_GE(f.size(), at);
        ASSERT_TRUE(f.compare(0, at, bytes, 0, at) == 0) << name << " after crash " << crashes;
        ASSERT_EQ(f.find_first_not_of('\0', at), std::string::npos)
            << name << ": non-zero bytes past the recovered point " << at;
      }
    }
    int seg = dp->position.segment.empty() ? 0 : index_of(dp->position.segment);
    uint64_t off = dp->position.offset;
    if (dp->complete) {
      ++seg;
      off = 0;
    }
    if (seg >= static_cast<int>(source.size())) break;
    Channel ch;
    uint64_t handle = 0;
    bool crashed = false, machine_died = false;
    for (; seg < static_cast<int>(source.size()) && !crashed; ++seg, off = 0) {
      const auto& [name, bytes] = source[seg];
      if (off == 0 && rng() % 4 != 0) {
        // Live: the receiver found the socket empty; the spare is ready
        // (or its preparation died) before the segment begins.
        if (rng() % 12 == 0) sim.DieAtNextFdatasyncOf("/walship.spare");
        w->NoteCaughtUp();
        if (!w->WaitForSpare(absl::Seconds(30))) {
          ++spare_deaths;
          crashed = machine_died = true;
          break;
        }
      }
      ASSERT_TRUE(w->BeginSegment(name, ++handle, off).ok());
      struct stat st;
      ASSERT_EQ(stat((dir + "/" + name + ".partial").c_str(), &st), 0);
      if (off == 0 && static_cast<uint64_t>(st.st_size) == kSeg) ++spares_taken;
      if (off == bytes.size()) {
        // Resumed at the end of a segment not yet published: the agent
        // sends its checkpoint at once.
        w->AddCheckpoint(name, bytes.size(), wire::Crc32c(bytes.data(), bytes.size()));
      }
      while (off < bytes.size()) {
        const uint64_t n = std::min<uint64_t>(bytes.size() - off, 1 + rng() % 16000);
        const std::string payload = bytes.substr(off, n);
        ch.Put(payload);
        ASSERT_TRUE(w->WriteData(ch.out(), DataHeader(handle, off, payload)).ok());
        off += n;
        if (off == bytes.size()) {
          w->AddCheckpoint(name, bytes.size(), wire::Crc32c(bytes.data(), bytes.size()));
        }
        if (rng() % 3 == 0) {
          const uint64_t how = rng() % 16;
          if (how < 2) sim.DieAtNextFdatasyncOf(".partial");
          if (how == 2) sim.DieAtNextDirFsync();
          auto f = w->Flush([&](const DurablePoint& p) {
            return store.Save(ReplicaState{"stream", p.position, p.complete, p.prefix_crc32c});
          });
          if (!f.ok() && how < 3) {
            ++sync_deaths;
            crashed = machine_died = true;
            break;
          }
          if (how < 3) sim.DieAtNextFdatasyncOf("");
          ASSERT_TRUE(f.ok()) << f.status();
          ASSERT_TRUE(store.Save(ReplicaState{"stream", f->position, f->complete,
                                              f->prefix_crc32c}).ok());
          acked = f->position;
        }
        if (rng() % 40 == 0) {
          crashed = true;
          break;
        }
      }
    }
    if (!crashed) {
      auto f = w->Flush();
      ASSERT_TRUE(f.ok()) << f.status();
      ASSERT_TRUE(store.Save(ReplicaState{"stream", f->position, f->complete,
                                          f->prefix_crc32c}).ok());
      acked = f->position;
      done = true;
    }
    w.reset();
    if (machine_died || rng() % 2 == 0) {
      sim.Crash();
    }
    sim.DieAtNextFdatasyncOf("");
    sim.Revive();
    ++crashes;
  }
  EXPECT_GE(crashes, 5);
  EXPECT_GE(spares_taken, 10) << "live segments did not start from the spare";
  EXPECT_GE(spare_deaths, 1) << "no power loss inside the spare's fdatasync";
  EXPECT_GE(sync_deaths, 1) << "no power loss inside a data or directory sync";
  std::printf("%d crashes, %d segments begun from a spare, %d deaths in the spare's sync, %d in "
              "a data or directory sync, %d kept tails\n",
              crashes, spares_taken, spare_deaths, sync_deaths, kept_tails);
  for (const auto& [name, bytes] : source) {
    EXPECT_TRUE(ReadFile(dir + "/" + name) == bytes) << name;
  }
  auto held = ListHeldSegments(sys_, dir, 1000);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->size(), source.size());
}

// A failed fdatasync is never retried on the same writer: Linux reports a
// writeback error once and may drop the dirty pages, so the retry "succeeds"
// over bytes the disk never got. Those bytes are cut back, never reported
// durable, and the next session does not present them as a tail.
TEST_P(SegmentWriterTest, AFailedFdatasyncIsNeverTrustedAgain) {
  std::string dir = testing::FreshTempDir("eio");
  testing::CrashSimSysCalls sim(dir);
  std::mt19937_64 rng(11);
  const std::string a = RandomBytes(rng, 3000);
  Channel ch;
  {
    SegmentWriter w(sim, dir, Options());
    ASSERT_TRUE(w.Recover(std::nullopt).ok());
    ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
    ch.Put(a.substr(0, 1000));
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a.substr(0, 1000))).ok());
    auto dp = w.Flush();
    ASSERT_TRUE(dp.ok()) << dp.status();
    ASSERT_EQ(dp->position, (Position{"seg-1", 1000}));
    ch.Put(a.substr(1000));
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 1000, a.substr(1000))).ok());
    sim.FailNextFdatasyncOf("seg-1.partial");
    dp = w.Flush();
    EXPECT_EQ(dp.status().code(), absl::StatusCode::kDataLoss) << dp.status();
    // The same writer never syncs again and never reports those bytes.
    dp = w.Flush();
    EXPECT_FALSE(dp.ok()) << "a retry reported " << dp->position.ToString() << " durable";
    EXPECT_TRUE(w.sync_failed());
    EXPECT_EQ(w.written(), (Position{"seg-1", 1000}));
    ch.Put(a.substr(1000, 10));
    EXPECT_FALSE(w.WriteData(ch.out(), DataHeader(1, 1000, a.substr(1000, 10))).ok());
  }
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), a.substr(0, 1000))
      << "bytes past the last durable offset were not cut back";
  // The next session starts from the last durable point, and a power loss
  // then loses nothing it was told is durable.
  const ReplicaState st{"stream", Position{"seg-1", 1000}, false,
                        wire::Crc32c(a.data(), 1000)};
  SegmentWriter w(sim, dir, Options());
  auto dp = w.Recover(st, SegmentWriter::Tail::kKeep);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->position, (Position{"seg-1", 1000}));
  EXPECT_FALSE(w.tail().has_value());
  sim.Crash();
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), a.substr(0, 1000));
}

// A crash in the middle of appending a walship.sums line leaves it without
// its newline. The next line must not be glued to it (and lost): restore
// needs it, and so does the recovery that finishes a publication.
TEST_P(SegmentWriterTest, ATornSumsLineDoesNotSwallowTheNext) {
  std::string dir = testing::FreshTempDir("torn-sums");
  std::mt19937_64 rng(12);
  const std::string a = RandomBytes(rng, 4000), b = RandomBytes(rng, 100);
  testing::WriteFile(dir + "/walship.sums", "seg-0 123 0000");  // torn, no newline
  SegmentWriter w(sys_, dir, Options());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Channel ch;
  ASSERT_TRUE(w.BeginSegment("seg-1", 1, 0).ok());
  ch.Put(a);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 0, a)).ok());
  w.AddCheckpoint("seg-1", a.size(), wire::Crc32c(a.data(), a.size()));
  ASSERT_TRUE(w.BeginSegment("seg-2", 2, 0).ok());
  ch.Put(b);
  ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(2, 0, b)).ok());
  auto dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys_, dir);
  ASSERT_EQ(sums.count("seg-1"), 1u) << ReadFile(dir + "/walship.sums");
  EXPECT_EQ(sums["seg-1"].length, a.size());
  EXPECT_EQ(sums["seg-1"].crc32c, wire::Crc32c(a.data(), a.size()));
}

// A partial segment before the durable position that walship.sums has no
// line for: nothing proves its bytes were never acknowledged, so recovery
// keeps it (it deleted it before).
TEST_P(SegmentWriterTest, RecoveryKeepsAPartialItCannotProveUnacknowledged) {
  std::string dir = testing::FreshTempDir("keep-partial");
  std::mt19937_64 rng(13);
  const std::string a = RandomBytes(rng, 7000), b = RandomBytes(rng, 300);
  testing::WriteFile(dir + "/seg-1.partial", a);
  testing::WriteFile(dir + "/seg-2.partial", b);
  testing::WriteFile(dir + "/seg-3.partial", b);
  const ReplicaState st{"stream", Position{"seg-2", b.size()}, false,
                        wire::Crc32c(b.data(), b.size())};
  SegmentWriter w(sys_, dir, Options());
  auto dp = w.Recover(st);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), a);
  // After the recorded segment: provably never acknowledged, removed.
  EXPECT_FALSE(Exists(dir + "/seg-3.partial"));
}

// A process that died between saving a record naming a new segment and the
// directory fsync meant for that segment's entry: the next process resumes
// in that segment and acknowledges more of it without another directory
// fsync, so recovery must make the entry durable itself.
TEST_P(SegmentWriterTest, RecoveryMakesTheResumedSegmentsEntryDurable) {
  std::string dir = testing::FreshTempDir("entry");
  testing::CrashSimSysCalls sim(dir);
  std::mt19937_64 rng(14);
  const std::string a = RandomBytes(rng, 2000);
  {
    // The segment file exists and its first bytes are synced, but no
    // directory fsync has covered its creation: what a process crash leaves
    // when it dies inside that cycle.
    sys::SysResult r = sim.Open((dir + "/seg-1.partial").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_TRUE(r.ok());
    sys::UniqueFd fd(static_cast<int>(r.rc));
    ASSERT_EQ(pwrite(fd.get(), a.data(), 1000, 0), 1000);
    ASSERT_TRUE(sim.Fdatasync(fd.get()).ok());
  }
  const ReplicaState st{"stream", Position{"seg-1", 1000}, false, wire::Crc32c(a.data(), 1000)};
  Channel ch;
  {
    SegmentWriter w(sim, dir, Options());
    ASSERT_TRUE(w.Recover(st).ok());
    ASSERT_TRUE(w.BeginSegment("seg-1", 1, 1000).ok());
    ch.Put(a.substr(1000));
    ASSERT_TRUE(w.WriteData(ch.out(), DataHeader(1, 1000, a.substr(1000))).ok());
    // The cycle that would let these bytes be acknowledged.
    auto dp = w.Flush([](const DurablePoint&) { return absl::OkStatus(); });
    ASSERT_TRUE(dp.ok()) << dp.status();
    ASSERT_EQ(dp->position, (Position{"seg-1", 2000}));
  }
  sim.Crash();
  EXPECT_EQ(ReadFile(dir + "/seg-1.partial"), a) << "acknowledged bytes lost with the entry";
}

INSTANTIATE_TEST_SUITE_P(Transports, SegmentWriterTest,
                         ::testing::Values(Transport::kZeroCopy, Transport::kCopy),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return std::string(TransportName(info.param));
                         });

}  // namespace
}  // namespace walship::replica
