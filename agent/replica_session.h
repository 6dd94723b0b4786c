// replica_session.h: the agent's state for one subscribed replica.
//
// A session is created by a Handshake, gets its data socket when the replica
// presents the session's one-time token on the data port, and is driven by
// the replica's Session stream. It owns:
//   - the data socket and the shipper thread writing it;
//   - a bounded queue of events (checkpoints, ack pacing, errors) for the
//     Session stream;
//   - the positions the replica acknowledged, and transfer counters.
// A session that fails (socket error, source error, stream gone) stops its
// shipper, queues a SessionError for the stream, and stays readable for
// Status until a new handshake under the same name replaces it. Sessions are
// independent: a stalled replica blocks only its own shipper thread.
//
// Thread-safety: all methods are thread-safe.
#ifndef WALSHIP_AGENT_REPLICA_SESSION_H_
#define WALSHIP_AGENT_REPLICA_SESSION_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/held_segments.h"
#include "agent/replica_state.h"
#include "agent/shipper.h"
#include "common/wire/frame.h"
#include "common/clock.h"
#include "common/net/data_conn.h"
#include "common/position.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"
#include "proto/walship.pb.h"

namespace walship::agent {

// Where a session's shipping starts: the replica's position, and the CRC32C
// of its bytes [0, position.offset) as verified at handshake.
struct ShipStart {
  Position position;
  uint32_t prefix_crc32c = 0;
  // The complete segments the replica presented (held_segments.h).
  std::vector<HeldSegment> held;
  // Agreed at handshake (compression.h): kNone ships plain DATA frames.
  wire::Codec compression = wire::Codec::kNone;
  int compression_level = 0;
};

// Builds and runs the shipper for a session's data socket; `replica` is the
// session's replica name. `tls` is the socket's TLS session (common/net/
// tls_conn.h), or null for a plaintext socket.
using ShipperRunner = std::function<absl::Status(
    int data_fd, net::DataConn* tls, const std::string& replica, const ShipStart& start, ShipperEvents* events,
    const std::atomic<bool>& stop)>;

class ReplicaSession final : public ShipperEvents {
 public:
  // `sys` shuts the data socket down on failure; it must outlive the session.
  ReplicaSession(sys::SysCalls& sys, uint64_t id, std::string name, ShipStart start,
                 std::string token,
                 absl::Time token_deadline, std::string replica_transport,
                 Clock& clock = DefaultClock());
  ~ReplicaSession() override;

  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }

  // Checks `token` and, if it is right, consumes it: OK once. kUnauthenticated
  // for an expired or already used token, or a wrong one (the message never
  // echoes the token). A wrong token consumes nothing, so a forged HELLO
  // cannot take the token from the replica it was issued to.
  absl::Status ClaimToken(absl::string_view token);

  // Takes ownership of the data socket (and its TLS session, null for a
  // plaintext socket) and starts shipping on a new thread.
  void StartShipping(sys::UniqueFd data_fd, ShipperRunner runner,
                     std::unique_ptr<net::DataConn> tls = nullptr);

  // The TLS identity (CertificateFingerprint of the client certificate)
  // that performed this session's handshake; set once, before the token is
  // handed out. Empty: a plaintext control channel.
  void BindIdentity(std::string fingerprint);
  // OK when `fingerprint` (of the data socket's client certificate) is the
  // bound one; kPermissionDenied otherwise. Consumes nothing.
  absl::Status CheckIdentity(const std::string& fingerprint) const;
  // How the replica's end moves bytes, from its SessionOpen (for status).
  void SetReplicaDataPath(std::string path);

  // Next event for the Session stream. Returns false on timeout. After a
  // SessionError has been returned, the session is finished.
  bool NextEvent(walship::v1::SessionEvent* event, absl::Duration timeout);

  void OnAck(const walship::v1::Ack& ack);
  // Queues an AckPacing event telling the replica how soon to acknowledge
  // (zero: at once), unless the last one queued said the same.
  void SetAckPacing(absl::Duration min_interval);
  // Stops shipping with `status` (logged once by the caller); queues a
  // SessionError for the stream. Idempotent: the first status wins.
  void Fail(absl::Status status);
  // Stops shipping and joins the shipper thread.
  void Close();

  bool finished() const;
  // Returns once the session has finished (Fail, Close).
  void AwaitFinished() const;
  absl::Time token_deadline() const { return token_deadline_; }
  bool has_data_socket() const;

