// The agent's replica positions file: format, load/save, damaged files.
#include "agent/postgres/replica_positions.h"

#include <sys/stat.h>

#include <cerrno>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sys/syscalls.h"
#include "common/wire/crc32c.h"
#include "gtest/gtest.h"
#include "tests/fakes/scripted_syscalls.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

ReplicaTable TwoReplicas() {
  ReplicaTable t;
  t.stream_id = "pg-7365025346473391442";
  t.replicas["r1"] = KnownReplica{Position{"000000010000000000000009", 80},
                                  absl::FromUnixSeconds(1714564800), false};
  t.replicas["r2.b-c_d"] = KnownReplica{Position{"000000010000000000000005", 4136},
                                        absl::FromUnixSeconds(1714564711), true};
  return t;
}

TEST(ReplicaPositionsFormatTest, EncodesTheDocumentedText) {
  const std::string body =
      "walship-agent-replicas 1\n"
      "stream pg-7365025346473391442\n"
      "replica r1 000000010000000000000009 80 2024-05-01T12:00:00Z held\n"
      "replica r2.b-c_d 000000010000000000000005 4136 2024-05-01T11:58:31Z released\n";
  EXPECT_EQ(ReplicaPositionStore::Encode(TwoReplicas()),
            absl::StrCat(body, absl::StrFormat("crc32c %08x\n",
                                               wire::Crc32c(body.data(), body.size()))));
}

TEST(ReplicaPositionsFormatTest, DecodeReadsWhatEncodeWrites) {
  for (const ReplicaTable& t : {TwoReplicas(), ReplicaTable{"s", {}}, ReplicaTable{}}) {
    absl::StatusOr<ReplicaTable> back =
        ReplicaPositionStore::Decode(ReplicaPositionStore::Encode(t));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == t);
  }
}

TEST(ReplicaPositionsFormatTest, EveryTruncationIsDataLoss) {
  const std::string text = ReplicaPositionStore::Encode(TwoReplicas());
  for (size_t n = 0; n < text.size(); ++n) {
    absl::StatusOr<ReplicaTable> t = ReplicaPositionStore::Decode(text.substr(0, n));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << "prefix of " << n << " bytes";
  }
}

TEST(ReplicaPositionsFormatTest, EveryFlippedBitIsDataLoss) {
  const std::string text = ReplicaPositionStore::Encode(TwoReplicas());
  // Past the version line: a flipped digit there is a version mismatch.
  for (size_t i = text.find('\n') + 1; i < text.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = text;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::StatusOr<ReplicaTable> t = ReplicaPositionStore::Decode(bad);
      EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss)
          << "byte " << i << " bit " << bit;
    }
  }
}

// A file whose CRC is right but whose records are not (a hand edit that
// recomputed the CRC, or a bug): still refused, with the line named.
absl::StatusOr<ReplicaTable> DecodeWithGoodCrc(const std::string& body) {
  return ReplicaPositionStore::Decode(absl::StrCat(
      body, absl::StrFormat("crc32c %08x\n", wire::Crc32c(body.data(), body.size()))));
}

TEST(ReplicaPositionsFormatTest, MalformedRecordsAreDataLossNamingTheLine) {
  const std::string head = "walship-agent-replicas 1\nstream s\n";
  const std::string good = "replica r1 000000010000000000000009 80 2024-05-01T12:00:00Z held\n";
  for (const std::string& line : {
           std::string("replica r1 000000010000000000000009 80 2024-05-01T12:00:00Z\n"),
           std::string("replica r/1 000000010000000000000009 80 2024-05-01T12:00:00Z held\n"),
           std::string("replica r1 ../etc 80 2024-05-01T12:00:00Z held\n"),
           std::string("replica r1 000000010000000000000009 -1 2024-05-01T12:00:00Z held\n"),
           std::string("replica r1 000000010000000000000009 80 yesterday held\n"),
           std::string("replica r1 000000010000000000000009 80 2024-05-01T12:00:00Z gone\n"),
           std::string("replica r1 000000010000000000000009 81 2024-05-01T12:00:00Z held\n"),
       }) {
    absl::StatusOr<ReplicaTable> t = DecodeWithGoodCrc(absl::StrCat(head, good, line));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << line;
    EXPECT_TRUE(absl::StrContains(t.status().message(), "line 4")) << t.status();
  }
  absl::StatusOr<ReplicaTable> no_stream =
      DecodeWithGoodCrc(absl::StrCat("walship-agent-replicas 1\n", good));
  EXPECT_EQ(no_stream.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ReplicaPositionsFormatTest, ALaterVersionIsFailedPrecondition) {
  absl::StatusOr<ReplicaTable> t =
      DecodeWithGoodCrc("walship-agent-replicas 2\nstream s\n");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "version 2")) << t.status();
  EXPECT_EQ(ReplicaPositionStore::Decode("something else\ncrc32c 00000000\n").status().code(),
            absl::StatusCode::kDataLoss);
}

