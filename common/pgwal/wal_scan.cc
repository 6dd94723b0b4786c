// Finding the end of valid PostgreSQL 15 WAL. See wal_scan.h for the rule.

#include "common/pgwal/wal_scan.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/wire/crc32c.h"

namespace walship::pg {
namespace {

uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

uint64_t LoadLe64(const uint8_t* p) {
  return static_cast<uint64_t>(LoadLe32(p)) |
         (static_cast<uint64_t>(LoadLe32(p + 4)) << 32);
}

bool IsValidRmgrId(uint8_t rmid) {
  return rmid <= kMaxBuiltinRmgrId || rmid >= kMinCustomRmgrId;
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// One scan. Walks records and fills `result_`; a method returning false has
// recorded why the scan stops.
class Scanner {
 public:
  Scanner(WalBytes& wal, const WalExpectations& exp, Lsn limit)
      : wal_(wal), exp_(exp), block_(exp.block_size), limit_(limit) {}

  absl::StatusOr<ScanResult> Run(Lsn start);

 private:
  // The page most recently loaded and validated.
  struct Page {
    bool loaded = false;
    Lsn addr = 0;
    size_t avail = 0;  // bytes WalBytes returned (<= block size)
    PageHeader header{};
    std::vector<uint8_t> bytes;
  };

  // Loads the page at `addr` into page_ and validates it (and the first page
  // of its segment when the segment is entered for the first time). Returns
  // false after recording a stop when the page is unusable.
  absl::StatusOr<bool> LoadPage(Lsn addr);

  // Validates the header of a page (the first `n` bytes of `bytes`) that is
  // at `addr`; false after recording a stop. Also applies the timeline
  // ordering rule.
  bool CheckPage(const uint8_t* bytes, size_t n, Lsn addr);

  // Checks 3-5 of the rule on a complete 24-byte header of the record at
  // `rec`; false after recording a stop.
  bool CheckRecordHeader(const uint8_t* hdr, Lsn rec);

  // Reads one record at `next_` (a record position or a page boundary).
  // Returns true if a record was accepted or must be re-read from a new
  // position (overwritten continuation), false after recording a stop.
  absl::StatusOr<bool> ReadRecord();

  // A record being read: its header bytes, then the CRC of the rest.
  struct RecordBuf {
    uint8_t hdr[kRecordHeaderSize] = {};
    uint64_t got = 0;  // bytes of the record consumed so far
    uint32_t body_crc = 0;

    void Consume(const uint8_t* p, size_t n) {
      if (got < kRecordHeaderSize) {
        const size_t h = std::min<size_t>(n, kRecordHeaderSize - got);
        std::memcpy(hdr + got, p, h);
        p += h;
        n -= h;
        got += h;
      }
      body_crc = wire::Crc32cExtend(body_crc, p, n);
      got += n;
    }
  };

  // Checks the end and the CRC of the complete record `buf` at `rec` that
  // ends at `end_exact`, and accepts it (advancing next_). False after
  // recording a stop.
  bool FinishRecord(const RecordBuf& buf, Lsn rec, Lsn end_exact);

  // Skips the continuation of an earlier record at the page boundary
  // `start`; sets next_. False after recording a stop.
  absl::StatusOr<bool> SkipContinuation(Lsn start);

  bool Stop(ScanStop stop, Lsn at, std::string reason) {
    result_.stop = stop;
    result_.stop_lsn = at;
    result_.stop_reason = std::move(reason);
    return false;
  }

  WalBytes& wal_;
  const WalExpectations exp_;
  const uint64_t block_;
  const Lsn limit_;

  ScanResult result_;
  Page page_;
  Lsn next_ = 0;            // where the next record (or its page) starts
  bool have_prev_ = false;  // false: only xl_prev < LSN can be checked
  Lsn prev_ = 0;            // LSN of the last accepted record
  bool have_checked_segment_ = false;
  uint64_t checked_segment_ = 0;  // segment whose first page passed
  bool have_latest_page_ = false;
  Lsn latest_page_ = 0;           // highest page address validated so far
  uint32_t latest_page_tli_ = 0;  // and its timeline
  std::vector<uint8_t> first_page_buf_;
};

bool Scanner::CheckPage(const uint8_t* bytes, size_t n, Lsn addr) {
  PageProblem problem = PageProblem::kNone;
  absl::Status s =
      ValidatePage(absl::MakeConstSpan(bytes, n), addr, exp_, &problem);
  if (!s.ok()) {
    ScanStop stop = ScanStop::kInvalidPage;
    switch (problem) {
      case PageProblem::kTruncated:
        stop = ScanStop::kNoData;
        break;
      case PageProblem::kZeroed:
        stop = ScanStop::kZeroed;
        break;
      case PageProblem::kStaleAddress:
        stop = ScanStop::kStalePage;
        break;
      default:
        break;
    }
    if (stop == ScanStop::kNoData) {
      return Stop(
          stop, addr,
          absl::StrCat("no WAL available at ", FormatLsn(addr), " (segment ",
                       SegmentOfLsn(addr, exp_.segment_size),
                       " missing or shorter): ", s.message()));
    }
    return Stop(stop, addr, std::string(s.message()));
  }
  // Timelines only increase along a consistent WAL sequence; pages re-read
  // at or before the latest one are not compared.
  const uint32_t tli = LoadLe32(bytes + page_layout::kTimeline);
  if (!have_latest_page_ || addr > latest_page_) {
    if (have_latest_page_ && tli < latest_page_tli_) {
      return Stop(ScanStop::kInvalidPage, addr,
                  absl::StrCat("WAL page at ", FormatLsn(addr),
                               ": out-of-sequence timeline ID ", tli,
                               " (after ", latest_page_tli_, ")"));
    }
    have_latest_page_ = true;
    latest_page_ = addr;
    latest_page_tli_ = tli;
  }
  return true;
}

absl::StatusOr<bool> Scanner::LoadPage(Lsn addr) {
  if (page_.loaded && page_.addr == addr) return true;
  page_.loaded = false;
  if (addr >= limit_) {
    return Stop(ScanStop::kLimit, addr,
                absl::StrCat("reached the limit ", FormatLsn(limit_)));
  }
  const uint64_t seg = SegmentOfLsn(addr, exp_.segment_size);
  const Lsn seg_start = SegmentStartLsn(seg, exp_.segment_size);
  if ((!have_checked_segment_ || checked_segment_ != seg) &&
      addr != seg_start) {
    // Entering a segment in its middle: its first page (long header) must
    // be valid too.
    first_page_buf_.resize(kLongPageHeaderSize);
    WALSHIP_ASSIGN_OR_RETURN(
        size_t n,
        wal_.ReadAt(seg_start, first_page_buf_.data(), kLongPageHeaderSize));
    if (!CheckPage(first_page_buf_.data(), n, seg_start)) return false;
    have_checked_segment_ = true;
    checked_segment_ = seg;
  }

  page_.bytes.resize(block_);
  WALSHIP_ASSIGN_OR_RETURN(size_t n,
                           wal_.ReadAt(addr, page_.bytes.data(), block_));
  if (!CheckPage(page_.bytes.data(), n, addr)) return false;
  absl::StatusOr<PageHeader> h =
      DecodePageHeader(absl::MakeConstSpan(page_.bytes.data(), n));
  if (!h.ok()) return h.status();  // cannot happen after CheckPage
  if (addr == seg_start) {
    have_checked_segment_ = true;
    checked_segment_ = seg;
  }
  page_.loaded = true;
  page_.addr = addr;
  page_.avail = n;
  page_.header = *h;
  if (page_.avail < page_.header.size()) {
    page_.loaded = false;
    return Stop(ScanStop::kNoData, addr,
                absl::StrCat("no WAL available past ", FormatLsn(addr + n)));
  }
  return true;
}

bool Scanner::CheckRecordHeader(const uint8_t* hdr, Lsn rec) {
  const uint32_t tot_len = LoadLe32(hdr + record_layout::kTotLen);
  if (tot_len < kRecordHeaderSize) {
    return Stop(
        ScanStop::kInvalidRecord, rec,
        absl::StrCat("invalid record length at ", FormatLsn(rec), ": wanted ",
                     kRecordHeaderSize, ", got ", tot_len));
  }
  if (tot_len > kMaxRecordLength) {
    return Stop(ScanStop::kInvalidRecord, rec,
                absl::StrCat("record length ", tot_len, " at ", FormatLsn(rec),
                             " too long"));
  }
  const uint8_t rmid = hdr[record_layout::kRmid];
  if (!IsValidRmgrId(rmid)) {
    return Stop(ScanStop::kInvalidRecord, rec,
                absl::StrCat("invalid resource manager ID ", rmid, " at ",
                             FormatLsn(rec)));
  }
  const Lsn xl_prev = LoadLe64(hdr + record_layout::kPrev);
  if (have_prev_ ? xl_prev != prev_ : xl_prev >= rec) {
    return Stop(
        ScanStop::kInvalidRecord, rec,
        absl::StrCat("record with incorrect prev-link ", FormatLsn(xl_prev),
                     " at ", FormatLsn(rec), " (expected ",
                     have_prev_ ? FormatLsn(prev_)
                                : absl::StrCat("below ", FormatLsn(rec)),
                     ")"));
  }
  return true;
}

absl::StatusOr<bool> Scanner::SkipContinuation(Lsn start) {
  Lsn p = start;
  for (;;) {
    WALSHIP_ASSIGN_OR_RETURN(bool ok, LoadPage(p));
    if (!ok) return false;
    const PageHeader& h = page_.header;
    const size_t hsz = h.size();
    if ((h.info & kXlpFirstIsContRecord) == 0) {
      next_ = p + hsz;
      return true;
    }
    // As XLogFindNextRecord: the continuation, padded, fills the page ->
    // it goes on (or ends exactly) there; look at the next page.
    if (MaxAlign(h.rem_len) >= block_ - hsz) {
      p += block_;
      continue;
    }
    next_ = p + hsz + MaxAlign(h.rem_len);
    return true;
  }
}

absl::StatusOr<bool> Scanner::ReadRecord() {
  // Position at the record, past a page header if at a page boundary.
  Lsn page_addr = next_ - next_ % block_;
  WALSHIP_ASSIGN_OR_RETURN(bool ok, LoadPage(page_addr));
  if (!ok) return false;
  size_t off = static_cast<size_t>(next_ % block_);
  const size_t first_hsz = page_.header.size();
  if (off == 0) {
    next_ += first_hsz;
    off = first_hsz;
  } else if (off < first_hsz) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid record offset at ", FormatLsn(next_),
                     ": inside the ", first_hsz, "-byte page header"));
  }
  const Lsn rec = next_;
  if ((page_.header.info & kXlpFirstIsContRecord) != 0 && off == first_hsz) {
    return Stop(ScanStop::kInvalidRecord, rec,
                absl::StrCat("contrecord is requested by ", FormatLsn(rec)));
  }
  if (rec >= limit_) {
    return Stop(ScanStop::kLimit, rec,
                absl::StrCat("reached the limit ", FormatLsn(limit_)));
  }

