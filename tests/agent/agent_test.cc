// The agent in-process: handshake validation, the data socket's token check,
// frames on the data socket, checkpoints and status on gRPC.
#include "agent/agent.h"

#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "common/sys/transfer.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/log_capture.h"
#include "tests/fakes/temp_dir.h"
#include "proto/walship.grpc.pb.h"

namespace walship::agent {
namespace {

using walship::v1::HandshakeRequest;
using walship::v1::HandshakeResponse;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    wal_ = testing::FreshTempDir("wal");
    seg1_ = std::string(5000, 'a') + std::string(5000, 'b');
    seg2_ = "second segment, still growing";
    testing::WriteFile(wal_ + "/seg-001", seg1_);
    testing::WriteFile(wal_ + "/seg-002", seg2_);
    StartAgent(wal_);
  }
  void StartAgent(const std::string& wal_dir) {
    AgentOptions o;
    o.wal_dir = wal_dir;
    o.heartbeat = absl::Milliseconds(50);
    o.max_payload = 4096;
    o.tls.insecure = true;
    agent_ = std::make_unique<Agent>(sys::DefaultSysCalls(), o);
    ASSERT_TRUE(agent_->Start().ok());
    stub_ = walship::v1::Control::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", agent_->control_port()),
        grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (agent_) agent_->Shutdown();
  }