  // Fills everything but lag, which needs the catalog.
  walship::v1::ReplicaStatus Snapshot() const;
  // What replica_state.h classifies.
  ReplicaFacts Facts() const;
  Position written() const;
  Position flushed() const;

  // ShipperEvents (shipper thread).
  void OnCheckpoint(const std::string& segment, uint64_t length,
                    uint32_t crc32c) override;
  // With the patches in the Checkpoint (walship.proto).
  void OnCheckpointWithPatches(const std::string& segment, uint64_t length, uint32_t crc32c,
                               const std::vector<SegmentPatch>& patches) override;
  void OnSent(const Position& sent, uint64_t bytes, bool zerocopy) override;
  void OnCompressed(uint64_t raw, uint64_t wire) override;

 private:
  void Push(walship::v1::SessionEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  sys::SysCalls& sys_;
  Clock& clock_;

  const uint64_t id_;
  const std::string name_;
  const ShipStart start_;
  const absl::Time token_deadline_;
  const std::string replica_transport_;

  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  bool token_used_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<walship::v1::SessionEvent> events_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  Position sent_ ABSL_GUARDED_BY(mu_);
  Position written_ ABSL_GUARDED_BY(mu_);
  Position flushed_ ABSL_GUARDED_BY(mu_);
  // When flushed_ last moved (or the session began).
  absl::Time progress_at_ ABSL_GUARDED_BY(mu_);
  walship::v1::TransferCounters agent_counters_ ABSL_GUARDED_BY(mu_);
  walship::v1::TransferCounters replica_counters_ ABSL_GUARDED_BY(mu_);
  absl::Duration ack_pacing_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();  // none sent

  sys::UniqueFd data_fd_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<net::DataConn> data_tls_ ABSL_GUARDED_BY(mu_);
  std::string data_path_ ABSL_GUARDED_BY(mu_);
  std::string replica_data_path_ ABSL_GUARDED_BY(mu_);
  std::string identity_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  absl::Mutex thread_mu_;  // Start and Close may race
  std::thread shipper_thread_ ABSL_GUARDED_BY(thread_mu_);
};

// All sessions, by id and by replica name.
class SessionRegistry {
 public:
  // Sessions read the time (token deadlines, progress) from `clock`.
  // Sessions shut their data socket down through `sys`; both must outlive
  // the registry.
  explicit SessionRegistry(sys::SysCalls& sys, Clock& clock = DefaultClock())
      : sys_(sys), clock_(clock) {}

  // Creates a session with a fresh random token (32 bytes) and a random id
  // (64 bits, never 0, unique among the registry's sessions), replacing (and
  // closing) any earlier session of the same replica name. The id is no
  // secret -- it travels in HELLO headers -- but the next one cannot be
  // guessed from the last; the token is what admits a data socket.
  std::shared_ptr<ReplicaSession> Create(const std::string& name, const ShipStart& start,
                                         const std::string& replica_transport,
                                         absl::Duration token_ttl,
                                         std::string* token_out);
  std::shared_ptr<ReplicaSession> Find(uint64_t id) const;
  // The latest session of every replica name.
  std::vector<std::shared_ptr<ReplicaSession>> All() const;
  void CloseAll();

  // `observer` runs after every acknowledgement a session takes (on the
  // thread reading that replica's stream); it must be cheap and must not
  // call back into the registry's writers. Set once, before serving.
  void SetAckObserver(std::function<void()> observer);
  void NotifyAck() const;

  // How soon replicas must acknowledge new positions (zero: at once, the
  // default): applied to every session, now and when created.
  void SetAckPacing(absl::Duration min_interval);

 private:
  uint64_t NewIdLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<ReplicaSession> FindLocked(uint64_t id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::function<void()> ack_observer_;
  sys::SysCalls& sys_;
  Clock& clock_;
  mutable absl::Mutex mu_;
  // SetAckPacing calls reach sessions in order; guards no data.
  absl::Mutex pacing_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Duration ack_pacing_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<std::string, std::shared_ptr<ReplicaSession>> by_name_ ABSL_GUARDED_BY(mu_);
};

// Bounded event queue: checkpoints are one per segment, so a stream that
// stops reading is failed rather than allowed to grow without limit.
inline constexpr size_t kMaxQueuedEvents = 4096;

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_REPLICA_SESSION_H_
