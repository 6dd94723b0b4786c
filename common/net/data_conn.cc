#include "common/net/data_conn.h"

#include <sys/socket.h>

#include <utility>

#include "common/status_macros.h"

namespace walship::net {
namespace {

class PlainConn final : public DataConn {
 public:
  PlainConn(sys::SysCalls& sys, int fd, Transport transport, size_t buffer_bytes,
            size_t pipe_bytes)
      : sys_(sys), fd_(fd), transport_(transport), pipe_bytes_(pipe_bytes) {
    if (transport_ == Transport::kCopy) buffer_.resize(buffer_bytes);
  }

  int fd() const override { return fd_; }
  DataPath path() const override { return DataPath::kPlain; }
  bool zerocopy() const override { return transport_ == Transport::kZeroCopy; }

  absl::Status SendFully(const void* buf, size_t count, bool more,
                         const sys::TransferOptions& io) override {
    return sys::SendFully(sys_, fd_, buf, count, more ? MSG_MORE : 0, io);
  }
  absl::Status ReadFully(void* buf, size_t count, const sys::TransferOptions& io) override {
    return sys::ReadFully(sys_, fd_, buf, count, io);
  }
  absl::Status SendFile(int in_fd, off_t offset, size_t count,
                        const sys::TransferOptions& io) override {
    if (zerocopy()) return sys::SendFileFully(sys_, fd_, in_fd, offset, count, io);
    return sys::CopyFileToSocket(sys_, fd_, in_fd, offset, count, absl::MakeSpan(buffer_), io);
  }
  absl::Status ReceiveToFile(int out_fd, off_t out_offset, size_t count,
                             const sys::TransferOptions& io) override {
    if (!zerocopy()) {
      if (buffer_.empty()) buffer_.resize(256u << 10);
      return sys::CopySocketToFile(sys_, fd_, out_fd, out_offset, count,
                                   absl::MakeSpan(buffer_), io);
    }
    if (!pipe_.has_value()) {
      WALSHIP_ASSIGN_OR_RETURN(sys::Pipe p, sys::Pipe::Create(sys_, pipe_bytes_));
      pipe_.emplace(std::move(p));
    }
    absl::Status s = sys::SpliceFully(sys_, fd_, *pipe_, out_fd, out_offset, count, io);
    if (!s.ok()) pipe_.reset();  // may hold stray bytes
    return s;
  }

 private:
  sys::SysCalls& sys_;
  const int fd_;
  const Transport transport_;
  const size_t pipe_bytes_;
  std::vector<char> buffer_;
  std::optional<sys::Pipe> pipe_;
};

}  // namespace

const char* DataPathName(DataPath path) {
  switch (path) {
    case DataPath::kPlain: return "off";
    case DataPath::kUserspaceTls: return "userspace";
    case DataPath::kKernelTls: return "ktls";
  }
  return "?";
}

std::unique_ptr<DataConn> MakePlainConn(sys::SysCalls& sys, int fd, Transport transport,
                                        size_t buffer_bytes, size_t pipe_bytes) {
  return std::make_unique<PlainConn>(sys, fd, transport, buffer_bytes, pipe_bytes);
}

}  // namespace walship::net
