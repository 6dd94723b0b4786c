#include "common/wire/segment_name.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walship::wire {
namespace {

using ::testing::HasSubstr;

TEST(SegmentNameTest, AcceptsValidNames) {
  for (const std::string& name :
       {std::string("000000010000000000000001"),
        std::string("00000001.history"), std::string("a"), std::string("A-z_9"),
        std::string("seg.1.2"), std::string("x.partial2"), std::string("tmp"),
        std::string("partial"), std::string("a.b-c_d"), std::string("a."),
        std::string(255, 'x')}) {
    EXPECT_TRUE(ValidateSegmentName(name).ok())
        << name << ": " << ValidateSegmentName(name);
  }
}

void ExpectRejected(const std::string& name, const std::string& why) {
  const absl::Status s = ValidateSegmentName(name);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(why)) << s;
}

TEST(SegmentNameTest, RejectsEmpty) { ExpectRejected("", "empty"); }

TEST(SegmentNameTest, RejectsTooLong) {
  ExpectRejected(std::string(256, 'x'), "longer than 255");
  // The quote is truncated and carries the length.
  const absl::Status s = ValidateSegmentName(std::string(1000, 'y'));
  EXPECT_THAT(std::string(s.message()), HasSubstr("(1000 bytes)"));
  EXPECT_LT(s.message().size(), 200u);
}

TEST(SegmentNameTest, RejectsPathsAndTraversal) {
  ExpectRejected("../x", "byte 2 (\"/\")");
  ExpectRejected("a/b", "byte 1 (\"/\")");
  ExpectRejected("/etc/passwd", "byte 0");
  ExpectRejected("a\\b", "is not one of [A-Za-z0-9._-]");
  ExpectRejected(".", "starts with '.'");
  ExpectRejected("..", "starts with '.'");
  ExpectRejected(".hidden", "starts with '.'");
  ExpectRejected("a..b", "contains \"..\"");
  ExpectRejected("a..", "contains \"..\"");
}

TEST(SegmentNameTest, RejectsReservedSuffixes) {
  ExpectRejected("000000010000000000000001.partial", ".partial");
  ExpectRejected("x.tmp", ".tmp");
  ExpectRejected("a.b.tmp", ".tmp");
  ExpectRejected("walship.progress", "walship.");
  ExpectRejected("walship.state", "walship.");
}

TEST(SegmentNameTest, RejectsOtherCharacters) {
  for (const char* name : {"a b", "a:b", "a*", "é", "a\nb", "a\tb", "~x",
                           "a%2fb", "a;rm"}) {
    ExpectRejected(name, "is not one of");
  }
}

TEST(SegmentNameTest, EscapesNonPrintablesInMessage) {
  const std::string name("x\0y", 3);
  const absl::Status s = ValidateSegmentName(name);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"x\\x00y\""));
  EXPECT_THAT(std::string(s.message()), HasSubstr("byte 1"));
  // The raw NUL must not appear in the message.
  EXPECT_EQ(std::string(s.message()).find('\0'), std::string::npos);

  const absl::Status s2 = ValidateSegmentName("\xff\x01");
  EXPECT_THAT(std::string(s2.message()), HasSubstr("\"\\xff\\x01\""));
}

}  // namespace
}  // namespace walship::wire
