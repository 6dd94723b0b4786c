// Copyright walship authors.
//
// Two halves: scripted tests drive each loop through ScriptedSysCalls and
// check the exact status code, the bytes delivered, the offset and length of
// every call; real tests run the same loops over temp files, socketpairs and
// TCP loopback to show the loops (and the fake's model of them) match the
// kernel.

#include "common/sys/transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>  // NOLINT(build/c++11)
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/sys/file_util.h"
#include "common/sys/pipe.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/scripted_syscalls.h"

namespace walship {
namespace sys {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Op = ScriptedSysCalls::Op;
using Call = ScriptedSysCalls::Call;

// Scripted tests never touch these fds for real: every call on them is
// scripted, and a fall-through by mistake fails with EBADF instead of hanging.
constexpr int kSock = 900;
constexpr int kFile = 901;

SysResult Ok(int64_t rc) { return SysResult{rc, 0}; }
SysResult Err(int err) { return SysResult{-1, err}; }

TransferOptions Opts() {
  TransferOptions opts;
  opts.io_timeout = absl::Seconds(2);
  return opts;
}

std::vector<size_t> Lens(const std::vector<Call>& calls) {
  std::vector<size_t> out;
  for (const Call& c : calls) out.push_back(c.len);
  return out;
}

std::vector<int64_t> Offsets(const std::vector<Call>& calls) {
  std::vector<int64_t> out;
  for (const Call& c : calls) out.push_back(c.offset.value_or(-1));
  return out;
}

std::vector<int64_t> OutOffsets(const std::vector<Call>& calls) {
  std::vector<int64_t> out;
  for (const Call& c : calls) out.push_back(c.offset2.value_or(-1));
  return out;
}

// Successive calls reading a `count`-byte range must never ask for more than
// what is left of it.
void ExpectNeverAsksBeyondRange(const std::vector<Call>& calls, size_t count) {
  size_t done = 0;
  for (const Call& c : calls) {
    EXPECT_LE(c.len, count - done) << "after " << done << " of " << count;
    if (c.result.rc > 0) done += static_cast<size_t>(c.result.rc);
  }
}

// ---------------------------------------------------------------------------
// SendFileFully, scripted.

TEST(SendFileFullyTest, ShortTransfersContinueFromAdvancedOffset) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Ok(1), Ok(10), Ok(20)});

  ASSERT_TRUE(SendFileFully(sys, kSock, kFile, 100, 31, Opts()).ok());

  const std::vector<Call> calls = sys.calls(Op::kSendFile);
  ASSERT_EQ(calls.size(), 3u);
  for (const Call& c : calls) {
    EXPECT_EQ(c.fd, kSock);
    EXPECT_EQ(c.fd2, kFile);
  }
  EXPECT_THAT(Offsets(calls), ElementsAre(100, 101, 111));
  EXPECT_THAT(Lens(calls), ElementsAre(31, 30, 20));
  EXPECT_EQ(sys.Output(kSock), ScriptedSysCalls::Pattern(100, 31));
  EXPECT_THAT(sys.violations(), IsEmpty());
}

// The script from STYLE.md: 1, 10, EAGAIN, 20, then 0 before the end.
TEST(SendFileFullyTest, ZeroBeforeEndIsSourceTruncatedDataLoss) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Ok(1), Ok(10), Err(EAGAIN), Ok(20), Ok(0)});
  sys.ScriptPoll({Ok(1)});

  const absl::Status s = SendFileFully(sys, kSock, kFile, 100, 40, Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("source truncated: file ended at offset "
                                     "131, expected 140"));
  const std::vector<Call> calls = sys.calls(Op::kSendFile);
  EXPECT_THAT(Offsets(calls), ElementsAre(100, 101, 111, 111, 131));
  EXPECT_THAT(Lens(calls), ElementsAre(40, 39, 29, 29, 9));
  ExpectNeverAsksBeyondRange(calls, 40);
  const std::vector<Call> polls = sys.calls(Op::kPoll);
  ASSERT_EQ(polls.size(), 1u);
  EXPECT_EQ(polls[0].fd, kSock);
  EXPECT_EQ(polls[0].events, POLLOUT);
  EXPECT_EQ(polls[0].flags, 2000);  // timeout_ms
  EXPECT_EQ(sys.Output(kSock), ScriptedSysCalls::Pattern(100, 31));
  EXPECT_TRUE(sys.AllScriptsConsumed());
}

TEST(SendFileFullyTest, RetriesEintrAtTheSameOffset) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Err(EINTR), Ok(5), Err(EINTR), Ok(26)});

  ASSERT_TRUE(SendFileFully(sys, kSock, kFile, 0, 31, Opts()).ok());

  const std::vector<Call> calls = sys.calls(Op::kSendFile);
  EXPECT_THAT(Offsets(calls), ElementsAre(0, 0, 5, 5));
  EXPECT_THAT(Lens(calls), ElementsAre(31, 31, 26, 26));
  EXPECT_THAT(sys.calls(Op::kPoll), IsEmpty());
  EXPECT_EQ(sys.Output(kSock), ScriptedSysCalls::Pattern(0, 31));
}

