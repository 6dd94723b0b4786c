#include "replica/member_agents.h"

#include <algorithm>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/net.h"

namespace walship::replica {
namespace {

bool Named(const std::vector<AgentEntry>& list, const AgentEntry& e) {
  return std::any_of(list.begin(), list.end(), [&](const AgentEntry& o) {
    return o.address == e.address || (!e.member.empty() && o.member == e.member);
  });
}

}  // namespace

MemberAgents AgentsFromMembers(const std::vector<LeaderKey::KeyValue>& kvs,
                               absl::string_view prefix, absl::string_view tag) {
  MemberAgents out;
  for (const LeaderKey::KeyValue& kv : kvs) {
    const std::string member = MemberOfKey(kv.key, prefix);
    if (member.empty()) continue;
    google::protobuf::Struct doc;
    if (!google::protobuf::util::JsonStringToMessage(kv.value, &doc).ok()) {
      out.problems.push_back(absl::StrCat("member ", member, ": its key ", kv.key,
                                          " does not hold a JSON object"));
      continue;
    }
    const auto tags = doc.fields().find("tags");
    const google::protobuf::Value* value = nullptr;
    if (tags != doc.fields().end() && tags->second.has_struct_value()) {
      const auto& fields = tags->second.struct_value().fields();
      if (auto it = fields.find(std::string(tag)); it != fields.end()) value = &it->second;
    }
    if (value == nullptr) {
      out.untagged.push_back(member);
      continue;
    }
    const std::string address = value->has_string_value() ? value->string_value() : "";
    if (auto hp = ParseHostPort(address); address.empty() || !hp.ok()) {
      out.problems.push_back(absl::StrCat("member ", member, ": tag ", tag,
                                          " is not a HOST:PORT string"));
      continue;
    }
    const AgentEntry e{address, member};
    if (Named(out.agents, e)) {
      out.problems.push_back(absl::StrCat("member ", member, ": tag ", tag, " gives ", address,
                                          ", which another member gave first"));
      continue;
    }
    out.agents.push_back(e);
  }
  return out;
}

std::vector<AgentEntry> MergeAgents(const std::vector<AgentEntry>& configured,
                                    const std::vector<AgentEntry>& discovered) {
  std::vector<AgentEntry> out = configured;
  for (const AgentEntry& e : discovered) {
    if (!Named(out, e)) out.push_back(e);
  }
  return out;
}

std::string DescribeAgents(const std::vector<AgentEntry>& agents) {
  if (agents.empty()) return "none";
  return absl::StrJoin(agents, ", ", [](std::string* s, const AgentEntry& e) {
    absl::StrAppend(s, e.member.empty() ? "" : e.member + "=", e.address);
  });
}

}  // namespace walship::replica
