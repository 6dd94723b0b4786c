#include "replica/serve.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/pgwal/wal_names.h"
#include "common/sys/transfer.h"
#include "common/wire/crc32c.h"
#include "replica/restore.h"
#include "replica/state_store.h"
#include "spdlog/spdlog.h"

namespace walship::replica {
namespace {

bool IsSegmentName(const std::string& name) {
  return name.size() == pg::kSegmentNameLength && pg::ParseSegmentName(name, 1u << 20).ok();
}

// The newest complete WAL segment of `sums`, if any.
const std::pair<const std::string, SegmentSum>* NewestSegment(
    const std::map<std::string, SegmentSum>& sums) {
  for (auto it = sums.rbegin(); it != sums.rend(); ++it) {
    if (IsSegmentName(it->first)) return &*it;
  }
  return nullptr;
}

}  // namespace

WalServeService::WalServeService(sys::SysCalls& sys, std::string dest,
                                 MetricsRegistry* metrics)
    : sys_(sys), dest_(std::move(dest)), metrics_(metrics) {
  if (metrics_ != nullptr) {
    fetches_ = metrics_->Counter("walship_replica_wal_fetches_total",
                                 "WalServe Fetch calls by result: served, not_found, refused "
                                 "(failed its record), failed (read error, client gone).");
    fetched_bytes_ = metrics_->Counter("walship_replica_wal_fetched_bytes_total",
                                       "File bytes sent by WalServe Fetch calls.");
  }
}

void WalServeService::Count(const char* result, uint64_t bytes) {
  if (!fetches_) return;
  fetches_->Add({{"result", result}}, 1);
  if (bytes > 0) fetched_bytes_->Add({}, static_cast<double>(bytes));
}

grpc::Status WalServeService::Held(grpc::ServerContext*, const v1::HeldRequest*,
                                   v1::HeldResponse* resp) {
  StateStore store(sys_, dest_);
  auto state = store.Load();
  if (!state.ok()) {
    spdlog::error("serve: cannot read the position record: {}", state.status().ToString());
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, state.status().ToString());
  }
  const std::map<std::string, SegmentSum> sums = LoadSegmentSums(sys_, dest_);
  size_t skip = sums.size() > kHeldFilesMax ? sums.size() - kHeldFilesMax : 0;
  for (const auto& [name, sum] : sums) {
    if (skip > 0) {
      --skip;
      continue;
    }
    v1::HeldSegment* f = resp->add_files();
    f->set_name(name);
    f->set_length(sum.length);
    f->set_crc32c(sum.crc32c);
  }
  if (!state->has_value()) return grpc::Status::OK;
  const ReplicaState& st = **state;
  resp->set_stream_id(st.stream_id);
  if (st.segment_complete || !IsSegmentName(st.durable.segment)) {
    // At the end of a complete file: the end is that of the newest complete
    // segment (a history file has no place in the WAL).
    const auto* newest = NewestSegment(sums);
    if (newest == nullptr) return grpc::Status::OK;
    resp->mutable_durable()->set_segment(newest->first);
    resp->mutable_durable()->set_offset(newest->second.length);
    resp->set_durable_segment_complete(true);
    resp->set_segment_size(newest->second.length);
    return grpc::Status::OK;
  }
  resp->mutable_durable()->set_segment(st.durable.segment);
  resp->mutable_durable()->set_offset(0);
  if (st.durable.offset == 0) return grpc::Status::OK;
  RestorePlan plan;
  std::string why;
  if (PlanRestore(sys_, dest_, st.durable.segment, &plan, &why) != kRestoreServed) {
    spdlog::error("serve: the segment being received fails its record: {}", why);
    return grpc::Status(grpc::StatusCode::DATA_LOSS, why);
  }
  resp->mutable_durable()->set_offset(plan.verified);
  resp->set_segment_size(plan.size + plan.pad);
  return grpc::Status::OK;
}

grpc::Status WalServeService::Fetch(grpc::ServerContext* ctx, const v1::FetchRequest* req,
                                    grpc::ServerWriter<v1::FetchChunk>* writer) {
  RestorePlan plan;
  std::string why;
  const int rc = PlanRestore(sys_, dest_, req->name(), &plan, &why);
  if (rc == kRestoreNotFound) {
    Count("not_found", 0);
    return grpc::Status(grpc::StatusCode::NOT_FOUND, why);
  }
  if (rc != kRestoreServed) {
    Count("refused", 0);
    spdlog::error("serve: {} for {}", why, ctx->peer());
    return grpc::Status(grpc::StatusCode::DATA_LOSS, why);
  }
  v1::FetchChunk chunk;
  v1::FetchHeader* h = chunk.mutable_header();
  h->set_size(plan.size);
  h->set_verified(plan.verified);
  h->set_verified_crc32c(plan.verified_crc32c);
  h->set_pad(plan.pad);
  h->set_complete(plan.complete);
  uint32_t crc = 0;
  std::string buf;
  for (uint64_t off = 0; off < plan.size || chunk.has_header();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kFetchChunkBytes, plan.size - off));
    buf.resize(n);
    if (absl::Status s = sys::PreadFully(sys_, plan.fd.get(), buf.data(), n, off); !s.ok()) {
      spdlog::error("serve: reading {} at {}: {}", plan.path, off, s.ToString());
      Count("failed", off);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, s.ToString());
    }
    if (off < plan.verified) {
      const uint64_t v = std::min<uint64_t>(n, plan.verified - off);
      crc = wire::Crc32cExtend(crc, buf.data(), static_cast<size_t>(v));
      if (off + v == plan.verified && crc != plan.verified_crc32c) {
        why = absl::StrFormat("refusing %s: its %d verified bytes changed while being sent "
                              "(CRC32C %08x, %08x recorded)",
                              plan.path, plan.verified, crc, plan.verified_crc32c);
        spdlog::error("serve: {}", why);
        Count("refused", off);
        return grpc::Status(grpc::StatusCode::DATA_LOSS, why);
      }
    }
    chunk.set_data(std::move(buf));
    if (!writer->Write(chunk)) {
      Count("failed", off);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    chunk.Clear();
    buf.clear();
    off += n;
  }
  spdlog::info("serve: {} to {}", why, ctx->peer());
  Count("served", plan.size);
  return grpc::Status::OK;
}

WalServer::WalServer(sys::SysCalls& sys, std::string dest, MetricsRegistry* metrics,
                     Clock& clock)
    : sys_(sys), clock_(clock), service_(sys, std::move(dest), metrics) {}

WalServer::~WalServer() { Shutdown(); }

absl::Status WalServer::Start(const std::string& listen, const TlsOptions& tls) {
  auto creds = MakeServerCredentials(sys_, clock_, tls, [](const std::string&, const std::string& detail) {
    spdlog::warn("serve port: refused a call: {}", detail);
  });
  if (!creds.ok()) return creds.status();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, *creds, &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen for WAL fetches on ", listen));
  }
  port_ = static_cast<uint16_t>(port);
  return absl::OkStatus();
}

void WalServer::Shutdown() {
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(clock_.Now() + absl::Seconds(1)));
    server_.reset();
  }
}

}  // namespace walship::replica
