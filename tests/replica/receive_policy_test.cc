// DecideAfterFrame over a real TCP loopback connection: what is queued in
// the kernel decides, and the peek takes nothing out of the socket.

#include "replica/receive_policy.h"

#include <errno.h>
#include <sys/socket.h>

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/tcp_pair.h"

namespace walship::replica {
namespace {

constexpr uint64_t kMaxDeferred = 1u << 20;
constexpr uint32_t kMaxPayload = 16u << 20;

class ReceivePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = testing::LoopbackTcpPair(sys_);
    ASSERT_TRUE(pair.ok()) << pair.status();
    tx_ = std::move(pair->tx);
    rx_ = std::move(pair->rx);
  }

  // Sends `bytes` and waits until all of them are queued on the receiving
  // side (loopback delivers them at once; the wait only covers scheduling).
  void Send(const std::string& bytes) {
    const int64_t before = sys_.InputQueued(rx_.get()).rc;
    ASSERT_EQ(sys_.Send(tx_.get(), bytes.data(), bytes.size(), 0).rc,
              static_cast<int64_t>(bytes.size()));
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (sys_.InputQueued(rx_.get()).rc < before + static_cast<int64_t>(bytes.size())) {
      ASSERT_LT(absl::Now(), deadline) << "bytes never arrived";
      absl::SleepFor(absl::Microseconds(100));
    }
  }

  AfterFrame Decide(uint64_t deferred) {
    return DecideAfterFrame(sys_, rx_.get(), deferred, kMaxDeferred, kMaxPayload);
  }

  static std::string Data(uint64_t offset, size_t n) {
    return wire::EncodeFrame(wire::FrameType::kData, 1, offset, std::string(n, 'w'));
  }

  sys::RealSysCalls sys_;
  sys::UniqueFd tx_, rx_;
};

TEST_F(ReceivePolicyTest, AnEmptySocketSyncsNow) {
  EXPECT_EQ(Decide(8192), AfterFrame::kSyncNow);
}

TEST_F(ReceivePolicyTest, AWholeSmallDataFrameWaitingIsReadFirstAndStaysQueued) {
  const std::string next = Data(8192, 8192);
  Send(next);
  EXPECT_EQ(Decide(8192), AfterFrame::kReadOn);
  // The peek consumed nothing: the receiver reads the same frame next.
  EXPECT_EQ(sys_.InputQueued(rx_.get()).rc, static_cast<int64_t>(next.size()));
  std::string got(next.size(), '\0');
  ASSERT_EQ(sys_.Recv(rx_.get(), got.data(), got.size(), MSG_WAITALL).rc,
            static_cast<int64_t>(next.size()));
  EXPECT_EQ(got, next);
  EXPECT_EQ(Decide(8192), AfterFrame::kSyncNow);
}

TEST_F(ReceivePolicyTest, AFrameStillArrivingGoesToTheFlusher) {
  const std::string next = Data(0, 65536);
  Send(next.substr(0, wire::kFrameHeaderSize + 100));
  EXPECT_EQ(Decide(4096), AfterFrame::kHandOff);
  Send(next.substr(wire::kFrameHeaderSize + 100));
  EXPECT_EQ(Decide(4096), AfterFrame::kReadOn);
}

TEST_F(ReceivePolicyTest, PartOfAHeaderGoesToTheFlusher) {
  Send(Data(0, 10).substr(0, 12));
  EXPECT_EQ(Decide(4096), AfterFrame::kHandOff);
}

TEST_F(ReceivePolicyTest, ABacklogPastTheBoundGoesToTheFlusher) {
  Send(Data(0, 64 << 10));
  EXPECT_EQ(Decide(kMaxDeferred - (64 << 10)), AfterFrame::kReadOn);
  EXPECT_EQ(Decide(kMaxDeferred - (64 << 10) + 1), AfterFrame::kHandOff);
  // Behind a catch-up frame (1 MiB), nothing is read first.
  EXPECT_EQ(Decide(kMaxDeferred), AfterFrame::kHandOff);
}

TEST_F(ReceivePolicyTest, OnlyDataFramesAreReadFirst) {
  Send(wire::EncodeFrame(wire::FrameType::kSegment, 2, 0, "000000010000000000000002"));
  EXPECT_EQ(Decide(4096), AfterFrame::kHandOff);
}

TEST_F(ReceivePolicyTest, AHeaderThatDoesNotDecodeIsLeftForTheReceiver) {
  std::string bad = Data(0, 64);
  bad[0] ^= 0xff;  // the magic
  Send(bad);
  EXPECT_EQ(Decide(4096), AfterFrame::kHandOff);
  EXPECT_EQ(sys_.InputQueued(rx_.get()).rc, static_cast<int64_t>(bad.size()));
}

TEST_F(ReceivePolicyTest, AClosedPeerSyncsNowAndTheReadReportsIt) {
  tx_.reset();
  // Nothing queued after a FIN: sync what arrived, then read the end.
  EXPECT_EQ(Decide(4096), AfterFrame::kSyncNow);
}

// The seam's failures never defer a sync.
class FailingPeek : public sys::RealSysCalls {
 public:
  explicit FailingPeek(bool queue) : queue_(queue) {}
  sys::SysResult InputQueued(int fd) override {
    return queue_ ? sys::SysResult{-1, EBADF} : sys::SysResult{4096, 0};
  }
  sys::SysResult Recv(int, void*, size_t, int) override { return {-1, EINTR}; }

 private:
  const bool queue_;
};

TEST(ReceivePolicyFaultTest, AFailingQueueQueryOrPeekGoesToTheFlusher) {
  FailingPeek queue(true), peek(false);
  EXPECT_EQ(DecideAfterFrame(queue, 900, 0, kMaxDeferred, kMaxPayload), AfterFrame::kHandOff);
  EXPECT_EQ(DecideAfterFrame(peek, 900, 0, kMaxDeferred, kMaxPayload), AfterFrame::kHandOff);
}

// Inside TLS the next header cannot be peeked: sync now only when neither
// the socket nor the TLS layer holds anything, else hand off.
TEST_F(ReceivePolicyTest, InsideTlsSyncsOnlyWhenNothingIsWaitingAnywhere) {
  EXPECT_EQ(DecideAfterTlsFrame(sys_, rx_.get(), 0), AfterFrame::kSyncNow);
  EXPECT_EQ(DecideAfterTlsFrame(sys_, rx_.get(), 5), AfterFrame::kHandOff);
  Send("encrypted record bytes");
  EXPECT_EQ(DecideAfterTlsFrame(sys_, rx_.get(), 0), AfterFrame::kHandOff);
}

}  // namespace
}  // namespace walship::replica
