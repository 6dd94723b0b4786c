// In-place patches on the replica (SegmentWriter::ApplyPatches, recovery of
// a patched segment; common/wire/wire_format.md section 11,
// replica/disk_format.md section 5.3): a checkpoint with patches makes the
// copy identical to the source's, a patch that does not give the
// checkpoint's CRC32C writes nothing, and a crash after the patch resumes
// correctly.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "common/segment_patch.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "replica/recovery.h"
#include "replica/segment_writer.h"
#include "replica/state_store.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

uint32_t Crc(const std::string& s) { return wire::Crc32c(s.data(), s.size()); }

// `a` as shipped (in-use bit set at 21) and as the source holds it now.
struct Binlogish {
  std::string shipped, closed;
};

Binlogish Make(size_t n) {
  std::mt19937 rng(static_cast<uint32_t>(n));
  Binlogish b;
  b.shipped.resize(n);
  for (char& c : b.shipped) c = static_cast<char>(rng());
  b.shipped[21] = static_cast<char>(b.shipped[21] | 0x01);
  b.closed = b.shipped;
  b.closed[21] = static_cast<char>(b.closed[21] & ~0x01);
  return b;
}

// Writes `bytes` as segment `name` (handle `handle`) through a socket pair.
void Land(SegmentWriter& w, const std::string& name, uint64_t handle, const std::string& bytes) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  sys::UniqueFd in(fds[0]), out(fds[1]);
  ASSERT_TRUE(w.BeginSegment(name, handle, 0).ok());
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min<size_t>(16 << 10, bytes.size() - at);
    ASSERT_EQ(write(in.get(), bytes.data() + at, n), static_cast<ssize_t>(n));
    wire::FrameHeader h;
    h.type = wire::FrameType::kData;
    h.segment_id = handle;
    h.offset = at;
    h.payload_length = static_cast<uint32_t>(n);
    h.payload_crc32c = wire::Crc32c(bytes.data() + at, n);
    ASSERT_TRUE(w.WriteData(out.get(), h).ok());
    at += n;
  }
}

std::vector<SegmentPatch> FlagPatch(const std::string& closed) {
  return {SegmentPatch{21, closed.substr(21, 1)}};
}

// A writer over the fresh directory `dir` (recovered: nothing there).
std::unique_ptr<SegmentWriter> FreshWriter(const std::string& dir) {
  auto w = std::make_unique<SegmentWriter>(sys::DefaultSysCalls(), dir, WriterOptions());
  EXPECT_TRUE(w->Recover(std::nullopt).ok());
  return w;
}

// Lands `first` as mysql-bin.000001, then begins mysql-bin.000002, which
// leaves the first complete.
void LandThenNext(SegmentWriter& w, const std::string& first) {
  Land(w, "mysql-bin.000001", 1, first);
  Land(w, "mysql-bin.000002", 2, "next");
}

TEST(SegmentPatchWriterTest, ACheckpointsPatchMakesTheCopyIdentical) {
  const std::string dir = testing::FreshTempDir("patch-ok");
  SegmentWriter w(sys::DefaultSysCalls(), dir, WriterOptions());
  ASSERT_TRUE(w.Recover(std::nullopt).ok());
  Binlogish b = Make(100000);
  Land(w, "mysql-bin.000001", 1, b.shipped);
  ASSERT_TRUE(w.Flush().ok());
  Land(w, "mysql-bin.000002", 2, "next");
  w.AddCheckpoint("mysql-bin.000001", b.closed.size(), Crc(b.closed), FlagPatch(b.closed));
  auto dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(testing::ReadFile(dir + "/mysql-bin.000001"), b.closed);
  EXPECT_FALSE(Exists(dir + "/mysql-bin.000001.partial"));
  auto sums = LoadSegmentSums(sys::DefaultSysCalls(), dir);
  ASSERT_EQ(sums.count("mysql-bin.000001"), 1u);
  EXPECT_EQ(sums["mysql-bin.000001"].crc32c, Crc(b.closed));
}

TEST(SegmentPatchWriterTest, APatchAlreadyThereIsHarmless) {
  const std::string dir = testing::FreshTempDir("patch-noop");
  std::unique_ptr<SegmentWriter> writer = FreshWriter(dir);
  SegmentWriter& w = *writer;
  Binlogish b = Make(5000);
  LandThenNext(w, b.closed);
  w.AddCheckpoint("mysql-bin.000001", b.closed.size(), Crc(b.closed), FlagPatch(b.closed));
  auto dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  dp = w.Flush();
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(testing::ReadFile(dir + "/mysql-bin.000001"), b.closed);
}

