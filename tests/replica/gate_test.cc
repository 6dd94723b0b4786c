// The promotion gate's pure steps (replica/gate.h): which files it writes
// into the standby's pg_wal, and the position it waits for. The whole gate
// runs against PostgreSQL in integration/drill/pg_gate_test.py.
#include "replica/gate.h"
#include "replica/gate_config.h"

#include "gtest/gtest.h"
#include "tests/common/pgwal/wal_builder.h"
#include "tests/fakes/temp_dir.h"

namespace walship::replica {
namespace {

constexpr uint64_t kSeg = uint64_t{1} << 20;

v1::HeldResponse Held(std::vector<std::string> files, const std::string& durable,
                      uint64_t offset, bool complete) {
  v1::HeldResponse h;
  for (const std::string& f : files) h.add_files()->set_name(f);
  h.mutable_durable()->set_segment(durable);
  h.mutable_durable()->set_offset(offset);
  h.set_durable_segment_complete(complete);
  return h;
}

TEST(GateFilesToFetchTest, NewestTimelineCopyOfEachSegmentFromReplayToEndAndHistoryFiles) {
  const v1::HeldResponse held = Held(
      {"000000010000000000000002", "000000010000000000000003", "000000010000000000000004",
       "000000010000000000000005", "00000002.history", "000000020000000000000005",
       "00000003.history"},
      "000000020000000000000006", 100, false);
  auto names = GateFilesToFetch(held, 2, 3 * kSeg + 500, 6 * kSeg + 100, kSeg);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{
                        "00000002.history", "000000010000000000000003",
                        "000000010000000000000004", "000000020000000000000005",
                        "000000020000000000000006"}));
}

TEST(GateFilesToFetchTest, AnEndAtASegmentBoundaryNeedsNothingPastIt) {
  const v1::HeldResponse held =
      Held({"000000010000000000000003", "000000010000000000000004"},
           "000000010000000000000004", kSeg, true);
  auto names = GateFilesToFetch(held, 1, 4 * kSeg, 5 * kSeg, kSeg);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"000000010000000000000004"}));
}

TEST(GateFilesToFetchTest, AMissingSegmentIsNamed) {
  const v1::HeldResponse held =
      Held({"000000010000000000000003", "000000010000000000000005"},
           "000000010000000000000006", 10, false);
  auto names = GateFilesToFetch(held, 1, 3 * kSeg, 6 * kSeg + 10, kSeg);
  EXPECT_EQ(names.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(names.status().message().find("000000010000000000000004"), absl::string_view::npos)
      << names.status();
}

class GateReplayTargetTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTempDir("pg_wal"); }
  std::string dir_;
  pg::testing::WalBuilderOptions opts_;
};

// A replica's end inside a record (a flush of whole pages): PostgreSQL
// replays up to the last whole record, and the gate waits for that.
TEST_F(GateReplayTargetTest, AnEndInsideARecordWaitsForTheLastWholeOne) {
  pg::testing::WalBuilder b(opts_, 3 * kSeg);
  for (int i = 0; i < 50; ++i) b.Append(200);
  const pg::Lsn whole = b.insert_lsn();
  b.Append(20000);  // spans pages
  ASSERT_TRUE(b.WriteTo(dir_).ok());
  const pg::WalExpectations exp = b.expectations();
  EXPECT_EQ(GateReplayTarget(sys::DefaultSysCalls(), dir_, exp, 1, 3 * kSeg, whole + 5000),
            whole);
  // An end at a record boundary is the target itself.
  EXPECT_EQ(GateReplayTarget(sys::DefaultSysCalls(), dir_, exp, 1, 3 * kSeg, whole), whole);
  EXPECT_EQ(GateReplayTarget(sys::DefaultSysCalls(), dir_, exp, 1, 3 * kSeg, b.insert_lsn()),
            b.insert_lsn());
}

