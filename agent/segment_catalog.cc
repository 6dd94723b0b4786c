#include "agent/segment_catalog.h"

#include <algorithm>
#include <utility>

namespace walship::agent {

int CatalogSnapshot::Find(const std::string& name) const {
  if (!segments) return -1;
  auto it = std::lower_bound(
      segments->begin(), segments->end(), name,
      [](const SegmentInfo& s, const std::string& n) { return s.name < n; });
  if (it == segments->end() || it->name != name) return -1;
  return static_cast<int>(it - segments->begin());
}

Position CatalogSnapshot::End() const {
  if (!segments || segments->empty()) return Position{};
  return Position{segments->back().name, segments->back().shippable};
}

uint64_t CatalogSnapshot::BytesAfter(const Position& from) const {
  if (!segments) return 0;
  uint64_t total = 0;
  for (const SegmentInfo& s : *segments) {
    if (s.name < from.segment) continue;
    if (s.name == from.segment) {
      if (s.shippable > from.offset) total += s.shippable - from.offset;
    } else {
      total += s.shippable;
    }
  }
  return total;
}

SegmentCatalog::SegmentCatalog(Clock& clock) : clock_(clock) {
  current_.segments = std::make_shared<const std::vector<SegmentInfo>>();
  current_.published = clock_.Now();
}

namespace {
// Enough history for minutes of lag at a publication every few ms; older
// entries are merged away, which only makes a very old lag read younger.
constexpr size_t kMaxEnds = 8192;
}  // namespace

void SegmentCatalog::Publish(std::vector<SegmentInfo> segments) {
  std::vector<CatalogListener*> claimed;
  CatalogSnapshot snap;
  {
    absl::MutexLock lock(&mu_);
    current_.version++;
    for (const SegmentInfo& seg : segments) ever_published_.insert(seg.name);
    current_.segments =
        std::make_shared<const std::vector<SegmentInfo>>(std::move(segments));
    current_.published = clock_.Now();
    Position end = current_.End();
    if (ends_.empty() || ends_.back().first < end) ends_.emplace_back(end, current_.published);
    while (ends_.size() > kMaxEnds) ends_.pop_front();
    // Claimed before the unlock wakes anyone: a claiming listener's thread
    // stays asleep.
    for (auto& [l, st] : listeners_) {
      if (!st.claimed && l->Claim()) {
        st.claimed = true;
        claimed.push_back(l);
      }
    }
    if (!claimed.empty()) snap = current_;
  }
  for (CatalogListener* l : claimed) l->Pump(snap);
}

void SegmentCatalog::AddListener(CatalogListener* l) {
  absl::MutexLock lock(&mu_);
  listeners_.emplace_back(l, ListenerState{});
}

void SegmentCatalog::RemoveListener(CatalogListener* l) {
  absl::MutexLock lock(&mu_);
  auto released = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const ListenerState* st = StateOf(l);
    return st == nullptr || !st->claimed;
  };
  mu_.Await(absl::Condition(&released));
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                  [l](const auto& e) { return e.first == l; }),
                   listeners_.end());
}

void SegmentCatalog::Release(CatalogListener* l, uint64_t version, bool caught_up) {
  absl::MutexLock lock(&mu_);
  ListenerState* st = StateOf(l);
  if (st == nullptr) return;
  st->claimed = false;
  if (caught_up) st->caught_up = std::max(st->caught_up, version);
}

SegmentCatalog::ListenerState* SegmentCatalog::StateOf(const CatalogListener* l) {
  for (auto& [x, st] : listeners_) {
    if (x == l) return &st;
  }
  return nullptr;
}

const SegmentCatalog::ListenerState* SegmentCatalog::StateOf(const CatalogListener* l) const {
  return const_cast<SegmentCatalog*>(this)->StateOf(l);
}

bool SegmentCatalog::WaitForChange(const CatalogListener* l, uint64_t seen_version,
                                   absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return true;
    if (current_.version == seen_version) return false;
    const ListenerState* st = StateOf(l);
    return st == nullptr || (!st->claimed && st->caught_up != current_.version);
  };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  return !shutdown_;
}

std::optional<std::string> SegmentCatalog::PublishedAfter(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = ever_published_.find(name);
  if (it == ever_published_.end() || ++it == ever_published_.end()) return std::nullopt;
  return *it;
}

std::optional<absl::Time> SegmentCatalog::ShippableSince(const Position& p) const {
  absl::MutexLock lock(&mu_);
  if (ends_.empty() || !(p < ends_.back().first)) return std::nullopt;
  // The first publication that made a byte after `p` shippable.
  auto it = std::upper_bound(
      ends_.begin(), ends_.end(), p,
      [](const Position& x, const std::pair<Position, absl::Time>& e) { return x < e.first; });
  return it->second;
}

void SegmentCatalog::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  current_.version++;
  current_.source_status = std::move(status);
}

void SegmentCatalog::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  current_.version++;
}

CatalogSnapshot SegmentCatalog::Get() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

bool SegmentCatalog::WaitForChange(uint64_t seen_version, absl::Time deadline) const {
  return WaitForChange(nullptr, seen_version, deadline);
}

}  // namespace walship::agent