TEST(SendFileFullyTest, EagainWaitsForWritableThenContinues) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Ok(7), Err(EAGAIN), Ok(24)});
  sys.ScriptPoll({Err(EINTR), Ok(1)});

  ASSERT_TRUE(SendFileFully(sys, kSock, kFile, 0, 31, Opts()).ok());

  EXPECT_THAT(Offsets(sys.calls(Op::kSendFile)), ElementsAre(0, 7, 7));
  const std::vector<Call> polls = sys.calls(Op::kPoll);
  ASSERT_EQ(polls.size(), 2u);  // EINTR during the wait resumes it.
  EXPECT_EQ(polls[1].fd, kSock);
  EXPECT_EQ(polls[1].events, POLLOUT);
  EXPECT_LE(polls[1].flags, 2000);
}

TEST(SendFileFullyTest, EagainThenPollTimeoutIsUnavailable) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Ok(3), Err(EAGAIN)});
  sys.ScriptPoll({Ok(0)});

  const absl::Status s = SendFileFully(sys, kSock, kFile, 0, 31, Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("timed out"));
  EXPECT_THAT(s.message(), HasSubstr("3 of 31"));
  EXPECT_EQ(sys.calls(Op::kSendFile).size(), 2u);
}

TEST(SendFileFullyTest, ZeroCountMakesNoCall) {
  ScriptedSysCalls sys;
  EXPECT_TRUE(SendFileFully(sys, kSock, kFile, 10, 0, Opts()).ok());
  EXPECT_THAT(sys.calls(), IsEmpty());
}

TEST(SendFileFullyTest, KernelOverreportingIsInternal) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Ok(32)});
  EXPECT_EQ(SendFileFully(sys, kSock, kFile, 0, 31, Opts()).code(),
            absl::StatusCode::kInternal);
}

TEST(SendFileFullyTest, NegativeOffsetIsInvalidArgument) {
  ScriptedSysCalls sys;
  EXPECT_EQ(SendFileFully(sys, kSock, kFile, -1, 31, Opts()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sys.calls(), IsEmpty());
}

struct ErrnoCase {
  int err;
  absl::StatusCode code;
};

class SendFileErrnoTest : public ::testing::TestWithParam<ErrnoCase> {};

TEST_P(SendFileErrnoTest, MapsToCodeWithOffsetContext) {
  ScriptedSysCalls sys;
  sys.ScriptSendFile({Ok(10), Err(GetParam().err)});

  const absl::Status s = SendFileFully(sys, kSock, kFile, 100, 31, Opts());

  EXPECT_EQ(s.code(), GetParam().code) << s;
  EXPECT_THAT(s.message(), HasSubstr("at offset 110"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("errno ", GetParam().err)));
  if (s.code() == absl::StatusCode::kUnimplemented) {
    EXPECT_THAT(s.message(), HasSubstr("--transport=copy"));
  }
  EXPECT_EQ(sys.calls(Op::kSendFile).size(), 2u);  // Never retried.
}

INSTANTIATE_TEST_SUITE_P(
    Errnos, SendFileErrnoTest,
    ::testing::Values(ErrnoCase{EPIPE, absl::StatusCode::kUnavailable},
                      ErrnoCase{ECONNRESET, absl::StatusCode::kUnavailable},
                      ErrnoCase{EIO, absl::StatusCode::kDataLoss},
                      ErrnoCase{EINVAL, absl::StatusCode::kUnimplemented},
                      ErrnoCase{ENOSYS, absl::StatusCode::kUnimplemented},
                      ErrnoCase{EOPNOTSUPP, absl::StatusCode::kUnimplemented},
                      ErrnoCase{ENOMEM, absl::StatusCode::kResourceExhausted}));

// ---------------------------------------------------------------------------
// SpliceFully, scripted. Fills are socket -> pipe, drains pipe -> file.

class SpliceFullyTest : public ::testing::Test {
 protected:
  // `capacity` 0 keeps the kernel default.
  Pipe MakePipe(size_t capacity) {
    absl::StatusOr<Pipe> pipe = Pipe::Create(sys_, capacity);
    EXPECT_TRUE(pipe.ok()) << pipe.status();
    return std::move(*pipe);
  }

  std::vector<Call> Fills() {
    std::vector<Call> out;
    for (const Call& c : sys_.calls(Op::kSplice)) {
      if (c.fd == kSock) out.push_back(c);
    }
    return out;
  }

  std::vector<Call> Drains() {
    std::vector<Call> out;
    for (const Call& c : sys_.calls(Op::kSplice)) {
      if (c.fd2 == kFile) out.push_back(c);
    }
    return out;
  }

  // Checks that fills never ask for more than the unreceived rest or the
  // free pipe space, and drains never for more than the pipe holds.
  void ExpectBookkeeping(const Pipe& pipe, size_t count) {
    size_t received = 0;
    size_t written = 0;
    for (const Call& c : sys_.calls(Op::kSplice)) {
      const size_t moved = c.result.rc > 0 ? c.result.rc : 0;
      if (c.fd == kSock) {
        EXPECT_EQ(c.fd2, pipe.write_fd());
        EXPECT_FALSE(c.offset.has_value());
        EXPECT_FALSE(c.offset2.has_value());
        EXPECT_LE(c.len, count - received);
        EXPECT_LE(c.len, pipe.capacity() - (received - written));
        received += moved;
      } else {
        EXPECT_EQ(c.fd, pipe.read_fd());
        EXPECT_EQ(c.fd2, kFile);
        EXPECT_LE(c.len, received - written);
        written += moved;
      }
      EXPECT_TRUE(c.flags & SPLICE_F_NONBLOCK);
    }
    EXPECT_THAT(sys_.violations(), IsEmpty());
  }

  ScriptedSysCalls sys_;
};

TEST_F(SpliceFullyTest, ShortTransfersMoveEveryByteToTheRightOffset) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Ok(1), Ok(1), Ok(10), Ok(10), Ok(20), Ok(20)});

  ASSERT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 512, 31, Opts()).ok());

  EXPECT_THAT(Lens(Fills()), ElementsAre(31, 30, 20));
  EXPECT_THAT(Lens(Drains()), ElementsAre(1, 10, 20));
  EXPECT_THAT(OutOffsets(Drains()), ElementsAre(512, 513, 523));
  EXPECT_EQ(sys_.Output(kFile).substr(512), ScriptedSysCalls::Pattern(0, 31));
  EXPECT_EQ(sys_.PipeModelSize(pipe.read_fd()), 0u);
  ExpectBookkeeping(pipe, 31);
}

