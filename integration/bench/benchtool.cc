// benchtool: the C++ helpers of the walship benchmark suite
// (integration/bench/README.md). Timing-critical work lives here, not in the
// Python driver: a Python writer or observer on a 2-core machine would
// measure its own interpreter.
//
//   raw-recv     the physical reference, receiving side: TCP socket ->
//                splice(2) -> pipe -> segment file, fdatasync policy as
//                walship-replica (a flusher thread syncs whatever is pending
//                after every chunk, at least every --flush-interval-us);
//                segment files NAME.partial renamed to NAME when complete.
//   raw-send     the physical reference, sending side: sendfile(2) of every
//                segment file of a directory (or --follow: tail it).
//   relay-send,  the pgbench section's physical reference: the least an
//   relay-recv   agent beside a PostgreSQL primary and a receiver do per
//                flush (raw_relay.h).
//   write        appends records of --min-record..--max-record bytes to
//                seg-%08d files at --rate bytes/s; logs "INDEX END_OFFSET
//                T_NS" per record (the position after its last byte, taken
//                after write(2) returned, or after fdatasync with --sync).
//   watch-state  logs every durable position a walship-replica acknowledges
//                (walship.progress) with the time it appeared (inotify).
//   fsync-probe  fdatasync latency of the disk under a write rate, with the
//                replica's group policy (sync whatever accumulated).
//   evict        drops a directory's files from the page cache
//                (fdatasync + POSIX_FADV_DONTNEED) and reports what stayed.
//   crc          CPU cost of checksumming a (cached) file the ways walship
//                does and could: CPU seconds per GiB of each method.
//
// Every time is CLOCK_MONOTONIC in nanoseconds, the clock of Python's
// time.monotonic(), so logs of different processes line up. Logs are kept
// in memory and written when the command ends (no I/O of ours during a
// measurement). Each command prints one JSON summary line on stdout.
//
// The raw pipeline uses walship's own transfer loops (common/sys/transfer.h):
// the same syscalls, none of walship's protocol, checksums or state file.
// Its wire format, host byte order (one machine):
//   header (24 bytes): u32 magic 'WSBR', u32 kind, u64 offset, u32 length,
//   u32 the payload's CRC32C with --verify (else zero; never checked);
//   kind 1 BEGIN (payload: segment name; offset: start offset), 2 DATA
//   (payload: `length` bytes of the current segment at `offset`), 3 END (no
//   payload: the sender is done).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_crc.h"
#include "common/flags.h"
#include "common/net.h"
#include "common/pgwal/wal_names.h"
#include "common/sched_slice.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/pipe.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/sys/unique_fd.h"
#include "common/wire/crc32c.h"
#include "integration/bench/bench_util.h"
#include "integration/bench/raw_relay.h"
#include "replica/state_store.h"

namespace walship::bench {
namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
void CatchStopSignals() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void SleepUntilNs(int64_t t) {
  timespec ts{static_cast<time_t>(t / 1000000000), static_cast<long>(t % 1000000000)};  // NOLINT
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR && !g_stop) {
  }
}

// Regular files of `dir` not starting with '.', sorted by name.
absl::StatusOr<std::vector<std::string>> ListSegments(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return sys::ErrnoToStatus(errno, absl::StrCat("opendir ", dir));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN) continue;
    names.push_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// CPU seconds (user + system) of the calling thread so far.
double ThreadCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// ---------------------------------------------------------------------------
// The raw pipeline's frames.

constexpr uint32_t kMagic = 0x52425357;  // "WSBR" little-endian
enum Kind : uint32_t { kBegin = 1, kData = 2, kEnd = 3 };
struct RawHeader {
  uint32_t magic;
  uint32_t kind;
  uint64_t offset;
  uint32_t length;
  uint32_t zero;
};
static_assert(sizeof(RawHeader) == 24, "raw header is 24 bytes");

bool ZeroCopy(const std::string& transport) { return transport != "copy"; }

// ---------------------------------------------------------------------------
// raw-send

struct SendOptions {
  std::string connect;
  std::string src;
  std::string transport = "zerocopy";
  uint64_t chunk_bytes = 1 << 20;
  bool follow = false;
  // Checksum every frame before sending it, as walship-agent does (one
  // FileCrcReader pass per frame, which also extends the segment's running
  // CRC): the sending side's share of verification.
  bool verify = false;
};

class RawSender {
 public:
  RawSender(sys::SysCalls& sys, const SendOptions& o) : sys_(sys), o_(o), crc_reader_(sys) {
    buffer_.resize(256 << 10);
  }

  absl::Status Connect() {
    WALSHIP_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(o_.connect));
    WALSHIP_ASSIGN_OR_RETURN(sock_, ConnectTcp(sys_, hp, absl::Seconds(10), true));
    WALSHIP_RETURN_IF_ERROR(SetNoDelay(sys_, sock_.get()));
    int buf = 4 << 20;  // as walship-agent's data socket
    sys::SysResult r = sys_.Setsockopt(sock_.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    if (!r.ok()) return sys::ErrnoToStatus(r.err, "setsockopt SO_SNDBUF");
    return absl::OkStatus();
  }

  absl::Status Header(Kind kind, uint64_t offset, uint32_t length, int flags,
                      uint32_t crc = 0) {
    RawHeader h{kMagic, kind, offset, length, crc};
    return sys::SendFully(sys_, sock_.get(), &h, sizeof(h), flags, io_);
  }

  absl::Status Begin(const std::string& name, uint64_t offset) {
    WALSHIP_ASSIGN_OR_RETURN(file_, sys::OpenFile(sys_, absl::StrCat(o_.src, "/", name),
                                                  O_RDONLY));
    name_ = name;
    sent_ = offset;
    segment_crc_ = 0;
    WALSHIP_RETURN_IF_ERROR(Header(kBegin, offset, name.size(), MSG_MORE));
    return sys::SendFully(sys_, sock_.get(), name.data(), name.size(), 0, io_);
  }

