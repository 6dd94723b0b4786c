#include "agent/control_service.h"

#include <algorithm>

#include "agent/compression.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "agent/data_port_tls.h"
#include "common/net/tls_conn.h"
#include "common/reason.h"
#include "common/rpc_status.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/wire/segment_name.h"
#include "spdlog/spdlog.h"

namespace walship::agent {
namespace {

// The fingerprint of the client certificate that made this call (empty
// without one): what the data socket's certificate must match.
std::string PeerFingerprint(const grpc::ServerContextBase& ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> pem = auth->FindPropertyValues("x509_pem_cert");
  if (pem.empty()) return "";
  return net::CertificateFingerprint(std::string(pem[0].data(), pem[0].size()));
}


bool ValidReplicaName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

void SetPos(const Position& p, walship::v1::Position* out) {
  out->set_segment(p.segment);
  out->set_offset(p.offset);
}

}  // namespace

ControlServiceImpl::ControlServiceImpl(const AgentOptions& options,
                                       const WalSource& source,
                                       const SegmentCatalog& catalog,
                                       SegmentChecksums& checksums,
                                       SessionRegistry& registry,
                                       const uint16_t& data_port,
                                       MetricsRegistry* metrics, Clock& clock)
    : clock_(clock),
      options_(options),
      source_(source),
      catalog_(catalog),
      checksums_(checksums),
      registry_(registry),
      data_port_(data_port),
      metrics_(metrics),
      order_(source, catalog) {
  if (metrics_ != nullptr) {
    metrics_->Counter("walship_agent_handshakes_refused_total",
                      "Handshakes refused, by reason (not_allowed, identity_mismatch, invalid, "
                      "wrong_stream, divergent, unconfirmed_tail, gap, damaged_copy, "
                      "source_failed, not_primary, not_leader, not_ready, source_behind, "
                      "older_timeline, patch_unsupported, other).");
    metrics_->Counter("walship_agent_handshakes_total", "Handshakes accepted, by replica.");
    acks_total_ = metrics_->Counter(
        "walship_agent_acks_total",
        "Acknowledgements received, by replica (paced: see --ack-interval-ms).");
  }
}

grpc::Status ControlServiceImpl::CheckIdentity(const grpc::ServerContextBase& ctx,
                                              const std::string& replica_name) const {
  if (options_.tls.insecure) return grpc::Status::OK;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  std::vector<std::string> names;
  if (auth != nullptr) names = PeerCertificateNames(*auth);
  if (std::find(names.begin(), names.end(), replica_name) != names.end()) {
    return grpc::Status::OK;
  }
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("replica name ", replica_name,
                   " is not a name its client certificate carries (",
                   names.empty() ? std::string("none") : absl::StrJoin(names, ", "),
                   "); issue the replica a certificate with CN or DNS SAN ",
                   replica_name));
}

void ControlServiceImpl::CountRefusal(const std::string& reason) {
  if (metrics_ == nullptr) return;
  metrics_->Counter("walship_agent_handshakes_refused_total", "")
      .Add({{"reason", reason}}, 1);
}

absl::StatusOr<ShipStart> ControlServiceImpl::StartPosition(
    const walship::v1::HandshakeRequest& req) {
  const Position durable{req.durable().segment(), req.durable().offset()};
  if (durable.segment.empty() && durable.offset != 0) {
    return absl::InvalidArgumentError("durable offset without a segment");
  }
  if (!durable.segment.empty()) {
    if (absl::Status s = wire::ValidateSegmentName(durable.segment); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("durable position: ", s.message()));
    }
  }
  WALSHIP_RETURN_IF_ERROR(source_.Readiness());
  if (gate_ != nullptr) WALSHIP_RETURN_IF_ERROR(gate_->Admit());
  CatalogSnapshot snap = catalog_.Get();
  if (!snap.source_status.ok()) {
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
                          "the WAL source failed, so the agent cannot vouch for its bytes: ",
                          snap.source_status.message())),
                      Reason::kSourceFailed);
  }
  // From the oldest segment the shipper finds.
  if (durable.segment.empty()) return ShipStart{durable, 0};
  if (snap.segments->empty()) {
    return WithReason(absl::UnavailableError(absl::StrCat(
                          "the WAL directory shows no segment yet; the replica is durable at ",
                          durable.ToString(), " and keeps every byte while it waits")),
                      Reason::kNotReady);
  }
  const int i = snap.Find(durable.segment);
  if (i >= 0) return CheckHeldPrefix((*snap.segments)[i], req);
  return ContinueMissing(snap, req);
}

