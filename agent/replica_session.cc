#include "agent/replica_session.h"

#include <sys/random.h>
#include <sys/socket.h>

#include <cstring>
#include <utility>

#include "agent/compression.h"
#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "spdlog/spdlog.h"
#include "common/sys/thread_name.h"

namespace walship::agent {
namespace {

void ToProto(const Position& p, walship::v1::Position* out) {
  out->set_segment(p.segment);
  out->set_offset(p.offset);
}

Position FromProto(const walship::v1::Position& p) {
  return Position{p.segment(), p.offset()};
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

// `n` bytes from the kernel's random source (getrandom blocks only until
// the pool is first initialized, at boot).
std::string RandomBytes(size_t n) {
  std::string t(n, '\0');
  size_t got = 0;
  while (got < t.size()) {
    ssize_t r = getrandom(&t[got], t.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return t;
}

std::string RandomToken() { return RandomBytes(32); }

uint64_t RandomId() {
  const std::string b = RandomBytes(sizeof(uint64_t));
  uint64_t id;
  std::memcpy(&id, b.data(), sizeof(id));
  return id;
}

}  // namespace

ReplicaSession::ReplicaSession(sys::SysCalls& sys, uint64_t id, std::string name,
                               ShipStart start, std::string token, absl::Time token_deadline,
                               std::string replica_transport, Clock& clock)
    : sys_(sys),
      clock_(clock),
      id_(id),
      name_(std::move(name)),
      start_(std::move(start)),
      token_deadline_(token_deadline),
      replica_transport_(std::move(replica_transport)),
      token_(std::move(token)) {
  sent_ = start_.position;
  written_ = start_.position;
  flushed_ = start_.position;
  progress_at_ = clock_.Now();
}

ReplicaSession::~ReplicaSession() { Close(); }

absl::Status ReplicaSession::ClaimToken(absl::string_view token) {
  absl::MutexLock lock(&mu_);
  if (finished_) return absl::UnauthenticatedError("session has ended");
  if (token_used_) return absl::UnauthenticatedError("token already used (replayed)");
  if (clock_.Now() > token_deadline_) return absl::UnauthenticatedError("token expired");
  // A wrong token consumes nothing: otherwise anyone who reaches the data
  // port could end a replica's session with a forged HELLO. Guessing is
  // hopeless anyway (256 random bits, and the data port rate-limits
  // addresses that fail).
  if (!ConstantTimeEquals(token, token_)) return absl::UnauthenticatedError("wrong token");
  token_used_ = true;
  token_.clear();
  return absl::OkStatus();
}

void ReplicaSession::StartShipping(sys::UniqueFd data_fd, ShipperRunner runner,
                                   std::unique_ptr<net::DataConn> tls) {
  int fd;
  net::DataConn* conn;
  {
    absl::MutexLock lock(&mu_);
    data_fd_ = std::move(data_fd);
    data_tls_ = std::move(tls);
    data_path_ = net::DataPathName(data_tls_ ? data_tls_->path() : net::DataPath::kPlain);
    fd = data_fd_.get();
    conn = data_tls_.get();
    if (finished_) return;
  }
  absl::MutexLock tl(&thread_mu_);
  shipper_thread_ = std::thread([this, fd, conn, runner = std::move(runner)] {
    NameThisThread(absl::StrCat("ws-ship-", name_));
    absl::Status s = runner(fd, conn, name_, start_, this, stop_);
    if (!s.ok() && !stop_.load()) {
      spdlog::error("replica {} (session {}): shipping stopped: {}", name_, id_,
                    s.ToString());
      Fail(s);
    }
  });
}

void ReplicaSession::BindIdentity(std::string fingerprint) {
  absl::MutexLock lock(&mu_);
  identity_ = std::move(fingerprint);
}

absl::Status ReplicaSession::CheckIdentity(const std::string& fingerprint) const {
  absl::MutexLock lock(&mu_);
  if (!identity_.empty() && fingerprint == identity_) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "the data socket's client certificate (", fingerprint.empty() ? "none" : fingerprint,
      ") is not the one that obtained the token at handshake (",
      identity_.empty() ? "none" : identity_, "): a token is valid only from its replica"));
}

void ReplicaSession::SetReplicaDataPath(std::string path) {
  absl::MutexLock lock(&mu_);
  replica_data_path_ = std::move(path);
}

void ReplicaSession::Push(walship::v1::SessionEvent event) {
  if (events_.size() >= kMaxQueuedEvents) {
    if (failure_.ok()) {
      failure_ = absl::ResourceExhaustedError(
          "control stream is not being read: event queue full");
    }
    return;
  }
  events_.push_back(std::move(event));
}

bool ReplicaSession::NextEvent(walship::v1::SessionEvent* event,
                               absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !events_.empty() || finished_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (!events_.empty()) {
    *event = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  if (finished_) {
    event->mutable_error()->set_code(static_cast<int>(failure_.code()));
    event->mutable_error()->set_message(std::string(failure_.message()));
    event->mutable_error()->set_reason(static_cast<walship::v1::Reason>(ReasonOf(failure_)));
    return true;
  }
  return false;
}

void ReplicaSession::OnAck(const walship::v1::Ack& ack) {
  const Position f = FromProto(ack.flushed());
  bool advanced = false;
  {
    absl::MutexLock lock(&mu_);
    Position w = FromProto(ack.written());
    if (written_ < w) written_ = w;
    if (flushed_ < f) {
      flushed_ = f;
      progress_at_ = clock_.Now();
      advanced = true;
    }
    replica_counters_ = ack.counters();
  }
  // The acknowledgement log (debug level): one line per new durable
  // position, what a fault campaign checks the replica's disk against.
  // Formatted only when logged: this runs once per synchronous commit.
  if (advanced && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("ack: replica {} flushed {}", name_, f.ToString());
  }
}

void ReplicaSession::SetAckPacing(absl::Duration min_interval) {
  absl::MutexLock lock(&mu_);
  if (finished_ || min_interval == ack_pacing_) return;
  ack_pacing_ = min_interval;
  walship::v1::SessionEvent ev;
  ev.mutable_ack_pacing()->set_min_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(min_interval)));
  Push(std::move(ev));
}

void ReplicaSession::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    if (failure_.ok()) failure_ = std::move(status);
    // Ignored on purpose: it only wakes the shipper; ENOTCONN (the peer went
    // first) leaves nothing to wake.
    if (data_fd_.valid()) (void)sys_.Shutdown(data_fd_.get(), SHUT_RDWR);
  }
  stop_.store(true);
}