TEST(SegmentPatchWriterTest, APatchThatDoesNotGiveTheChecksumWritesNothing) {
  const std::string dir = testing::FreshTempDir("patch-bad");
  std::unique_ptr<SegmentWriter> writer = FreshWriter(dir);
  SegmentWriter& w = *writer;
  Binlogish b = Make(5000);
  LandThenNext(w, b.shipped);
  ASSERT_TRUE(w.Flush().ok());
  std::string other = b.closed;
  other[22] ^= 0x01;  // not what the patch makes
  w.AddCheckpoint("mysql-bin.000001", other.size(), Crc(other), FlagPatch(b.closed));
  auto dp = w.Flush();
  ASSERT_FALSE(dp.ok());
  EXPECT_EQ(dp.status().code(), absl::StatusCode::kFailedPrecondition) << dp.status();
  EXPECT_EQ(testing::ReadFile(dir + "/mysql-bin.000001.partial"), b.shipped);
}

TEST(SegmentPatchWriterTest, APatchOutsideTheSegmentOrTooLongIsRefused) {
  for (const SegmentPatch& p :
       {SegmentPatch{4999, std::string("ab")}, SegmentPatch{0, std::string(65, 'x')}}) {
    const std::string dir = testing::FreshTempDir("patch-big");
    std::unique_ptr<SegmentWriter> writer = FreshWriter(dir);
    SegmentWriter& w = *writer;
    Binlogish b = Make(5000);
    LandThenNext(w, b.shipped);
    ASSERT_TRUE(w.Flush().ok());
    w.AddCheckpoint("mysql-bin.000001", b.shipped.size(), Crc(b.shipped), {p});
    auto dp = w.Flush();
    ASSERT_FALSE(dp.ok());
    EXPECT_EQ(dp.status().code(), absl::StatusCode::kInvalidArgument) << dp.status();
    EXPECT_EQ(testing::ReadFile(dir + "/mysql-bin.000001.partial"), b.shipped);
  }
}

// The state a crash leaves: the record names the unpatched partial; its
// line is in walship.sums; the patch is on disk (`patched`) or not.
absl::StatusOr<RecoveredPoint> CrashAfterLine(const std::string& dir, const Binlogish& b,
                                              bool patched) {
  std::ofstream(dir + "/mysql-bin.000001.partial", std::ios::binary)
      << (patched ? b.closed : b.shipped);
  char line[128];
  std::snprintf(line, sizeof(line), "mysql-bin.000001 %zu %08x\n", b.closed.size(),
                Crc(b.closed));
  std::ofstream(dir + "/" + std::string(kSumsFileName), std::ios::binary) << line;
  ReplicaState st;
  st.stream_id = "mysql-binlog-1";
  st.durable = Position{"mysql-bin.000001", b.shipped.size()};
  st.prefix_crc32c = Crc(b.shipped);
  return RecoverDirectory(sys::DefaultSysCalls(), dir, st, TailPolicy::kTruncate);
}

TEST(SegmentPatchWriterTest, ACrashAfterThePatchPublishesTheSegment) {
  const std::string dir = testing::FreshTempDir("patch-crash-after");
  Binlogish b = Make(7000);
  auto rp = CrashAfterLine(dir, b, /*patched=*/true);
  ASSERT_TRUE(rp.ok()) << rp.status();
  EXPECT_TRUE(rp->durable.complete);
  EXPECT_EQ(rp->durable.position, (Position{"mysql-bin.000001", b.closed.size()}));
  EXPECT_EQ(testing::ReadFile(dir + "/mysql-bin.000001"), b.closed);
  EXPECT_FALSE(Exists(dir + "/mysql-bin.000001.partial"));
}

TEST(SegmentPatchWriterTest, ACrashBeforeThePatchResumesAsRecorded) {
  const std::string dir = testing::FreshTempDir("patch-crash-before");
  Binlogish b = Make(7000);
  auto rp = CrashAfterLine(dir, b, /*patched=*/false);
  ASSERT_TRUE(rp.ok()) << rp.status();
  EXPECT_FALSE(rp->durable.complete);
  EXPECT_EQ(rp->durable.position, (Position{"mysql-bin.000001", b.shipped.size()}));
  EXPECT_EQ(rp->durable.prefix_crc32c, Crc(b.shipped));
  EXPECT_EQ(testing::ReadFile(dir + "/mysql-bin.000001.partial"), b.shipped);
}

}  // namespace
}  // namespace walship::replica