  // Sends [sent_, end) of the current file in chunks.
  absl::Status SendTo(uint64_t end) {
    while (sent_ < end) {
      const uint64_t n = std::min(end - sent_, o_.chunk_bytes);
      uint32_t crc = 0;
      if (o_.verify) {
        WALSHIP_ASSIGN_OR_RETURN(auto crcs, crc_reader_.Twice(file_.get(), sent_, n, name_, 0,
                                                              segment_crc_));
        crc = crcs.first;
        segment_crc_ = crcs.second;
      }
      WALSHIP_RETURN_IF_ERROR(Header(kData, sent_, static_cast<uint32_t>(n), MSG_MORE, crc));
      if (ZeroCopy(o_.transport)) {
        WALSHIP_RETURN_IF_ERROR(
            sys::SendFileFully(sys_, sock_.get(), file_.get(), sent_, n, io_));
      } else {
        WALSHIP_RETURN_IF_ERROR(sys::CopyFileToSocket(sys_, sock_.get(), file_.get(), sent_, n,
                                                      absl::MakeSpan(buffer_), io_));
      }
      sent_ += n;
      bytes_ += n;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() {
    struct stat st;
    sys::SysResult r = sys_.Fstat(file_.get(), &st);
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fstat ", name_));
    return static_cast<uint64_t>(st.st_size);
  }

  absl::Status CatchUp() {
    WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListSegments(o_.src));
    for (const std::string& n : names) {
      WALSHIP_RETURN_IF_ERROR(Begin(n, 0));
      WALSHIP_ASSIGN_OR_RETURN(uint64_t size, Size());
      WALSHIP_RETURN_IF_ERROR(SendTo(size));
      ++segments_;
    }
    return absl::OkStatus();
  }

  // Tails the directory (append format: a segment is complete once a later
  // one exists) until SIGTERM.
  absl::Status Follow() {
    sys::UniqueFd ino(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!ino.valid()) return sys::ErrnoToStatus(errno, "inotify_init1");
    if (inotify_add_watch(ino.get(), o_.src.c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0) {
      return sys::ErrnoToStatus(errno, absl::StrCat("inotify_add_watch ", o_.src));
    }
    char evbuf[64 << 10];
    while (!g_stop) {
      bool progressed = false;
      if (file_.valid()) {
        WALSHIP_ASSIGN_OR_RETURN(uint64_t size, Size());
        if (size > sent_) {
          WALSHIP_RETURN_IF_ERROR(SendTo(size));
          progressed = true;
        }
      }
      if (!progressed) {
        WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListSegments(o_.src));
        auto next = std::upper_bound(names.begin(), names.end(), name_);
        if (next != names.end()) {
          if (file_.valid()) {  // complete: a later segment exists
            WALSHIP_ASSIGN_OR_RETURN(uint64_t size, Size());
            WALSHIP_RETURN_IF_ERROR(SendTo(size));
            ++segments_;
          }
          WALSHIP_RETURN_IF_ERROR(Begin(*next, 0));
          progressed = true;
        }
      }
      if (progressed) continue;
      pollfd pfd{ino.get(), POLLIN, 0};
      poll(&pfd, 1, 100);
      while (read(ino.get(), evbuf, sizeof(evbuf)) > 0) {
      }
    }
    return absl::OkStatus();
  }

  absl::Status Run() {
    WALSHIP_RETURN_IF_ERROR(Connect());
    t0_ = NowNs();
    WALSHIP_RETURN_IF_ERROR(o_.follow ? Follow() : CatchUp());
    WALSHIP_RETURN_IF_ERROR(Header(kEnd, 0, 0, 0));
    shutdown(sock_.get(), SHUT_WR);
    // Wait until the receiver is done (it closes after its final sync).
    char b;
    pollfd pfd{sock_.get(), POLLIN, 0};
    poll(&pfd, 1, 600000);
    (void)!read(sock_.get(), &b, 1);
    printf("{\"cmd\":\"raw-send\",\"bytes\":%llu,\"segments\":%llu,\"t_start_ns\":%lld,"
           "\"t_end_ns\":%lld,%s}\n",
           static_cast<unsigned long long>(bytes_), static_cast<unsigned long long>(segments_),
           static_cast<long long>(t0_), static_cast<long long>(NowNs()),
           SelfStatsJson().c_str());
    return absl::OkStatus();
  }

 private:
  sys::SysCalls& sys_;
  const SendOptions& o_;
  FileCrcReader crc_reader_;
  uint32_t segment_crc_ = 0;
  sys::TransferOptions io_;
  sys::UniqueFd sock_, file_;
  std::string name_;
  uint64_t sent_ = 0, bytes_ = 0, segments_ = 0;
  int64_t t0_ = 0;
  std::vector<char> buffer_;
};

// ---------------------------------------------------------------------------
// raw-recv

struct RecvOptions {
  std::string listen = "127.0.0.1:0";
  std::string port_file;
  std::string dest;
  std::string transport = "zerocopy";
  std::string durable_log;
  uint64_t pipe_bytes = 1 << 20;
  int64_t flush_interval_us = 2000;
  // 0: the group policy (a flusher thread, as walship-replica); N > 0:
  // fdatasync inline in the receive loop after every N bytes.
  uint64_t sync_bytes = 0;
  // Checksum every payload byte after it lands, as walship-replica verifies
  // (one FileCrcReader pass over each frame): the cost of verification
  // with no protocol around it.
  bool verify = false;
  // Drop a published segment's pages from the page cache, as walship-replica
  // does by default (--drop-behind).
  bool drop_behind = true;
};

class RawReceiver {
 public:
  RawReceiver(sys::SysCalls& sys, const RecvOptions& o) : sys_(sys), o_(o), crc_reader_(sys) {
    buffer_.resize(256 << 10);
  }