void ReplicaSession::Close() {
  Fail(absl::CancelledError("session closed"));
  absl::MutexLock tl(&thread_mu_);
  if (shipper_thread_.joinable()) shipper_thread_.join();
}

bool ReplicaSession::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

void ReplicaSession::AwaitFinished() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&finished_));
}

bool ReplicaSession::has_data_socket() const {
  absl::MutexLock lock(&mu_);
  return data_fd_.valid();
}

ReplicaFacts ReplicaSession::Facts() const {
  absl::MutexLock lock(&mu_);
  return ReplicaFacts{finished_, data_fd_.valid(), failure_, flushed_, progress_at_};
}

walship::v1::ReplicaStatus ReplicaSession::Snapshot() const {
  absl::MutexLock lock(&mu_);
  walship::v1::ReplicaStatus s;
  s.set_name(name_);
  s.set_session_id(id_);
  s.set_connected(!finished_ && data_fd_.valid());
  s.set_transport(replica_transport_);
  s.set_compression(CompressionLabel(start_.compression, start_.compression_level));
  s.set_data_path(data_path_);
  s.set_replica_data_path(replica_data_path_);
  ToProto(sent_, s.mutable_sent());
  ToProto(written_, s.mutable_written());
  ToProto(flushed_, s.mutable_flushed());
  *s.mutable_agent_counters() = agent_counters_;
  *s.mutable_replica_counters() = replica_counters_;
  if (!failure_.ok()) s.set_last_error(failure_.ToString());
  return s;
}

Position ReplicaSession::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

Position ReplicaSession::flushed() const {
  absl::MutexLock lock(&mu_);
  return flushed_;
}

