#include "integration/bench/raw_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/postgres/pg_client.h"
#include "agent/postgres/pg_flush_feed.h"
#include "common/net.h"
#include "common/pgwal/wal_names.h"
#include "common/sched_slice.h"
#include "common/status_macros.h"
#include "common/sys/dir_watch.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/pipe.h"
#include "common/sys/transfer.h"
#include "common/sys/unique_fd.h"
#include "integration/bench/bench_util.h"

namespace walship::bench {
namespace {

constexpr uint32_t kRelayMagic = 0x4c525357;  // "WSRL" little-endian
struct RelayHeader {
  uint32_t magic;
  uint32_t zero0;
  uint64_t lsn;
  uint32_t length;
  uint32_t zero1;
};
static_assert(sizeof(RelayHeader) == 24, "relay header is 24 bytes");

// Waits up to 100 ms for `fd` to become readable; false on timeout.
bool WaitReadable(sys::SysCalls& sys, int fd) {
  pollfd p{fd, POLLIN, 0};
  sys::SysResult r = sys.Poll(&p, 1, 100);
  return r.ok() && r.rc > 0;
}

// RelayRecvOptions::Prealloc, for a segment file just opened (a reopened one
// that is already full size is left alone).
absl::Status Prepare(sys::SysCalls& sys, int fd, RelayRecvOptions::Prealloc how,
                     uint64_t size) {
  using P = RelayRecvOptions::Prealloc;
  struct stat st;
  sys::SysResult r = sys.Fstat(fd, &st);
  if (!r.ok()) return sys::ErrnoToStatus(r.err, "fstat");
  if (how == P::kNone || static_cast<uint64_t>(st.st_size) >= size) return absl::OkStatus();
  if (how != P::kZero) {
    r = sys.Fallocate(fd, how == P::kKeepSize ? FALLOC_FL_KEEP_SIZE : 0, 0,
                      static_cast<off_t>(size));
    if (!r.ok()) return sys::ErrnoToStatus(r.err, "fallocate");
    r = sys.Fsync(fd);
    return r.ok() ? absl::OkStatus() : sys::ErrnoToStatus(r.err, "fsync");
  }
  const std::vector<char> zeros(1 << 20, 0);
  for (uint64_t off = 0; off < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), size - off));
    r = sys.Pwrite(fd, zeros.data(), n, static_cast<off_t>(off));
    if (!r.ok()) return sys::ErrnoToStatus(r.err, "zero-filling a segment");
    off += static_cast<uint64_t>(r.rc);
  }
  r = sys.Fdatasync(fd);
  return r.ok() ? absl::OkStatus() : sys::ErrnoToStatus(r.err, "fdatasync");
}

}  // namespace

absl::StatusOr<RelayRecvOptions::Prealloc> ParsePrealloc(absl::string_view name) {
  using P = RelayRecvOptions::Prealloc;
  if (name == "none") return P::kNone;
  if (name == "keep-size") return P::kKeepSize;
  if (name == "fallocate") return P::kFallocate;
  if (name == "zero") return P::kZero;
  return absl::InvalidArgumentError(
      absl::StrCat("--prealloc: \"", name, "\" is none, keep-size, fallocate or zero"));
}

absl::StatusOr<RelaySendOptions::Follow> ParseFollow(absl::string_view name) {
  if (name == "feed") return RelaySendOptions::Follow::kFeed;
  if (name == "query") return RelaySendOptions::Follow::kQuery;
  return absl::InvalidArgumentError(
      absl::StrCat("--follow: \"", name, "\" is feed or query"));
}