  absl::Status Run() {
    WALSHIP_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(o_.listen));
    uint16_t port = 0;
    WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd lfd, ListenTcp(sys_, hp, 1, &port));
    WALSHIP_RETURN_IF_ERROR(WriteText(o_.port_file, absl::StrCat("data=", hp.host, ":", port, "\n")));
    int fd = accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return sys::ErrnoToStatus(errno, "accept4");
    sock_ = sys::UniqueFd(fd);
    WALSHIP_RETURN_IF_ERROR(SetNoDelay(sys_, sock_.get()));
    int buf = 4 << 20;  // as walship-replica
    sys::SysResult r = sys_.Setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    if (!r.ok()) return sys::ErrnoToStatus(r.err, "setsockopt SO_RCVBUF");
    if (ZeroCopy(o_.transport)) {
      WALSHIP_ASSIGN_OR_RETURN(sys::Pipe p, sys::Pipe::Create(sys_, o_.pipe_bytes));
      pipe_ = std::make_unique<sys::Pipe>(std::move(p));
    }
    t_accept_ = NowNs();
    std::thread flusher;
    if (o_.sync_bytes == 0) flusher = std::thread([this] { FlushLoop(); });
    absl::Status s = ReceiveLoop();
    const double recv_cpu = ThreadCpuSeconds();
    {
      absl::MutexLock l(&mu_);
      done_ = true;
      kicked_ = true;
    }
    if (flusher.joinable()) flusher.join();
    if (s.ok()) s = FinishSegment();
    const int64_t t_end = NowNs();
    std::string log;
    for (const auto& d : durable_) absl::StrAppend(&log, d.name, " ", d.offset, " ", d.t, "\n");
    WALSHIP_RETURN_IF_ERROR(WriteText(o_.durable_log, log));
    sock_.reset();
    printf("{\"cmd\":\"raw-recv\",\"ok\":%s,\"bytes\":%llu,\"segments\":%llu,"
           "\"t_accept_ns\":%lld,\"t_first_byte_ns\":%lld,\"t_end_ns\":%lld,\"fdatasync\":%s,"
           "\"receive_thread_cpu_s\":%.3f,\"flusher_thread_cpu_s\":%.3f,\"verified\":%s,"
           "\"crc32c_xor\":%u,%s}\n",
           s.ok() ? "true" : "false", static_cast<unsigned long long>(bytes_),
           static_cast<unsigned long long>(segments_), static_cast<long long>(t_accept_),
           static_cast<long long>(t_first_), static_cast<long long>(t_end),
           LatencyJson(sync_ns_).c_str(), recv_cpu, flusher_cpu_.load(),
           o_.verify ? "true" : "false", crc_sink_ ^ running_crc_, SelfStatsJson().c_str());
    return s;
  }

 private:
  struct Seg {
    std::string name;
    std::shared_ptr<sys::UniqueFd> fd;
    uint64_t written = 0;
    uint64_t synced = 0;
  };
  struct Durable {
    std::string name;
    uint64_t offset;
    int64_t t;
  };

  absl::Status ReceiveLoop() {
    sys::TransferOptions idle;
    idle.io_timeout = absl::InfiniteDuration();
    for (;;) {
      RawHeader h;
      absl::Status s = sys::ReadFully(sys_, sock_.get(), &h, sizeof(h), idle);
      if (absl::IsOutOfRange(s)) return absl::OkStatus();  // sender closed
      WALSHIP_RETURN_IF_ERROR(s);
      if (h.magic != kMagic) return absl::DataLossError("bad raw frame magic");
      if (h.kind == kEnd) return absl::OkStatus();
      if (h.kind == kBegin) {
        std::string name(h.length, '\0');
        WALSHIP_RETURN_IF_ERROR(sys::ReadFully(sys_, sock_.get(), name.data(), name.size(), io_));
        WALSHIP_RETURN_IF_ERROR(FinishSegment());
        WALSHIP_RETURN_IF_ERROR(BeginSegment(name, h.offset));
        continue;
      }
      if (h.kind != kData) return absl::DataLossError("bad raw frame kind");
      std::shared_ptr<sys::UniqueFd> fd;
      {
        absl::MutexLock l(&mu_);
        if (!cur_.fd || h.offset != cur_.written) return absl::DataLossError("raw frame gap");
        fd = cur_.fd;
      }
      if (t_first_ == 0) t_first_ = NowNs();
      if (pipe_) {
        s = sys::SpliceFully(sys_, sock_.get(), *pipe_, fd->get(), h.offset, h.length, io_);
      } else {
        s = sys::CopySocketToFile(sys_, sock_.get(), fd->get(), h.offset, h.length,
                                  absl::MakeSpan(buffer_), io_);
      }
      WALSHIP_RETURN_IF_ERROR(s);
      if (o_.verify) {
        WALSHIP_ASSIGN_OR_RETURN(auto crcs, crc_reader_.Twice(fd->get(), h.offset, h.length,
                                                              "raw segment", 0, running_crc_));
        running_crc_ = crcs.second;
        crc_sink_ ^= crcs.first;
      }
      bytes_ += h.length;
      {
        absl::MutexLock l(&mu_);
        cur_.written += h.length;
        kicked_ = true;
      }
      if (o_.sync_bytes > 0 && cur_.written - cur_.synced >= o_.sync_bytes) {
        WALSHIP_RETURN_IF_ERROR(SyncCurrent());
      }
    }
  }

  absl::Status BeginSegment(const std::string& name, uint64_t offset) {
    const std::string path = absl::StrCat(o_.dest, "/", name, ".partial");
    WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                             sys::OpenFile(sys_, path, O_RDWR | O_CREAT | O_TRUNC));
    WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, o_.dest));
    absl::MutexLock l(&mu_);
    cur_ = Seg{name, std::make_shared<sys::UniqueFd>(std::move(fd)), offset, offset};
    return absl::OkStatus();
  }

  // fdatasync of the current segment if it has unsynced bytes; records the
  // durable position. Called by the flusher or (inline policy) the receiver.
  absl::Status SyncCurrent() {
    Seg s;
    {
      absl::MutexLock l(&mu_);
      if (!cur_.fd || cur_.synced >= cur_.written) return absl::OkStatus();
      s = cur_;
    }
    const int64_t t0 = NowNs();
    sys::SysResult r = sys_.Fdatasync(s.fd->get());
    const int64_t t1 = NowNs();
    if (!r.ok()) return sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", s.name));
    absl::MutexLock l(&mu_);
    sync_ns_.push_back(t1 - t0);
    if (cur_.name == s.name && s.written > cur_.synced) {
      cur_.synced = s.written;
      durable_.push_back({s.name, s.written, t1});
    }
    return absl::OkStatus();
  }

  // Makes the current segment durable and publishes it under its name.
  absl::Status FinishSegment() {
    std::string name;
    {
      absl::MutexLock l(&mu_);
      if (!cur_.fd) return absl::OkStatus();
      name = cur_.name;
    }
    WALSHIP_RETURN_IF_ERROR(SyncCurrent());
    const std::string from = absl::StrCat(o_.dest, "/", name, ".partial");
    const std::string to = absl::StrCat(o_.dest, "/", name);
    if (rename(from.c_str(), to.c_str()) != 0) {
      return sys::ErrnoToStatus(errno, absl::StrCat("rename ", from));
    }
    WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys_, o_.dest));
    absl::MutexLock l(&mu_);
    if (o_.drop_behind) {
      posix_fadvise(cur_.fd->get(), 0, 0, POSIX_FADV_DONTNEED);
    }
    cur_ = Seg{};
    ++segments_;
    return absl::OkStatus();
  }

  void FlushLoop() {
    for (;;) {
      {
        absl::MutexLock l(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&kicked_),
                             absl::Microseconds(o_.flush_interval_us));
        kicked_ = false;
        if (done_) {
          flusher_cpu_.store(ThreadCpuSeconds());
          return;
        }
      }
      absl::Status s = SyncCurrent();
      if (!s.ok()) {
        fprintf(stderr, "raw-recv: %s\n", s.ToString().c_str());
        return;
      }
    }
  }

  sys::SysCalls& sys_;
  const RecvOptions& o_;
  FileCrcReader crc_reader_;  // receive thread only
  uint32_t running_crc_ = 0;
  uint32_t crc_sink_ = 0;     // printed, so the checksums cannot be optimized away
  sys::TransferOptions io_;
  sys::UniqueFd sock_;
  std::unique_ptr<sys::Pipe> pipe_;
  std::vector<char> buffer_;
  absl::Mutex mu_;
  Seg cur_ ABSL_GUARDED_BY(mu_);
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Durable> durable_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> sync_ns_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ = 0, segments_ = 0;
  int64_t t_accept_ = 0, t_first_ = 0;
  std::atomic<double> flusher_cpu_{0};
};