  // The header, or the part of it on this page (at least 8 bytes: records
  // are MAXALIGNed and pages end on an 8-byte boundary).
  const size_t on_page = std::min<size_t>(kRecordHeaderSize, block_ - off);
  if (page_.avail < off + on_page) {
    return Stop(ScanStop::kNoData, rec,
                absl::StrCat("no WAL available past ",
                             FormatLsn(page_addr + page_.avail),
                             " (record header at ", FormatLsn(rec), ")"));
  }
  if (AllZero(page_.bytes.data() + off, on_page)) {
    return Stop(ScanStop::kZeroed, rec,
                absl::StrCat("zeroed record header at ", FormatLsn(rec),
                             " (end of WAL)"));
  }
  const uint32_t tot_len = LoadLe32(page_.bytes.data() + off);
  bool header_checked = false;
  if (on_page == kRecordHeaderSize) {
    if (!CheckRecordHeader(page_.bytes.data() + off, rec)) return false;
    header_checked = true;
  } else if (tot_len < kRecordHeaderSize) {
    return Stop(
        ScanStop::kInvalidRecord, rec,
        absl::StrCat("invalid record length at ", FormatLsn(rec), ": wanted ",
                     kRecordHeaderSize, ", got ", tot_len));
  }

  // Stream the record: header bytes into `buf.hdr`, the rest into the CRC.
  RecordBuf buf;
  const uint64_t& got = buf.got;

