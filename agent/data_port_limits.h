// data_port_limits.h: the bookkeeping that keeps the agent's data port open
// to replicas while strangers abuse it (DataServer, data_server.h, is the
// only user): the table of connections still sending their HELLO, the
// per-address failure limiter, and the rejection log that counts rather than
// logs one line per refused connection.
//
// None of these classes does I/O, reads a clock or locks: the caller passes
// `now` and owns the thread. DataServer uses them from its one event-loop
// thread; tests drive them with a fake time.
//
// An "address" is a peer's IP address as text ("127.0.0.2", "::1"), without
// the port: every limit here is per address. A "peer" is "ip:port", for log
// lines.
#ifndef WALSHIP_AGENT_DATA_PORT_LIMITS_H_
#define WALSHIP_AGENT_DATA_PORT_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/net/tls_conn.h"
#include "common/sys/unique_fd.h"
#include "common/wire/frame.h"

namespace walship::agent {

// One accepted connection whose HELLO is not complete yet.
struct PendingHello {
  sys::UniqueFd fd;
  std::string address;  // the peer's IP address: the key of every per-address limit
  std::string peer;     // "ip:port", for log lines
  absl::Time accepted;
  absl::Time deadline;  // the whole HELLO must be in by then
  // The HELLO's bytes so far: `have` of them; `header` is set once the first
  // kFrameHeaderSize bytes decoded (then the frame is kFrameHeaderSize +
  // header->payload_length bytes long).
  size_t have = 0;
  std::optional<wire::FrameHeader> header;
  // With TLS on the data socket: the session (its handshake done once
  // `tls_ready`; `want_write` while it waits for the socket to take bytes),
  // and the client certificate's fingerprint.
  std::unique_ptr<net::TlsConn> tls;
  bool tls_ready = false;
  bool want_write = false;
  std::string fingerprint;
  // The rejection's metric label when the TLS layer decided it.
  const char* refusal = nullptr;
  uint8_t bytes[wire::kFrameHeaderSize + wire::kMaxHelloPayloadLength] = {};
};

// PendingTable
//
// At most `max_total` connections waiting for their HELLO, at most
// `max_per_address` of them from one address. When the table is full, a new
// connection takes the slot of the one accepted earliest: a replica sends its
// HELLO within milliseconds of connecting, so it is never the oldest entry
// for long, and strangers that hold connections open without finishing a
// HELLO cannot keep it out (they can only push each other out). Entries are
// keyed by a number that grows with every Add, so key order is accept order.
//
// Example:
//   PendingTable table(64, 8);
//   if (table.AddressFull(p.address)) { ...refuse p: too_many_pending... }
//   std::optional<PendingHello> evicted;
//   uint64_t key = table.Add(std::move(p), &evicted);
//   if (evicted) { ...refuse *evicted: evicted... }
class PendingTable {
 public:
  // Both limits are at least 1.
  PendingTable(int max_total, int max_per_address);

  // True when `address` already has max_per_address entries.
  bool AddressFull(const std::string& address) const;
  // Adds `hello` (precondition: !AddressFull(hello.address)) and returns its
  // key. If the table was full, the entry accepted earliest is removed first
  // and returned in *evicted; otherwise *evicted is reset.
  uint64_t Add(PendingHello hello, std::optional<PendingHello>* evicted);
  // The entry under `key`, or nullptr. Valid until the next Add/Take.
  PendingHello* Find(uint64_t key);
  // Removes and returns the entry under `key` (precondition: present).
  PendingHello Take(uint64_t key);
  // Removes and returns, in accept order, every entry whose deadline is at
  // or before `now`.
  std::vector<PendingHello> TakeExpired(absl::Time now);
  // The earliest deadline; InfiniteFuture when empty.
  absl::Time NextDeadline() const;
  // Removes and returns every entry (shutdown).
  std::vector<PendingHello> TakeAll();

  size_t size() const { return entries_.size(); }
  int CountFrom(const std::string& address) const;
  // Keys in accept order.
  std::vector<uint64_t> Keys() const;

 private:
  void Forget(const PendingHello& hello);

