#include "replica/agent_list.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net.h"
#include "common/reason.h"

namespace walship::replica {
namespace {

bool UpperHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
  });
}

}  // namespace

absl::StatusOr<std::vector<AgentEntry>> ParseAgentEntries(absl::string_view text) {
  std::vector<AgentEntry> out;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("no agent given");
  }
  auto taken = [&out](auto field, const std::string& v) {
    return std::any_of(out.begin(), out.end(), [&](const AgentEntry& e) { return e.*field == v; });
  };
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string entry(absl::StripAsciiWhitespace(part));
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty entry in the agent list \"", text, "\""));
    }
    AgentEntry e;
    e.address = entry;
    if (size_t eq = entry.find('='); eq != std::string::npos) {
      e.member = std::string(absl::StripAsciiWhitespace(entry.substr(0, eq)));
      e.address = std::string(absl::StripAsciiWhitespace(entry.substr(eq + 1)));
      if (e.member.empty() || e.address.find('=') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("agent \"", entry, "\": expected NAME=HOST:PORT"));
      }
    }
    if (auto hp = ParseHostPort(e.address); !hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("agent \"", entry, "\": ", hp.status().message()));
    }
    if (taken(&AgentEntry::address, e.address)) {
      return absl::InvalidArgumentError(absl::StrCat("agent ", e.address, " is named twice"));
    }
    if (!e.member.empty() && taken(&AgentEntry::member, e.member)) {
      return absl::InvalidArgumentError(
          absl::StrCat("member name ", e.member, " is given to two agents"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseAgentList(absl::string_view text) {
  absl::StatusOr<std::vector<AgentEntry>> entries = ParseAgentEntries(text);
  if (!entries.ok()) return entries.status();
  std::vector<std::string> out;
  for (AgentEntry& e : *entries) out.push_back(std::move(e.address));
  return out;
}

uint32_t TimelineOfWalName(absl::string_view name) {
  absl::string_view tli;
  if (name.size() == 24 && UpperHex(name)) {
    tli = name.substr(0, 8);
  } else if (name.size() == 16 && absl::EndsWith(name, ".history") &&
             UpperHex(name.substr(0, 8))) {
    tli = name.substr(0, 8);
  } else {
    return 0;
  }
  uint32_t v = 0;
  if (!absl::SimpleHexAtoi(tli, &v)) return 0;
  return v;
}

absl::Status CheckTimelineFence(uint32_t offered, uint32_t held, absl::string_view agent) {
  if (offered == 0 || held == 0 || offered >= held) return absl::OkStatus();
  return WithReason(
      absl::UnavailableError(absl::StrCat(
          "agent ", agent, " serves timeline ", offered, ", older than timeline ", held,
          " this replica holds durably: its node was superseded (a stale or demoted "
          "primary), and its WAL past the fork point is not in this replica's history; "
          "refusing it")),
      Reason::kOlderTimeline);
}

bool AgentCannotServe(const absl::Status& s) {
  const Reason r = ReasonOf(s);
  return r == Reason::kNotPrimary || r == Reason::kOlderTimeline || r == Reason::kNotLeader;
}

std::optional<AgentView> NewerPrimary(uint32_t current, const std::vector<AgentView>& views) {
  if (current == 0) return std::nullopt;
  for (const AgentView& v : views) {
    if (v.serving && v.timeline > current) return v;
  }
  return std::nullopt;
}

AgentRotation::AgentRotation(std::vector<std::string> agents)
    : agents_(std::move(agents)), last_outcome_(agents_.size()) {}

const std::string& AgentRotation::current() const {
  static const std::string* const kNone = new std::string();
  return agents_.empty() ? *kNone : agents_[current_];
}

bool AgentRotation::SetAgents(std::vector<std::string> agents) {
  if (agents == agents_) return false;
  std::vector<std::string> outcomes(agents.size());
  size_t next = 0;
  for (size_t i = 0; i < agents.size(); ++i) {
    auto it = std::find(agents_.begin(), agents_.end(), agents[i]);
    if (it == agents_.end()) continue;
    const size_t was = static_cast<size_t>(it - agents_.begin());
    outcomes[i] = last_outcome_[was];
    if (was == current_) next = i;
  }
  agents_ = std::move(agents);
  last_outcome_ = std::move(outcomes);
  current_ = next;
  tried_ = 0;
  return true;
}

AgentRotation::Step AgentRotation::OnSessionEnd(const absl::Status& s, bool established) {
  Step step;
  if (agents_.empty()) {
    step.round_complete = true;
    step.outcome_changed = true;
    step.outcome = absl::AsciiStrToLower(absl::StatusCodeToString(s.code()));
    return step;
  }
  step.agent = agents_[current_];
  step.index = current_;
  const Reason reason = ReasonOf(s);
  step.outcome = reason != Reason::kUnspecified
                     ? std::string(ReasonName(reason))
                     : absl::AsciiStrToLower(absl::StatusCodeToString(s.code()));
  std::string& last = last_outcome_[current_];
  step.outcome_changed = last != step.outcome;
  last = step.outcome;
  if (established) {
    leader_ = agents_[current_];
    tried_ = 0;
    // The leader is tried again first, unless it said it cannot serve.
    if (!AgentCannotServe(s)) return step;
  }
  ++tried_;
  if (tried_ >= agents_.size()) {
    step.round_complete = true;
    tried_ = 0;
  }
  const size_t before = current_;
  current_ = (current_ + 1) % agents_.size();
  step.switched = current_ != before;
  return step;
}

}  // namespace walship::replica
