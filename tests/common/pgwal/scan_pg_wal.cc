// Test tool: prints where valid WAL ends in a pg_wal directory, by
// walship::pg::ScanWal, for real_wal_test.sh.
//
//   scan_pg_wal --dir=PG_WAL --timeline=1 --segment-size=1048576
//               --system-id=ID --start=0/100028 [--limit=LSN]
//
// Prints one line:
//   end=<LSN> last_record=<LSN> last_record_end=<LSN> records=<N>
//   stop=<name> stop_lsn=<LSN> reason=<text>
// and exits 0, or prints the error and exits 1.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/pgwal/wal_scan.h"
#include "common/sys/syscalls.h"

namespace {

using namespace walship::pg;  // NOLINT: a test tool

struct Options {
  std::string dir;
  uint64_t timeline = 1;
  uint64_t segment_size = uint64_t{16} << 20;
  uint64_t block_size = 8192;
  uint64_t system_id = 0;
  std::string start;
  std::string limit;

  absl::Status Validate() const {
    if (dir.empty()) return absl::InvalidArgumentError("--dir is required");
    if (start.empty()) return absl::InvalidArgumentError("--start is required");
    if (timeline == 0 || timeline > UINT32_MAX) {
      return absl::InvalidArgumentError("--timeline out of range");
    }
    return absl::OkStatus();
  }
};

absl::Status Run(const Options& opts) {
  absl::Status valid = opts.Validate();
  if (!valid.ok()) return valid;
  absl::StatusOr<Lsn> start = ParseLsn(opts.start);
  if (!start.ok()) return start.status();
  Lsn limit = UINT64_MAX;
  if (!opts.limit.empty()) {
    absl::StatusOr<Lsn> l = ParseLsn(opts.limit);
    if (!l.ok()) return l.status();
    limit = *l;
  }
  WalExpectations exp;
  exp.system_id = opts.system_id;
  exp.segment_size = opts.segment_size;
  exp.block_size = static_cast<uint32_t>(opts.block_size);
  DirectoryWalBytes wal(walship::sys::DefaultSysCalls(), opts.dir,
                        static_cast<uint32_t>(opts.timeline),
                        opts.segment_size);
  absl::StatusOr<ScanResult> r = ScanWal(wal, *start, exp, limit);
  if (!r.ok()) return r.status();
  std::printf(
      "end=%s last_record=%s last_record_end=%s records=%llu "
      "stop=%s stop_lsn=%s reason=%s\n",
      FormatLsn(r->end).c_str(), FormatLsn(r->last_record_start).c_str(),
      FormatLsn(r->last_record_end).c_str(),
      static_cast<unsigned long long>(r->records), ScanStopName(r->stop),
      FormatLsn(r->stop_lsn).c_str(), r->stop_reason.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  walship::FlagSet flags("scan_pg_wal: prints where valid WAL ends");
  flags.String("dir", &opts.dir, "pg_wal directory");
  flags.Uint("timeline", &opts.timeline, "timeline of the segment files");
  flags.Uint("segment-size", &opts.segment_size, "wal_segment_size in bytes");
  flags.Uint("block-size", &opts.block_size, "XLOG_BLCKSZ");
  flags.Uint("system-id", &opts.system_id, "system identifier (0: unchecked)");
  flags.String("start", &opts.start, "LSN to start at (record or page start)");
  flags.String("limit", &opts.limit, "LSN not to read past (default: none)");
  absl::StatusOr<std::vector<std::string>> args = flags.Parse(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n%s", args.status().ToString().c_str(),
                 flags.Usage().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  absl::Status s = Run(opts);
  if (!s.ok()) {
    std::fprintf(stderr, "scan_pg_wal: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