  HandshakeRequest Request() {
    HandshakeRequest r;
    r.set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
    r.set_replica_name("r1");
    return r;
  }
  grpc::Status Handshake(const HandshakeRequest& req, HandshakeResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->Handshake(&ctx, req, resp);
  }
  // The agent's Status; empty if the call failed (which fails the test).
  walship::v1::StatusResponse AgentStatus() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    walship::v1::StatusResponse st;
    grpc::Status s = stub_->Status(&ctx, walship::v1::StatusRequest(), &st);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return st;
  }
  // Replaces the running agent with one of options `o` (on the test's WAL
  // directory, plaintext) reading the time from `clock`.
  void Restart(AgentOptions o, Clock& clock, sys::SysCalls& sys = sys::DefaultSysCalls()) {
    agent_->Shutdown();
    o.wal_dir = wal_;
    o.tls.insecure = true;
    agent_ = std::make_unique<Agent>(sys, o, clock);
    ASSERT_TRUE(agent_->Start().ok());
    stub_ = walship::v1::Control::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", agent_->control_port()), grpc::InsecureChannelCredentials()));
  }
  // A data socket that has sent the HELLO of `resp`'s session.
  sys::UniqueFd Hello(const HandshakeResponse& resp) {
    sys::UniqueFd fd = Connect();
    std::string hello =
        wire::EncodeFrame(wire::FrameType::kHello, resp.session_id(), 0, resp.data_token());
    EXPECT_EQ(write(fd.get(), hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
    return fd;
  }
  sys::UniqueFd Connect() {
    auto fd = ConnectTcp(sys::DefaultSysCalls(), HostPort{"127.0.0.1", agent_->data_port()},
                         absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    return std::move(*fd);
  }
  // Reads one frame (header + payload) from `fd`.
  absl::StatusOr<std::pair<wire::FrameHeader, std::string>> ReadFrame(int fd) {
    sys::TransferOptions io;
    io.io_timeout = absl::Seconds(10);
    uint8_t hdr[wire::kFrameHeaderSize];
    absl::Status s = sys::ReadFully(sys::DefaultSysCalls(), fd, hdr, sizeof(hdr), io);
    if (!s.ok()) return s;
    auto h = wire::DecodeFrameHeader(absl::MakeConstSpan(hdr, sizeof(hdr)),
                                     wire::kMaxPayloadLength);
    if (!h.ok()) return h.status();
    std::string payload(h->payload_length, '\0');
    s = sys::ReadFully(sys::DefaultSysCalls(), fd, payload.data(), payload.size(), io);
    if (!s.ok()) return s;
    return std::make_pair(*h, payload);
  }

  std::string wal_, seg1_, seg2_;
  // For agents started by Restart(..., clock_); real time at the start, so
  // that deadlines derived from it mean something to gRPC.
  testing::FakeClock clock_{absl::Now()};
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<walship::v1::Control::Stub> stub_;
};

TEST_F(AgentTest, HandshakeRejectsBadRequestsWithActionableCodes) {
  HandshakeResponse resp;
  HandshakeRequest r = Request();
  r.set_protocol_version(walship::v1::PROTOCOL_VERSION_UNSPECIFIED);
  EXPECT_EQ(Handshake(r, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  r = Request();
  r.set_replica_name("../evil");
  EXPECT_EQ(Handshake(r, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  r = Request();
  r.set_stream_id("append-someoneelse");
  grpc::Status s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("refusing to mix"), std::string::npos)
      << s.error_message();

  r = Request();
  r.mutable_durable()->set_segment("../x");
  EXPECT_EQ(Handshake(r, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Divergent prefix: the replica's first 100 bytes have another CRC.
  r = Request();
  r.mutable_durable()->set_segment("seg-001");
  r.mutable_durable()->set_offset(100);
  r.set_durable_prefix_crc32c(12345);
  s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("divergent"), std::string::npos) << s.error_message();

  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kDivergent);

  // More bytes of a complete segment than the source has: divergent.
  r = Request();
  r.mutable_durable()->set_segment("seg-001");
  r.mutable_durable()->set_offset(seg1_.size() + 1);
  s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kDivergent);

  // More bytes of the open segment than the source shows so far: not proof
  // of anything, the replica waits (and keeps them).
  r = Request();
  r.mutable_durable()->set_segment("seg-002");
  r.mutable_durable()->set_offset(seg2_.size() + 1);
  s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kSourceBehind);

  // A segment the source does not show yet: waits as well.
  r = Request();
  r.mutable_durable()->set_segment("seg-003");
  s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kSourceBehind);

  // Behind retention.
  r = Request();
  r.mutable_durable()->set_segment("seg-000");
  r.mutable_durable()->set_offset(10);
  s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kGap);
  EXPECT_NE(s.error_message().find("seg-000 is no longer in the WAL directory"), std::string::npos)
      << s.error_message();
  // Complete there, but nothing proves that seg-001 came right after seg-000
  // (this agent never saw it, and the names carry no sequence number): a
  // gap too, never a silent continuation.
  r.set_durable_segment_complete(true);
  s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kGap);
  EXPECT_NE(s.error_message().find("cannot prove that no segment is missing between seg-000 "
                                   "and seg-001"),
            std::string::npos)
      << s.error_message();
}