TEST_F(SpliceFullyTest, NeverPullsMoreThanThePipeHasRoomFor) {
  Pipe pipe = MakePipe(4096);
  ASSERT_EQ(pipe.capacity(), 4096u);
  sys_.ScriptSplice({Ok(4096), Ok(1000),  // pipe full, partial drain
                     Ok(1000), Ok(4096),  // refill only the freed room
                     Ok(4096), Ok(4096),  //
                     Ok(808), Ok(808)});  // the tail

  ASSERT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 0, 10000, Opts()).ok());

  EXPECT_THAT(Lens(Fills()), ElementsAre(4096, 1000, 4096, 808));
  EXPECT_THAT(Lens(Drains()), ElementsAre(4096, 4096, 4096, 808));
  EXPECT_THAT(OutOffsets(Drains()), ElementsAre(0, 1000, 5096, 9192));
  EXPECT_EQ(sys_.Output(kFile), ScriptedSysCalls::Pattern(0, 10000));
  ExpectBookkeeping(pipe, 10000);
}

TEST_F(SpliceFullyTest, ShortDrainContinuesAtAdvancedFileOffset) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Ok(31), Ok(5), Ok(26)});

  ASSERT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 100, 31, Opts()).ok());

  EXPECT_THAT(Lens(Fills()), ElementsAre(31));
  EXPECT_THAT(Lens(Drains()), ElementsAre(31, 26));
  EXPECT_THAT(OutOffsets(Drains()), ElementsAre(100, 105));
  EXPECT_EQ(sys_.Output(kFile).substr(100), ScriptedSysCalls::Pattern(0, 31));
  ExpectBookkeeping(pipe, 31);
}

TEST_F(SpliceFullyTest, RetriesEintrOnBothSides) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Err(EINTR), Ok(31), Err(EINTR), Ok(31)});

  ASSERT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 0, 31, Opts()).ok());

  EXPECT_THAT(Lens(Fills()), ElementsAre(31, 31));
  EXPECT_THAT(OutOffsets(Drains()), ElementsAre(0, 0));
  EXPECT_EQ(sys_.Output(kFile), ScriptedSysCalls::Pattern(0, 31));
  ExpectBookkeeping(pipe, 31);
}

TEST_F(SpliceFullyTest, EagainWithEmptyPipeWaitsForReadableSocket) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Err(EAGAIN), Ok(31), Ok(31)});
  sys_.ScriptPoll({Ok(1)});

  ASSERT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 0, 31, Opts()).ok());

  const std::vector<Call> polls = sys_.calls(Op::kPoll);
  ASSERT_EQ(polls.size(), 1u);
  EXPECT_EQ(polls[0].fd, kSock);
  EXPECT_EQ(polls[0].events, POLLIN);
  ExpectBookkeeping(pipe, 31);
}

TEST_F(SpliceFullyTest, EagainWithBytesInPipeDrainsBeforeWaiting) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Ok(10), Ok(4),       // 6 bytes left in the pipe
                     Err(EAGAIN), Ok(6),  // drain them instead of polling
                     Ok(21), Ok(21)});

  ASSERT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 0, 31, Opts()).ok());

  EXPECT_THAT(sys_.calls(Op::kPoll), IsEmpty());
  EXPECT_THAT(Lens(Fills()), ElementsAre(31, 21, 21));
  EXPECT_THAT(OutOffsets(Drains()), ElementsAre(0, 4, 10));
  EXPECT_EQ(sys_.Output(kFile), ScriptedSysCalls::Pattern(0, 31));
  ExpectBookkeeping(pipe, 31);
}

TEST_F(SpliceFullyTest, EagainThenPollTimeoutIsUnavailable) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Err(EAGAIN)});
  sys_.ScriptPoll({Ok(0)});

  const absl::Status s = SpliceFully(sys_, kSock, pipe, kFile, 0, 31, Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("timed out"));
}

TEST_F(SpliceFullyTest, ZeroFromSocketIsPeerClosedUnavailable) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Ok(10), Ok(10), Ok(0)});

  const absl::Status s = SpliceFully(sys_, kSock, pipe, kFile, 0, 31, Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer closed after 10 of 31 bytes"));
  ExpectBookkeeping(pipe, 31);
}

TEST_F(SpliceFullyTest, ZeroCountMakesNoCall) {
  Pipe pipe = MakePipe(0);
  EXPECT_TRUE(SpliceFully(sys_, kSock, pipe, kFile, 0, 0, Opts()).ok());
  EXPECT_THAT(sys_.calls(Op::kSplice), IsEmpty());
}

class SpliceSocketErrnoTest : public SpliceFullyTest,
                              public ::testing::WithParamInterface<ErrnoCase> {
};