// A scan that cannot prove where replay stops leaves the target at the
// replica's end: the gate then fails rather than promote early.
TEST_F(GateReplayTargetTest, WithoutProofTheTargetIsTheReplicasEnd) {
  pg::testing::WalBuilder b(opts_, 3 * kSeg);
  for (int i = 0; i < 10; ++i) b.Append(200);
  const pg::Lsn valid_end = b.insert_lsn();
  ASSERT_TRUE(b.WriteTo(dir_).ok());
  const pg::WalExpectations exp = b.expectations();
  // Zeros past the valid WAL: not a record cut by the end.
  EXPECT_EQ(GateReplayTarget(sys::DefaultSysCalls(), dir_, exp, 1, 3 * kSeg, valid_end + 4096),
            valid_end + 4096);
  // Another timeline's files are not there.
  EXPECT_EQ(GateReplayTarget(sys::DefaultSysCalls(), dir_, exp, 2, 3 * kSeg, valid_end - 8),
            valid_end - 8);
}

}  // namespace
}  // namespace walship::replica

namespace walship::replica {
namespace {

TEST(SyncStandbyNamesIncludeTest, ListsAsPostgreSqlReadsThem) {
  EXPECT_TRUE(SyncStandbyNamesInclude("walship", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("WalShip", "walship"));  // case-insensitive
  EXPECT_TRUE(SyncStandbyNamesInclude("node1, walship", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("FIRST 1 (walship, node1)", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("ANY 1 (node1,\"walship\")", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("2 ( a , walship )", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("*", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("ANY 1 (*)", "walship"));
  EXPECT_TRUE(SyncStandbyNamesInclude("\"wal\"\"ship\"", "wal\"ship"));
}

TEST(SyncStandbyNamesIncludeTest, OtherNamesAndEmptyAreNot) {
  EXPECT_FALSE(SyncStandbyNamesInclude("", "walship"));
  EXPECT_FALSE(SyncStandbyNamesInclude("node1", "walship"));
  EXPECT_FALSE(SyncStandbyNamesInclude("walship2, node1", "walship"));
  EXPECT_FALSE(SyncStandbyNamesInclude("FIRST 1 (node1, node2)", "walship"));
  // A keyword or a count is not a member.
  EXPECT_FALSE(SyncStandbyNamesInclude("ANY 1 (node1)", "any"));
  EXPECT_FALSE(SyncStandbyNamesInclude("ANY 1 (node1)", "1"));
}

}  // namespace
}  // namespace walship::replica

namespace walship::replica {
namespace {

TEST(GateHistoryCheckTest, TheStandbysOwnTimelineOrAnAncestorLeftAfterTheEnd) {
  // Timeline 3 forked from 2 at 0/5000000, 2 from 1 at 0/3000000.
  const std::vector<pg::TimelineSwitch> h3 = {{1, 0x3000000}, {2, 0x5000000}};
  EXPECT_TRUE(GateHistoryCheck(1, {}, 1, 0x9000000).ok());
  EXPECT_TRUE(GateHistoryCheck(3, h3, 3, 0x9000000).ok());
  EXPECT_TRUE(GateHistoryCheck(3, h3, 2, 0x5000000).ok());  // up to the switch
  EXPECT_TRUE(GateHistoryCheck(3, h3, 1, 0x2FFFFF0).ok());
}

TEST(GateHistoryCheckTest, OtherHistoriesAreRefusedWithTheReason) {
  const std::vector<pg::TimelineSwitch> h3 = {{1, 0x3000000}, {2, 0x5000000}};
  // Left timeline 2 before the replicas' end on it.
  absl::Status s = GateHistoryCheck(3, h3, 2, 0x5000100);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("left timeline 2 at 0/5000000"), std::string::npos) << s;
  // A newer timeline than the standby knows: its replay LSN means nothing.
  s = GateHistoryCheck(2, {{1, 0x3000000}}, 3, 0x100);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("newer than every timeline"), std::string::npos) << s;
  // A timeline beside the standby's, not its ancestor.
  s = GateHistoryCheck(4, {{1, 0x3000000}, {3, 0x6000000}}, 2, 0x100);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not in the history"), std::string::npos) << s;
}

}  // namespace
}  // namespace walship::replica