absl::StatusOr<ShipStart> ControlServiceImpl::CheckHeldPrefix(
    const SegmentInfo& seg, const walship::v1::HandshakeRequest& req) {
  const Position durable{req.durable().segment(), req.durable().offset()};
  if (durable.offset > seg.shippable) {
    if (seg.complete) {
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
                            "divergent history: the replica holds ", durable.offset,
                            " bytes of ", seg.name, " but the source's complete segment has ",
                            seg.shippable)),
                        Reason::kDivergent);
    }
    // Not proof of anything: the source may not show what it wrote yet (a
    // restart over a directory still being filled, a primary that reports
    // its flush position late).
    return WithReason(absl::UnavailableError(absl::StrCat(
                          "the replica holds ", durable.offset, " bytes of ", seg.name,
                          " but the source shows only ", seg.shippable,
                          " so far; waiting for the source to catch up")),
                      Reason::kSourceBehind);
  }
  WALSHIP_ASSIGN_OR_RETURN(uint32_t crc, checksums_.Prefix(seg.name, durable.offset));
  // Only the bits the format declares mutable may differ (a MariaDB binlog
  // closed since the replica received its head): the shipper then checks
  // the rest against what the replica holds, and the checkpoint patches it.
  WALSHIP_ASSIGN_OR_RETURN(
      bool same, checksums_.PrefixMatchesButMutable(seg.name, durable.offset, crc,
                                                    req.durable_prefix_crc32c(),
                                                    source_.MutableBytes()));
  if (!same) {
    return WithReason(absl::FailedPreconditionError(absl::StrFormat(
                          "divergent history: the replica's first %d bytes of %s have CRC32C "
                          "%08x, the source's have %08x; the replica's copy differs from the "
                          "primary",
                          durable.offset, seg.name, req.durable_prefix_crc32c(), crc)),
                      Reason::kDivergent);
  }
  if (crc != req.durable_prefix_crc32c()) {
    spdlog::info("replica {}: its first {} bytes of {} differ from the source's only in bits "
                 "format {} rewrites in place; the segment's checkpoint will patch them",
                 req.replica_name(), durable.offset, seg.name, source_.FormatName());
  }
  return ShipStart{durable, req.durable_prefix_crc32c()};
}

absl::StatusOr<ShipStart> ControlServiceImpl::ContinueMissing(
    const CatalogSnapshot& snap, const walship::v1::HandshakeRequest& req) {
  const Position durable{req.durable().segment(), req.durable().offset()};
  WALSHIP_ASSIGN_OR_RETURN(std::optional<Position> next,
                           source_.RedirectMissing(durable, req.durable_prefix_crc32c()));
  if (next.has_value()) {
    spdlog::info("replica durable at {}: that segment was superseded (timeline switch); "
                 "continuing at {}",
                 durable.ToString(), next->ToString());
    return ShipStart{*next, 0};
  }
  const std::vector<SegmentInfo>& segs = *snap.segments;
  if (durable.segment < segs.front().name) {
    if (!req.durable_segment_complete()) {
      return WithReason(absl::FailedPreconditionError(absl::StrCat(
                            "gap: the replica is durable at ", durable.ToString(), " but ",
                            durable.segment, " is no longer in the WAL directory (oldest is ",
                            segs.front().name, "): the source can neither send the rest of it "
                            "nor confirm the bytes the replica holds; rebuild the replica "
                            "from a newer base")),
                        Reason::kGap);
    }
    // The replica holds all of it; the stream moved on since, and every
    // segment between must still be here.
    WALSHIP_RETURN_IF_ERROR(order_.CheckNext(durable.segment, segs.front().name));
    return ShipStart{Position{segs.front().name, 0}, 0};
  }
  if (durable.segment > segs.back().name) {
    return WithReason(absl::UnavailableError(absl::StrCat(
                          "the replica is durable at ", durable.ToString(),
                          " but the source shows no segment of that name yet (newest is ",
                          segs.back().name, "); waiting")),
                      Reason::kSourceBehind);
  }
  const auto after = std::upper_bound(
      segs.begin(), segs.end(), durable.segment,
      [](const std::string& n, const SegmentInfo& s) { return n < s.name; });
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        "gap: the replica is durable at ", durable.ToString(),
                        " but the source has no segment of that name, although it has ",
                        std::prev(after)->name, " before it and ", after->name,
                        " after it; rebuild the replica from a newer base")),
                    Reason::kGap);
}

