// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: transfer.h
// -----------------------------------------------------------------------------
//
// Loop-until-done wrappers around the data-moving syscalls. Each loop in
// walship that moves bytes between a file and a socket is written here, once,
// and every caller uses it. All of them share these rules:
//
//   * EINTR: the call is retried. No bytes are lost or duplicated, because an
//     interrupted call that had moved bytes returns the short count instead.
//   * EAGAIN (non-blocking socket): wait for readiness with poll(2) for at
//     most `TransferOptions::io_timeout`, then retry. A wait that expires
//     fails with kUnavailable("timed out ..."). The timeout bounds each wait,
//     not the whole transfer: a slow but moving peer never times out. On a
//     blocking TCP socket the kernel blocks instead and only SO_RCVTIMEO /
//     SO_SNDTIMEO (which surface as EAGAIN) bound the wait; splice from an
//     AF_UNIX socket never blocks (SPLICE_F_NONBLOCK applies to it), so it
//     always waits here.
//   * Short transfers: the loop continues from where the kernel stopped.
//     Offsets are advanced by the byte count the kernel returned.
//   * No call ever asks for more than what remains of `count`, so a transfer
//     never consumes bytes beyond its range from a socket or a file.
//   * Errors become a Status through ErrnoToStatus (errors.h), with context
//     naming the operation, descriptors, byte offset and progress
//     ("N of M bytes"). Codes, by what the caller does next:
//       kUnavailable   the peer closed, reset, or did not become ready in
//                      time (EPIPE, ECONNRESET, EOF on a socket mid-transfer,
//                      poll timeout): reconnect and retry.
//       kDataLoss      the source file ended before `count` bytes (it was
//                      truncated or is shorter than the caller believed), or
//                      the disk reported EIO.
//       kUnimplemented sendfile/splice cannot be used for these descriptors
//                      (EINVAL, ENOSYS, EOPNOTSUPP): restart with
//                      --transport=copy (CopyFileToSocket/CopySocketToFile).
//       others         as ErrnoToStatus maps them (ENOSPC ->
//                      kResourceExhausted, ...).
//   * State after failure: some prefix of the range may have been moved. The
//     destination's contents in the range are unspecified and the socket's
//     stream position is unknown; the caller must treat the connection as
//     dead and rewrite (or discard) the destination range. Nothing here ever
//     fsyncs: durability is the caller's job.
//   * SIGPIPE: sendfile(2) and write(2) raise SIGPIPE when the peer has gone;
//     only send(2) can suppress it per call (MSG_NOSIGNAL, which SendFully
//     always adds). Daemons call IgnoreSigpipe() once at startup so the
//     failure arrives as EPIPE -> kUnavailable instead of killing the process.
//
// Offsets are byte offsets within the file (for WAL, within one segment);
// counts are bytes. None of these functions use or move a file descriptor's
// file position except ReadFully/WriteFully/SendFully, which work on stream
// positions by nature.
//
// Thread-safety: the functions hold no state. Concurrent transfers on
// distinct descriptors are fine; two concurrent transfers on one socket
// interleave bytes unpredictably, as with the raw syscalls.

#ifndef WALSHIP_COMMON_SYS_TRANSFER_H_
#define WALSHIP_COMMON_SYS_TRANSFER_H_

#include <sys/types.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/sys/pipe.h"
#include "common/sys/syscalls.h"

