// append_source.h: WAL source for directories of append-only segment files.
//
// The shape of MySQL binlogs, RocksDB and etcd WALs and many custom logs:
// regular files whose names sort in WAL order, each growing only by appends.
// Every visible byte is shippable (the writer is trusted to append only
// durable bytes; formats that need a durability horizon have their own
// source). A segment is complete once a later segment exists.
//
// Formats whose records can be checked (etcd, RocksDB) give the source a
// RecordScanner (record_scanner.h): a segment is then shipped up to the end
// of its last valid record, not its size; the preallocation rules below do
// not apply (preallocated and recycled files are followed, the bytes past
// the valid end held back); a complete segment's length is its valid end
// when it completed, so the replica's copy is the source file cut at its
// valid end. A complete segment whose file size changes still fails the
// source (kDataLoss).
//
// Which files are segments:
//   * Only regular files: symbolic links are never followed (lstat, and
//     O_NOFOLLOW on every open), other file types are skipped; each skipped
//     name is logged once (a link as a warning).
//   * Hidden files (leading '.') and names that are not valid segment names
//     (wire/segment_name.h) are skipped.
//   * With a segment pattern (AppendSourceOptions::segment_pattern), exactly
//     the names it matches in full; other names are skipped (logged once at
//     debug, and counted in one line at start). A matching name that is not a
//     valid segment name fails the source.
//   * Without one, every name of the one shape the directory holds (see
//     NameShape: "mysql-bin.000001" and "mysql-bin.000002" are both
//     "mysql-bin.NNNNNN"). A directory holding names of several shapes (binlogs
//     beside mysql-bin.index; RocksDB's LOG, CURRENT and MANIFEST beside its
//     logs) cannot be followed without a pattern: Start fails, and a file of
//     another shape appearing later fails the source, never becoming a
//     segment. (Ignoring it would be wrong whenever the first shape seen was
//     the stray one, e.g. an index file written before the first binlog:
//     shipping would stall silently while the real segments pile up.)
//
// Preallocated files are refused, never shipped as data. A file whose size
// was reached by preallocation (fallocate, ftruncate, zeros written ahead of
// the data, as etcd's WAL does) holds zeros past its written data, which an
// append-only directory never shows. So before a segment's new bytes
// [published, size) are published:
//   * a hole or unwritten range in them (lseek SEEK_HOLE before `size`; ext4,
//     xfs and tmpfs report fallocated, never written ranges as holes) fails
//     the source at once;
//   * a run of at least kPreallocatedZeroRun zero bytes at the end of a
//     complete segment fails the source; at the end of the open segment it
//     holds the segment back (nothing new of it is published) while the
//     writer may still be appending the rest of a record, and fails the
//     source when it is still there, at the same size, zero_tail_grace
//     after it was first seen (an append-only writer whose records end in
//     that many zero bytes is not supported).
// The failure is kFailedPrecondition naming the file, the offset where its
// data ends and why; what was published of the file before stays valid.
//
// A SQLite WAL is refused too: a segment named "...-wal" that starts with
// SQLite's WAL magic fails the source with kFailedPrecondition saying why
// (SQLite rewrites it from offset 0 after each checkpoint) and what works
// instead (agent/sqlite/sqlite_wal.h).
//
// Changes are followed with inotify (IN_MODIFY on the tail segment costs one
// fstat, one lseek and a one-byte pread; creations, renames and deletions
// trigger a directory rescan), with a slow periodic rescan as a safety net
// for missed events (e.g. queue overflow).
//
// Errors: a segment that shrinks, or a complete segment that grows, means the
// directory is not append-only: the catalog is failed with kDataLoss and the
// shippers stop. A preallocated segment or names of several shapes fail it
// with kFailedPrecondition (an operator must act). An unreadable directory
// fails the catalog with the errno status. Each failure is logged as an
// error. A failure found by Start's first scan is returned by Start instead.
//
// Thread-safety: as WalSource; Successor may be called from any thread at any
// time (the pattern is immutable after construction).
#ifndef WALSHIP_AGENT_APPEND_SOURCE_H_
#define WALSHIP_AGENT_APPEND_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/record_scanner.h"
#include "agent/segment_catalog.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/sys/dir_watch.h"
#include "common/sys/syscalls.h"
#include "common/sys/unique_fd.h"

