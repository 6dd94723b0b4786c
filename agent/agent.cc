#include "agent/agent.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "agent/append_source.h"
#include "agent/postgres_source.h"
#include "agent/slot_keeper.h"
#include "agent/control_service.h"
#include "agent/data_server.h"
#include "agent/replica_session.h"
#include "agent/segment_catalog.h"
#include "agent/segment_checksums.h"
#include "agent/shipper.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "common/sys/file_util.h"
#include "spdlog/spdlog.h"

namespace walship::agent {

Agent::Agent(sys::SysCalls& sys, AgentOptions options)
    : sys_(sys), options_(std::move(options)) {}

Agent::~Agent() { Shutdown(); }

uint16_t Agent::data_port() const { return data_server_ ? data_server_->port() : 0; }

absl::Status Agent::Start() {
  WALSHIP_RETURN_IF_ERROR(options_.Validate());
  catalog_ = std::make_unique<SegmentCatalog>();
  registry_ = std::make_unique<SessionRegistry>();
  if (options_.format == "postgres") {
    PostgresSourceOptions po;
    po.wal_dir = options_.wal_dir;
    po.conninfo = options_.pg_conninfo;
    po.stream_id = options_.stream_id;
    auto pg = std::make_unique<PostgresSource>(sys_, po, *catalog_);
    PostgresSource* raw = pg.get();
    source_ = std::move(pg);
    WALSHIP_RETURN_IF_ERROR(source_->Start());
    if (!options_.pg_slot.empty()) {
      SlotKeeperOptions ko;
      ko.conninfo = options_.pg_conninfo;
      ko.slot = options_.pg_slot;
      ko.max_retained_bytes = options_.max_retained_bytes;
      SessionRegistry* registry = registry_.get();
      slot_keeper_ = std::make_unique<SlotKeeper>(
          ko,
          [registry] {
            std::vector<ReplicaFlush> out;
            for (const auto& s : registry->All()) out.push_back({s->name(), s->flushed()});
            return out;
          },
          [raw](const Position& p) { return raw->PositionToLsn(p); });
      WALSHIP_RETURN_IF_ERROR(slot_keeper_->Start());
    }
  } else {
    AppendSourceOptions so;
    so.wal_dir = options_.wal_dir;
    so.stream_id = options_.stream_id;
    source_ = std::make_unique<AppendSource>(sys_, so, *catalog_);
    WALSHIP_RETURN_IF_ERROR(source_->Start());
  }
  checksums_ = std::make_unique<SegmentChecksums>(sys_, source_->wal_dir());

  ShipperOptions ship;
  ship.transport = options_.transport;
  ship.max_payload = options_.max_payload;
  ship.io.io_timeout = options_.io_timeout;
  ShipperRunner runner = [this, ship](int fd, const Position& start,
                                      ShipperEvents* events,
                                      const std::atomic<bool>& stop) {
    Shipper shipper(sys_, *catalog_, *checksums_, source_->wal_dir(), fd, start, ship,
                    events);
    return shipper.Run(stop);
  };
  DataServerOptions dso;
  WALSHIP_ASSIGN_OR_RETURN(dso.listen, ParseHostPort(options_.data_listen));
  data_server_ = std::make_unique<DataServer>(sys_, dso, *registry_, std::move(runner));
  WALSHIP_RETURN_IF_ERROR(data_server_->Start());
  data_port_ = data_server_->port();

  service_ = std::make_unique<ControlServiceImpl>(options_, *source_, *catalog_,
                                                  *checksums_, *registry_, data_port_);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for control on ", options_.listen));
  }
  control_port_ = static_cast<uint16_t>(port);
  WALSHIP_ASSIGN_OR_RETURN(HostPort control, ParseHostPort(options_.listen));
  WALSHIP_ASSIGN_OR_RETURN(HostPort data, ParseHostPort(options_.data_listen));
  control.port = control_port_;
  data.port = data_port_;
  spdlog::info("serving stream {} ({} format) from {}: control on {}, data on {}, transport {}",
               source_->StreamId(), source_->FormatName(), options_.wal_dir,
               control.ToString(), data.ToString(), TransportName(options_.transport));
  if (!options_.port_file.empty()) {
    std::string dir = ".", name = options_.port_file;
    size_t slash = options_.port_file.rfind('/');
    if (slash != std::string::npos) {
      dir = options_.port_file.substr(0, slash);
      name = options_.port_file.substr(slash + 1);
    }
    WALSHIP_RETURN_IF_ERROR(sys::WriteFileAtomically(
        sys_, dir, name,
        absl::StrCat("control=", control.ToString(), "\ndata=", data.ToString(), "\n")));
  }
  return absl::OkStatus();
}

void Agent::Shutdown() {
  if (slot_keeper_) slot_keeper_->Stop();
  if (data_server_) data_server_->Stop();
  if (catalog_) catalog_->Shutdown();
  if (registry_) registry_->CloseAll();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
  }
  if (source_) source_->Stop();
}

}  // namespace walship::agent
