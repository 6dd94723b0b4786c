#include "replica/control_client.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

void SetPos(const Position& p, walship::v1::Position* out) {
  out->set_segment(p.segment);
  out->set_offset(p.offset);
}

// The session's status for a handshake the agent refused or never answered.
absl::Status HandshakeError(const grpc::Status& gs, const std::string& agent) {
  absl::Status s = FromGrpc(gs, absl::StrCat("handshake with ", agent));
  // The server could not be reached, is shutting down, or its source cannot
  // answer yet (not a primary, no segment yet): retry.
  if (gs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return WithReason(absl::UnavailableError(s.message()), ReasonOf(s));
  }
  // UNAUTHENTICATED (the agent refused our certificate) is retried too,
  // not fatal: an operator fixes it, or a CA rotation completes, without
  // restarting us.
  return s;
}

}  // namespace

absl::StatusOr<Negotiated> NegotiateHandshake(const ReplicaOptions& options,
                                              const std::string& stream_id,
                                              const DurablePoint& recorded,
                                              const std::optional<DurablePoint>& tail,
                                              const HandshakeCall& call,
                                              const ResolveTailFn& resolve) {
  Negotiated out;
  out.durable = recorded;
  // Bytes received before the last stop but never recorded are presented
  // first: the agent's prefix check confirms them byte for byte (CRC32C),
  // and only then do they count. If it refuses them (FAILED_PRECONDITION),
  // they are cut off and the recorded position is presented instead.
  grpc::Status gs = call(tail.value_or(recorded), tail.has_value(), &out.response);
  if (tail.has_value()) {
    if (gs.ok()) {
      WALSHIP_RETURN_IF_ERROR(resolve(true));
      spdlog::info("kept {} bytes of {} received before the last stop: the agent confirmed "
                   "them", tail->position.offset - recorded.position.offset,
                   tail->position.segment);
      out.durable = *tail;
    } else if (ReasonOf(FromGrpc(gs)) == Reason::kDivergent) {
      // Only proof that they differ from the source's bytes cuts them: a
      // gap, a source not ready or not a primary, a wrong stream leave them
      // (acknowledged bytes may be among them) and end this session.
      spdlog::warn("discarding the {} bytes of {} past the recorded position {}: the agent "
                   "showed that they differ from the source's ({})",
                   tail->position.offset - recorded.position.offset, tail->position.segment,
                   recorded.position.ToString(), gs.error_message());
      WALSHIP_RETURN_IF_ERROR(resolve(false));
      out.response.Clear();
      gs = call(recorded, false, &out.response);
    }
  }
  if (!gs.ok()) return HandshakeError(gs, options.agent);
  const walship::v1::HandshakeResponse& resp = out.response;
  if (resp.protocol_version() != walship::v1::PROTOCOL_VERSION_1) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent speaks protocol version ", resp.protocol_version()));
  }
  if (!stream_id.empty() && resp.stream_id() != stream_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "destination ", options.dest, " holds stream ", stream_id,
        " but the agent serves ", resp.stream_id()));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ControlClient>> ControlClient::Create(
    sys::SysCalls& sys, const ReplicaOptions& options, Clock& clock) {
  WALSHIP_ASSIGN_OR_RETURN(HostPort agent, ParseHostPort(options.agent));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(sys, clock, options.agent, options.tls);
  if (!channel.ok()) {
    // Checked at start-up; failing now means the files changed under a
    // rotation in progress: keep retrying rather than exit.
    return absl::UnavailableError(
        absl::StrCat("TLS files: ", channel.status().message()));
  }
  grpc::ChannelArguments own;
  own.SetInt("walship.acknowledgements", 1);  // never the events' connection
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ack_channel =
      MakeChannel(sys, clock, options.agent, options.tls, own);
  if (!ack_channel.ok()) {
    return absl::UnavailableError(absl::StrCat("TLS files: ", ack_channel.status().message()));
  }
  return std::unique_ptr<ControlClient>(
      new ControlClient(options, std::move(agent), walship::v1::Control::NewStub(*channel),
                        walship::v1::Control::NewStub(*ack_channel), clock));
}

grpc::Status ControlClient::Call(const std::string& stream_id,
                                 const std::vector<HeldCopy>& held, const DurablePoint& at,
                                 bool unrecorded, walship::v1::HandshakeResponse* out) {
  walship::v1::HandshakeRequest req;
  req.set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
  req.set_replica_name(options_.name);
  req.set_stream_id(stream_id);
  SetPos(at.position, req.mutable_durable());
  req.set_durable_prefix_crc32c(at.prefix_crc32c);
  req.set_durable_segment_complete(at.complete);
  req.set_durable_unrecorded(unrecorded);
  for (const HeldCopy& h : held) {
    walship::v1::HeldSegment* m = req.add_held_segments();
    m->set_name(h.name);
    m->set_length(h.length);
    m->set_crc32c(h.crc32c);
    m->set_unrecorded(h.unrecorded);
  }
  req.set_transport(TransportName(options_.transport));
  // The compression asked for (compressed_frames.h); none: plain DATA.
  req.set_compression(static_cast<walship::v1::Compression>(options_.compression));
  req.set_compression_level(options_.compression_level);
  req.set_data_tls(options_.data_tls_on() ? walship::v1::DATA_TLS_ON : walship::v1::DATA_TLS_OFF);
  req.set_applies_patches(true);  // SegmentWriter::ApplyPatches
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(clock_.Now() + options_.connect_timeout));
  return stub_->Handshake(&ctx, req, out);
}

absl::StatusOr<Negotiated> ControlClient::Handshake(const std::string& stream_id,
                                                    const DurablePoint& recorded,
                                                    const std::optional<DurablePoint>& tail,
                                                    const std::vector<HeldCopy>& held,
                                                    const ResolveTailFn& resolve) {
  HandshakeCall call = [&](const DurablePoint& at, bool unrecorded,
                           walship::v1::HandshakeResponse* out) {
    return Call(stream_id, held, at, unrecorded, out);
  };
  return NegotiateHandshake(options_, stream_id, recorded, tail, call, resolve);
}

std::unique_ptr<ControlClient::SessionStream> ControlClient::OpenSession(
    grpc::ClientContext* ctx) {
  return stub_->Session(ctx);
}

std::unique_ptr<ControlClient::SessionStream> ControlClient::OpenAckSession(
    grpc::ClientContext* ctx) {
  return ack_stub_->Session(ctx);
}

}  // namespace walship::replica
