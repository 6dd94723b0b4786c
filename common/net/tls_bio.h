// tls_bio.h: the userspace TLS path's own BIOs (OpenSSL's I/O objects).
//
// OpenSSL's socket BIO moves one TLS record per system call, and its
// read-ahead buffer costs more than it saves: before each record it moves
// every byte still buffered to the front of the buffer (to align the next
// payload), so a buffer of k records is copied about k/2 times. These two
// BIOs batch the socket I/O themselves, through sys::SysCalls:
//
//   GatherBio     (agent, write side) appends each record to a vector the
//                 caller sends with one send(2) per buffer (TlsConn::Drain).
//   ReadAheadBio  (replica, read side) reads the socket a buffer at a time
//                 with read(2) and hands OpenSSL, from memory, the record
//                 header and body it asks for (read-ahead stays off in the
//                 SSL object, so OpenSSL never moves buffered bytes): one
//                 extra copy of each byte, one system call per buffer.
//                 Used where walship's own record layer (tls_records.h)
//                 does not apply: TLS 1.2, ChaCha20-Poly1305.
//
// Neither is used where kernel TLS takes the direction (OpenSSL needs its
// socket BIO to hand the record layer to the kernel).
//
// Ownership: each New*Bio returns a BIO the caller gives to the SSL object
// (SSL_set0_wbio / SSL_set0_rbio), which frees it. The state it points to
// (the vector, the ReadAhead) is the caller's and must outlive the BIO.
// Thread-safety: as the SSL object, one thread at a time.
#ifndef WALSHIP_COMMON_NET_TLS_BIO_H_
#define WALSHIP_COMMON_NET_TLS_BIO_H_

#include <cstddef>
#include <vector>

#include "common/sys/syscalls.h"

struct bio_st;

namespace walship::net {

// A write-only BIO appending every write to `*out`.
bio_st* NewGatherBio(std::vector<char>* out);

// A write-only BIO failing every write (no retry): OpenSSL's write side
// once walship's own record layer sends (tls_records.h).
bio_st* NewRefusingBio();

// The read side's buffer: the socket's bytes not yet handed to OpenSSL.
class ReadAhead {
 public:
  // Reads `fd` (borrowed, non-blocking) through `sys`, up to `capacity`
  // bytes per read(2).
  ReadAhead(sys::SysCalls& sys, int fd, size_t capacity);

  // BIO_read's contract: up to `n` bytes into `out`; > 0 the count; 0 the
  // peer closed (eof() is then true); -1 with *retry when the socket has
  // nothing yet (EAGAIN; EINTR is retried), -1 without it on an error
  // (errno set to the syscall's).
  int Read(char* out, size_t n, bool* retry);

  // Bytes read from the socket and not yet handed to OpenSSL.
  size_t buffered() const { return end_ - begin_; }
  bool eof() const { return eof_; }

 private:
  sys::SysCalls& sys_;
  const int fd_;
  std::vector<char> buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
  bool eof_ = false;
};

// A read-only BIO serving OpenSSL from `*state`. BIO_pending is
// state->buffered().
bio_st* NewReadAheadBio(ReadAhead* state);

}  // namespace walship::net

#endif  // WALSHIP_COMMON_NET_TLS_BIO_H_