// A replica whose complete segment was removed while the agent watched: the
// agent saw what followed it, so it resumes the replica there when that is
// still here, and reports the first missing segment by name when it is not.
TEST_F(AgentTest, AResumeAfterARemovedSegmentIsProvenOrAGap) {
  HandshakeResponse resp;
  const std::string seg3(500, 'c');
  ASSERT_EQ(unlink((wal_ + "/seg-001").c_str()), 0);
  HandshakeRequest r = Request();
  r.mutable_durable()->set_segment("seg-001");
  r.mutable_durable()->set_offset(seg1_.size());
  r.set_durable_segment_complete(true);
  grpc::Status s;
  // The agent notices the removal (inotify); seg-002 followed seg-001.
  for (int i = 0; i < 200; ++i) {
    s = Handshake(r, &resp);
    if (s.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.start().segment(), "seg-002");
  EXPECT_EQ(resp.start().offset(), 0u);

  // seg-003 appears, then seg-002 goes as well: resuming after seg-001 would
  // skip seg-002.
  testing::WriteFile(wal_ + "/seg-003", seg3);
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_EQ(unlink((wal_ + "/seg-002").c_str()), 0);
  for (int i = 0; i < 200; ++i) {
    s = Handshake(r, &resp);
    if (!s.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kGap);
  EXPECT_NE(s.error_message().find("segment seg-002 (after seg-001"), std::string::npos)
      << s.error_message();
}

// An agent over a directory that shows no segment (restarted while it is
// being restored, say) cannot compare anything: the replica is told to wait,
// never that its bytes differ.
TEST_F(AgentTest, AnEmptyDirectoryIsNotReadyNotDivergent) {
  agent_->Shutdown();
  agent_.reset();
  const std::string empty = testing::FreshTempDir("agent_test_empty");
  StartAgent(empty);
  HandshakeResponse resp;
  HandshakeRequest r = Request();
  r.mutable_durable()->set_segment("seg-001");
  r.mutable_durable()->set_offset(1000);
  r.set_durable_prefix_crc32c(wire::Crc32c(seg1_.data(), 1000));
  r.set_durable_unrecorded(true);
  grpc::Status s = Handshake(r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ReasonOf(FromGrpc(s)), Reason::kNotReady);
}

TEST_F(AgentTest, ShipsFramesAfterAValidTokenAndRejectsReplays) {
  HandshakeRequest r = Request();
  r.mutable_durable()->set_segment("seg-001");
  r.mutable_durable()->set_offset(1000);
  r.set_durable_prefix_crc32c(wire::Crc32c(seg1_.data(), 1000));
  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(r, &resp).ok());
  EXPECT_EQ(resp.start().segment(), "seg-001");
  EXPECT_EQ(resp.start().offset(), 1000u);
  EXPECT_EQ(resp.data_port(), agent_->data_port());
  EXPECT_EQ(resp.source_format(), "append");

  grpc::ClientContext sctx;
  auto stream = stub_->Session(&sctx);
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(resp.session_id());
  ASSERT_TRUE(stream->Write(open));

  sys::UniqueFd fd = Connect();
  std::string hello =
      wire::EncodeFrame(wire::FrameType::kHello, resp.session_id(), 0, resp.data_token());
  ASSERT_TRUE(sys::SendFully(sys::DefaultSysCalls(), fd.get(), hello.data(), hello.size(), 0,
                             sys::TransferOptions())
                  .ok());
  auto f = ReadFrame(fd.get());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->first.type, wire::FrameType::kSegment);
  EXPECT_EQ(f->second, "seg-001");
  EXPECT_EQ(f->first.offset, 1000u);
  // DATA frames cover [1000, 10000) in payloads of at most 4096 bytes.
  std::string got;
  while (got.size() < seg1_.size() - 1000) {
    f = ReadFrame(fd.get());
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->first.type, wire::FrameType::kData);
    EXPECT_LE(f->first.payload_length, 4096u);
    EXPECT_EQ(f->first.offset, 1000 + got.size());
    got += f->second;
  }
  EXPECT_TRUE(got == seg1_.substr(1000));
  f = ReadFrame(fd.get());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->second, "seg-002");
  f = ReadFrame(fd.get());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->second, seg2_);

  // The checkpoint for seg-001 arrives on the control stream.
  walship::v1::SessionEvent ev;
  bool checkpoint = false;
  for (int i = 0; i < 50 && !checkpoint; ++i) {
    ASSERT_TRUE(stream->Read(&ev));
    if (ev.has_checkpoint()) {
      checkpoint = true;
      EXPECT_EQ(ev.checkpoint().segment(), "seg-001");
      EXPECT_EQ(ev.checkpoint().length(), seg1_.size());
      EXPECT_EQ(ev.checkpoint().crc32c(), wire::Crc32c(seg1_.data(), seg1_.size()));
    }
  }
  EXPECT_TRUE(checkpoint);

  // Ack and read it back in Status.
  walship::v1::SessionRequest ack;
  ack.mutable_ack()->mutable_flushed()->set_segment("seg-002");
  ack.mutable_ack()->mutable_flushed()->set_offset(seg2_.size());
  ASSERT_TRUE(stream->Write(ack));
  bool acked = false;
  for (int i = 0; i < 100 && !acked; ++i) {
    walship::v1::StatusResponse st = AgentStatus();
    ASSERT_EQ(st.replicas_size(), 1);
    // The shipper counts bytes after sendfile returns, which can be after
    // the reader got them: wait for both.
    acked = st.replicas(0).flushed().offset() == seg2_.size() &&
            st.replicas(0).agent_counters().bytes_zerocopy() ==
                seg1_.size() - 1000 + seg2_.size();
    if (acked) {
      EXPECT_EQ(st.replicas(0).lag_bytes(), 0u);
      EXPECT_TRUE(st.replicas(0).connected());
      EXPECT_EQ(st.replicas(0).agent_counters().bytes_zerocopy(),
                seg1_.size() - 1000 + seg2_.size());
      EXPECT_EQ(st.replicas(0).agent_counters().bytes_copy(), 0u);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(acked);

  // Replaying the same HELLO on a new connection: closed, nothing sent.
  sys::UniqueFd again = Connect();
  ASSERT_TRUE(sys::SendFully(sys::DefaultSysCalls(), again.get(), hello.data(), hello.size(),
                             0, sys::TransferOptions())
                  .ok());
  char c;
  EXPECT_EQ(read(again.get(), &c, 1), 0);  // EOF: the agent closed it
  sctx.TryCancel();
}

TEST_F(AgentTest, SessionStreamMustOpenALiveSessionAndEndsItWhenClosed) {
  // Finishes a stream whose only message is `first` (none when empty).
  auto only = [&](const walship::v1::SessionRequest* first) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub_->Session(&ctx);
    if (first != nullptr) {
      EXPECT_TRUE(stream->Write(*first));
    }
    stream->WritesDone();
    walship::v1::SessionEvent ev;
    while (stream->Read(&ev)) {
    }
    return stream->Finish();
  };
  walship::v1::SessionRequest ack;
  ack.mutable_ack()->mutable_flushed()->set_segment("seg-001");
  grpc::Status s = only(&ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("must be SessionOpen"), std::string::npos);
  s = only(nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(987654321);
  s = only(&open);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("handshake again"), std::string::npos);

  // A live session: heartbeats arrive; the replica closing its side ends the
  // session on the agent, which finishes the stream and shows it gone.
  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(Request(), &resp).ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub_->Session(&ctx);
  open.mutable_open()->set_session_id(resp.session_id());
  ASSERT_TRUE(stream->Write(open));
  walship::v1::SessionEvent ev;
  // First how soon to acknowledge (by default at once), then heartbeats.
  ASSERT_TRUE(stream->Read(&ev));
  ASSERT_TRUE(ev.has_ack_pacing());
  EXPECT_EQ(ev.ack_pacing().min_interval_ms(), 0u);
  ASSERT_TRUE(stream->Read(&ev));
  EXPECT_TRUE(ev.has_heartbeat());
  stream->WritesDone();
  while (stream->Read(&ev)) {
  }
  s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("replica closed the control stream"), std::string::npos)
      << s.error_message();
  // The session is over: its id cannot be opened again.
  s = only(&open);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