TEST_P(SpliceSocketErrnoTest, SocketSideErrno) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Ok(10), Ok(10), Err(GetParam().err)});

  const absl::Status s = SpliceFully(sys_, kSock, pipe, kFile, 0, 31, Opts());

  EXPECT_EQ(s.code(), GetParam().code) << s;
  EXPECT_THAT(s.message(), HasSubstr("10 of 31 bytes received"));
  if (s.code() == absl::StatusCode::kUnimplemented) {
    EXPECT_THAT(s.message(), HasSubstr("--transport=copy"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Errnos, SpliceSocketErrnoTest,
    ::testing::Values(ErrnoCase{EPIPE, absl::StatusCode::kUnavailable},
                      ErrnoCase{ECONNRESET, absl::StatusCode::kUnavailable},
                      ErrnoCase{EINVAL, absl::StatusCode::kUnimplemented},
                      ErrnoCase{ENOSYS, absl::StatusCode::kUnimplemented}));

class SpliceFileErrnoTest : public SpliceFullyTest,
                            public ::testing::WithParamInterface<ErrnoCase> {};

TEST_P(SpliceFileErrnoTest, FileSideErrnoNamesTheFileOffset) {
  Pipe pipe = MakePipe(0);
  sys_.ScriptSplice({Ok(31), Ok(8), Err(GetParam().err)});

  const absl::Status s = SpliceFully(sys_, kSock, pipe, kFile, 512, 31, Opts());

  EXPECT_EQ(s.code(), GetParam().code) << s;
  EXPECT_THAT(s.message(), HasSubstr("file offset 520"));
  if (s.code() == absl::StatusCode::kUnimplemented) {
    EXPECT_THAT(s.message(), HasSubstr("--transport=copy"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Errnos, SpliceFileErrnoTest,
    ::testing::Values(ErrnoCase{EIO, absl::StatusCode::kDataLoss},
                      ErrnoCase{ENOSPC, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{EDQUOT, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{EINVAL, absl::StatusCode::kUnimplemented}));

// ---------------------------------------------------------------------------
// CopyFileToSocket, scripted. 16-byte buffer, 40 bytes from offset 100.

TEST(CopyFileToSocketTest, ShortReadsAndSendsDeliverTheExactRange) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptPread({Ok(1), Err(EINTR), Ok(10), Ok(16), Ok(13)});
  sys.ScriptSend(
      {Ok(1), Ok(4), Err(EAGAIN), Err(EINTR), Ok(6), Ok(16), Ok(13)});
  sys.ScriptPoll({Ok(1)});

  ASSERT_TRUE(CopyFileToSocket(sys, kSock, kFile, 100, 40,
                               absl::MakeSpan(buffer), Opts())
                  .ok());

  const std::vector<Call> preads = sys.calls(Op::kPread);
  EXPECT_THAT(Offsets(preads), ElementsAre(100, 101, 101, 111, 127));
  EXPECT_THAT(Lens(preads), ElementsAre(16, 16, 16, 16, 13));
  ExpectNeverAsksBeyondRange(preads, 40);
  const std::vector<Call> sends = sys.calls(Op::kSend);
  EXPECT_THAT(Lens(sends), ElementsAre(1, 10, 6, 6, 6, 16, 13));
  for (const Call& c : sends) {
    EXPECT_EQ(c.fd, kSock);
    EXPECT_TRUE(c.flags & MSG_NOSIGNAL);
  }
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).events, POLLOUT);
  EXPECT_EQ(sys.Output(kSock), ScriptedSysCalls::Pattern(100, 40));
  EXPECT_TRUE(sys.AllScriptsConsumed());
}

TEST(CopyFileToSocketTest, PreadZeroBeforeEndIsDataLoss) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptPread({Ok(11), Ok(0)});
  sys.ScriptSend({Ok(11)});

  const absl::Status s = CopyFileToSocket(sys, kSock, kFile, 100, 40,
                                          absl::MakeSpan(buffer), Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("file ended at offset 111, expected 140"));
}

TEST(CopyFileToSocketTest, SendTimeoutIsUnavailable) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptPread({Ok(16)});
  sys.ScriptSend({Err(EAGAIN)});
  sys.ScriptPoll({Ok(0)});

  EXPECT_EQ(
      CopyFileToSocket(sys, kSock, kFile, 0, 40, absl::MakeSpan(buffer), Opts())
          .code(),
      absl::StatusCode::kUnavailable);
}

TEST(CopyFileToSocketTest, EmptyBufferIsInvalidArgument) {
  ScriptedSysCalls sys;
  EXPECT_EQ(
      CopyFileToSocket(sys, kSock, kFile, 0, 40, absl::Span<char>(), Opts())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sys.calls(), IsEmpty());
}

class CopyFileToSocketErrnoTest : public ::testing::TestWithParam<ErrnoCase> {};

TEST_P(CopyFileToSocketErrnoTest, SendErrno) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptPread({Ok(16)});
  sys.ScriptSend({Ok(3), Err(GetParam().err)});
  EXPECT_EQ(
      CopyFileToSocket(sys, kSock, kFile, 0, 40, absl::MakeSpan(buffer), Opts())
          .code(),
      GetParam().code);
}

INSTANTIATE_TEST_SUITE_P(
    Errnos, CopyFileToSocketErrnoTest,
    ::testing::Values(ErrnoCase{EPIPE, absl::StatusCode::kUnavailable},
                      ErrnoCase{ECONNRESET, absl::StatusCode::kUnavailable}));

TEST(CopyFileToSocketTest, PreadEioIsDataLossWithOffset) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptPread({Ok(16), Err(EIO)});
  sys.ScriptSend({Ok(16)});

  const absl::Status s = CopyFileToSocket(sys, kSock, kFile, 100, 40,
                                          absl::MakeSpan(buffer), Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("at offset 116"));
}

