// walship-status: prints an agent's Status (every replica's positions, lag
// and transfer counters) as a table or as JSON.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "google/protobuf/util/json_util.h"
#include "proto/walship.grpc.pb.h"

namespace {

std::string Pos(const walship::v1::Position& p) {
  if (p.segment().empty()) return "-";
  return absl::StrFormat("%s@%d", p.segment(), p.offset());
}

}  // namespace

int main(int argc, char** argv) {
  std::string agent;
  bool json = false;
  int64_t timeout_ms = 5000;
  walship::FlagSet flags(
      "walship-status: shows an agent's replicas, their positions, lag and counters.\n"
      "Usage: walship-status --agent=HOST:PORT [--json]\n"
      "Exit status: 0 answered; 1 bad usage; 2 the agent did not answer.");
  flags.String("agent", &agent, "HOST:PORT of the agent's control port (required).");
  flags.Bool("json", &json, "Print the Status message as JSON.");
  flags.Int("timeout-ms", &timeout_ms, "Deadline for the call.");
  auto args = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!args.ok() || agent.empty()) {
    std::fprintf(stderr, "walship-status: %s\n",
                 args.ok() ? "--agent is required" : std::string(args.status().message()).c_str());
    return 1;
  }
  auto stub = walship::v1::Control::NewStub(
      grpc::CreateChannel(agent, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(timeout_ms)));
  walship::v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, walship::v1::StatusRequest(), &resp);
  if (!s.ok()) {
    std::fprintf(stderr, "walship-status: %s: %s\n", agent.c_str(), s.error_message().c_str());
    return 2;
  }
  if (json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions opts;
    opts.always_print_primitive_fields = true;
    opts.preserve_proto_field_names = true;
    google::protobuf::util::MessageToJsonString(resp, &out, opts);
    std::printf("%s\n", out.c_str());
    return 0;
  }
  std::printf("stream %s (%s), source end %s\n", resp.stream_id().c_str(),
              resp.source_format().c_str(), Pos(resp.source_end()).c_str());
  std::printf("%-16s %-9s %-9s %-28s %-28s %12s %9s %14s %14s  %s\n", "REPLICA", "CONNECTED",
              "TRANSPORT", "SENT", "FLUSHED", "LAG_BYTES", "LAG_MS", "ZEROCOPY_BYTES",
              "COPY_BYTES", "LAST_ERROR");
  for (const auto& r : resp.replicas()) {
    std::printf("%-16s %-9s %-9s %-28s %-28s %12llu %9llu %14llu %14llu  %s\n",
                r.name().c_str(), r.connected() ? "yes" : "no", r.transport().c_str(),
                Pos(r.sent()).c_str(), Pos(r.flushed()).c_str(),
                static_cast<unsigned long long>(r.lag_bytes()),
                static_cast<unsigned long long>(r.lag_ms()),
                static_cast<unsigned long long>(r.agent_counters().bytes_zerocopy()),
                static_cast<unsigned long long>(r.agent_counters().bytes_copy()),
                r.last_error().c_str());
  }
  return 0;
}