  const size_t max_total_;
  const int max_per_address_;
  uint64_t next_key_ = 1;
  std::map<uint64_t, PendingHello> entries_;
  absl::flat_hash_map<std::string, int> per_address_;
};

// FailureLimiter
//
// Counts failed connections per address and, past a burst, refuses the
// address for a while. Each address has a failure debt: +1 per failure,
// forgiven at one per `forgive_every` (but not while it is blocked). A
// failure that brings the debt above `burst` blocks the address for a
// backoff that starts at `first_backoff` and doubles with each further
// block, up to `max_backoff`, and leaves the debt at `burst`: one more
// failure right after the block blocks it again, for twice as long. Failures
// during a block add to the debt but do not extend the block. An address
// whose debt has been forgiven to zero and that is not blocked is forgotten
// (its backoff starts over). So with the defaults an address may fail about
// once a second forever, or 10 times in a burst, before it is refused; a
// steady stream of failures is refused nearly all the time.
//
// At most `max_addresses` are tracked: past that, forgotten ones are dropped
// first, then the one whose block ends soonest (an attacker with more
// addresses than that can dilute the limiter; the pending table's bounds and
// eviction still keep replicas' connections going).
struct FailureLimiterOptions {
  double burst = 10;
  absl::Duration forgive_every = absl::Seconds(1);
  absl::Duration first_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  size_t max_addresses = 4096;
};

class FailureLimiter {
 public:
  explicit FailureLimiter(FailureLimiterOptions options);

  // Records one failed connection from `address`. Returns how long the
  // address is now blocked for if this failure blocked it, else zero.
  absl::Duration RecordFailure(const std::string& address, absl::Time now);
  // True while `address` is blocked; then *until (if not null) is when the
  // block ends.
  bool Blocked(const std::string& address, absl::Time now, absl::Time* until = nullptr) const;
  // Addresses tracked (blocked or with failure debt).
  size_t tracked() const { return entries_.size(); }

 private:
  struct Entry {
    double debt = 0;          // failures not yet forgiven, as of `updated`
    absl::Time updated;
    absl::Time blocked_until = absl::InfinitePast();
    absl::Duration next_backoff;
  };
  double DebtAt(const Entry& e, absl::Time now) const;
  bool Forgettable(const Entry& e, absl::Time now) const;
  void MakeRoom(absl::Time now);

  const FailureLimiterOptions options_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

// RejectLog
//
// Decides which rejected connections get a log line of their own. Every
// rejection is passed to Record (the caller counts it in its metric as
// well). Per address, an interval of `interval` starts at its first
// rejection; within it, the first rejection of each reason is logged in full
// ("data port: rejected connection from PEER: DETAIL"), as long as fewer
// than `max_full_lines` full lines were logged in the current interval over
// all addresses; the others are only counted. When an address's interval
// ends with rejections that were not logged in full, Flush logs one summary
// line for it:
//
//   data port: rejected 1234 connections from 127.0.0.2 in 10s (bad_token
//   1200, timeout 34); 1232 of them not logged one by one
//
// So one address costs at most one line per reason plus one per interval,
// however fast it is refused. At most `max_addresses` are tracked at once;
// rejections from further addresses are summarized together as "other
// addresses".
struct RejectLogOptions {
  absl::Duration interval = absl::Seconds(10);
  int max_full_lines = 50;
  size_t max_addresses = 1024;
};

class RejectLog {
 public:
  // Receives each line to log (a warning). DataServer passes spdlog.
  using Sink = std::function<void(const std::string& line)>;
  RejectLog(RejectLogOptions options, Sink sink);

  void Record(const std::string& address, const std::string& peer, absl::string_view reason,
              absl::string_view detail, absl::Time now);
  // Logs the summary of every address whose interval has ended by `now`.
  void Flush(absl::Time now);
  // Logs every summary still open (shutdown).
  void FlushAll();

 private:
  struct Interval {
    absl::Time start;
    uint64_t total = 0;
    uint64_t logged = 0;
    std::map<std::string, uint64_t> by_reason;
  };
  void Summarize(const std::string& address, const Interval& interval);

  const RejectLogOptions options_;
  const Sink sink_;
  std::map<std::string, Interval> open_;  // by address
  absl::Time next_due_ = absl::InfiniteFuture();  // the earliest open interval's end
  absl::Time lines_window_start_ = absl::InfinitePast();
  int lines_in_window_ = 0;
};

// The address under which RejectLog groups rejections past max_addresses.
inline constexpr absl::string_view kOtherAddresses = "other addresses";

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_DATA_PORT_LIMITS_H_