// ---------------------------------------------------------------------------
// write

struct WriteOptions {
  std::string dir;
  double rate = 0;  // bytes/s; 0 = as fast as possible
  uint64_t bytes = 0;
  double seconds = 0;
  uint64_t min_record = 8 << 10;
  uint64_t max_record = 64 << 10;
  uint64_t segment_bytes = 16 << 20;
  uint64_t first_index = 1;
  uint64_t seed = 1;
  bool sync = false;
  std::string log;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }

 private:
  uint64_t s_;
};

absl::Status RunWrite(const WriteOptions& o) {
  constexpr size_t kPool = 64 << 20;
  std::vector<char> pool(kPool + o.max_record);
  Rng rng(o.seed);
  for (size_t i = 0; i + 8 <= pool.size(); i += 8) {
    uint64_t v = rng.Next();
    memcpy(&pool[i], &v, 8);
  }
  std::vector<std::string> lines;
  std::string log;
  uint64_t index = o.first_index - 1, in_seg = o.segment_bytes, total = 0, records = 0;
  int fd = -1;
  const int64_t t0 = NowNs();
  const int64_t deadline = o.seconds > 0 ? t0 + static_cast<int64_t>(o.seconds * 1e9) : 0;
  auto finish_seg = [&]() -> absl::Status {
    if (fd < 0) return absl::OkStatus();
    if (o.sync || o.rate == 0) fdatasync(fd);
    close(fd);
    fd = -1;
    return absl::OkStatus();
  };
  while (!g_stop) {
    if (o.bytes > 0 && total >= o.bytes) break;
    if (deadline > 0 && NowNs() >= deadline) break;
    uint64_t n = rng.Between(o.min_record, o.max_record);
    if (o.bytes > 0) n = std::min(n, o.bytes - total);
    if (o.rate > 0) SleepUntilNs(t0 + static_cast<int64_t>(static_cast<double>(total) / o.rate * 1e9));
    const char* p = &pool[rng.Next() % kPool];
    uint64_t left = n;
    while (left > 0) {
      if (in_seg >= o.segment_bytes) {
        WALSHIP_RETURN_IF_ERROR(finish_seg());
        ++index;
        char name[32];
        snprintf(name, sizeof(name), "seg-%08llu", static_cast<unsigned long long>(index));
        const std::string path = absl::StrCat(o.dir, "/", name);
        fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) return sys::ErrnoToStatus(errno, absl::StrCat("open ", path));
        in_seg = 0;
      }
      const uint64_t k = std::min(left, o.segment_bytes - in_seg);
      uint64_t done = 0;
      while (done < k) {
        ssize_t w = write(fd, p + done, k - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return sys::ErrnoToStatus(errno, "write");
        done += static_cast<uint64_t>(w);
      }
      p += k;
      left -= k;
      in_seg += k;
    }
    if (o.sync) fdatasync(fd);
    total += n;
    ++records;
    if (!o.log.empty()) absl::StrAppend(&log, index, " ", in_seg, " ", NowNs(), "\n");
  }
  WALSHIP_RETURN_IF_ERROR(finish_seg());
  const int64_t t1 = NowNs();
  WALSHIP_RETURN_IF_ERROR(WriteText(o.log, log));
  printf("{\"cmd\":\"write\",\"bytes\":%llu,\"records\":%llu,\"segments\":%llu,"
         "\"t_start_ns\":%lld,\"t_end_ns\":%lld,\"rate_mb_s\":%.2f}\n",
         static_cast<unsigned long long>(total), static_cast<unsigned long long>(records),
         static_cast<unsigned long long>(index - o.first_index + 1), static_cast<long long>(t0),
         static_cast<long long>(t1), total / 1e6 / ((t1 - t0) / 1e9));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// watch-state

struct WatchOptions {
  std::string dest;
  std::string log;
  // Exit once the durable position reaches (until_segment, until_offset).
  std::string until_segment;
  uint64_t until_offset = 0;
  double timeout = 0;
};

absl::Status RunWatch(const WatchOptions& o) {
  // The replica rewrites walship.progress before every acknowledgement
  // (replica/state_store.h): its modifications time them. The file itself is
  // watched, not the directory, whose segment files change with every frame.
  sys::UniqueFd ino(inotify_init1(IN_CLOEXEC));
  if (!ino.valid()) return sys::ErrnoToStatus(errno, "inotify_init1");
  const int wd_dir = inotify_add_watch(ino.get(), o.dest.c_str(), IN_CREATE | IN_MOVED_TO);
  if (wd_dir < 0) return sys::ErrnoToStatus(errno, absl::StrCat("inotify_add_watch ", o.dest));
  const std::string path = absl::StrCat(o.dest, "/", replica::kProgressFileName);
  int wd_file = -1;
  auto watch_file = [&] {
    if (wd_file < 0) wd_file = inotify_add_watch(ino.get(), path.c_str(), IN_MODIFY);
  };
  std::string last, log;
  std::string seg;
  uint64_t off = 0;
  bool reached = false;
  int64_t t_reached = 0;
  // The file is rewritten in place (never replaced), so one descriptor
  // serves the whole run: one pread per event keeps this observer cheap, as
  // it runs beside the load whose TPS is measured.
  sys::UniqueFd progress_fd;
  auto check = [&](int64_t t) {
    if (!progress_fd.valid()) progress_fd = sys::UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!progress_fd.valid()) return;
    char b[replica::ProgressFile::kBytes];
    const ssize_t n = pread(progress_fd.get(), b, sizeof(b), 0);
    if (n <= 0) return;
    std::string text(b, strnlen(b, static_cast<size_t>(n)));
    if (text.empty() || text == last) return;
    auto st = replica::StateStore::Decode(text);
    if (!st.ok()) return;  // read mid-write; the next event rereads it
    last = text;
    seg = st->durable.segment;
    off = st->durable.offset;
    std::string complete = st->segment_complete ? "1" : "0";
    absl::StrAppend(&log, seg.empty() ? "-" : seg, " ", off, " ", complete, " ", t, "\n");
    if (!o.until_segment.empty() && !reached &&
        (seg > o.until_segment || (seg == o.until_segment && off >= o.until_offset))) {
      reached = true;
      t_reached = t;
    }
  };
  const int64_t t0 = NowNs();
  watch_file();
  check(t0);
  char evbuf[64 << 10];
  while (!g_stop && !reached) {
    if (o.timeout > 0 && NowNs() - t0 > static_cast<int64_t>(o.timeout * 1e9)) break;
    pollfd pfd{ino.get(), POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) continue;
    ssize_t n = read(ino.get(), evbuf, sizeof(evbuf));
    const int64_t t = NowNs();
    bool relevant = false;
    for (ssize_t i = 0; i < n;) {
      auto* ev = reinterpret_cast<inotify_event*>(evbuf + i);
      if (ev->wd == wd_dir && ev->len > 0 &&
          strcmp(ev->name, replica::kProgressFileName) == 0) {
        watch_file();
        relevant = true;
      } else if (ev->wd == wd_file) {
        relevant = true;
      }
      i += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
    if (relevant) check(t);
  }
  WALSHIP_RETURN_IF_ERROR(WriteText(o.log, log));
  printf("{\"cmd\":\"watch-state\",\"reached\":%s,\"t_start_ns\":%lld,\"t_reached_ns\":%lld,"
         "\"segment\":\"%s\",\"offset\":%llu}\n",
         reached ? "true" : "false", static_cast<long long>(t0),
         static_cast<long long>(t_reached), seg.c_str(), static_cast<unsigned long long>(off));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// fsync-probe

struct ProbeOptions {
  std::string dir;
  double rate = 100e6;
  double seconds = 5;
  uint64_t segment_bytes = 16 << 20;
  uint64_t max_chunk = 1 << 20;
  uint64_t min_chunk = 8 << 10;
};

absl::Status RunProbe(const ProbeOptions& o) {
  std::vector<char> buf(o.max_chunk, 'p');
  std::vector<int64_t> lat;
  uint64_t total = 0, in_seg = o.segment_bytes, index = 0;
  int fd = -1;
  const int64_t t0 = NowNs();
  const int64_t end = t0 + static_cast<int64_t>(o.seconds * 1e9);
  while (!g_stop && NowNs() < end) {
    const double due = o.rate * (NowNs() - t0) / 1e9 - static_cast<double>(total);
    if (due < static_cast<double>(o.min_chunk)) {
      SleepUntilNs(t0 + static_cast<int64_t>((total + o.min_chunk) / o.rate * 1e9));
      continue;
    }
    if (in_seg >= o.segment_bytes) {
      if (fd >= 0) close(fd);
      const std::string path = absl::StrCat(o.dir, "/probe-", ++index);
      fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return sys::ErrnoToStatus(errno, absl::StrCat("open ", path));
      in_seg = 0;
    }
    uint64_t n = std::min<uint64_t>({static_cast<uint64_t>(due), o.max_chunk,
                                     o.segment_bytes - in_seg});
    if (pwrite(fd, buf.data(), n, static_cast<off_t>(in_seg)) != static_cast<ssize_t>(n)) {
      return sys::ErrnoToStatus(errno, "pwrite");
    }
    in_seg += n;
    total += n;
    const int64_t s0 = NowNs();
    if (fdatasync(fd) != 0) return sys::ErrnoToStatus(errno, "fdatasync");
    lat.push_back(NowNs() - s0);
  }
  if (fd >= 0) close(fd);
  const int64_t t1 = NowNs();
  printf("{\"cmd\":\"fsync-probe\",\"bytes\":%llu,\"rate_mb_s\":%.2f,\"fdatasync\":%s}\n",
         static_cast<unsigned long long>(total), total / 1e6 / ((t1 - t0) / 1e9),
         LatencyJson(lat).c_str());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// warm-memory
//
// Touches every page of an anonymous mapping, then unmaps it. In a VM whose
// host takes back guest memory the guest frees (free page reporting), the
// first write to such a page costs a fault in the host: measured here at
// 2-5 CPU s/GiB, against 0.2-0.8 for a page the guest freed a moment ago.
// Whoever allocates page cache pays it, so a run right after an idle pause
// would be charged for the machine's memory policy rather than for its own
// work. Run before every catch-up run, it hands each variant recently freed
// pages alike.

absl::Status RunWarmMemory(uint64_t mib) {
  const size_t len = static_cast<size_t>(mib) << 20;
  const int64_t t0 = NowNs();
  if (len > 0) {
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return sys::ErrnoToStatus(errno, "mmap");
    volatile char* p = static_cast<char*>(m);
    const long page = sysconf(_SC_PAGESIZE);  // NOLINT
    for (size_t off = 0; off < len; off += static_cast<size_t>(page)) p[off] = 1;
    munmap(m, len);
  }
  const double secs = (NowNs() - t0) / 1e9;
  printf("{\"cmd\":\"warm-memory\",\"mib\":%llu,\"seconds\":%.3f,\"s_per_gib\":%.3f}\n",
         static_cast<unsigned long long>(mib), secs, mib > 0 ? secs / (mib / 1024.0) : 0.0);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// evict

absl::Status RunEvict(const std::string& dir) {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListSegments(dir));
  uint64_t bytes = 0, resident = 0;
  const long page = sysconf(_SC_PAGESIZE);  // NOLINT
  for (const std::string& n : names) {
    const std::string path = absl::StrCat(dir, "/", n);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sys::ErrnoToStatus(errno, absl::StrCat("open ", path));
    struct stat st;
    fstat(fd, &st);
    fdatasync(fd);  // dirty pages cannot be dropped
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    bytes += st.st_size;
    if (st.st_size > 0) {
      void* m = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        std::vector<unsigned char> vec((st.st_size + page - 1) / page);
        if (mincore(m, st.st_size, vec.data()) == 0) {
          for (unsigned char c : vec) resident += (c & 1) ? page : 0;
        }
        munmap(m, st.st_size);
      }
    }
    close(fd);
  }
  printf("{\"cmd\":\"evict\",\"files\":%zu,\"bytes\":%llu,\"resident_after\":%llu}\n",
         names.size(), static_cast<unsigned long long>(bytes),
         static_cast<unsigned long long>(resident));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// crc

// Each method checksums the whole file `passes` times; prints CPU s/GiB.
absl::Status RunCrc(sys::SysCalls& sys, const std::string& path, uint64_t frame) {
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd, sys::OpenFile(sys, path, O_RDONLY));
  struct stat st;
  fstat(fd.get(), &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::vector<char> buf(frame);
  std::string out = "{\"cmd\":\"crc\",\"bytes\":" + std::to_string(size);
  uint32_t sink = 0;
  auto measure = [&](const char* name, auto fn) -> absl::Status {
    const double c0 = ThreadCpuSeconds();
    const int64_t t0 = NowNs();
    WALSHIP_RETURN_IF_ERROR(fn());
    const double cpu = ThreadCpuSeconds() - c0;
    absl::StrAppend(&out, ",\"", name, "_cpu_s_per_gib\":", cpu / (size / double(1 << 30)),
                    ",\"", name, "_wall_s_per_gib\":",
                    (NowNs() - t0) / 1e9 / (size / double(1 << 30)));
    return absl::OkStatus();
  };
  // Checksums [off, off + n) through a mapping of the 2 MiB-aligned window
  // around it, populated for the range with MADV_POPULATE_READ; the window is
  // kept while consecutive ranges stay in it (walship's reader before it
  // switched to pread).
  WALSHIP_RETURN_IF_ERROR(measure("mmap_window_per_frame", [&]() -> absl::Status {
    constexpr uint64_t kStep = 2ull << 20;
    uint32_t c = 0;
    for (uint64_t start = 0; start < size; start += kStep) {
      const uint64_t len = std::min(kStep, size - start);
      void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd.get(), static_cast<off_t>(start));
      if (m == MAP_FAILED) return sys::ErrnoToStatus(errno, "mmap " + path);
      for (uint64_t off = 0; off < len; off += frame) {
        const size_t n = static_cast<size_t>(std::min(frame, len - off));
        auto* p = static_cast<uint8_t*>(m) + off;
#ifdef MADV_POPULATE_READ
        madvise(p, n, MADV_POPULATE_READ);
#endif
        c = wire::Crc32cExtend(c, p, n);
      }
      munmap(m, len);
    }
    sink ^= c;
    return absl::OkStatus();
  }));
  // One MAP_POPULATE mapping per 8 MiB window, whole file.
  WALSHIP_RETURN_IF_ERROR(measure("mmap_populate_whole", [&]() -> absl::Status {
    constexpr uint64_t kWindow = 8ull << 20;
    uint32_t c = 0;
    for (uint64_t start = 0; start < size; start += kWindow) {
      const uint64_t len = std::min(kWindow, size - start);
      void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd.get(),
                     static_cast<off_t>(start));
      if (m == MAP_FAILED) return sys::ErrnoToStatus(errno, "mmap " + path);
      c = wire::Crc32cExtend(c, m, static_cast<size_t>(len));
      munmap(m, len);
    }
    sink ^= c;
    return absl::OkStatus();
  }));
  // As the shipper and the replica do: one FileCrcReader pass per frame
  // (pread into its buffer, then the CRC).
  WALSHIP_RETURN_IF_ERROR(measure("reader_per_frame", [&]() -> absl::Status {
    FileCrcReader reader(sys);
    uint32_t c = 0;
    for (uint64_t off = 0; off < size; off += frame) {
      WALSHIP_ASSIGN_OR_RETURN(auto two,
                               reader.Twice(fd.get(), off, std::min(frame, size - off), path, 0, c));
      c = two.second;
    }
    sink ^= c;
    return absl::OkStatus();
  }));
  // One Crc32cOfFileRange over the whole file, as SegmentChecksums.
  WALSHIP_RETURN_IF_ERROR(measure("whole_file", [&]() -> absl::Status {
    WALSHIP_ASSIGN_OR_RETURN(uint32_t c, Crc32cOfFileRange(sys, fd.get(), 0, size, path));
    sink ^= c;
    return absl::OkStatus();
  }));
  // Pure computation on a buffer already in user memory.
  WALSHIP_RETURN_IF_ERROR(measure("compute_only", [&]() -> absl::Status {
    uint32_t c = 0;
    for (uint64_t off = 0; off < size; off += frame) {
      c = wire::Crc32cExtend(c, buf.data(), static_cast<size_t>(std::min(frame, size - off)));
    }
    sink ^= c;
    return absl::OkStatus();
  }));
  printf("%s,\"sink\":%u}\n", out.c_str(), sink);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

constexpr char kUsage[] =
    "benchtool COMMAND [flags]: helpers of the walship benchmark "
    "(integration/bench/README.md).\n"
    "Commands: raw-recv, raw-send, relay-send, relay-recv, write, watch-state,\n"
    "fsync-probe, evict, crc, warm-memory.\n"
    "benchtool COMMAND --help lists the command's flags.";

int Main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "%s\n", kUsage);
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  CatchStopSignals();
  sys::IgnoreSigpipe();
  sys::SysCalls& sys = sys::DefaultSysCalls();
  FlagSet flags(absl::StrCat("benchtool ", cmd, ": see integration/bench/benchtool.cc"));
  RecvOptions ro;
  SendOptions so;
  WriteOptions wo;
  WatchOptions wa;
  ProbeOptions po;
  RelaySendOptions rso;
  RelayRecvOptions rro;
  uint64_t timeline = 1, segment_bytes = 16 << 20;
  std::string prealloc = "none";
  std::string follow = "feed";
  std::string evict_dir;
  uint64_t warm_mib = 0;
  int64_t flush_us = ro.flush_interval_us;
  int64_t query_interval_ms = absl::ToInt64Milliseconds(rso.min_query_interval);
  int64_t slice_us = 0;
  std::string rate, seconds;
  if (cmd == "raw-recv") {
    flags.String("listen", &ro.listen, "HOST:PORT to listen on (port 0: any)");
    flags.String("port-file", &ro.port_file, "write data=HOST:PORT here once listening");
    flags.String("dest", &ro.dest, "destination directory (must exist)");
    flags.String("transport", &ro.transport, "zerocopy (splice) or copy (read/pwrite)");
    flags.String("durable-log", &ro.durable_log, "log 'SEGMENT OFFSET T_NS' per sync here");
    flags.Uint("pipe-bytes", &ro.pipe_bytes, "pipe capacity");
    flags.Int("flush-interval-us", &flush_us, "group policy: longest pause between syncs");
    flags.Uint("sync-bytes", &ro.sync_bytes,
               "0: group policy (flusher thread, as walship-replica); N: fdatasync inline "
               "every N bytes");
    flags.Bool("verify", &ro.verify, "CRC32C every payload byte after it lands, as walship");
    flags.Bool("drop-behind", &ro.drop_behind,
               "drop a published segment's pages from the page cache, as walship-replica");
  } else if (cmd == "raw-send") {
    flags.String("connect", &so.connect, "HOST:PORT of raw-recv");
    flags.String("src", &so.src, "directory of segment files");
    flags.String("transport", &so.transport, "zerocopy (sendfile) or copy (pread/send)");
    flags.Uint("chunk-bytes", &so.chunk_bytes, "largest DATA frame");
    flags.Bool("follow", &so.follow, "tail the directory until SIGTERM");
    flags.Bool("verify", &so.verify, "CRC32C every frame before sending it, as walship-agent");
  } else if (cmd == "relay-send") {
    flags.String("conninfo", &rso.conninfo, "libpq conninfo of the primary");
    flags.String("application-name", &rso.application_name, "name in pg_stat_replication");
    flags.String("wal-dir", &rso.wal_dir, "the primary's pg_wal");
    flags.String("connect", &rso.connect, "HOST:PORT of relay-recv");
    flags.Uint("system-id", &rso.system_id, "the cluster's system identifier");
    flags.Uint("timeline", &timeline, "the primary's timeline");
    flags.Uint("segment-bytes", &segment_bytes, "WAL segment size");
    flags.String("follow", &follow,
                 "learn the flush position from a walsender (feed) or by query (query)");
    flags.Int("query-interval-ms", &query_interval_ms,
              "query: the shortest pause between flush-position queries (as walship-agent's "
              "--pg-query-interval-ms)");
    flags.Int("sched-slice-us", &slice_us,
              "scheduler slice for the thread, as walship's --sched-slice-us (0: default)");
  } else if (cmd == "relay-recv") {
    flags.String("listen", &rro.listen, "HOST:PORT to listen on (port 0: any)");
    flags.String("port-file", &rro.port_file, "write data=HOST:PORT here once listening");
    flags.String("dest", &rro.dest, "destination directory (must exist)");
    flags.Uint("timeline", &timeline, "the primary's timeline");
    flags.Uint("segment-bytes", &segment_bytes, "WAL segment size");
    flags.Uint("pipe-bytes", &rro.pipe_bytes, "pipe capacity");
    flags.String("prealloc", &prealloc,
                 "new segment files: none (grow), keep-size, fallocate or zero (pg_receivewal)");
    flags.Int("sched-slice-us", &slice_us,
              "scheduler slice for the thread, as walship's --sched-slice-us (0: default)");
  } else if (cmd == "write") {
    flags.String("dir", &wo.dir, "WAL directory (must exist)");
    flags.String("rate", &rate, "bytes per second (0: unthrottled)");
    flags.Uint("bytes", &wo.bytes, "stop after this many bytes (0: no limit)");
    flags.String("seconds", &seconds, "stop after this long (0: no limit)");
    flags.Uint("min-record", &wo.min_record, "smallest record");
    flags.Uint("max-record", &wo.max_record, "largest record");
    flags.Uint("segment-bytes", &wo.segment_bytes, "segment size");
    flags.Uint("first-index", &wo.first_index, "index of the first segment file");
    flags.Uint("seed", &wo.seed, "seed of the record sizes and contents");
    flags.Bool("sync", &wo.sync, "fdatasync each record before timestamping it");
    flags.String("log", &wo.log, "log 'INDEX END_OFFSET T_NS' per record here");
  } else if (cmd == "watch-state") {
    flags.String("dest", &wa.dest, "walship-replica destination directory (must exist)");
    flags.String("log", &wa.log, "log 'SEGMENT OFFSET COMPLETE T_NS' per change here");
    flags.String("until-segment", &wa.until_segment, "exit once durable at this segment...");
    flags.Uint("until-offset", &wa.until_offset, "... and offset");
    flags.String("seconds", &seconds, "give up after this long (0: never)");
  } else if (cmd == "fsync-probe") {
    flags.String("dir", &po.dir, "directory on the disk to probe (must exist)");
    flags.String("rate", &rate, "bytes per second");
    flags.String("seconds", &seconds, "how long");
    flags.Uint("max-chunk", &po.max_chunk, "largest write between syncs");
  } else if (cmd == "evict") {
    flags.String("dir", &evict_dir, "directory whose files to drop from the page cache");
  } else if (cmd == "warm-memory") {
    flags.Uint("mib", &warm_mib, "MiB of anonymous memory to touch and free");
  } else if (cmd == "crc") {
    flags.String("file", &evict_dir, "file to checksum (read it once first to cache it)");
    flags.Uint("frame-bytes", &so.chunk_bytes, "frame size of the per-frame methods");
  } else {
    fprintf(stderr, "unknown command %s\n%s\n", cmd.c_str(), kUsage);
    return 1;
  }
  auto parsed = flags.Parse(argc, argv, 2);
  if (!parsed.ok()) {
    fprintf(stderr, "benchtool %s: %s\n", cmd.c_str(), parsed.status().ToString().c_str());
    return 1;
  }
  if (flags.help_requested()) {
    printf("%s\n", flags.Usage().c_str());
    return 0;
  }
  ro.flush_interval_us = flush_us;
  double r = 0, secs = 0;
  if (!rate.empty() && !absl::SimpleAtod(rate, &r)) r = -1;
  if (!seconds.empty() && !absl::SimpleAtod(seconds, &secs)) secs = -1;
  if (r < 0 || secs < 0) {
    fprintf(stderr, "benchtool %s: bad --rate or --seconds\n", cmd.c_str());
    return 1;
  }
  absl::Status s;
  if (cmd == "raw-recv") {
    s = RawReceiver(sys, ro).Run();
  } else if (cmd == "raw-send") {
    s = RawSender(sys, so).Run();
  } else if (cmd == "relay-send" || cmd == "relay-recv") {
    rso.sched_slice = rro.sched_slice = absl::Microseconds(slice_us);
    if (timeline == 0 || timeline > UINT32_MAX || !pg::IsValidSegmentSize(segment_bytes)) {
      s = absl::InvalidArgumentError("bad --timeline or --segment-bytes");
    } else if (absl::Status v = ValidateSchedSlice(rso.sched_slice, "sched-slice-us"); !v.ok()) {
      s = v;
    } else if (cmd == "relay-send") {
      absl::StatusOr<RelaySendOptions::Follow> f = ParseFollow(follow);
      if (!f.ok()) {
        fprintf(stderr, "benchtool relay-send: %s\n", f.status().ToString().c_str());
        return 1;
      }
      rso.follow = *f;
      rso.min_query_interval = absl::Milliseconds(std::max<int64_t>(1, query_interval_ms));
      rso.timeline = static_cast<uint32_t>(timeline);
      rso.segment_bytes = segment_bytes;
      s = RunRelaySend(sys, rso, &g_stop);
    } else if (absl::StatusOr<RelayRecvOptions::Prealloc> p = ParsePrealloc(prealloc); !p.ok()) {
      s = p.status();
    } else {
      rro.timeline = static_cast<uint32_t>(timeline);
      rro.segment_bytes = segment_bytes;
      rro.prealloc = *p;
      s = RunRelayRecv(sys, rro, &g_stop);
    }
  } else if (cmd == "write") {
    wo.rate = r;
    wo.seconds = secs;
    if (wo.min_record == 0 || wo.max_record < wo.min_record) {
      s = absl::InvalidArgumentError("need 0 < --min-record <= --max-record");
    } else {
      s = RunWrite(wo);
    }
  } else if (cmd == "watch-state") {
    wa.timeout = secs;
    s = RunWatch(wa);
  } else if (cmd == "fsync-probe") {
    if (!rate.empty()) po.rate = r;
    if (!seconds.empty()) po.seconds = secs;
    s = RunProbe(po);
  } else if (cmd == "crc") {
    s = RunCrc(sys, evict_dir, so.chunk_bytes);
  } else if (cmd == "warm-memory") {
    s = RunWarmMemory(warm_mib);
  } else {
    s = RunEvict(evict_dir);
  }
  fflush(stdout);
  if (!s.ok()) {
    fprintf(stderr, "benchtool %s: %s\n", cmd.c_str(), s.ToString().c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace walship::bench

int main(int argc, char** argv) { return walship::bench::Main(argc, argv); }