namespace {

// How relay-send learns the flush position (RelaySendOptions::Follow).
class FlushSource {
 public:
  virtual ~FlushSource() = default;
  // Waits up to 100 ms for news or for `also_fd`, then returns the flush
  // position as now known.
  virtual absl::StatusOr<pg::Lsn> Wait(int also_fd) = 0;
  // Every byte before `acked` is durable on the receiver.
  virtual absl::Status Report(pg::Lsn acked) = 0;
};

class FeedSource : public FlushSource {
 public:
  FeedSource(sys::SysCalls& sys, agent::PgFlushFeedOptions o) : sys_(sys), feed_(std::move(o)) {}
  absl::Status Start(uint64_t system_id, uint32_t timeline) {
    return feed_.Start(system_id, timeline);
  }
  // Like pg_receivewal, the start counts as written and flushed at once: the
  // primary lists the relay from its first status update on.
  pg::Lsn start() const { return feed_.start_lsn(); }
  absl::StatusOr<pg::Lsn> Wait(int also_fd) override {
    pollfd p[2] = {{feed_.socket(), POLLIN, 0}, {also_fd, POLLIN, 0}};
    // A failed poll (EINTR) only shortens the wait: Drain() reads what is there.
    (void)sys_.Poll(p, 2, 100);
    return feed_.Drain();
  }
  absl::Status Report(pg::Lsn acked) override { return feed_.Report(acked, acked, absl::Now()); }

 private:
  sys::SysCalls& sys_;
  agent::PgFlushFeed feed_;
};

class QuerySource : public FlushSource {
 public:
  QuerySource(std::string conninfo, sys::DirWatch watch, absl::Duration min_interval)
      : pg_(std::move(conninfo)), watch_(std::move(watch)), min_interval_(min_interval) {}
  absl::StatusOr<pg::Lsn> Ask() {
    last_query_ = absl::Now();
    WALSHIP_ASSIGN_OR_RETURN(
        agent::PgClient::Rows rows,
        pg_.QueryPrepared("relay_flush", "SELECT pg_current_wal_flush_lsn()::text"));
    if (rows.size() != 1 || rows[0].size() != 1) {
      return absl::FailedPreconditionError("unexpected answer to the flush position query");
    }
    WALSHIP_ASSIGN_OR_RETURN(flush_, pg::ParseLsn(rows[0][0]));
    return flush_;
  }
  // As walship-agent without its feed: the pause first, then the wait.
  absl::StatusOr<pg::Lsn> Wait(int also_fd) override {
    const absl::Duration since = absl::Now() - last_query_;
    if (since < min_interval_) absl::SleepFor(min_interval_ - since);
    bool written = false;
    watch_.Wait(absl::Milliseconds(100), [&](const inotify_event&) { written = true; }, also_fd);
    if (written) return Ask();
    return flush_;
  }
  absl::Status Report(pg::Lsn) override { return absl::OkStatus(); }

 private:
  agent::PgClient pg_;
  sys::DirWatch watch_;
  const absl::Duration min_interval_;
  absl::Time last_query_ = absl::InfinitePast();
  pg::Lsn flush_ = 0;
};

}  // namespace

