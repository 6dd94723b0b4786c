// The streaming replication messages, byte for byte.
#include "agent/postgres/pg_stream_protocol.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace walship::agent::pgstream {
namespace {

std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  return std::vector<uint8_t>(v.begin(), v.end());
}

void AppendBig64(std::vector<uint8_t>* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back((v >> shift) & 0xff);
}

TEST(PgStreamProtocolTest, ParsesXLogData) {
  std::vector<uint8_t> m = {'w'};
  AppendBig64(&m, 0x16B374D848ull);  // dataStart
  AppendBig64(&m, 0x16B374E000ull);  // walEnd
  AppendBig64(&m, 123456789);        // sendTime
  m.insert(m.end(), {1, 2, 3, 4, 5});
  auto p = ParseServerMessage(m);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kind, ServerMessage::Kind::kXLogData);
  EXPECT_EQ(p->data_start, 0x16B374D848ull);
  EXPECT_EQ(p->wal_end, 0x16B374E000ull);
  EXPECT_EQ(p->send_time_us, 123456789);
  EXPECT_EQ(p->data_len, 5u);
  EXPECT_FALSE(p->reply_requested);
}

TEST(PgStreamProtocolTest, XLogDataWithoutPayloadIsValid) {
  std::vector<uint8_t> m(kXLogDataHeaderSize, 0);
  m[0] = 'w';
  auto p = ParseServerMessage(m);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->data_len, 0u);
}

TEST(PgStreamProtocolTest, ParsesKeepalive) {
  std::vector<uint8_t> m = {'k'};
  AppendBig64(&m, 0x100000028ull);
  AppendBig64(&m, 42);
  m.push_back(1);
  auto p = ParseServerMessage(m);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kind, ServerMessage::Kind::kKeepalive);
  EXPECT_EQ(p->wal_end, 0x100000028ull);
  EXPECT_EQ(p->send_time_us, 42);
  EXPECT_TRUE(p->reply_requested);
  m.back() = 0;
  EXPECT_FALSE(ParseServerMessage(m)->reply_requested);
}

TEST(PgStreamProtocolTest, ShortOrUnknownMessagesAreErrors) {
  EXPECT_EQ(ParseServerMessage({}).status().code(), absl::StatusCode::kDataLoss);
  for (size_t n = 1; n < kXLogDataHeaderSize; ++n) {
    std::vector<uint8_t> m(n, 0);
    m[0] = 'w';
    EXPECT_EQ(ParseServerMessage(m).status().code(), absl::StatusCode::kDataLoss) << n;
  }
  for (size_t n : {size_t{1}, kKeepaliveSize - 1, kKeepaliveSize + 1}) {
    std::vector<uint8_t> m(n, 0);
    m[0] = 'k';
    EXPECT_EQ(ParseServerMessage(m).status().code(), absl::StatusCode::kDataLoss) << n;
  }
  auto unknown = ParseServerMessage(Bytes({'z', 0, 0}));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("0x7a"), std::string::npos) << unknown.status();
}

TEST(PgStreamProtocolTest, EncodesStandbyStatusBigEndian) {
  std::string m = EncodeStandbyStatus(0x0102030405060708ull, 0x1112131415161718ull, 0,
                                      0x2122232425262728ll, false);
  ASSERT_EQ(m.size(), kStandbyStatusSize);
  std::vector<uint8_t> want = {'r'};
  AppendBig64(&want, 0x0102030405060708ull);
  AppendBig64(&want, 0x1112131415161718ull);
  AppendBig64(&want, 0);
  AppendBig64(&want, 0x2122232425262728ull);
  want.push_back(0);
  EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), want);
  EXPECT_EQ(EncodeStandbyStatus(0, 0, 0, 0, true).back(), 1);
}

TEST(PgStreamProtocolTest, TimestampsCountFromTheYear2000) {
  EXPECT_EQ(PgTimestamp(absl::FromUnixSeconds(946684800)), 0);
  EXPECT_EQ(PgTimestamp(absl::FromUnixSeconds(946684801) + absl::Microseconds(5)), 1000005);
  EXPECT_EQ(PgTimestamp(absl::FromUnixSeconds(946684799)), -1000000);
}

}  // namespace
}  // namespace walship::agent::pgstream