// While stalled, holds every Pread made by the control server's threads
// ("ws-control..."): a disk that stops answering a handshake's checksum.
class StalledReads : public sys::RealSysCalls {
 public:
  void Stall() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Resume() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Waits until a read is held.
  bool AwaitHeld(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto held = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&held), timeout);
  }
  sys::SysResult Pread(int fd, void* buf, size_t n, off_t off) override {
    char name[16] = {};
    prctl(PR_GET_NAME, name);
    if (absl::StartsWith(name, "ws-control")) {
      absl::MutexLock lock(&mu_);
      ++held_;
      mu_.Await(absl::Condition(&open_));
      --held_;
    }
    return RealSysCalls::Pread(fd, buf, n, off);
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
};

// One thread serves every call's messages (agent/control_server.h): a
// handshake whose checksum read hangs must not hold up another replica's
// acknowledgements, nor Status.
TEST_F(AgentTest, AHandshakeStuckOnTheDiskHoldsUpNoAcknowledgement) {
  StalledReads disk;
  Restart(AgentOptions{}, DefaultClock(), disk);
  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(Request(), &resp).ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub_->Session(&ctx);
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(resp.session_id());
  ASSERT_TRUE(stream->Write(open));

  // Replica r2 holds 100 bytes of seg-001: the agent reads them to compare.
  disk.Stall();
  HandshakeRequest held = Request();
  held.set_replica_name("r2");
  held.mutable_durable()->set_segment("seg-001");
  held.mutable_durable()->set_offset(100);
  held.set_durable_prefix_crc32c(wire::Crc32c(seg1_.data(), 100));
  grpc::Status held_status;
  std::thread stuck([&] {
    HandshakeResponse r;
    held_status = Handshake(held, &r);
  });
  ASSERT_TRUE(disk.AwaitHeld(absl::Seconds(10))) << "the handshake never read the disk";

  walship::v1::SessionRequest ack;
  ack.mutable_ack()->mutable_flushed()->set_segment("seg-001");
  ack.mutable_ack()->mutable_flushed()->set_offset(4000);
  ASSERT_TRUE(stream->Write(ack));
  // Within 5 s (a stalled server fails each Status after 1 s).
  bool acked = false;
  for (const absl::Time until = absl::Now() + absl::Seconds(5); !acked && absl::Now() < until;) {
    grpc::ClientContext sctx;
    sctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    walship::v1::StatusResponse st;
    if (stub_->Status(&sctx, walship::v1::StatusRequest(), &st).ok()) {
      for (const auto& r : st.replicas()) {
        acked = acked || (r.name() == "r1" && r.flushed().offset() == 4000u);
      }
    }
    if (!acked) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(acked) << "the acknowledgement (or Status) waited for another replica's handshake";

  disk.Resume();
  stuck.join();
  EXPECT_TRUE(held_status.ok()) << held_status.error_message();
  stream->WritesDone();
  walship::v1::SessionEvent ev;
  while (stream->Read(&ev)) {
  }
  stream->Finish();
  agent_->Shutdown();
  agent_.reset();  // before `disk`, which it reads through
}

TEST_F(AgentTest, AcknowledgementsMayTakeAStreamOfTheirOwn) {
  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(Request(), &resp).ok());
  EXPECT_TRUE(resp.ack_stream());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto events = stub_->Session(&ctx);
  walship::v1::SessionRequest open;
  open.mutable_open()->set_session_id(resp.session_id());
  ASSERT_TRUE(events->Write(open));
  walship::v1::SessionEvent ev;
  ASSERT_TRUE(events->Read(&ev));
  ASSERT_TRUE(ev.has_ack_pacing());

  grpc::ClientContext actx;
  actx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto acks = stub_->Session(&actx);
  open.mutable_open()->set_acks_only(true);
  ASSERT_TRUE(acks->Write(open));
  walship::v1::SessionRequest ack;
  ack.mutable_ack()->mutable_flushed()->set_segment("seg-001");
  ack.mutable_ack()->mutable_flushed()->set_offset(5000);
  ASSERT_TRUE(acks->Write(ack));
  bool acked = false;
  for (int i = 0; i < 100 && !acked; ++i) {
    walship::v1::StatusResponse st = AgentStatus();
    ASSERT_EQ(st.replicas_size(), 1);
    acked = st.replicas(0).flushed().segment() == "seg-001" &&
            st.replicas(0).flushed().offset() == 5000u;
    if (!acked) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(acked) << "an acknowledgement on the acknowledgements' stream was not taken";
  // Events still go out on the first stream only.
  ASSERT_TRUE(events->Read(&ev));
  EXPECT_TRUE(ev.has_heartbeat());

  // Closing the acknowledgements' stream finishes it and ends the session,
  // as closing the events' stream does.
  acks->WritesDone();
  grpc::Status s = acks->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  while (events->Read(&ev)) {
  }
  s = events->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("replica closed the control stream"), std::string::npos)
      << s.error_message();
}