  const size_t first_len = std::min<uint64_t>(tot_len, block_ - off);
  if (page_.avail < off + first_len) {
    return Stop(ScanStop::kNoData, rec,
                absl::StrCat("no WAL available past ",
                             FormatLsn(page_addr + page_.avail), " (record at ",
                             FormatLsn(rec), ", ", tot_len, " bytes)"));
  }
  buf.Consume(page_.bytes.data() + off, first_len);
  Lsn end_exact = rec + first_len;

  while (got < tot_len) {
    page_addr += block_;
    WALSHIP_ASSIGN_OR_RETURN(bool loaded, LoadPage(page_addr));
    if (!loaded) {
      result_.stop_lsn = rec;
      result_.stop_reason =
          absl::StrCat("record at ", FormatLsn(rec),
                       " is incomplete: ", result_.stop_reason);
      return false;
    }
    const PageHeader& ph = page_.header;
    if ((ph.info & kXlpFirstIsOverwriteContRecord) != 0) {
      // The record was abandoned and its continuation overwritten; the
      // next record starts on this page.
      ++result_.overwritten_records;
      next_ = page_addr;
      return true;
    }
    if ((ph.info & kXlpFirstIsContRecord) == 0) {
      return Stop(
          ScanStop::kInvalidRecord, rec,
          absl::StrCat("there is no contrecord flag at ", FormatLsn(page_addr),
                       " (record at ", FormatLsn(rec), ")"));
    }
    if (ph.rem_len == 0 || tot_len != ph.rem_len + got) {
      return Stop(
          ScanStop::kInvalidRecord, rec,
          absl::StrCat("invalid contrecord length ", ph.rem_len, " (expected ",
                       tot_len - got, ") at ", FormatLsn(page_addr),
                       " (record at ", FormatLsn(rec), ")"));
    }
    const size_t hsz = ph.size();
    const size_t len = std::min<uint64_t>(block_ - hsz, ph.rem_len);
    if (page_.avail < hsz + len) {
      return Stop(
          ScanStop::kNoData, rec,
          absl::StrCat("no WAL available past ",
                       FormatLsn(page_addr + page_.avail), " (record at ",
                       FormatLsn(rec), ", ", tot_len, " bytes)"));
    }
    buf.Consume(page_.bytes.data() + hsz, len);
    end_exact = page_addr + hsz + len;
    if (!header_checked && got >= kRecordHeaderSize) {
      if (!CheckRecordHeader(buf.hdr, rec)) return false;
      header_checked = true;
    }
  }