class ReplicaPositionStoreTest : public ::testing::Test {
 protected:
  sys::SysCalls& real_ = sys::DefaultSysCalls();
  std::string dir_ = walship::testing::FreshTempDir("replica_positions");
};

TEST_F(ReplicaPositionStoreTest, NoFileIsAnEmptyTable) {
  ReplicaPositionStore store(real_, dir_);
  absl::StatusOr<ReplicaTable> t = store.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(*t == ReplicaTable{});
}

TEST_F(ReplicaPositionStoreTest, LoadsWhatItSaved) {
  ReplicaPositionStore store(real_, dir_);
  ASSERT_TRUE(store.Save(TwoReplicas()).ok());
  EXPECT_EQ(walship::testing::ReadFile(store.path()),
            ReplicaPositionStore::Encode(TwoReplicas()));
  absl::StatusOr<ReplicaTable> t = ReplicaPositionStore(real_, dir_).Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(*t == TwoReplicas());
}

TEST_F(ReplicaPositionStoreTest, ADamagedFileStopsTheLoadNamingTheFile) {
  ReplicaPositionStore store(real_, dir_);
  ASSERT_TRUE(store.Save(TwoReplicas()).ok());
  std::string text = walship::testing::ReadFile(store.path());
  walship::testing::WriteFile(store.path(), text.substr(0, text.size() / 2));
  absl::StatusOr<ReplicaTable> t = store.Load();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(t.status().message(), store.path())) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "delete it")) << t.status();
}

TEST_F(ReplicaPositionStoreTest, ATornTempFileIsIgnoredAndReplaced) {
  ReplicaPositionStore store(real_, dir_);
  ASSERT_TRUE(store.Save(TwoReplicas()).ok());
  // A crash in the middle of the next save leaves a partial temp file.
  walship::testing::WriteFile(store.path() + ".tmp", "walship-agent-replicas 1\nstre");
  absl::StatusOr<ReplicaTable> t = store.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(*t == TwoReplicas());
  ReplicaTable next = TwoReplicas();
  next.replicas.erase("r1");
  ASSERT_TRUE(store.Save(next).ok());
  EXPECT_TRUE(*store.Load() == next);
}

TEST_F(ReplicaPositionStoreTest, AFailedSaveLeavesThePreviousFile) {
  sys::ScriptedSysCalls scripted;
  ReplicaPositionStore store(scripted, dir_);
  ASSERT_TRUE(store.Save(TwoReplicas()).ok());
  ReplicaTable next = TwoReplicas();
  next.replicas["r3"] = KnownReplica{Position{"00000001000000000000000A", 0},
                                     absl::FromUnixSeconds(1714564900), false};
  scripted.ScriptWrite({{-1, ENOSPC}});
  absl::Status s = store.Save(next);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  absl::StatusOr<ReplicaTable> t = store.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(*t == TwoReplicas());
  struct stat st;
  EXPECT_NE(::stat((store.path() + ".tmp").c_str(), &st), 0) << "temp file left behind";
}

TEST_F(ReplicaPositionStoreTest, RefusesToWriteWhatItCouldNotRead) {
  ReplicaPositionStore store(real_, dir_);
  ReplicaTable bad_name = TwoReplicas();
  bad_name.replicas["a b"] = bad_name.replicas["r1"];
  EXPECT_EQ(store.Save(bad_name).code(), absl::StatusCode::kInvalidArgument);
  ReplicaTable bad_segment = TwoReplicas();
  bad_segment.replicas["r1"].flushed.segment = "";
  EXPECT_EQ(store.Save(bad_segment).code(), absl::StatusCode::kInvalidArgument);
  ReplicaTable bad_stream = TwoReplicas();
  bad_stream.stream_id = "a\nreplica x";
  EXPECT_EQ(store.Save(bad_stream).code(), absl::StatusCode::kInvalidArgument);
  struct stat st;
  EXPECT_NE(::stat(store.path().c_str(), &st), 0) << "nothing was to be written";
}

TEST_F(ReplicaPositionStoreTest, EnsureDirCreatesOneLevel) {
  ReplicaPositionStore store(real_, dir_ + "/state");
  ASSERT_TRUE(store.EnsureDir().ok());
  ASSERT_TRUE(store.EnsureDir().ok());  // exists: fine
  ASSERT_TRUE(store.Save(TwoReplicas()).ok());
  ReplicaPositionStore deeper(real_, dir_ + "/no/such/parent");
  EXPECT_EQ(deeper.EnsureDir().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace walship::agent