TEST_F(AgentTest, GarbageAndWrongTokensAreClosed) {
  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(Request(), &resp).ok());
  {
    sys::UniqueFd fd = Connect();
    std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(100, 'z');
    ASSERT_EQ(write(fd.get(), garbage.data(), garbage.size()),
              static_cast<ssize_t>(garbage.size()));
    char c;
    EXPECT_LE(read(fd.get(), &c, 1), 0);
  }
  {
    sys::UniqueFd fd = Connect();
    std::string hello = wire::EncodeFrame(wire::FrameType::kHello, resp.session_id(), 0,
                                          std::string(32, 'w'));
    ASSERT_EQ(write(fd.get(), hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
    char c;
    EXPECT_LE(read(fd.get(), &c, 1), 0);
  }
  // The wrong attempt consumed nothing: the right token still opens the
  // data socket (its first frame is a SEGMENT), once.
  std::string hello = wire::EncodeFrame(wire::FrameType::kHello, resp.session_id(), 0,
                                        resp.data_token());
  sys::UniqueFd fd = Connect();
  ASSERT_EQ(write(fd.get(), hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
  auto frame = ReadFrame(fd.get());
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->first.type, wire::FrameType::kSegment);
  {
    sys::UniqueFd again = Connect();
    ASSERT_EQ(write(again.get(), hello.data(), hello.size()),
              static_cast<ssize_t>(hello.size()));
    char c;
    EXPECT_LE(read(again.get(), &c, 1), 0);
  }
}

TEST_F(AgentTest, ExpiredTokenIsRefusedLoggedAndCounted) {
  AgentOptions o;
  o.heartbeat = absl::Milliseconds(50);
  o.token_ttl = absl::Milliseconds(200);
  Restart(o, clock_);
  testing::LogCapture log;

  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(Request(), &resp).ok());
  EXPECT_EQ(resp.token_ttl_ms(), 200u);
  clock_.Advance(absl::Milliseconds(400));
  sys::UniqueFd fd = Hello(resp);
  char c;
  EXPECT_LE(read(fd.get(), &c, 1), 0) << "an expired token must not open the data socket";

  const std::string counted =
      "walship_agent_data_connections_rejected_total{reason=\"bad_token\"} 1";
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!absl::StrContains(agent_->metrics().Render(), counted) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(absl::StrContains(agent_->metrics().Render(), counted));
  EXPECT_TRUE(log.Logged("data port: rejected connection from", "token expired"));
}

// The agent classifies its replicas on its own clock: one behind the source
// whose durable position has not moved for --stall-timeout-ms is reported
// stalled (no_progress), and not a moment sooner.
TEST_F(AgentTest, AReplicaWithoutProgressIsStalledAfterTheStallTimeoutOnTheAgentsClock) {
  AgentOptions o;
  o.heartbeat = absl::Milliseconds(50);
  o.stall_timeout = absl::Seconds(10);
  Restart(o, clock_);
  HandshakeResponse resp;
  ASSERT_TRUE(Handshake(Request(), &resp).ok());
  sys::UniqueFd fd = Hello(resp);
  ASSERT_TRUE(ReadFrame(fd.get()).ok()) << "not shipping";
  auto no_progress = [this] {
    (void)agent_->metrics().Render();  // runs the collectors
    return agent_->metrics().Value("walship_agent_replica_stalled",
                                   {{"replica", "r1"}, {"reason", "no_progress"}});
  };
  EXPECT_EQ(no_progress(), 0);
  clock_.Advance(o.stall_timeout - absl::Milliseconds(1));
  EXPECT_EQ(no_progress(), 0);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(no_progress(), 1);
}

}  // namespace
}  // namespace walship::agent