// ---------------------------------------------------------------------------
// CopySocketToFile, scripted. 16-byte buffer, 40 bytes to file offset 1000.

TEST(CopySocketToFileTest, ShortReadsAndWritesLandAtTheRightOffsets) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptRead({Ok(1), Ok(10), Err(EAGAIN), Err(EINTR), Ok(16), Ok(13)});
  sys.ScriptPwrite({Ok(1), Ok(4), Err(EINTR), Ok(6), Ok(16), Ok(13)});
  sys.ScriptPoll({Ok(1)});

  ASSERT_TRUE(CopySocketToFile(sys, kSock, kFile, 1000, 40,
                               absl::MakeSpan(buffer), Opts())
                  .ok());

  const std::vector<Call> reads = sys.calls(Op::kRead);
  EXPECT_THAT(Lens(reads), ElementsAre(16, 16, 16, 16, 16, 13));
  ExpectNeverAsksBeyondRange(reads, 40);
  const std::vector<Call> pwrites = sys.calls(Op::kPwrite);
  EXPECT_THAT(Offsets(pwrites),
              ElementsAre(1000, 1001, 1005, 1005, 1011, 1027));
  EXPECT_THAT(Lens(pwrites), ElementsAre(1, 10, 6, 6, 16, 13));
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).fd, kSock);
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).events, POLLIN);
  EXPECT_EQ(sys.Output(kFile).substr(1000), ScriptedSysCalls::Pattern(0, 40));
  EXPECT_TRUE(sys.AllScriptsConsumed());
}

TEST(CopySocketToFileTest, ZeroFromSocketIsPeerClosedUnavailable) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptRead({Ok(11), Ok(0)});
  sys.ScriptPwrite({Ok(11)});

  const absl::Status s = CopySocketToFile(sys, kSock, kFile, 1000, 40,
                                          absl::MakeSpan(buffer), Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer closed after 11 of 40 bytes"));
}

TEST(CopySocketToFileTest, ReadTimeoutIsUnavailable) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptRead({Err(EAGAIN)});
  sys.ScriptPoll({Ok(0)});
  EXPECT_EQ(
      CopySocketToFile(sys, kSock, kFile, 0, 40, absl::MakeSpan(buffer), Opts())
          .code(),
      absl::StatusCode::kUnavailable);
}

TEST(CopySocketToFileTest, ConnectionResetIsUnavailable) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptRead({Err(ECONNRESET)});
  EXPECT_EQ(
      CopySocketToFile(sys, kSock, kFile, 0, 40, absl::MakeSpan(buffer), Opts())
          .code(),
      absl::StatusCode::kUnavailable);
}

class CopySocketToFileErrnoTest : public ::testing::TestWithParam<ErrnoCase> {};

TEST_P(CopySocketToFileErrnoTest, PwriteErrnoNamesTheFileOffset) {
  ScriptedSysCalls sys;
  char buffer[16];
  sys.ScriptRead({Ok(16), Ok(16)});
  sys.ScriptPwrite({Ok(16), Ok(2), Err(GetParam().err)});

  const absl::Status s = CopySocketToFile(sys, kSock, kFile, 1000, 40,
                                          absl::MakeSpan(buffer), Opts());

  EXPECT_EQ(s.code(), GetParam().code) << s;
  EXPECT_THAT(s.message(), HasSubstr("at offset 1018"));
}

INSTANTIATE_TEST_SUITE_P(
    Errnos, CopySocketToFileErrnoTest,
    ::testing::Values(ErrnoCase{EIO, absl::StatusCode::kDataLoss},
                      ErrnoCase{ENOSPC, absl::StatusCode::kResourceExhausted}));

// ---------------------------------------------------------------------------
// ReadFully / SendFully / WriteFully / PwriteFully / PreadFully, scripted.

TEST(ReadFullyTest, ShortReadsEintrAndEagainFillTheBuffer) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Ok(1), Ok(10), Err(EINTR), Err(EAGAIN), Ok(20)});
  sys.ScriptPoll({Ok(1)});
  std::string buf(31, 'x');

  ASSERT_TRUE(ReadFully(sys, kSock, buf.data(), buf.size(), Opts()).ok());

  EXPECT_EQ(buf, ScriptedSysCalls::Pattern(0, 31));
  EXPECT_THAT(Lens(sys.calls(Op::kRead)), ElementsAre(31, 30, 20, 20, 20));
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).events, POLLIN);
}

TEST(ReadOnceTest, RetriesEintrOnlyAndReturnsTheRest) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Err(EINTR), Err(EINTR), Ok(7), Err(EAGAIN), Ok(0), Err(ECONNRESET)});
  char buf[16];
  const SysResult first = ReadOnce(sys, kSock, buf, sizeof(buf));
  EXPECT_TRUE(first.ok());
  EXPECT_EQ(first.rc, 7);
  EXPECT_EQ(std::string(buf, 7), ScriptedSysCalls::Pattern(0, 7));
  EXPECT_EQ(ReadOnce(sys, kSock, buf, sizeof(buf)).err, EAGAIN);
  EXPECT_EQ(ReadOnce(sys, kSock, buf, sizeof(buf)).rc, 0);
  EXPECT_EQ(ReadOnce(sys, kSock, buf, sizeof(buf)).err, ECONNRESET);
  EXPECT_THAT(Lens(sys.calls(Op::kRead)), ElementsAre(16, 16, 16, 16, 16, 16));
}

