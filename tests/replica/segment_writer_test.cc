// SegmentWriter and StateStore: frame handling, verification, divergence,
// and durability under simulated crashes.
#include "replica/segment_writer.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "replica/state_store.h"
#include "tests/replica/crash_sim_syscalls.h"

namespace walship::replica {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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

// Streams random segments through a writer, flushing and persisting like the
// replica's flusher, and crashes at random points: after every crash the
// recovered durable position is at or after the last acknowledged one, and
// every byte before it equals the source.
TEST_P(SegmentWriterTest, SimulatedCrashesNeverLoseAcknowledgedBytes) {
  const uint64_t seed = 20261202 + static_cast<int>(GetParam());
  std::mt19937_64 rng(seed);
  std::printf("crash simulation seed %llu\n", static_cast<unsigned long long>(seed));
  std::string dir = testing::FreshTempDir(GetParam() == Transport::kZeroCopy ? "crash-zc" : "crash-copy");
  testing::CrashSimSysCalls sim(dir);
  // Source: 6 segments of random sizes.
  std::vector<std::pair<std::string, std::string>> source;
  for (int i = 1; i <= 10; ++i) {
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
  while (!done) {
    StateStore store(sim, dir);
    auto state = store.Load();
    ASSERT_TRUE(state.ok()) << state.status();
    auto w = std::make_unique<SegmentWriter>(sim, dir, Options());
    auto dp = w->Recover(*state);
    ASSERT_TRUE(dp.ok()) << dp.status();
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
    ReplicaState saved = state->value_or(ReplicaState{"stream", {}, false});
    bool crashed = false;
    for (; seg < static_cast<int>(source.size()) && !crashed; ++seg, off = 0) {
      const auto& [name, bytes] = source[seg];
      ASSERT_TRUE(w->BeginSegment(name, ++handle, off).ok());
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
          auto f = w->Flush();
          ASSERT_TRUE(f.ok()) << f.status();
          ReplicaState next{"stream", f->position, f->complete, f->prefix_crc32c};
          ASSERT_TRUE(store.Save(next).ok());
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
      ASSERT_TRUE(
          store.Save(ReplicaState{"stream", f->position, f->complete, f->prefix_crc32c}).ok());
      acked = f->position;
    }
    w.reset();
    sim.Crash();
    ++crashes;
  }
  EXPECT_GE(crashes, 5);
  for (const auto& [name, bytes] : source) {
    EXPECT_TRUE(ReadFile(dir + "/" + name) == bytes) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, SegmentWriterTest,
                         ::testing::Values(Transport::kZeroCopy, Transport::kCopy),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return std::string(TransportName(info.param));
                         });

}  // namespace
}  // namespace walship::replica
