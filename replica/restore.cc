#include "replica/restore.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_crc.h"
#include "common/pgwal/wal_names.h"
#include "common/pgwal/wal_page.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "common/wire/crc32c.h"
#include "common/wire/segment_name.h"
#include "replica/recovery.h"
#include "replica/state_store.h"

namespace walship::replica {
namespace {

// Copies [0, length) of `src` to `target` and appends `pad` zero bytes.
absl::Status CopyOut(sys::SysCalls& sys, int src, uint64_t length, uint64_t pad,
                     const std::string& target) {
  auto out = sys::OpenFile(sys, target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!out.ok()) return out.status();
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < length;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - off));
    if (absl::Status s = sys::PreadFully(sys, src, buf.data(), n, off); !s.ok()) return s;
    if (absl::Status s = sys::WriteFully(sys, out->get(), buf.data(), n); !s.ok()) return s;
    off += n;
  }
  std::fill(buf.begin(), buf.end(), 0);
  for (uint64_t done = 0; done < pad;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), pad - done));
    if (absl::Status s = sys::WriteFully(sys, out->get(), buf.data(), n); !s.ok()) return s;
    done += n;
  }
  return absl::OkStatus();
}

// Plans serving the published (or about to be published) file `complete` of
// `name`, open as `fd`, if it matches its line in the checksum file.
int PlanComplete(sys::SysCalls& sys, const std::string& dest, const std::string& name,
                 const std::string& complete, sys::UniqueFd fd, RestorePlan* plan,
                 std::string* why) {
  std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys, dest);
  auto it = sums.find(name);
  if (it == sums.end()) {
    *why = absl::StrCat("refusing ", complete, ": no checksum recorded in ", kSumsFileName);
    return kRestoreRefused;
  }
  struct stat st;
  if (!sys.Fstat(fd.get(), &st).ok() ||
      static_cast<uint64_t>(st.st_size) != it->second.length) {
    *why = absl::StrCat("refusing ", complete, ": length ", st.st_size, " but ",
                        it->second.length, " recorded");
    return kRestoreRefused;
  }
  auto crc = Crc32cOfFileRange(sys, fd.get(), 0, it->second.length, complete);
  if (!crc.ok() || *crc != it->second.crc32c) {
    *why = crc.ok() ? absl::StrFormat("refusing %s: CRC32C %08x but %08x recorded",
                                      complete, *crc, it->second.crc32c)
                    : std::string(crc.status().message());
    return kRestoreRefused;
  }
  plan->fd = std::move(fd);
  plan->path = complete;
  plan->size = it->second.length;
  plan->verified = it->second.length;
  plan->verified_crc32c = it->second.crc32c;
  plan->pad = 0;
  plan->complete = true;
  *why = absl::StrCat("served ", name, " (", it->second.length, " bytes, verified)");
  return kRestoreServed;
}

}  // namespace

