// data_conn.h: how bytes get onto and off the data socket.
//
// The data socket carries frames (common/wire/wire_format.md) one way, agent
// to replica, after the replica's HELLO. A DataConn is that socket as the
// code that moves frames sees it; the frames are the same on every path:
//
//   kPlain         the socket itself. Payload moves with sendfile(2) on the
//                  agent and splice(2) socket -> pipe -> file on the replica
//                  (Transport::kZeroCopy), or through one reused buffer
//                  (Transport::kCopy). common/sys/transfer.h's loops.
//   kUserspaceTls  a TLS session (OpenSSL) over the socket. Payload is
//                  encrypted and decrypted in user space, through one reused
//                  buffer: pread + SSL_write on the agent, SSL_read + pwrite
//                  on the replica. (tls_conn.h)
//   kKernelTls     a TLS session whose record layer the kernel runs (kTLS):
//                  SSL_sendfile keeps sendfile(2) from the page cache on the
//                  agent, and the replica splices from the socket. Chosen at
//                  run time when OpenSSL and the kernel offer it (tls_conn.h).
//
// Every method has transfer.h's contract: exactly `count` bytes or an error,
// EINTR retried, each wait for readiness bounded by `io.io_timeout`, the
// same codes (kUnavailable: the peer or the network, reconnect; kDataLoss:
// the source file ended early, or the disk reported EIO; ...). After any
// failure the connection is dead: the stream position is unknown, and the
// destination range of a ReceiveToFile holds unspecified bytes.
//
// Thread-safety: one thread at a time (the agent's shipper hands the
// connection between threads under its own lock). The file descriptor is
// borrowed unless the implementation says otherwise.
#ifndef WALSHIP_COMMON_NET_DATA_CONN_H_
#define WALSHIP_COMMON_NET_DATA_CONN_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "common/sys/pipe.h"
#include "common/sys/syscalls.h"
#include "common/sys/transfer.h"
#include "common/transport.h"

namespace walship::net {

enum class DataPath { kPlain, kUserspaceTls, kKernelTls };

// "off", "userspace", "ktls": the names in logs, status and metrics.
const char* DataPathName(DataPath path);

class DataConn {
 public:
  virtual ~DataConn() = default;

  // The socket (for shutdown(2), readiness and socket options).
  virtual int fd() const = 0;
  virtual DataPath path() const = 0;
  // True when payload bytes never enter user space (OnSent's `zerocopy`).
  virtual bool zerocopy() const = 0;

  // Sends `count` bytes of `buf`. `more` (MSG_MORE on a plain socket): more
  // follows at once, so the bytes may wait to share a TCP segment.
  virtual absl::Status SendFully(const void* buf, size_t count, bool more,
                                 const sys::TransferOptions& io) = 0;
  // Reads exactly `count` bytes. End of stream before the first byte:
  // kOutOfRange("end of stream"), as sys::ReadFully.
  virtual absl::Status ReadFully(void* buf, size_t count, const sys::TransferOptions& io) = 0;
  // Agent: sends bytes [offset, offset + count) of the file `in_fd`.
  virtual absl::Status SendFile(int in_fd, off_t offset, size_t count,
                                const sys::TransferOptions& io) = 0;
  // Replica: writes the next `count` bytes of the stream into `out_fd` at
  // `out_offset`. Nothing is fsynced.
  virtual absl::Status ReceiveToFile(int out_fd, off_t out_offset, size_t count,
                                     const sys::TransferOptions& io) = 0;
  // Bytes already taken off the socket and decrypted but not yet read (0 on
  // a plain socket): the socket's own queue does not show them.
  virtual size_t Buffered() const { return 0; }
};

// The plain socket `fd` (borrowed) moving payload with `transport`;
// `buffer_bytes` is the copy transport's buffer, `pipe_bytes` the zero-copy
// receive pipe's capacity (created at the first ReceiveToFile, and again
// after a failed one).
std::unique_ptr<DataConn> MakePlainConn(sys::SysCalls& sys, int fd, Transport transport,
                                        size_t buffer_bytes = 256u << 10,
                                        size_t pipe_bytes = 1u << 20);

}  // namespace walship::net

#endif  // WALSHIP_COMMON_NET_DATA_CONN_H_
