#include "agent/data_port_limits.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace walship::agent {

// ---------------------------------------------------------------------------
// PendingTable

PendingTable::PendingTable(int max_total, int max_per_address)
    : max_total_(static_cast<size_t>(std::max(1, max_total))),
      max_per_address_(std::max(1, max_per_address)) {}

bool PendingTable::AddressFull(const std::string& address) const {
  return CountFrom(address) >= max_per_address_;
}

int PendingTable::CountFrom(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

uint64_t PendingTable::Add(PendingHello hello, std::optional<PendingHello>* evicted) {
  evicted->reset();
  if (entries_.size() >= max_total_) {
    // The oldest entry: keys grow with every Add.
    evicted->emplace(Take(entries_.begin()->first));
  }
  ++per_address_[hello.address];
  const uint64_t key = next_key_++;
  entries_.emplace(key, std::move(hello));
  return key;
}

PendingHello* PendingTable::Find(uint64_t key) {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void PendingTable::Forget(const PendingHello& hello) {
  auto it = per_address_.find(hello.address);
  if (it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
}

PendingHello PendingTable::Take(uint64_t key) {
  auto it = entries_.find(key);
  PendingHello out = std::move(it->second);
  entries_.erase(it);
  Forget(out);
  return out;
}

std::vector<PendingHello> PendingTable::TakeExpired(absl::Time now) {
  std::vector<uint64_t> expired;
  for (const auto& [key, hello] : entries_) {
    if (hello.deadline <= now) expired.push_back(key);
  }
  std::vector<PendingHello> out;
  out.reserve(expired.size());
  for (uint64_t key : expired) out.push_back(Take(key));
  return out;
}

absl::Time PendingTable::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, hello] : entries_) next = std::min(next, hello.deadline);
  return next;
}

std::vector<PendingHello> PendingTable::TakeAll() {
  std::vector<PendingHello> out;
  out.reserve(entries_.size());
  for (uint64_t key : Keys()) out.push_back(Take(key));
  return out;
}

std::vector<uint64_t> PendingTable::Keys() const {
  std::vector<uint64_t> keys;
  keys.reserve(entries_.size());
  for (const auto& [key, hello] : entries_) keys.push_back(key);
  return keys;
}

// ---------------------------------------------------------------------------
// FailureLimiter

FailureLimiter::FailureLimiter(FailureLimiterOptions options) : options_(std::move(options)) {}

double FailureLimiter::DebtAt(const Entry& e, absl::Time now) const {
  // Nothing is forgiven while blocked.
  const absl::Time from = std::max(e.updated, e.blocked_until);
  if (now <= from) return e.debt;
  const double forgiven = absl::FDivDuration(now - from, options_.forgive_every);
  return std::max(0.0, e.debt - forgiven);
}

bool FailureLimiter::Forgettable(const Entry& e, absl::Time now) const {
  return now >= e.blocked_until && DebtAt(e, now) <= 0;
}

void FailureLimiter::MakeRoom(absl::Time now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (Forgettable(it->second, now)) {
      entries_.erase(it++);
    } else {
      ++it;
    }
  }
  if (entries_.size() < options_.max_addresses) return;
  // The block that ends soonest; among the unblocked, the smallest debt.
  auto least = std::min_element(entries_.begin(), entries_.end(), [](const auto& a,
                                                                     const auto& b) {
    if (a.second.blocked_until != b.second.blocked_until) {
      return a.second.blocked_until < b.second.blocked_until;
    }
    return a.second.debt < b.second.debt;
  });
  entries_.erase(least);
}

absl::Duration FailureLimiter::RecordFailure(const std::string& address, absl::Time now) {
  auto it = entries_.find(address);
  if (it != entries_.end() && Forgettable(it->second, now)) {
    entries_.erase(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    if (entries_.size() >= options_.max_addresses) MakeRoom(now);
    Entry fresh;
    fresh.updated = now;
    fresh.next_backoff = options_.first_backoff;
    it = entries_.emplace(address, fresh).first;
  }
  Entry& e = it->second;
  e.debt = DebtAt(e, now) + 1;
  e.updated = std::max(e.updated, now);
  if (now < e.blocked_until || e.debt <= options_.burst) return absl::ZeroDuration();
  const absl::Duration backoff = e.next_backoff;
  e.blocked_until = now + backoff;
  e.next_backoff = std::min(backoff * 2, options_.max_backoff);
  // The debt stays at the burst: a failure right after the block blocks
  // again, for twice as long, unless time has forgiven some of it.
  e.debt = options_.burst;
  return backoff;
}

bool FailureLimiter::Blocked(const std::string& address, absl::Time now,
                             absl::Time* until) const {
  auto it = entries_.find(address);
  if (it == entries_.end() || now >= it->second.blocked_until) return false;
  if (until != nullptr) *until = it->second.blocked_until;
  return true;
}

// ---------------------------------------------------------------------------
// RejectLog

RejectLog::RejectLog(RejectLogOptions options, Sink sink)
    : options_(std::move(options)), sink_(std::move(sink)) {}

void RejectLog::Record(const std::string& address, const std::string& peer,
                       absl::string_view reason, absl::string_view detail, absl::Time now) {
  auto it = open_.find(address);
  if (it == open_.end()) {
    const bool room = open_.size() < options_.max_addresses;
    const std::string key = room ? address : std::string(kOtherAddresses);
    it = open_.find(key);
    if (it == open_.end()) {
      Interval fresh;
      fresh.start = now;
      it = open_.emplace(key, std::move(fresh)).first;
      next_due_ = std::min(next_due_, now + options_.interval);
    }
  }
  Interval& in = it->second;
  ++in.total;
  uint64_t& of_reason = in.by_reason[std::string(reason)];
  const bool first_of_reason = of_reason++ == 0;
  if (now >= lines_window_start_ + options_.interval) {
    lines_window_start_ = now;
    lines_in_window_ = 0;
  }
  if (first_of_reason && lines_in_window_ < options_.max_full_lines) {
    ++lines_in_window_;
    ++in.logged;
    sink_(absl::StrCat("data port: rejected connection from ", peer, ": ", detail));
  }
}

void RejectLog::Summarize(const std::string& address, const Interval& in) {
  if (in.total <= in.logged) return;
  std::vector<std::string> parts;
  for (const auto& [reason, count] : in.by_reason) {
    parts.push_back(absl::StrCat(reason, " ", count));
  }
  sink_(absl::StrCat("data port: rejected ", in.total, " connections from ", address, " in ",
                     absl::FormatDuration(options_.interval), " (", absl::StrJoin(parts, ", "),
                     "); ", in.total - in.logged, " of them not logged one by one"));
}

void RejectLog::Flush(absl::Time now) {
  if (now < next_due_) return;
  next_due_ = absl::InfiniteFuture();
  for (auto it = open_.begin(); it != open_.end();) {
    const absl::Time end = it->second.start + options_.interval;
    if (now >= end) {
      Summarize(it->first, it->second);
      it = open_.erase(it);
    } else {
      next_due_ = std::min(next_due_, end);
      ++it;
    }
  }
}

void RejectLog::FlushAll() {
  for (const auto& [address, in] : open_) Summarize(address, in);
  open_.clear();
  next_due_ = absl::InfiniteFuture();
}

}  // namespace walship::agent