  return FinishRecord(buf, rec, end_exact);
}

bool Scanner::FinishRecord(const RecordBuf& buf, Lsn rec, Lsn end_exact) {
  const uint8_t* hdr = buf.hdr;
  if (end_exact > limit_) {
    return Stop(ScanStop::kLimit, rec,
                absl::StrCat("record at ", FormatLsn(rec), " ends at ",
                             FormatLsn(end_exact), ", past the limit ",
                             FormatLsn(limit_)));
  }
  const uint32_t crc = wire::Crc32cExtend(buf.body_crc, hdr, kRecordCrcOffset);
  const uint32_t stored = LoadLe32(hdr + record_layout::kCrc);
  if (crc != stored) {
    return Stop(ScanStop::kChecksumMismatch, rec,
                absl::StrFormat("incorrect resource manager data checksum in "
                                "record at %s: stored %08X, computed %08X",
                                FormatLsn(rec), stored, crc));
  }

  ++result_.records;
  result_.last_record_start = rec;
  result_.last_record_end = end_exact;
  have_prev_ = true;
  prev_ = rec;
  next_ = MaxAlign(end_exact);
  if (hdr[record_layout::kRmid] == kRmXlogId &&
      (hdr[record_layout::kInfo] & 0xF0) == kXlogSwitch) {
    // The rest of the segment is unused.
    const uint64_t seg = exp_.segment_size;
    next_ = (next_ + seg - 1) / seg * seg;
  }
  result_.end = next_;
  return true;
}