namespace walship::agent {

// The shortest run of zero bytes at the end of a segment that marks it as
// preallocated (see the file comment).
inline constexpr uint64_t kPreallocatedZeroRun = 64 << 10;

// The shape of a file name: each decimal digit replaced by "N", so names
// whose numbers differ in width (and so do not sort in WAL order) differ.
// "mysql-bin.000001" -> "mysql-bin.N", "000005.log" -> "N.log",
// "MANIFEST-000004" -> "MANIFEST-N", "LOG" -> "LOG".
std::string NameShape(absl::string_view name);

// A compiled segment pattern: an ECMAScript regular expression (std::regex)
// that a segment's name matches in full. If it has a capturing group, group
// 1 is the segment's sequence number, decimal digits of a fixed width, and
// consecutive segments have consecutive numbers.
//
// Example: SegmentPattern::Compile(R"(mysql-bin\.([0-9]{6}))")->Successor(
// "mysql-bin.000009") == "mysql-bin.000010".
//
// Immutable once compiled; copies share the compiled expression; safe to use
// from any number of threads.
class SegmentPattern {
 public:
  // kInvalidArgument quoting `pattern` and why it is not a valid regular
  // expression.
  static absl::StatusOr<SegmentPattern> Compile(const std::string& pattern);

  // True when `name` matches the whole pattern.
  bool Matches(const std::string& name) const;
  // True when the pattern has a capturing group (a sequence number).
  bool has_sequence() const { return re_->mark_count() > 0; }
  // `name` with its group 1 incremented by one at the same width
  // ("000009" -> "000010"), if that name matches the pattern too and is a
  // valid segment name; nullopt when the pattern has no group, `name` does
  // not match, its group 1 is not decimal digits, or the increment overflows
  // the width ("999999").
  std::optional<std::string> Successor(const std::string& name) const;
  const std::string& text() const { return text_; }

 private:
  SegmentPattern(std::string text, std::shared_ptr<const std::regex> re)
      : text_(std::move(text)), re_(std::move(re)) {}

  std::string text_;
  std::shared_ptr<const std::regex> re_;
};

struct AppendSourceOptions {
  std::string wal_dir;
  // Overrides the derived stream identity (e.g. when the directory moves).
  std::string stream_id;
  // A SegmentPattern; empty: the names of the directory's one shape (see the
  // file comment). An invalid pattern makes Start fail with kInvalidArgument.
  std::string segment_pattern;
  absl::Duration rescan_interval = absl::Seconds(2);
  // How long the open segment may end in kPreallocatedZeroRun zero bytes
  // without growing before it is refused as preallocated.
  absl::Duration zero_tail_grace = absl::Seconds(1);
  // The format's name (FormatName(), the stream identity's prefix).
  std::string format_name = "append";
  // Set by formats whose records tell where a segment's data ends
  // (record_scanner.h): segments are shipped up to their valid end, and the
  // preallocation refusal above does not apply. Unset: the append rules.
  RecordScannerMaker scanner;
  // With a segment pattern: a subdirectory of wal_dir where the database
  // moves old segments under the same name (RocksDB: "archive"). Its files
  // that match the pattern are segments too (complete ones), found there by
  // the source and by readers (Segments()). Empty: none.
  std::string archive_subdir;
  // WalSource::MutableBytes (the format's).
  std::vector<MutableBits> mutable_bytes;
};

// What the source holds back of its open segment (for metrics and status).
struct HeldBackState {
  std::string segment;     // the open segment ("" before the first scan)
  uint64_t valid_end = 0;  // its shippable end
  uint64_t file_size = 0;  // its size
  HeldBack reason = HeldBack::kNone;
};

class AppendSource final : public WalSource {
 public:
  AppendSource(sys::SysCalls& sys, AppendSourceOptions options,
               SegmentCatalog& catalog,
               Clock& clock = DefaultClock());
  ~AppendSource() override;

  absl::Status Start() override;
  void Stop() override;
  std::string StreamId() const override { return stream_id_; }
  std::string FormatName() const override { return options_.format_name; }
  std::string wal_dir() const override { return options_.wal_dir; }
  // With a segment pattern that has a group: SegmentPattern::Successor.
  // Otherwise nullopt (names alone do not tell).
  std::optional<std::string> Successor(const std::string& name) const override;
  // With a scanner: walship_agent_source_valid_end_bytes and
  // walship_agent_source_held_back_bytes{reason} for the open segment.
  void DeclareMetrics(MetricsRegistry& metrics) override;
  // The open segment's valid end and what is held back past it.
  HeldBackState held_back() const;
  std::optional<SourceHold> Hold() const override;
  // wal_dir, then its archive_subdir if any.
  SegmentLocator Segments() const override;
  std::vector<MutableBits> MutableBytes() const override { return options_.mutable_bytes; }

 private:
  // A segment seen ending in kPreallocatedZeroRun zero bytes.
  struct ZeroTail {
    std::string name;
    uint64_t size = 0;
    absl::Time since;
  };

