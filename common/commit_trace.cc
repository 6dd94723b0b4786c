#include "common/commit_trace.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/sys/file_util.h"
#include "spdlog/spdlog.h"

namespace walship {

const char* TraceStageName(TraceStage stage) {
  switch (stage) {
    case TraceStage::kFeed:
      return "feed";
    case TraceStage::kSent:
      return "sent";
    case TraceStage::kHeader:
      return "header";
    case TraceStage::kSpliced:
      return "spliced";
    case TraceStage::kVerified:
      return "verified";
    case TraceStage::kSynced:
      return "synced";
    case TraceStage::kAckSent:
      return "ack_sent";
    case TraceStage::kAck:
      return "ack";
    case TraceStage::kStatus:
      return "status";
    case TraceStage::kAckWritten:
      return "ack_written";
  }
  return "unknown";
}

CommitTrace::CommitTrace(size_t capacity, Clock& clock)
    : clock_(clock), ring_(std::max<size_t>(capacity, 1)) {}

void CommitTrace::Record(TraceStage stage, absl::string_view segment, uint64_t offset) {
  const int64_t nanos = clock_.MonotonicNanos();
  const size_t n = std::min(segment.size(), kMaxSegmentName);
  absl::MutexLock lock(&mu_);
  Entry& e = ring_[recorded_ % ring_.size()];
  e.nanos = nanos;
  e.offset = offset;
  e.stage = stage;
  e.segment_length = static_cast<uint8_t>(n);
  std::memcpy(e.segment, segment.data(), n);
  ++recorded_;
}

std::string CommitTrace::Text() const {
  std::vector<Entry> copy;
  uint64_t recorded = 0;
  {
    absl::MutexLock lock(&mu_);
    copy = ring_;
    recorded = recorded_;
  }
  const uint64_t size = copy.size();
  const uint64_t first = recorded > size ? recorded - size : 0;
  std::string out;
  out.reserve((recorded - first) * 64);
  for (uint64_t i = first; i < recorded; ++i) {
    const Entry& e = copy[i % size];
    absl::StrAppend(&out, e.nanos, " ", TraceStageName(e.stage), " ",
                    absl::string_view(e.segment, e.segment_length), " ", e.offset, "\n");
  }
  return out;
}

absl::Status CommitTrace::Dump(sys::SysCalls& sys, const std::string& path) const {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return sys::WriteFileAtomically(sys, dir.empty() ? "/" : dir, name, Text());
}

uint64_t CommitTrace::recorded() const {
  absl::MutexLock lock(&mu_);
  return recorded_;
}

uint64_t CommitTrace::dropped() const {
  absl::MutexLock lock(&mu_);
  return recorded_ > ring_.size() ? recorded_ - ring_.size() : 0;
}

void DumpCommitTrace(sys::SysCalls& sys, const CommitTrace& trace, const std::string& path) {
  if (absl::Status s = trace.Dump(sys, path); !s.ok()) {
    spdlog::error("--trace-commits: writing {}: {}", path, s.ToString());
    return;
  }
  spdlog::info("--trace-commits: wrote {} records to {} ({} older ones dropped)",
               trace.recorded() - trace.dropped(), path, trace.dropped());
}

}  // namespace walship