TEST(ReadFullyTest, EofBeforeAnyByteIsOutOfRange) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Ok(0)});
  char buf[8];
  const absl::Status s = ReadFully(sys, kSock, buf, sizeof(buf), Opts());
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "end of stream");
}

TEST(ReadFullyTest, EofMidReadIsUnavailable) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Ok(1), Ok(10), Ok(0)});
  char buf[31];
  const absl::Status s = ReadFully(sys, kSock, buf, sizeof(buf), Opts());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer closed mid-read after 11 of 31"));
}

TEST(ReadFullyTest, PollTimeoutIsUnavailable) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Err(EAGAIN)});
  sys.ScriptPoll({Ok(0)});
  char buf[8];
  TransferOptions opts;
  opts.io_timeout = absl::Microseconds(1500);  // Rounds up to 2 ms.
  const absl::Status s = ReadFully(sys, kSock, buf, sizeof(buf), opts);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).flags, 2);
}

TEST(ReadFullyTest, InfiniteTimeoutPollsWithMinusOne) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Err(EAGAIN), Ok(8)});
  sys.ScriptPoll({Ok(1)});
  char buf[8];
  TransferOptions opts;
  opts.io_timeout = absl::InfiniteDuration();
  ASSERT_TRUE(ReadFully(sys, kSock, buf, sizeof(buf), opts).ok());
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).flags, -1);
}

TEST(ReadFullyTest, ConnectionResetIsUnavailable) {
  ScriptedSysCalls sys;
  sys.ScriptRead({Err(ECONNRESET)});
  char buf[8];
  EXPECT_EQ(ReadFully(sys, kSock, buf, sizeof(buf), Opts()).code(),
            absl::StatusCode::kUnavailable);
}

TEST(SendFullyTest, AlwaysAddsMsgNosignalAndContinuesShortSends) {
  ScriptedSysCalls sys;
  sys.ScriptSend({Ok(1), Err(EAGAIN), Ok(10), Ok(20)});
  sys.ScriptPoll({Ok(1)});
  const std::string data = ScriptedSysCalls::Pattern(7, 31);

  ASSERT_TRUE(
      SendFully(sys, kSock, data.data(), data.size(), MSG_MORE, Opts()).ok());

  const std::vector<Call> sends = sys.calls(Op::kSend);
  EXPECT_THAT(Lens(sends), ElementsAre(31, 30, 30, 20));
  for (const Call& c : sends) EXPECT_EQ(c.flags, MSG_MORE | MSG_NOSIGNAL);
  EXPECT_EQ(sys.calls(Op::kPoll).at(0).events, POLLOUT);
  EXPECT_EQ(sys.Output(kSock), data);
}

TEST(SendFullyTest, EpipeIsUnavailable) {
  ScriptedSysCalls sys;
  sys.ScriptSend({Ok(5), Err(EPIPE)});
  const std::string data(31, 'a');
  EXPECT_EQ(SendFully(sys, kSock, data.data(), data.size(), 0, Opts()).code(),
            absl::StatusCode::kUnavailable);
}

TEST(WriteFullyTest, ShortWritesAndEintr) {
  ScriptedSysCalls sys;
  sys.ScriptWrite({Ok(1), Err(EINTR), Ok(10), Ok(20)});
  const std::string data = ScriptedSysCalls::Pattern(0, 31);
  ASSERT_TRUE(WriteFully(sys, kFile, data.data(), data.size()).ok());
  EXPECT_THAT(Lens(sys.calls(Op::kWrite)), ElementsAre(31, 30, 30, 20));
  EXPECT_EQ(sys.Output(kFile), data);
}

TEST(WriteFullyTest, EnospcIsResourceExhausted) {
  ScriptedSysCalls sys;
  sys.ScriptWrite({Ok(3), Err(ENOSPC)});
  const std::string data(31, 'a');
  const absl::Status s = WriteFully(sys, kFile, data.data(), data.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("3 of 31"));
}

TEST(PwriteFullyTest, ShortWritesAdvanceTheOffset) {
  ScriptedSysCalls sys;
  sys.ScriptPwrite({Ok(1), Ok(10), Err(EINTR), Ok(20)});
  const std::string data = ScriptedSysCalls::Pattern(0, 31);
  ASSERT_TRUE(PwriteFully(sys, kFile, data.data(), data.size(), 4096).ok());
  EXPECT_THAT(Offsets(sys.calls(Op::kPwrite)),
              ElementsAre(4096, 4097, 4107, 4107));
  EXPECT_EQ(sys.Output(kFile).substr(4096), data);
}

TEST(PreadFullyTest, ShortReadsAdvanceTheOffset) {
  ScriptedSysCalls sys;
  sys.ScriptPread({Ok(1), Ok(10), Ok(20)});
  std::string buf(31, '\0');
  ASSERT_TRUE(PreadFully(sys, kFile, buf.data(), buf.size(), 50).ok());
  EXPECT_THAT(Offsets(sys.calls(Op::kPread)), ElementsAre(50, 51, 61));
  EXPECT_EQ(buf, ScriptedSysCalls::Pattern(50, 31));
}