namespace walship {
namespace sys {

struct TransferOptions {
  // The longest wait for a socket to become ready after one EAGAIN. Rounded
  // up to whole milliseconds; absl::InfiniteDuration() waits forever; zero
  // or negative fails on the first EAGAIN.
  absl::Duration io_timeout = absl::Seconds(30);
};

// SendFileFully()
//
// Sends bytes [offset, offset + count) of the file `in_fd` to the socket
// `out_sock` with sendfile(2), without copying through user space and without
// using `in_fd`'s file position.
//
// Returns OK once exactly `count` bytes were accepted by the socket.
// sendfile returning 0 before then means the file ended early: kDataLoss
// ("source truncated: file ended at offset X, expected Y"), never success.
// EPIPE/ECONNRESET -> kUnavailable; EINVAL/ENOSYS/EOPNOTSUPP ->
// kUnimplemented (use --transport=copy). `count == 0` is OK without any call.
absl::Status SendFileFully(SysCalls& sys, int out_sock, int in_fd, off_t offset,
                           size_t count, const TransferOptions& opts);

// SpliceFully()
//
// Moves exactly `count` bytes from the socket `in_sock` into the file
// `out_fd` at byte offset `out_offset`, through `pipe` with splice(2), never
// copying through user space. The file's position is neither used nor moved.
//
// The pipe must be empty on entry. Socket data is pulled in steps of at most
// min(bytes remaining, pipe.capacity() - bytes in the pipe) and the pipe is
// drained into the file after each step; when the socket has nothing
// (EAGAIN) the pipe is drained before waiting for POLLIN.
//
// Errors: the socket ending (splice returns 0) before `count` bytes ->
// kUnavailable("peer closed after N of M bytes"); EPIPE/ECONNRESET ->
// kUnavailable; file-side EIO -> kDataLoss, ENOSPC -> kResourceExhausted
// (context names the file offset); EINVAL/ENOSYS/EOPNOTSUPP ->
// kUnimplemented (use --transport=copy).
//
// After any failure the pipe may hold unspecified bytes: the caller must
// discard it and create a new Pipe for the next transfer. On success it is
// empty again.
absl::Status SpliceFully(SysCalls& sys, int in_sock, const Pipe& pipe,
                         int out_fd, off_t out_offset, size_t count,
                         const TransferOptions& opts);

// CopyFileToSocket()
//
// The user-space fallback for SendFileFully (--transport=copy): pread(2)s
// the range into `buffer`, reused for every chunk, and send(2)s each chunk
// with MSG_NOSIGNAL. Same contract and error codes as SendFileFully, except
// that EINVAL is not reinterpreted (kInvalidArgument). pread returning 0
// before the end -> kDataLoss (source truncated). `buffer` must be non-empty
// unless `count == 0` (kInvalidArgument otherwise).
absl::Status CopyFileToSocket(SysCalls& sys, int out_sock, int in_fd,
                              off_t offset, size_t count,
                              absl::Span<char> buffer,
                              const TransferOptions& opts);

// CopySocketToFile()
//
// The user-space fallback for SpliceFully: read(2)s from the socket into
// `buffer` and pwrite(2)s each chunk to `out_fd` at `out_offset` onwards.
// Same contract and error codes as SpliceFully (without the pipe), except
// that EINVAL is not reinterpreted (kInvalidArgument). `buffer` must be
// non-empty unless `count == 0`.
absl::Status CopySocketToFile(SysCalls& sys, int in_sock, int out_fd,
                              off_t out_offset, size_t count,
                              absl::Span<char> buffer,
                              const TransferOptions& opts);

// ReadFully()
//
// Reads exactly `count` bytes from a stream (normally a socket) into `buf`.
//
// End of stream before the first byte -> absl::OutOfRangeError("end of
// stream"): the peer closed cleanly between messages. End of stream after
// some bytes -> kUnavailable("peer closed mid-read after N of M bytes").
// EINTR/EAGAIN as in the file comment. `count == 0` is OK without any call.
// On failure `buf` holds unspecified bytes.
absl::Status ReadFully(SysCalls& sys, int fd, void* buf, size_t count,
                       const TransferOptions& opts);

// ReadOnce()
//
// One read(2) of up to `count` bytes into `buf`, retried while it fails
// with EINTR; any other result as the kernel gave it (bytes read, 0 at end
// of stream, EAGAIN on an empty non-blocking socket, errors). For callers
// that buffer a socket themselves and must not wait.
SysResult ReadOnce(SysCalls& sys, int fd, void* buf, size_t count);

// SendFully()
//
// Sends exactly `count` bytes from `buf` on the socket `fd` with send(2).
// `flags` (e.g. MSG_MORE) is passed on every call, always with MSG_NOSIGNAL
// added. EPIPE/ECONNRESET -> kUnavailable.
absl::Status SendFully(SysCalls& sys, int fd, const void* buf, size_t count,
                       int flags, const TransferOptions& opts);

// WriteFully()
//
// Writes exactly `count` bytes to a file at its current position with
// write(2), retrying EINTR and continuing after short writes. Meant for
// regular files (no readiness waits; EAGAIN is an error). ENOSPC ->
// kResourceExhausted, EIO -> kDataLoss.
absl::Status WriteFully(SysCalls& sys, int fd, const void* buf, size_t count);

// PwriteFully()
//
// Writes exactly `count` bytes to a file at byte `offset` with pwrite(2).
// Same rules as WriteFully; the file position is not used.
absl::Status PwriteFully(SysCalls& sys, int fd, const void* buf, size_t count,
                         off_t offset);

// PreadFully()
//
// Reads exactly `count` bytes of a file at byte `offset` with pread(2). The
// file ending first -> kOutOfRange ("file ended at offset X, wanted Y"); `buf`
// then holds the bytes that did exist followed by unspecified bytes.
absl::Status PreadFully(SysCalls& sys, int fd, void* buf, size_t count,
                        off_t offset);

// IgnoreSigpipe()
//
// Sets SIGPIPE to SIG_IGN for the whole process, once; later calls do
// nothing. Thread-safe. Call it from main() before any socket I/O.
void IgnoreSigpipe();

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_TRANSFER_H_