void ReplicaSession::OnCheckpoint(const std::string& segment, uint64_t length,
                                  uint32_t crc32c) {
  walship::v1::SessionEvent e;
  e.mutable_checkpoint()->set_segment(segment);
  e.mutable_checkpoint()->set_length(length);
  e.mutable_checkpoint()->set_crc32c(crc32c);
  absl::MutexLock lock(&mu_);
  Push(std::move(e));
}

void ReplicaSession::OnCheckpointWithPatches(const std::string& segment, uint64_t length,
                                             uint32_t crc32c,
                                             const std::vector<SegmentPatch>& patches) {
  walship::v1::SessionEvent e;
  e.mutable_checkpoint()->set_segment(segment);
  e.mutable_checkpoint()->set_length(length);
  e.mutable_checkpoint()->set_crc32c(crc32c);
  for (const SegmentPatch& p : patches) {
    walship::v1::SegmentPatch* out = e.mutable_checkpoint()->add_patches();
    out->set_offset(p.offset);
    out->set_bytes(p.bytes);
  }
  absl::MutexLock lock(&mu_);
  Push(std::move(e));
}

void ReplicaSession::OnSent(const Position& sent, uint64_t bytes, bool zerocopy) {
  absl::MutexLock lock(&mu_);
  sent_ = sent;
  if (zerocopy) {
    agent_counters_.set_bytes_zerocopy(agent_counters_.bytes_zerocopy() + bytes);
  } else {
    agent_counters_.set_bytes_copy(agent_counters_.bytes_copy() + bytes);
  }
}

void ReplicaSession::OnCompressed(uint64_t raw, uint64_t wire) {
  absl::MutexLock lock(&mu_);
  agent_counters_.set_bytes_compressed_raw(agent_counters_.bytes_compressed_raw() + raw);
  agent_counters_.set_bytes_compressed_wire(agent_counters_.bytes_compressed_wire() + wire);
}

std::shared_ptr<ReplicaSession> SessionRegistry::Create(
    const std::string& name, const ShipStart& start,
    const std::string& replica_transport, absl::Duration token_ttl,
    std::string* token_out) {
  std::shared_ptr<ReplicaSession> old;
  std::shared_ptr<ReplicaSession> s;
  {
    absl::MutexLock lock(&mu_);
    *token_out = RandomToken();
    s = std::make_shared<ReplicaSession>(sys_, NewIdLocked(), name, start, *token_out,
                                         clock_.Now() + token_ttl, replica_transport, clock_);
    auto it = by_name_.find(name);
    if (it != by_name_.end()) old = it->second;
    by_name_[name] = s;
    // The first event of every session: an agent that never sends one
    // leaves the replica acknowledging at once.
    s->SetAckPacing(ack_pacing_);
  }
  if (old) {
    old->Fail(absl::AbortedError("replaced by a new session of the same replica"));
    old->Close();
  }
  return s;
}

uint64_t SessionRegistry::NewIdLocked() const {
  for (;;) {
    const uint64_t id = RandomId();
    if (id != 0 && FindLocked(id) == nullptr) return id;
  }
}

std::shared_ptr<ReplicaSession> SessionRegistry::FindLocked(uint64_t id) const {
  for (const auto& [name, s] : by_name_) {
    if (s->id() == id) return s;
  }
  return nullptr;
}

std::shared_ptr<ReplicaSession> SessionRegistry::Find(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return FindLocked(id);
}

std::vector<std::shared_ptr<ReplicaSession>> SessionRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ReplicaSession>> out;
  for (const auto& [name, s] : by_name_) out.push_back(s);
  return out;
}

void SessionRegistry::CloseAll() {
  for (auto& s : All()) s->Close();
}

void SessionRegistry::SetAckObserver(std::function<void()> observer) {
  ack_observer_ = std::move(observer);
}

void SessionRegistry::SetAckPacing(absl::Duration min_interval) {
  absl::MutexLock order(&pacing_mu_);
  std::vector<std::shared_ptr<ReplicaSession>> all;
  {
    absl::MutexLock lock(&mu_);
    ack_pacing_ = min_interval;
    for (const auto& [name, s] : by_name_) all.push_back(s);
  }
  for (auto& s : all) s->SetAckPacing(min_interval);
}

void SessionRegistry::NotifyAck() const {
  if (ack_observer_) ack_observer_();
}

}  // namespace walship::agent
