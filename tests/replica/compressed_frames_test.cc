// ZDATA on the replica: CompressedFrames (read, decompress, verify) and
// SegmentWriter::WriteBytes (the stream rules for bytes from memory).
#include "replica/compressed_frames.h"

#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "common/net/data_conn.h"
#include "common/reason.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "common/wire/compress.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replica/segment_writer.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

using ::testing::HasSubstr;

std::string WalLike(size_t n, int seed) {
  std::string s;
  for (int i = 0; s.size() < n; ++i) {
    s += "row " + std::to_string(seed * 1000003 + i) + " balance 0000000 filler          |";
  }
  s.resize(n);
  return s;
}

absl::Span<const uint8_t> Span(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// A ZDATA frame for `raw` at `offset` of handle 1: header and payload.
struct Frame {
  wire::FrameHeader h;
  std::string payload;
};
Frame Compressed(wire::Codec codec, uint64_t offset, const std::string& raw) {
  Frame f;
  f.h = wire::FrameHeader{wire::FrameType::kData, 1, offset, static_cast<uint32_t>(raw.size()),
                          wire::Crc32c(raw.data(), raw.size())};
  auto c = wire::Compressor::Create(codec, 1);
  EXPECT_TRUE(c.ok());
  std::vector<uint8_t> scratch;
  f.payload = std::string(wire::BuildCompressedFrame(**c, Span(raw), &f.h, &scratch));
  EXPECT_EQ(f.h.type, wire::FrameType::kCompressedData);
  return f;
}

class CompressedFramesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    in_ = sys::UniqueFd(fds[0]);
    out_ = sys::UniqueFd(fds[1]);
    options_.compression = wire::Codec::kZstd;
    answer_.set_compression(walship::v1::COMPRESSION_ZSTD);
    answer_.set_compression_level(1);
    io_.io_timeout = absl::Seconds(5);
    ASSERT_TRUE(writer_.Recover(std::nullopt).ok());
    ASSERT_TRUE(writer_.BeginSegment("seg-1", 1, 0).ok());
  }

  absl::Status Receive(CompressedFrames& frames, const Frame& f) {
    EXPECT_EQ(write(in_.get(), f.payload.data(), f.payload.size()),
              static_cast<ssize_t>(f.payload.size()));
    auto conn = net::MakePlainConn(sys_, out_.get(), Transport::kCopy);
    return frames.Receive(*conn, f.h, io_, writer_);
  }

  std::string Partial() { return testing::ReadFile(dir_ + "/seg-1.partial"); }

  sys::SysCalls& sys_ = sys::DefaultSysCalls();
  std::string dir_;
  sys::UniqueFd in_, out_;
  ReplicaOptions options_;
  walship::v1::HandshakeResponse answer_;
  MetricsRegistry metrics_;
  sys::TransferOptions io_;
  SegmentWriter writer_{sys_, dir_ = testing::FreshTempDir("compressed_frames_w"),
                        WriterOptions{}};
};

TEST_F(CompressedFramesTest, WritesPlainBytesAndCountsBothSizes) {
  CompressedFrames frames(options_, answer_, metrics_);
  ASSERT_EQ(frames.codec(), wire::Codec::kZstd);
  const std::string a = WalLike(100000, 1), b = WalLike(50000, 2);
  const Frame fa = Compressed(wire::Codec::kZstd, 0, a);
  const Frame fb = Compressed(wire::Codec::kZstd, a.size(), b);
  ASSERT_TRUE(Receive(frames, fa).ok());
  ASSERT_TRUE(Receive(frames, fb).ok());
  EXPECT_EQ(Partial(), a + b);
  EXPECT_EQ(writer_.written(), (Position{"seg-1", a.size() + b.size()}));
  EXPECT_EQ(frames.raw_bytes(), a.size() + b.size());
  EXPECT_EQ(frames.wire_bytes(), fa.payload.size() + fb.payload.size());
  EXPECT_EQ(writer_.counters().bytes_copy, a.size() + b.size());
  // The running CRC the checkpoint is checked against covers the plain bytes.
  const std::string all = a + b;
  writer_.AddCheckpoint("seg-1", all.size(), wire::Crc32c(all.data(), all.size()));
  ASSERT_TRUE(writer_.Flush().ok());
  EXPECT_EQ(testing::ReadFile(dir_ + "/seg-1"), all);
}

TEST_F(CompressedFramesTest, CorruptFrameLeavesNothingBehind) {
  CompressedFrames frames(options_, answer_, metrics_);
  const std::string a = WalLike(40000, 3), b = WalLike(40000, 4);
  ASSERT_TRUE(Receive(frames, Compressed(wire::Codec::kZstd, 0, a)).ok());
  Frame bad = Compressed(wire::Codec::kZstd, a.size(), b);
  bad.payload[bad.payload.size() / 2] ^= 0x40;
  absl::Status s = Receive(frames, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kChecksum) << s;
  EXPECT_EQ(Partial(), a);
  EXPECT_EQ(writer_.written(), (Position{"seg-1", a.size()}));
}

TEST_F(CompressedFramesTest, ResendIsComparedAndDivergenceRefused) {
  CompressedFrames frames(options_, answer_, metrics_);
  const std::string a = WalLike(60000, 5);
  ASSERT_TRUE(Receive(frames, Compressed(wire::Codec::kZstd, 0, a)).ok());
  // An overlapping resend that also extends: the overlap matches, the rest lands.
  const std::string more = a.substr(30000) + WalLike(20000, 6);
  ASSERT_TRUE(Receive(frames, Compressed(wire::Codec::kZstd, 30000, more)).ok());
  EXPECT_EQ(Partial(), a + more.substr(30000));
  // A resend that differs from what is held: divergent history.
  std::string other = a.substr(0, 10000);
  other[5000] = '#';
  absl::Status s = Receive(frames, Compressed(wire::Codec::kZstd, 0, other));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("differ from the replica's at offset 5000"));
  // A gap.
  s = Receive(frames, Compressed(wire::Codec::kZstd, 200000, WalLike(1000, 7)));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
}

TEST_F(CompressedFramesTest, ZdataWithoutAgreementOrWithAnotherCodecIsDataLoss) {
  walship::v1::HandshakeResponse declined;
  declined.set_compression_declined("this agent runs with --allow-compression=false");
  CompressedFrames none(options_, declined, metrics_);
  EXPECT_EQ(none.codec(), wire::Codec::kNone);
  const Frame f = Compressed(wire::Codec::kZstd, 0, WalLike(10000, 8));
  absl::Status s = Receive(none, f);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no compression was agreed"));

  CompressedFrames zstd(options_, answer_, metrics_);
  const Frame lz4 = Compressed(wire::Codec::kLz4, 0, WalLike(10000, 9));
  s = Receive(zstd, lz4);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("codec lz4, but the handshake agreed zstd"));
  EXPECT_EQ(writer_.written(), (Position{"seg-1", 0}));
}

}  // namespace
}  // namespace walship::replica