absl::Status RunRelaySend(sys::SysCalls& sys, const RelaySendOptions& o,
                          const volatile int* stop) {
  RequestCommitPathSlice(sys, o.sched_slice, "relay-send");
  std::unique_ptr<FlushSource> source;
  pg::Lsn sent = 0;
  if (o.follow == RelaySendOptions::Follow::kFeed) {
    agent::PgFlushFeedOptions fo;
    fo.conninfo = o.conninfo;
    fo.application_name = o.application_name;
    auto feed = std::make_unique<FeedSource>(sys, fo);
    WALSHIP_RETURN_IF_ERROR(feed->Start(o.system_id, o.timeline));
    sent = feed->start();
    source = std::move(feed);
  } else {
    WALSHIP_ASSIGN_OR_RETURN(sys::DirWatch watch,
                             sys::DirWatch::Open(sys, o.wal_dir, IN_MODIFY | IN_CLOSE_WRITE));
    auto query = std::make_unique<QuerySource>(
        absl::StrCat(o.conninfo, " application_name=", o.application_name), std::move(watch),
        o.min_query_interval);
    // From the flush position at the start, as the feed's walsender starts.
    WALSHIP_ASSIGN_OR_RETURN(sent, query->Ask());
    source = std::move(query);
  }
  WALSHIP_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(o.connect));
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd sock,
                           ConnectTcp(sys, hp, absl::Seconds(10), /*nonblocking=*/true));
  WALSHIP_RETURN_IF_ERROR(SetNoDelay(sys, sock.get()));
  const sys::TransferOptions io;

  pg::Lsn acked = sent;
  uint64_t open_segno = ~uint64_t{0};
  sys::UniqueFd file;
  std::vector<char> acks(4096);
  size_t ack_bytes = 0;
  uint64_t frames = 0, bytes = 0, ack_count = 0;
  // The relay's own lag: from learning of a flush position to the
  // receiver's acknowledgement covering it (PostgreSQL's flush_lag adds the
  // walsender's side).
  std::vector<std::pair<pg::Lsn, int64_t>> learned;  // (flush position, time)
  size_t learned_acked = 0;
  std::vector<int64_t> relay_lag_ns;
  absl::Status status;
  while (!*stop && status.ok()) {
    absl::StatusOr<pg::Lsn> flush = source->Wait(sock.get());
    if (!flush.ok()) {
      status = flush.status();
      break;
    }
    if (*flush > sent) learned.emplace_back(*flush, NowNs());
    while (sent < *flush) {
      const uint64_t segno = pg::SegmentOfLsn(sent, o.segment_bytes);
      const uint64_t off = sent - pg::SegmentStartLsn(segno, o.segment_bytes);
      const uint64_t n = std::min(*flush - sent, o.segment_bytes - off);
      if (segno != open_segno) {
        const std::string path =
            absl::StrCat(o.wal_dir, "/", pg::SegmentName(o.timeline, segno, o.segment_bytes));
        WALSHIP_ASSIGN_OR_RETURN(file, sys::OpenFile(sys, path, O_RDONLY));
        open_segno = segno;
      }
      RelayHeader h{kRelayMagic, 0, sent, static_cast<uint32_t>(n), 0};
      WALSHIP_RETURN_IF_ERROR(sys::SendFully(sys, sock.get(), &h, sizeof(h), MSG_MORE, io));
      WALSHIP_RETURN_IF_ERROR(
          sys::SendFileFully(sys, sock.get(), file.get(), static_cast<off_t>(off), n, io));
      sent += n;
      bytes += n;
      ++frames;
    }
    // Acknowledgements: whatever arrived, without blocking.
    for (;;) {
      sys::SysResult r = sys.Read(sock.get(), acks.data() + ack_bytes, acks.size() - ack_bytes);
      if (r.ok() && r.rc == 0) {
        status = absl::UnavailableError("relay-recv closed the connection");
        break;
      }
      if (!r.ok()) {
        if (r.err != EAGAIN && r.err != EINTR) status = sys::ErrnoToStatus(r.err, "relay acks");
        break;
      }
      ack_bytes += static_cast<size_t>(r.rc);
      size_t used = 0;
      for (; ack_bytes - used >= sizeof(uint64_t); used += sizeof(uint64_t)) {
        uint64_t lsn;
        memcpy(&lsn, acks.data() + used, sizeof(lsn));
        acked = std::max(acked, lsn);
        ++ack_count;
      }
      memmove(acks.data(), acks.data() + used, ack_bytes - used);
      ack_bytes -= used;
    }
    for (; learned_acked < learned.size() && learned[learned_acked].first <= acked;
         ++learned_acked) {
      relay_lag_ns.push_back(NowNs() - learned[learned_acked].second);
    }
    absl::Status s = source->Report(acked);
    if (!s.ok() && status.ok()) status = s;
  }
  printf("{\"cmd\":\"relay-send\",\"ok\":%s,\"bytes\":%llu,\"frames\":%llu,\"acks\":%llu,"
         "\"acked_lsn\":%llu,\"relay_lag\":%s,%s}\n",
         status.ok() ? "true" : "false", static_cast<unsigned long long>(bytes),
         static_cast<unsigned long long>(frames), static_cast<unsigned long long>(ack_count),
         static_cast<unsigned long long>(acked), LatencyJson(std::move(relay_lag_ns)).c_str(),
         SelfStatsJson().c_str());
  return status;
}