grpc::Status ControlServiceImpl::Refuse(const grpc::ServerContext& ctx,
                                        const walship::v1::HandshakeRequest& req,
                                        const absl::Status& why) {
  const Reason reason = ReasonOf(why);
  if (req.durable_unrecorded() && reason == Reason::kDivergent) {
    // Bytes the replica never recorded: it cuts them off and asks again.
    spdlog::info("handshake from replica {} ({}): not confirming the bytes it received "
                 "before its last stop and never recorded: {}",
                 req.replica_name(), ctx.peer(), std::string(why.message()));
    CountRefusal("unconfirmed_tail");
  } else if (absl::IsUnavailable(why)) {
    // The replica retries; one line per replica and cause, not per attempt.
    RefusalLog(req.replica_name(), ctx.peer(), why);
    CountRefusal(std::string(ReasonName(reason)));
  } else {
    spdlog::error("handshake from replica {} ({}): {}", req.replica_name(), ctx.peer(),
                  why.ToString());
    CountRefusal(reason == Reason::kUnspecified ? "other" : std::string(ReasonName(reason)));
  }
  return ToGrpc(why);
}

void ControlServiceImpl::RefusalLog(const std::string& replica, const std::string& peer,
                                    const absl::Status& why) {
  const std::string key = absl::StrCat(replica, "/", ReasonName(ReasonOf(why)));
  {
    absl::MutexLock lock(&log_mu_);
    // Names come from callers: bounded, at the price of a repeated line.
    if (last_refusal_log_.size() >= 1024) last_refusal_log_.clear();
    absl::Time& last = last_refusal_log_[key];
    if (clock_.Now() - last < absl::Seconds(30)) return;
    last = clock_.Now();
  }
  spdlog::warn("handshake from replica {} ({}): not now, the replica retries: {}", replica,
               peer, std::string(why.message()));
}