TEST(PreadFullyTest, ShortFileIsOutOfRange) {
  ScriptedSysCalls sys;
  sys.ScriptPread({Ok(11), Ok(0)});
  char buf[31];
  const absl::Status s = PreadFully(sys, kFile, buf, sizeof(buf), 50);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("file ended at offset 61, wanted 81"));
}

TEST(PreadFullyTest, EioIsDataLoss) {
  ScriptedSysCalls sys;
  sys.ScriptPread({Err(EIO)});
  char buf[31];
  EXPECT_EQ(PreadFully(sys, kFile, buf, sizeof(buf), 0).code(),
            absl::StatusCode::kDataLoss);
}

// ---------------------------------------------------------------------------
// Real kernel: temp files, socketpairs, TCP loopback.

std::string TempDir() {
  const char* dir = getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

class RealTransferTest : public ::testing::Test {
 protected:
  void SetUp() override { IgnoreSigpipe(); }

  UniqueFd MakeFile(const std::string& name, const std::string& contents) {
    const std::string path = absl::StrCat(TempDir(), "/", name);
    absl::StatusOr<UniqueFd> fd =
        OpenFile(sys_, path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    EXPECT_TRUE(fd.ok()) << fd.status();
    EXPECT_TRUE(
        PwriteFully(sys_, fd->get(), contents.data(), contents.size(), 0).ok());
    return std::move(*fd);
  }

  std::string ReadAll(int fd, off_t offset, size_t n) {
    std::string out(n, '\0');
    const absl::Status s = PreadFully(sys_, fd, out.data(), n, offset);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  static std::pair<UniqueFd, UniqueFd> SocketPair(bool nonblocking) {
    int fds[2];
    const int type =
        SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
    EXPECT_EQ(::socketpair(AF_UNIX, type, 0, fds), 0) << strerror(errno);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
  }

  // A connected TCP pair over 127.0.0.1 on an ephemeral port.
  std::pair<UniqueFd, UniqueFd> TcpPair() {
    UniqueFd listener(static_cast<int>(
        sys_.Socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0).rc));
    EXPECT_TRUE(listener.valid());
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_TRUE(sys_.Bind(listener.get(), reinterpret_cast<sockaddr*>(&addr),
                          sizeof(addr))
                    .ok());
    EXPECT_TRUE(sys_.Listen(listener.get(), 1).ok());
    socklen_t len = sizeof(addr);
    EXPECT_TRUE(sys_.Getsockname(listener.get(),
                                 reinterpret_cast<sockaddr*>(&addr), &len)
                    .ok());
    UniqueFd client(static_cast<int>(
        sys_.Socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0).rc));
    EXPECT_TRUE(sys_.Connect(client.get(), reinterpret_cast<sockaddr*>(&addr),
                             sizeof(addr))
                    .ok());
    UniqueFd server(static_cast<int>(
        sys_.Accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC).rc));
    EXPECT_TRUE(server.valid());
    return {std::move(client), std::move(server)};
  }

  // Sends [src_offset, +count) of `src` over `tx` with sendfile while
  // splicing it from `rx` into `dst` at `dst_offset`; returns both statuses.
  std::pair<absl::Status, absl::Status> SendFileToSplice(
      UniqueFd tx, int rx, int src, off_t src_offset, int dst, off_t dst_offset,
      size_t count) {
    absl::Status sent;
    std::thread sender([&, tx = std::move(tx)]() mutable {
      sent = SendFileFully(sys_, tx.get(), src, src_offset, count, Opts());
      tx.reset();  // The receiver must see EOF if the sender gave up.
    });
    absl::StatusOr<Pipe> pipe = Pipe::Create(sys_, 1 << 20);
    absl::Status received = pipe.status();
    if (pipe.ok()) {
      received = SpliceFully(sys_, rx, *pipe, dst, dst_offset, count, Opts());
    }
    sender.join();
    return {sent, received};
  }

  SysCalls& sys_ = DefaultSysCalls();
};

constexpr size_t k3MiB = 3 << 20;

TEST_F(RealTransferTest, SendFileToSpliceOverTcpIsByteExact) {
  const std::string data = RandomBytes(k3MiB + 4096, 1);
  UniqueFd src = MakeFile("tcp_src", data);
  UniqueFd dst = MakeFile("tcp_dst", "");
  auto [client, server] = TcpPair();

  auto [sent, received] = SendFileToSplice(
      std::move(client), server.get(), src.get(), 4096, dst.get(), 8192, k3MiB);

  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(received.ok()) << received;
  EXPECT_TRUE(ReadAll(dst.get(), 8192, k3MiB) == data.substr(4096));
}

TEST_F(RealTransferTest, SendFileToSpliceOverNonblockingSocketpair) {
  const std::string data = RandomBytes(k3MiB, 2);
  UniqueFd src = MakeFile("unix_src", data);
  UniqueFd dst = MakeFile("unix_dst", "");
  auto [a, b] = SocketPair(/*nonblocking=*/true);

  auto [sent, received] = SendFileToSplice(std::move(a), b.get(), src.get(), 0,
                                           dst.get(), 0, k3MiB);

  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(received.ok()) << received;
  EXPECT_TRUE(ReadAll(dst.get(), 0, k3MiB) == data);
}