int PlanRestore(sys::SysCalls& sys, const std::string& dest, const std::string& name,
                RestorePlan* plan, std::string* why) {
  uint32_t tli = 0;
  const bool is_history = pg::ParseHistoryFileName(name, &tli);
  // The smallest segment size admits every valid name.
  const bool is_segment = name.size() == 24 && pg::ParseSegmentName(name, 1u << 20).ok();
  if (!wire::ValidateSegmentName(name).ok() || (!is_history && !is_segment &&
                                                name.find('.') != std::string::npos)) {
    *why = absl::StrCat("not a WAL file name: \"", absl::CHexEscape(name), "\"");
    return kRestoreNotFound;
  }
  std::string complete = absl::StrCat(dest, "/", name);
  const std::string partial = absl::StrCat(complete, ".partial");
  StateStore store(sys, dest);
  auto state = store.Load();
  auto fd = sys::OpenFile(sys, complete, O_RDONLY);
  if (!fd.ok() && state.ok() && state->has_value() &&
      ((*state)->durable.segment > name ||
       ((*state)->durable.segment == name && (*state)->segment_complete))) {
    // The position record is past this segment, yet it still has its
    // partial name: the machine stopped after the record and the segment's
    // checksum line reached the disk but before its rename did
    // (SegmentWriter::Flush saves the record beside that directory fsync).
    // The replica's next start finishes the publication; until then the
    // file is served if it matches its checksum line, like any other.
    fd = sys::OpenFile(sys, partial, O_RDONLY);
    if (fd.ok()) complete = partial;
  }
  if (fd.ok()) return PlanComplete(sys, dest, name, complete, std::move(*fd), plan, why);
  // The segment being received: durable bytes only.
  if (!state.ok()) {
    *why = state.status().ToString();
    return kRestoreRefused;
  }
  if (!state->has_value() || (*state)->durable.segment != name || (*state)->segment_complete ||
      (*state)->durable.offset == 0) {
    *why = absl::StrCat(name, " is not available");
    return kRestoreNotFound;
  }
  fd = sys::OpenFile(sys, partial, O_RDONLY);
  if (!fd.ok()) {
    *why = absl::StrCat(partial, ": ", fd.status().message());
    return kRestoreNotFound;
  }
  uint64_t durable = (*state)->durable.offset;
  uint32_t durable_crc = (*state)->prefix_crc32c;
  auto crc = Crc32cOfFileRange(sys, fd->get(), 0, durable, partial);
  if (!crc.ok() || *crc != (*state)->prefix_crc32c) {
    *why = crc.ok() ? absl::StrFormat("refusing %s: CRC32C of its %d durable bytes is %08x, "
                                      "%08x recorded",
                                      partial, durable, *crc, (*state)->prefix_crc32c)
                    : std::string(crc.status().message());
    return kRestoreRefused;
  }
  // Acknowledged bytes past the lazily saved record count as verified as far
  // as walship.progress names them and they still have the CRC32C it records
  // (the record's prefix CRC extended over them: one pass over the file).
  if (std::optional<ReplicaState> p = ProgressPast(sys, dest, **state)) {
    auto more = Crc32cOfFileRange(sys, fd->get(), durable, p->durable.offset - durable,
                                  partial, *crc);
    if (more.ok() && *more == p->prefix_crc32c) {
      durable = p->durable.offset;
      durable_crc = p->prefix_crc32c;
    }
  }
  // Past the verified bytes, the rest of NAME.partial is served too,
  // unverified: acknowledged bytes past a record that a power loss left
  // without a trustworthy walship.progress are among them (their fdatasync
  // came before their acknowledgement), and so may be bytes the crash
  // damaged. Every byte walship ships was durable on the primary, and
  // PostgreSQL checks each record (CRC32C, page header, link to the one
  // before) and stops at the first that fails, so serving them can only let
  // it replay more of the primary's WAL, never something else.
  uint64_t size = durable;
  uint64_t pad = 0;
  if (is_segment) {
    uint8_t header[pg::kLongPageHeaderSize];
    auto page = sys::PreadFully(sys, fd->get(), header, sizeof(header), 0);
    auto h = page.ok() ? pg::DecodePageHeader(absl::MakeConstSpan(header, sizeof(header)))
                       : absl::StatusOr<pg::PageHeader>(page);
    if (!h.ok() || !h->is_long || !pg::IsValidSegmentSize(h->seg_size) ||
        h->seg_size < durable) {
      *why = absl::StrCat("refusing ", partial, ": no valid first page header to size it");
      return kRestoreRefused;
    }
    struct stat st;
    if (sys.Fstat(fd->get(), &st).ok() && static_cast<uint64_t>(st.st_size) > durable) {
      size = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), h->seg_size);
    }
    // A pre-sized partial's zeros after its last non-zero byte are sent as
    // the padding.
    if (auto end = PartialTailEnd(sys, fd->get(), durable, size, h->seg_size, partial); end.ok()) {
      size = *end;
    }
    pad = h->seg_size - size;
  }
  *why = absl::StrCat("served ", name, ": ", durable, " verified bytes of the segment being "
                      "received, ", size - durable, " more past them unverified (PostgreSQL "
                      "checks each record), zero-padded by ", pad);
  plan->fd = std::move(*fd);
  plan->path = partial;
  plan->size = size;
  plan->verified = durable;
  plan->verified_crc32c = durable_crc;
  plan->pad = pad;
  plan->complete = false;
  return kRestoreServed;
}

int Restore(sys::SysCalls& sys, const std::string& dest, const std::string& name,
            const std::string& target, std::string* why) {
  RestorePlan plan;
  if (int rc = PlanRestore(sys, dest, name, &plan, why); rc != kRestoreServed) return rc;
  if (absl::Status s = CopyOut(sys, plan.fd.get(), plan.size, plan.pad, target); !s.ok()) {
    *why = s.ToString();
    return kRestoreRefused;
  }
  return kRestoreServed;
}

}  // namespace walship::replica
