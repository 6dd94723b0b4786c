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

}  // namespace status
}  // namespace walship
