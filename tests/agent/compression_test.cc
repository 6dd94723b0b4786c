#include "agent/compression.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/net/data_conn.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/sys/unique_fd.h"
#include "common/wire/compress.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/tcp_pair.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

using ::testing::HasSubstr;

walship::v1::HandshakeRequest Asking(walship::v1::Compression c, int level = 0) {
  walship::v1::HandshakeRequest req;
  req.set_compression(c);
  req.set_compression_level(level);
  return req;
}

TEST(NegotiateCompressionTest, AgreesDeclinesAndSaysWhy) {
  CompressionChoice c = NegotiateCompression(Asking(walship::v1::COMPRESSION_NONE), true);
  EXPECT_EQ(c.codec, wire::Codec::kNone);
  EXPECT_EQ(c.declined, "");  // nothing asked, nothing declined

  c = NegotiateCompression(Asking(walship::v1::COMPRESSION_ZSTD), true);
  EXPECT_EQ(c.codec, wire::Codec::kZstd);
  EXPECT_EQ(c.level, 1);  // the codec's default
  EXPECT_EQ(CompressionLabel(c.codec, c.level), "zstd:1");

  c = NegotiateCompression(Asking(walship::v1::COMPRESSION_LZ4, 9), true);
  EXPECT_EQ(c.codec, wire::Codec::kLz4);
  EXPECT_EQ(c.level, 9);

  c = NegotiateCompression(Asking(walship::v1::COMPRESSION_ZSTD), false);
  EXPECT_EQ(c.codec, wire::Codec::kNone);
  EXPECT_THAT(c.declined, HasSubstr("--allow-compression=false"));

  c = NegotiateCompression(Asking(walship::v1::COMPRESSION_LZ4, 13), true);
  EXPECT_EQ(c.codec, wire::Codec::kNone);
  EXPECT_THAT(c.declined, HasSubstr("compression level 13 for lz4 outside [1, 12]"));

  c = NegotiateCompression(Asking(static_cast<walship::v1::Compression>(7)), true);
  EXPECT_EQ(c.codec, wire::Codec::kNone);
  EXPECT_THAT(c.declined, HasSubstr("does not know compression 7"));

  walship::v1::HandshakeResponse resp;
  SetCompression(NegotiateCompression(Asking(walship::v1::COMPRESSION_LZ4), true), &resp);
  EXPECT_EQ(resp.compression(), walship::v1::COMPRESSION_LZ4);
  EXPECT_EQ(resp.compression_level(), 1);
}

class CompressedSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTempDir("compression_test");
    auto pair = testing::LoopbackTcpPair(sys_, /*nonblocking_tx=*/true);
    ASSERT_TRUE(pair.ok()) << pair.status();
    tx_ = std::move(pair->tx);
    rx_ = std::move(pair->rx);
    io_.io_timeout = absl::Seconds(10);
  }

  // A segment file of `bytes` at `path`, open for reading.
  sys::UniqueFd File(const std::string& name, const std::string& bytes) {
    testing::WriteFile(dir_ + "/" + name, bytes);
    sys::SysResult r = sys_.Open((dir_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC, 0);
    EXPECT_TRUE(r.ok());
    return sys::UniqueFd(static_cast<int>(r.rc));
  }

  // Sends bytes [offset, offset + n) of `file` and reads the frame back.
  wire::FrameHeader SendAndReceive(CompressedSender& sender, int file, const std::string& bytes,
                                   uint64_t offset, uint32_t n, std::string* payload) {
    wire::FrameHeader h{wire::FrameType::kData, 3, offset, n,
                        wire::Crc32c(bytes.data() + offset, n)};
    auto conn = net::MakePlainConn(sys_, tx_.get(), Transport::kCopy);
    absl::StatusOr<uint32_t> sent = sender.Send(*conn, file, h, io_);
    EXPECT_TRUE(sent.ok()) << sent.status();
    uint8_t raw[wire::kFrameHeaderSize];
    EXPECT_TRUE(sys::ReadFully(sys_, rx_.get(), raw, sizeof(raw), io_).ok());
    absl::StatusOr<wire::FrameHeader> got =
        wire::DecodeFrameHeader(absl::MakeConstSpan(raw, sizeof(raw)), wire::kMaxPayloadLength);
    EXPECT_TRUE(got.ok()) << got.status();
    payload->resize(got->payload_length);
    EXPECT_TRUE(sys::ReadFully(sys_, rx_.get(), payload->data(), payload->size(), io_).ok());
    EXPECT_EQ(*sent, got->payload_length);
    return *got;
  }

  sys::SysCalls& sys_ = sys::DefaultSysCalls();
  std::string dir_;
  sys::UniqueFd tx_, rx_;
  sys::TransferOptions io_;
};

TEST_F(CompressedSenderTest, SendsZdataThatDecompressesToTheFileBytes) {
  std::string bytes;
  for (int i = 0; bytes.size() < (600 << 10); ++i) {
    bytes += "INSERT INTO pgbench_history VALUES (" + std::to_string(i) + ", 42);";
  }
  sys::UniqueFd file = File("seg", bytes);
  for (wire::Codec codec : {wire::Codec::kZstd, wire::Codec::kLz4}) {
    SCOPED_TRACE(wire::CodecName(codec));
    auto sender = CompressedSender::Create(sys_, codec, 1);
    ASSERT_TRUE(sender.ok()) << sender.status();
    std::string payload;
    const wire::FrameHeader h =
        SendAndReceive(**sender, file.get(), bytes, 4096, 512 << 10, &payload);
    EXPECT_EQ(h.type, wire::FrameType::kCompressedData);
    EXPECT_EQ(h.codec, codec);
    EXPECT_EQ(h.offset, 4096u);
    EXPECT_EQ(h.raw_length, 512u << 10);
    EXPECT_LT(h.payload_length, h.raw_length / 4);
    auto d = wire::Decompressor::Create(codec);
    ASSERT_TRUE(d.ok());
    std::vector<uint8_t> out;
    ASSERT_TRUE(wire::DecompressPayload(
                    **d, h,
                    absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(payload.data()),
                                        payload.size()),
                    &out)
                    .ok());
    EXPECT_EQ(std::string(out.begin(), out.end()), bytes.substr(4096, 512 << 10));
  }
}

TEST_F(CompressedSenderTest, SendsBytesThatDoNotShrinkAsPlainData) {
  std::mt19937 rng(7);
  std::string bytes(128 << 10, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  sys::UniqueFd file = File("random", bytes);
  auto sender = CompressedSender::Create(sys_, wire::Codec::kZstd, 3);
  ASSERT_TRUE(sender.ok());
  std::string payload;
  const wire::FrameHeader h = SendAndReceive(**sender, file.get(), bytes, 0, 100000, &payload);
  EXPECT_EQ(h.type, wire::FrameType::kData);
  EXPECT_EQ(h.payload_length, 100000u);
  EXPECT_EQ(payload, bytes.substr(0, 100000));
  EXPECT_TRUE(wire::VerifyPayload(
                  h, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(payload.data()),
                                         payload.size()))
                  .ok());
}

TEST(CompressedSenderCreateTest, RefusesNoneAndBadLevels) {
  EXPECT_EQ(CompressedSender::Create(sys::DefaultSysCalls(), wire::Codec::kNone, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CompressedSender::Create(sys::DefaultSysCalls(), wire::Codec::kZstd, 99)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walship::agent
