#include "replica/fetch.h"

#include <fcntl.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/rpc_status.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/file_util.h"
#include "common/sys/transfer.h"
#include "common/sys/unique_fd.h"
#include "common/wire/crc32c.h"
#include "replica/restore.h"

namespace walship::replica {
namespace {

// Writes the call's chunks to `fd`, checking them against the header.
// `drained`: the stream ended (its status tells how); otherwise the caller
// cancels the call.
absl::StatusOr<FetchedFile> ReceiveInto(sys::SysCalls& sys,
                                        grpc::ClientReaderInterface<v1::FetchChunk>& reader,
                                        int fd, const std::string& name, bool* drained) {
  v1::FetchChunk chunk;
  *drained = false;
  if (!reader.Read(&chunk)) {
    *drained = true;
    return absl::UnavailableError(absl::StrCat(name, ": the stream ended before its header"));
  }
  if (!chunk.has_header()) {
    return absl::UnavailableError(absl::StrCat(name, ": the stream ended before its header"));
  }
  const v1::FetchHeader h = chunk.header();
  if (h.verified() > h.size() || (h.complete() && (h.verified() != h.size() || h.pad() != 0))) {
    return absl::DataLossError(absl::StrCat(name, ": inconsistent header: ", h.ShortDebugString()));
  }
  uint64_t got = 0;
  uint32_t crc = 0;
  do {
    const std::string& data = chunk.data();
    if (data.size() > h.size() - got) {
      return absl::DataLossError(
          absl::StrCat("refusing ", name, ": more than the ", h.size(), " bytes announced"));
    }
    if (got < h.verified()) {
      const uint64_t v = std::min<uint64_t>(data.size(), h.verified() - got);
      crc = wire::Crc32cExtend(crc, data.data(), static_cast<size_t>(v));
    }
    WALSHIP_RETURN_IF_ERROR(sys::WriteFully(sys, fd, data.data(), data.size()));
    got += data.size();
  } while (reader.Read(&chunk));
  *drained = true;
  if (got != h.size()) {
    // The call's status tells why it ended early (checked by the caller
    // first); an OK status with bytes missing is a damaged stream.
    return absl::DataLossError(
        absl::StrCat("refusing ", name, ": ", got, " bytes received, ", h.size(), " announced"));
  }
  if (crc != h.verified_crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "refusing %s: CRC32C of its %d verified bytes is %08x as received, %08x recorded "
        "by the replica",
        name, h.verified(), crc, h.verified_crc32c()));
  }
  std::string zeros(std::min<uint64_t>(h.pad(), uint64_t{1} << 20), '\0');
  for (uint64_t done = 0; done < h.pad();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), h.pad() - done));
    WALSHIP_RETURN_IF_ERROR(sys::WriteFully(sys, fd, zeros.data(), n));
    done += n;
  }
  return FetchedFile{h.size(), h.verified(), h.pad(), h.complete()};
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::StatusOr<FetchedFile> FetchWalFile(sys::SysCalls& sys, v1::WalServe::StubInterface& stub,
                                         const std::string& name, const std::string& target,
                                         absl::Time deadline, bool durable) {
  const std::string tmp = absl::StrCat(target, ".walship-fetch");
  WALSHIP_ASSIGN_OR_RETURN(sys::UniqueFd fd,
                           sys::OpenFile(sys, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::FetchRequest req;
  req.set_name(name);
  std::unique_ptr<grpc::ClientReaderInterface<v1::FetchChunk>> reader = stub.Fetch(&ctx, req);
  bool drained = false;
  absl::StatusOr<FetchedFile> got = ReceiveInto(sys, *reader, fd.get(), name, &drained);
  if (!drained) ctx.TryCancel();
  grpc::Status call = reader->Finish();
  absl::Status s = got.status();
  if (!call.ok() && drained) {
    // The server's word first: NOT_FOUND, DATA_LOSS, UNAVAILABLE,
    // DEADLINE_EXCEEDED...
    s = FromGrpc(call, absl::StrCat("fetch ", name));
  }
  if (s.ok() && durable) {
    if (sys::SysResult r = sys.Fdatasync(fd.get()); !r.ok()) {
      s = sys::ErrnoToStatus(r.err, absl::StrCat("fdatasync ", tmp));
    }
  }
  if (int err = fd.Close(); err != 0 && s.ok()) {
    s = sys::ErrnoToStatus(err, absl::StrCat("close ", tmp));
  }
  if (s.ok()) {
    if (sys::SysResult r = sys.Rename(tmp.c_str(), target.c_str()); !r.ok()) {
      s = sys::ErrnoToStatus(r.err, absl::StrCat("rename ", tmp, " to ", target));
    }
  }
  if (!s.ok()) {
    // Best effort: a leftover is truncated by the next fetch of the name.
    (void)sys.Unlink(tmp.c_str());
    return s;
  }
  if (durable) WALSHIP_RETURN_IF_ERROR(sys::FsyncDir(sys, DirOf(target)));
  return got;
}

absl::StatusOr<v1::HeldResponse> FetchHeld(v1::WalServe::StubInterface& stub,
                                           absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::HeldResponse resp;
  grpc::Status s = stub.Held(&ctx, v1::HeldRequest(), &resp);
  if (!s.ok()) return FromGrpc(s, "held");
  return resp;
}

absl::StatusOr<std::unique_ptr<v1::WalServe::StubInterface>> MakeWalServeStub(
    sys::SysCalls& sys, Clock& clock, const std::string& address, const TlsOptions& tls) {
  WALSHIP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                           MakeChannel(sys, clock, address, tls));
  return std::unique_ptr<v1::WalServe::StubInterface>(v1::WalServe::NewStub(channel));
}

int RestoreFrom(sys::SysCalls& sys, Clock& clock, const std::vector<std::string>& addresses,
                const TlsOptions& tls, const std::string& name, const std::string& target,
                absl::Duration timeout, std::string* why) {
  const absl::Time deadline = clock.Now() + timeout;
  std::vector<std::string> notes;
  bool refused = false;
  for (const std::string& address : addresses) {
    auto stub = MakeWalServeStub(sys, clock, address, tls);
    if (!stub.ok()) {
      notes.push_back(absl::StrCat(address, ": ", stub.status().message()));
      continue;
    }
    auto got = FetchWalFile(sys, **stub, name, target, deadline, /*durable=*/false);
    if (got.ok()) {
      *why = absl::StrCat("served ", name, " from ", address, ": ", got->size, " bytes (",
                          got->verified, " verified), zero-padded by ", got->pad);
      return kRestoreServed;
    }
    if (got.status().code() == absl::StatusCode::kDataLoss) refused = true;
    notes.push_back(absl::StrCat(address, ": ", got.status().ToString()));
  }
  *why = absl::StrJoin(notes, "; ");
  return refused ? kRestoreRefused : kRestoreNotFound;
}

}  // namespace walship::replica