absl::Status RunRelayRecv(sys::SysCalls& sys, const RelayRecvOptions& o,
                          const volatile int* stop) {
  RequestCommitPathSlice(sys, o.sched_slice, "relay-recv");
  WALSHIP_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(o.listen));
  uint16_t port = 0;
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd lfd, ListenTcp(sys, hp, 1, &port));
  WALSHIP_RETURN_IF_ERROR(WriteText(o.port_file, absl::StrCat("data=", hp.host, ":", port, "\n")));
  while (!*stop && !WaitReadable(sys, lfd.get())) {
  }
  if (*stop) return absl::OkStatus();
  sys::SysResult a = sys.Accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC);
  if (!a.ok()) return sys::ErrnoToStatus(a.err, "accept4");
  sys::UniqueFd sock(static_cast<int>(a.rc));
  WALSHIP_RETURN_IF_ERROR(SetNoDelay(sys, sock.get()));
  WALSHIP_ASSIGN_OR_RETURN(sys::Pipe pipe, sys::Pipe::Create(sys, o.pipe_bytes));
  sys::TransferOptions idle;
  idle.io_timeout = absl::InfiniteDuration();
  const sys::TransferOptions io;

  uint64_t open_segno = ~uint64_t{0};
  sys::UniqueFd file;
  std::vector<int64_t> sync_ns;
  uint64_t bytes = 0, frames = 0;
  while (!*stop) {
    if (!WaitReadable(sys, sock.get())) continue;
    // pg_receivewal's loop: take everything that has arrived, then one
    // fdatasync and one acknowledgement for all of it.
    pg::Lsn end = 0;
    bool closed = false;
    do {
      RelayHeader h;
      absl::Status s = sys::ReadFully(sys, sock.get(), &h, sizeof(h), idle);
      if (absl::IsOutOfRange(s)) {
        closed = true;
        break;
      }
      WALSHIP_RETURN_IF_ERROR(s);
      if (h.magic != kRelayMagic) return absl::DataLossError("bad relay frame magic");
      const uint64_t segno = pg::SegmentOfLsn(h.lsn, o.segment_bytes);
      const uint64_t off = h.lsn - pg::SegmentStartLsn(segno, o.segment_bytes);
      if (h.length == 0 || off + h.length > o.segment_bytes) {
        return absl::DataLossError("relay frame crosses a segment boundary");
      }
      if (segno != open_segno) {
        if (file.valid()) {  // the old segment's tail first
          sys::SysResult r = sys.Fdatasync(file.get());
          if (!r.ok()) return sys::ErrnoToStatus(r.err, "fdatasync");
        }
        const std::string path =
            absl::StrCat(o.dest, "/", pg::SegmentName(o.timeline, segno, o.segment_bytes));
        WALSHIP_ASSIGN_OR_RETURN(file, sys::OpenFile(sys, path, O_RDWR | O_CREAT));
        WALSHIP_RETURN_IF_ERROR(Prepare(sys, file.get(), o.prealloc, o.segment_bytes));
        WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys, o.dest));
        open_segno = segno;
      }
      WALSHIP_RETURN_IF_ERROR(sys::SpliceFully(sys, sock.get(), pipe, file.get(),
                                               static_cast<off_t>(off), h.length, io));
      end = h.lsn + h.length;
      bytes += h.length;
      ++frames;
      pollfd p{sock.get(), POLLIN, 0};
      sys::SysResult r = sys.Poll(&p, 1, 0);
      if (!r.ok() || r.rc == 0) break;
    } while (true);
    if (end != 0) {
      const int64_t t0 = NowNs();
      sys::SysResult r = sys.Fdatasync(file.get());
      if (!r.ok()) return sys::ErrnoToStatus(r.err, "fdatasync");
      sync_ns.push_back(NowNs() - t0);
      WALSHIP_RETURN_IF_ERROR(sys::SendFully(sys, sock.get(), &end, sizeof(end), 0, io));
    }
    if (closed) break;
  }
  // Errors return above: a summary means the run ended cleanly.
  printf("{\"cmd\":\"relay-recv\",\"ok\":true,\"bytes\":%llu,\"frames\":%llu,"
         "\"fdatasync\":%s,%s}\n",
         static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(frames),
         LatencyJson(std::move(sync_ns)).c_str(), SelfStatsJson().c_str());
  return absl::OkStatus();
}

}  // namespace walship::bench
