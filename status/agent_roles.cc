#include "status/agent_roles.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace walship {
namespace status {
namespace {

std::string TimelineText(uint32_t timeline) {
  return timeline != 0 ? absl::StrCat(", timeline ", timeline) : "";
}

}  // namespace

std::string AgentLabel(const AgentAnswer& a) {
  return a.member.empty() ? a.address : absl::StrCat(a.member, " (", a.address, ")");
}

std::string AgentLine(const AgentAnswer& a) {
  std::string line = absl::StrCat("agent ", AgentLabel(a), ": ");
  if (!a.answered) return absl::StrCat(line, "DID NOT ANSWER: ", a.error);
  if (!a.serving()) return absl::StrCat(line, "not serving: ", a.not_serving);
  return absl::StrCat(line, "serving", TimelineText(a.timeline));
}

std::string ServingSummary(const std::vector<AgentAnswer>& answers) {
  std::vector<const AgentAnswer*> serving;
  size_t silent = 0;
  for (const AgentAnswer& a : answers) {
    if (a.serving()) serving.push_back(&a);
    if (!a.answered) ++silent;
  }
  const std::string silent_text =
      silent == 0 ? "" : absl::StrCat("; ", silent, " did not answer");
  if (serving.empty()) {
    return absl::StrCat("NO AGENT SERVES (", answers.size(), " agents asked", silent_text, ")");
  }
  if (serving.size() == 1) {
    return absl::StrCat("serving: ", AgentLabel(*serving[0]), TimelineText(serving[0]->timeline),
                        " (1 of ", answers.size(), " agents", silent_text, ")");
  }
  return absl::StrCat(
      "SEVERAL AGENTS SERVE: ",
      absl::StrJoin(serving, ", ", [](std::string* out, const AgentAnswer* a) {
        absl::StrAppend(out, AgentLabel(*a),
                        a->timeline != 0 ? absl::StrCat(" timeline ", a->timeline) : "");
      }));
}

std::string LeaderDisagreement(const std::vector<AgentAnswer>& answers,
                               const LeaderView& leader) {
  if (leader.state != LeaderView::State::kNamed) return "";
  const std::string head = absl::StrCat("THE LEADER KEY NAMES ", leader.member, ", ");
  for (const AgentAnswer& a : answers) {
    if (a.serving() && a.member != leader.member) {
      return absl::StrCat(head, "BUT ", AgentLabel(a), " SERVES");
    }
  }
  for (const AgentAnswer& a : answers) {
    if (a.member != leader.member) continue;
    if (!a.answered || a.serving()) return "";
    return absl::StrCat(head, "WHOSE AGENT ", AgentLabel(a), " DOES NOT SERVE");
  }
  return absl::StrCat(head, "AND NO AGENT ASKED IS ", leader.member, "'S");
}

}  // namespace status
}  // namespace walship