  void Loop();
  // Lists the directory and publishes. Returns the source failure, if any.
  absl::Status Rescan();
  // The segments in the directory and their sizes (see the file comment),
  // or why the directory cannot be followed.
  absl::StatusOr<std::map<std::string, uint64_t>> ListSegments();
  // Adds the segments of the archive subdirectory (if any) to `sizes`
  // (names in wal_dir win) and records them in archived_.
  absl::Status ListArchive(std::map<std::string, uint64_t>& sizes);
  // Where segment `name` was listed.
  std::string PathOf(const std::string& name) const;
  // Without a pattern: an error unless every name is of the one shape.
  absl::Status CheckShapes(const std::map<std::string, std::vector<std::string>>& by_shape);
  // Logs `what` about `name` once (a warning, or at debug level) until the
  // name leaves the directory.
  void NoteOnce(const std::string& name, bool warn, const std::string& what);
  // With a scanner: removes from `sizes` the segments after the first one
  // the scanner does not let complete yet (RecordScanner::MayComplete), and
  // records it in held_open_.
  absl::Status HoldUnclosed(std::map<std::string, uint64_t>& sizes);
  // Re-reads the tail segment's size only.
  absl::Status RefreshTail();
  // Checks `sizes` (the segments seen, by name) against what was published
  // and publishes what may be shipped. `tail_sized_by_fd`: the tail's size
  // was read from tail_fd_ (else from its path).
  absl::Status PublishChecked(std::map<std::string, uint64_t> sizes,
                              bool tail_sized_by_fd = false);
  absl::Status CheckAppendOnly(const std::map<std::string, uint64_t>& sizes) const;
  // Whether bytes [from, size) of segment `name` may be published: true,
  // false to hold them back for now, or the refusal (see the file comment).
  // `fd` is an open descriptor of it, or -1 to open it here.
  absl::StatusOr<bool> CheckWritten(const std::string& name, int fd, uint64_t from,
                                    uint64_t size, bool complete);
  // kFailedPrecondition for a "-wal" segment that starts with the SQLite
  // WAL magic (agent/sqlite/sqlite_wal.h).
  absl::Status RefuseSqliteWal(const std::string& name, int fd, uint64_t size);
  absl::Status RefusePreallocated(const std::string& name, int fd, uint64_t from,
                                  uint64_t size, uint64_t unwritten_from, bool hole);
  // With a scanner: the shippable end of segment `name` (size `size`),
  // published up to `from` so far.
  absl::StatusOr<uint64_t> ScanValidEnd(const std::string& name, int fd, uint64_t from,
                                        uint64_t size, bool complete);
  // Makes `last` the tail and tail_fd_ its descriptor (reopened unless
  // `tail_sized_by_fd` or it still names that file).
  void UpdateTail(const std::string& last, bool tail_sized_by_fd);

  Clock& clock_;

  sys::SysCalls& sys_;
  const AppendSourceOptions options_;
  SegmentCatalog& catalog_;
  // The compiled options_.segment_pattern, or why it does not compile.
  std::optional<SegmentPattern> pattern_;
  absl::Status pattern_status_;
  std::string stream_id_;
  std::optional<sys::DirWatch> watch_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  // Everything below is only touched by the source thread (and by Start
  // before the thread exists).
  bool failed_ = false;
  // Last published sizes by name, and the last name seen then (the open
  // segment: every published name before it was published complete).
  std::map<std::string, uint64_t> published_;
  std::string published_tail_;
  std::string tail_name_;
  sys::UniqueFd tail_fd_;
  // Without a pattern: the shape of the names followed.
  std::string shape_;
  // Names whose skipping was logged.
  std::set<std::string> noted_;
  // With a pattern: the shapes of the names the last scan skipped, counted.
  std::map<std::string, int> skipped_shapes_;
  std::optional<ZeroTail> zero_tail_;
  // With a scanner: the scanner, and the file sizes last seen (a complete
  // segment's size must not change).
  std::unique_ptr<RecordScanner> scanner_;
  std::map<std::string, uint64_t> seen_sizes_;
  // The segment HoldUnclosed keeps open although later ones exist ("":
  // none): a change to it calls for a full rescan.
  std::string held_open_;
  // The segments the last listing found in the archive subdirectory.
  std::set<std::string> archived_;
  mutable absl::Mutex held_mu_;
  HeldBackState held_ ABSL_GUARDED_BY(held_mu_);
};

// The stream identity for a directory: a hash of the host name, the
// directory's real path and its device/inode, so two primaries' directories
// never collide even at the same path.
absl::StatusOr<std::string> DeriveStreamId(sys::SysCalls& sys,
                                           const std::string& dir,
                                           const std::string& prefix);

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_APPEND_SOURCE_H_
