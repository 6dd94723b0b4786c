// -----------------------------------------------------------------------------
// File: integration/bench/raw_relay.h
// -----------------------------------------------------------------------------
//
// The pgbench section's physical reference: the least any "agent beside the
// primary, replica elsewhere" design must do per flush, with none of
// walship's protocol, threads, checksums, state file or gRPC.
//
//   relay-send   beside the primary. One thread. Learns the flush position
//                from a walsender (walship's own flush feed,
//                agent/postgres/pg_flush_feed.h: the WAL payload is discarded), sends
//                the newly durable bytes from pg_wal's files with
//                sendfile(2), reads the receiver's acknowledgements and
//                reports them to the walsender as written and flushed.
//                With --follow=query it has no walsender, as walship-agent
//                --pg-feed=false: PostgreSQL writing into pg_wal (inotify)
//                prompts a prepared pg_current_wal_flush_lsn() query, at
//                most one per min_query_interval (walship's 2 ms), and
//                acknowledgements are read and dropped (nothing on the
//                primary waits for them).
//   relay-recv   the receiver. One thread, pg_receivewal's loop: read
//                whatever arrived (splice(2) into the segment file at its
//                offset), fdatasync, acknowledge, repeat.
//
// The primary then lists the relay in pg_stat_replication, and PostgreSQL's
// own flush_lag times it exactly as it times pg_receivewal and walship's
// flush feed. Compared with pg_receivewal, the relay adds what the product
// cannot avoid: a second process beside the primary, a second socket, a
// second read of the WAL (from pg_wal's page cache, not from the
// walsender's message). Compared with walship, it lacks everything that
// makes walship safe to run: checksums, a durable position record, resume,
// segment publication, control channel, many replicas.
//
// Wire (host byte order; one machine): the sender's frames are a 24-byte
// header {u32 magic 'WSRL', u32 zero, u64 lsn, u32 length, u32 zero}
// followed by `length` bytes of WAL starting at `lsn`, never crossing a
// segment boundary. The receiver answers with u64 LSNs: every byte before
// one is fdatasync'ed.
//
// Segment files are created as needed (by default growing with every write,
// as walship-replica's; --prealloc prepares them otherwise) and the
// directory is fsynced when one is created. Not safe for any use
// but measurement: no resume, no validation beyond the header's magic.
#ifndef WALSHIP_INTEGRATION_BENCH_RAW_RELAY_H_
#define WALSHIP_INTEGRATION_BENCH_RAW_RELAY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/sys/syscalls.h"

namespace walship::bench {

struct RelaySendOptions {
  std::string conninfo;       // libpq conninfo of the primary
  std::string application_name = "raw-relay";
  std::string wal_dir;        // the primary's pg_wal
  std::string connect;        // HOST:PORT of relay-recv
  uint64_t system_id = 0;     // IDENTIFY_SYSTEM's, checked
  uint32_t timeline = 1;
  uint64_t segment_bytes = 16 << 20;
  enum class Follow { kFeed, kQuery };
  Follow follow = Follow::kFeed;
  absl::Duration min_query_interval = absl::Milliseconds(2);
  // The scheduler slice the one thread asks for (common/sched_slice.h), as
  // walship's threads on a commit's path do; zero: the kernel's default.
  absl::Duration sched_slice = absl::ZeroDuration();
};

struct RelayRecvOptions {
  std::string listen = "127.0.0.1:0";
  std::string port_file;      // "data=HOST:PORT\n" once listening
  std::string dest;           // must exist
  uint32_t timeline = 1;
  uint64_t segment_bytes = 16 << 20;
  uint64_t pipe_bytes = 1 << 20;
  // How a new segment file is prepared before its first byte lands:
  //   kNone       created empty; every write extends it (walship-replica's
  //               segments while it catches up);
  //   kKeepSize   fallocate(FALLOC_FL_KEEP_SIZE): blocks reserved, size
  //               still grows with every write;
  //   kFallocate  fallocate(0): full size at once, blocks reserved as
  //               unwritten extents that each write converts;
  //   kZero       every byte written as zero and fdatasync'ed, as
  //               pg_receivewal does (walship-replica's live segments are
  //               zero-filled spares, prepared in the background).
  enum class Prealloc { kNone, kKeepSize, kFallocate, kZero };
  Prealloc prealloc = Prealloc::kNone;
  // As RelaySendOptions::sched_slice.
  absl::Duration sched_slice = absl::ZeroDuration();
};

// "feed" or "query"; kInvalidArgument otherwise.
absl::StatusOr<RelaySendOptions::Follow> ParseFollow(absl::string_view name);
// "none", "keep-size", "fallocate" or "zero"; kInvalidArgument otherwise.
absl::StatusOr<RelayRecvOptions::Prealloc> ParsePrealloc(absl::string_view name);

// Both run until SIGTERM/SIGINT sets `*stop` (or the peer closes), then
// print one JSON summary line on stdout. `stop` is read between waits of at
// most 100 ms.
absl::Status RunRelaySend(sys::SysCalls& sys, const RelaySendOptions& o,
                          const volatile int* stop);
absl::Status RunRelayRecv(sys::SysCalls& sys, const RelayRecvOptions& o,
                          const volatile int* stop);

}  // namespace walship::bench

#endif  // WALSHIP_INTEGRATION_BENCH_RAW_RELAY_H_