TEST_F(RealTransferTest, CopyTransportsAreByteExact) {
  const std::string data = RandomBytes(k3MiB, 3);
  UniqueFd src = MakeFile("copy_src", data);
  UniqueFd dst = MakeFile("copy_dst", "");
  auto socks = SocketPair(/*nonblocking=*/true);
  const int a = socks.first.get();
  const int b = socks.second.get();

  absl::Status sent;
  std::thread sender([&] {
    std::vector<char> buffer(64 << 10);
    sent = CopyFileToSocket(sys_, a, src.get(), 0, k3MiB,
                            absl::MakeSpan(buffer), Opts());
  });
  std::vector<char> buffer(48 << 10);  // Deliberately not a divisor.
  const absl::Status received = CopySocketToFile(
      sys_, b, dst.get(), 100, k3MiB, absl::MakeSpan(buffer), Opts());
  sender.join();

  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(received.ok()) << received;
  EXPECT_TRUE(ReadAll(dst.get(), 100, k3MiB) == data);
}

TEST_F(RealTransferTest, SourceTruncatedUnderSenderIsDataLoss) {
  UniqueFd src = MakeFile("trunc_src", RandomBytes(1 << 20, 4));
  ASSERT_TRUE(sys_.Ftruncate(src.get(), 100 << 10).ok());
  UniqueFd dst = MakeFile("trunc_dst", "");
  auto [client, server] = TcpPair();

  auto [sent, received] = SendFileToSplice(std::move(client), server.get(),
                                           src.get(), 0, dst.get(), 0, 1 << 20);

  EXPECT_EQ(sent.code(), absl::StatusCode::kDataLoss) << sent;
  EXPECT_THAT(sent.message(),
              HasSubstr("file ended at offset 102400, expected 1048576"));
  // The sender hung up, so the receiver sees the peer close mid-transfer.
  EXPECT_EQ(received.code(), absl::StatusCode::kUnavailable) << received;
  EXPECT_THAT(received.message(),
              HasSubstr("peer closed after 102400 of 1048576 bytes"));
}

TEST_F(RealTransferTest, CopyFromTruncatedSourceIsDataLoss) {
  UniqueFd src = MakeFile("copy_trunc_src", RandomBytes(1000, 5));
  auto [a, b] = SocketPair(/*nonblocking=*/false);
  std::vector<char> buffer(4096);
  const absl::Status s = CopyFileToSocket(sys_, a.get(), src.get(), 0, 2000,
                                          absl::MakeSpan(buffer), Opts());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("file ended at offset 1000"));
}

TEST_F(RealTransferTest, PeerClosingMidCopyIsUnavailable) {
  UniqueFd dst = MakeFile("copy_peer_dst", "");
  auto [a, b] = SocketPair(/*nonblocking=*/false);
  const std::string part = RandomBytes(1000, 6);
  ASSERT_TRUE(
      SendFully(sys_, a.get(), part.data(), part.size(), 0, Opts()).ok());
  a.reset();
  std::vector<char> buffer(4096);

  const absl::Status s = CopySocketToFile(sys_, b.get(), dst.get(), 0, 1 << 20,
                                          absl::MakeSpan(buffer), Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer closed after 1000 of 1048576"));
  EXPECT_TRUE(ReadAll(dst.get(), 0, 1000) == part);
}

TEST_F(RealTransferTest, SendFileToClosedPeerIsUnavailable) {
  UniqueFd src = MakeFile("epipe_src", RandomBytes(1 << 20, 7));
  auto [a, b] = SocketPair(/*nonblocking=*/false);
  b.reset();
  const absl::Status s =
      SendFileFully(sys_, a.get(), src.get(), 0, 1 << 20, Opts());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST_F(RealTransferTest, SpliceIntoAppendOnlyFilePointsAtCopyTransport) {
  // splice(2) refuses O_APPEND targets with EINVAL, the same errno it uses for
  // descriptor pairs it cannot handle at all.
  MakeFile("append_dst", "");
  absl::StatusOr<UniqueFd> dst = OpenFile(
      sys_, absl::StrCat(TempDir(), "/append_dst"), O_WRONLY | O_APPEND);
  ASSERT_TRUE(dst.ok()) << dst.status();
  auto socks = SocketPair(/*nonblocking=*/false);
  absl::StatusOr<Pipe> pipe = Pipe::Create(sys_, 0);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  ASSERT_TRUE(SendFully(sys_, socks.first.get(), "x", 1, 0, Opts()).ok());

  const absl::Status s =
      SpliceFully(sys_, socks.second.get(), *pipe, dst->get(), 0, 1, Opts());

  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), HasSubstr("--transport=copy"));
}

TEST_F(RealTransferTest, ReadFullyDistinguishesCleanAndMidMessageClose) {
  auto [a, b] = SocketPair(/*nonblocking=*/false);
  const std::string msg = "hello";
  ASSERT_TRUE(SendFully(sys_, a.get(), msg.data(), msg.size(), 0, Opts()).ok());
  ASSERT_TRUE(SendFully(sys_, a.get(), "ab", 2, 0, Opts()).ok());
  a.reset();

  char buf[5];
  ASSERT_TRUE(ReadFully(sys_, b.get(), buf, 5, Opts()).ok());
  EXPECT_EQ(std::string(buf, 5), msg);
  EXPECT_EQ(ReadFully(sys_, b.get(), buf, 5, Opts()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReadFully(sys_, b.get(), buf, 5, Opts()).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(RealTransferTest, SilentPeerTimesOut) {
  auto [a, b] = SocketPair(/*nonblocking=*/true);
  TransferOptions opts;
  opts.io_timeout = absl::Milliseconds(20);
  char buf[4];
  const absl::Status s = ReadFully(sys_, b.get(), buf, sizeof(buf), opts);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("timed out"));
}

}  // namespace
}  // namespace sys
}  // namespace walship