absl::StatusOr<ScanResult> Scanner::Run(Lsn start) {
  WALSHIP_RETURN_IF_ERROR(ValidateExpectations(exp_));
  if (start % kMaxAlign != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scan start ", FormatLsn(start), " is not a multiple of ", kMaxAlign));
  }
  if (start % block_ != 0 && start % block_ < kShortPageHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scan start ", FormatLsn(start), " lies inside a page header"));
  }
  result_.end = start;
  if (start % block_ == 0) {
    WALSHIP_ASSIGN_OR_RETURN(bool ok, SkipContinuation(start));
    if (!ok) return result_;
  } else {
    next_ = start;
  }
  for (;;) {
    WALSHIP_ASSIGN_OR_RETURN(bool ok, ReadRecord());
    if (!ok) return result_;
  }
}

}  // namespace

WalBytes::~WalBytes() = default;

DirectoryWalBytes::DirectoryWalBytes(sys::SysCalls& sys, std::string dir,
                                     uint32_t timeline, uint64_t segment_size)
    : sys_(sys),
      dir_(std::move(dir)),
      timeline_(timeline),
      segment_size_(segment_size) {}

absl::Status DirectoryWalBytes::OpenSegment(uint64_t segno) {
  if (have_segno_ && open_segno_ == segno) return absl::OkStatus();
  fd_.reset();
  have_segno_ = false;
  const std::string path =
      absl::StrCat(dir_, "/", SegmentName(timeline_, segno, segment_size_));
  absl::StatusOr<sys::UniqueFd> fd = sys::OpenFile(sys_, path, O_RDONLY);
  if (!fd.ok()) {
    // A missing file is "no data"; it is not remembered, so a file that
    // appears later is seen by the next read.
    if (absl::IsNotFound(fd.status())) return absl::OkStatus();
    return fd.status();
  }
  fd_ = std::move(fd).value();
  have_segno_ = true;
  open_segno_ = segno;
  return absl::OkStatus();
}

absl::StatusOr<size_t> DirectoryWalBytes::ReadAt(Lsn lsn, uint8_t* buf,
                                                 size_t n) {
  size_t done = 0;
  while (done < n) {
    const Lsn pos = lsn + done;
    const uint64_t segno = pos / segment_size_;
    const uint64_t seg_off = pos % segment_size_;
    WALSHIP_RETURN_IF_ERROR(OpenSegment(segno));
    if (!fd_.valid()) break;
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(n - done, segment_size_ - seg_off));
    size_t got = 0;
    while (got < want) {
      const sys::SysResult r =
          sys_.Pread(fd_.get(), buf + done + got, want - got,
                     static_cast<off_t>(seg_off + got));
      if (!r.ok()) {
        if (r.err == EINTR) continue;
        return sys::ErrnoToStatus(
            r.err, absl::StrCat("pread WAL segment ", dir_, "/",
                                SegmentName(timeline_, segno, segment_size_),
                                " at offset ", seg_off + got));
      }
      if (r.rc == 0) break;  // the file is shorter
      got += static_cast<size_t>(r.rc);
    }
    done += got;
    if (got < want) break;
  }
  return done;
}

const char* ScanStopName(ScanStop stop) {
  switch (stop) {
    case ScanStop::kLimit:
      return "limit";
    case ScanStop::kNoData:
      return "no data";
    case ScanStop::kZeroed:
      return "zeroed";
    case ScanStop::kStalePage:
      return "stale page";
    case ScanStop::kInvalidPage:
      return "invalid page";
    case ScanStop::kInvalidRecord:
      return "invalid record";
    case ScanStop::kChecksumMismatch:
      return "checksum mismatch";
  }
  return "unknown";
}

absl::StatusOr<ScanResult> ScanWal(WalBytes& wal, Lsn start,
                                   const WalExpectations& exp, Lsn limit) {
  Scanner scanner(wal, exp, limit);
  return scanner.Run(start);
}

absl::StatusOr<Lsn> FindEndOfValidWal(WalBytes& wal, Lsn start,
                                      const WalExpectations& exp, Lsn limit) {
  WALSHIP_ASSIGN_OR_RETURN(ScanResult r, ScanWal(wal, start, exp, limit));
  return r.end;
}

}  // namespace walship::pg