grpc::Status ControlServiceImpl::Handshake(grpc::ServerContext* ctx,
                                           const walship::v1::HandshakeRequest* req,
                                           walship::v1::HandshakeResponse* resp) {
  if (req->protocol_version() != walship::v1::PROTOCOL_VERSION_1) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("unsupported protocol version ",
                                     req->protocol_version(), " (agent speaks 1)"));
  }
  if (!ValidReplicaName(req->replica_name())) {
    CountRefusal("invalid");
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "replica name must be 1..64 characters of [A-Za-z0-9._-]");
  }
  if (!options_.allow_replicas.empty() &&
      std::find(options_.allow_replicas.begin(), options_.allow_replicas.end(),
                req->replica_name()) == options_.allow_replicas.end()) {
    std::string msg = absl::StrCat("replica ", req->replica_name(),
                                   " is not in this agent's --allow-replicas list");
    spdlog::error("handshake from {}: refused: {}", ctx->peer(), msg);
    CountRefusal("not_allowed");
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, msg);
  }
  if (grpc::Status id = CheckIdentity(*ctx, req->replica_name()); !id.ok()) {
    spdlog::error("handshake from {}: refused: {}", ctx->peer(), id.error_message());
    CountRefusal("identity_mismatch");
    return id;
  }
  const std::string stream_id = source_.StreamId();
  if (!req->stream_id().empty() && req->stream_id() != stream_id) {
    std::string msg = absl::StrCat(
        "replica ", req->replica_name(), " belongs to stream ", req->stream_id(),
        " but this agent serves stream ", stream_id,
        "; refusing to mix two primaries' WAL");
    spdlog::error("handshake from {}: {}", ctx->peer(), msg);
    CountRefusal("wrong_stream");
    return ToGrpc(WithReason(absl::FailedPreconditionError(msg), Reason::kWrongStream));
  }
  // Before a token exists: a replica that would send it, and receive WAL, in
  // plaintext against this agent's choice is refused.
  if (absl::Status tls = CheckDataTlsChoice(options_.data_tls_on(), req->data_tls()); !tls.ok()) {
    return Refuse(*ctx, *req, tls);
  }
  if (!source_.MutableBytes().empty() && !req->applies_patches()) {
    return Refuse(*ctx, *req,
                  WithReason(absl::FailedPreconditionError(absl::StrCat(
                                 "replica ", req->replica_name(), " does not apply the in-place "
                                 "patches of format ", source_.FormatName(),
                                 " (whose database rewrites bytes of a segment after writing "
                                 "them): its copies of complete segments would differ from the "
                                 "source's; upgrade walship-replica")),
                             Reason::kPatchUnsupported));
  }
  absl::StatusOr<ShipStart> start = StartPosition(*req);
  if (!start.ok()) return Refuse(*ctx, *req, start.status());
  for (const walship::v1::HeldSegment& h : req->held_segments()) {
    if (!wire::ValidateSegmentName(h.name()).ok()) continue;
    start->held.push_back(HeldSegment{h.name(), h.length(), h.crc32c(), h.unrecorded()});
  }
  const CompressionChoice compression =
      NegotiateCompression(*req, options_.allow_compression);
  start->compression = compression.codec;
  start->compression_level = compression.level;
  std::string token;
  auto session = registry_.Create(req->replica_name(), *start, req->transport(),
                                  options_.token_ttl, &token);
  if (options_.data_tls_on()) session->BindIdentity(PeerFingerprint(*ctx));
  resp->set_data_tls(options_.data_tls_on() ? walship::v1::DATA_TLS_ON
                                            : walship::v1::DATA_TLS_OFF);
  resp->set_protocol_version(walship::v1::PROTOCOL_VERSION_1);
  resp->set_stream_id(stream_id);
  SetPos(start->position, resp->mutable_start());
  resp->set_data_token(token);
  resp->set_session_id(session->id());
  resp->set_token_ttl_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.token_ttl)));
  resp->set_max_payload_bytes(options_.max_payload);
  resp->set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat)));
  resp->set_data_port(data_port_);
  resp->set_ack_stream(true);
  resp->set_source_format(source_.FormatName());
  resp->set_timeline(source_.Timeline());
  SetCompression(compression, resp);
  if (!compression.declined.empty()) {
    spdlog::warn("replica {}: compression declined, shipping uncompressed: {}",
                 req->replica_name(), compression.declined);
  }
  if (metrics_ != nullptr) {
    metrics_->Counter("walship_agent_handshakes_total", "")
        .Add({{"replica", req->replica_name()}}, 1);
  }
  spdlog::info("replica {} (session {}) from {}: shipping from {}, compression {}",
               req->replica_name(), session->id(), ctx->peer(), start->position.ToString(),
               CompressionLabel(compression.codec, compression.level));
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Status(grpc::ServerContext*,
                                        const walship::v1::StatusRequest*,
                                        walship::v1::StatusResponse* resp) {
  CatalogSnapshot snap = catalog_.Get();
  Position endpos = snap.End();
  resp->set_stream_id(source_.StreamId());
  resp->set_source_format(source_.FormatName());
  resp->set_timeline(source_.Timeline());
  SetPos(endpos, resp->mutable_source_end());
  if (std::optional<SourceHold> hold = source_.Hold();
      hold.has_value() && hold->segment == endpos.segment) {
    resp->set_source_file_size(hold->file_size);
    resp->set_held_back_reason(hold->reason);
  }
  // Sessions are stalled by a leader key only once it names another member;
  // the source's error says whether a new replica would be served.
  const absl::Status source = source_.Readiness();
  const absl::Status readiness = SessionReadiness(source, gate_);
  const absl::Status serving = ServingReadiness(source, gate_);
  if (!snap.source_status.ok()) {
    resp->set_source_error(snap.source_status.ToString());
  } else if (!serving.ok()) {
    resp->set_source_error(serving.ToString());
  }
  const absl::Time now = clock_.Now();
  uint64_t zc = 0, cp = 0;
  for (const auto& session : registry_.All()) {
    walship::v1::ReplicaStatus* r = resp->add_replicas();
    *r = session->Snapshot();
    const ReplicaFacts facts = session->Facts();
    const ReplicaCondition c =
        Classify(facts, snap, readiness, now, options_.stall_timeout);
    r->set_state(std::string(StateName(c.state)));
    r->set_state_reason(c.reason);
    r->set_unchanged_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(now - facts.progress_at)));
    const Position& flushed = facts.flushed;
    const uint64_t lag = c.lag_bytes;
    r->set_lag_bytes(lag);
    // Age of the oldest shippable byte this replica has not flushed.
    std::optional<absl::Time> since = catalog_.ShippableSince(flushed);
    r->set_lag_ms(lag == 0 || !since.has_value()
                      ? 0
                      : static_cast<uint64_t>(absl::ToInt64Milliseconds(now - *since)));
    zc += r->agent_counters().bytes_zerocopy();
    cp += r->agent_counters().bytes_copy();
  }
  resp->mutable_agent_counters()->set_bytes_zerocopy(zc);
  resp->mutable_agent_counters()->set_bytes_copy(cp);
  return grpc::Status::OK;
}

}  // namespace walship::agent
