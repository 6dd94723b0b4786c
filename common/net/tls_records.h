// tls_records.h: the replica's TLS 1.3 receive record layer, run by walship
// after OpenSSL's handshake: the userspace counterpart of kernel TLS receive.
//
// OpenSSL 3.0 decrypts a record only inside its own record buffer, and then
// copies the plaintext out: on the userspace path every byte of WAL was
// copied twice more than on a plaintext socket (read-ahead buffer -> record
// buffer -> caller). Kernel TLS avoids this by taking the record layer once
// the handshake is done, with the keys OpenSSL hands it. RecordReader does
// the same in user space, for the one direction it serves (agent ->
// replica): it reads the socket a buffer at a time and decrypts each record
// from that buffer straight into the caller's memory. OpenSSL keeps the
// handshake, certificate checks and the whole sending side.
//
// What it accepts (RFC 8446 section 5), and nothing else:
//   - TLS 1.3 with TLS_AES_128_GCM_SHA256 or TLS_AES_256_GCM_SHA384 (the
//     caller keeps OpenSSL's record layer for TLS 1.2 and ChaCha20).
//   - Records of type application_data, legacy version 0x0303, at most
//     2^14 + 256 bytes of ciphertext. Each is authenticated (AES-GCM, the
//     record header as additional data, nonce = IV xor sequence number)
//     before any of its bytes is returned.
//   - Inner content: application data; an alert (close_notify ends the
//     stream; any other is an error); handshake messages KeyUpdate (the
//     read keys advance; a requested update is reported through
//     TakeUpdateRequest()) and NewSessionTicket (ignored).
// The traffic secret comes from OpenSSL's key-log callback
// (SERVER_TRAFFIC_SECRET_0); key and IV are derived from it with
// HKDF-Expand-Label (RFC 8446 section 7.1 and 7.3).
//
// Errors: a record that fails authentication or is malformed is kDataLoss
// with Reason::kChecksum (nothing of it is returned; the caller discards
// the frame and reconnects); a read error is the errno's status; the peer
// closing the socket without close_notify, or sending an alert, is
// kUnavailable. After an error the reader must not be used again.
//
// Thread-safety: one thread at a time.
#ifndef WALSHIP_COMMON_NET_TLS_RECORDS_H_
#define WALSHIP_COMMON_NET_TLS_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sys/syscalls.h"

struct evp_cipher_ctx_st;

namespace walship::net {

// TLS 1.3 cipher suites (IANA values) RecordReader decrypts.
inline constexpr uint16_t kTlsAes128GcmSha256 = 0x1301;
inline constexpr uint16_t kTlsAes256GcmSha384 = 0x1302;

// HKDF-Expand-Label(secret, label, "", length) with the suite's hash: the
// key schedule's derivation of a key, an IV or the next traffic secret.
absl::StatusOr<std::vector<uint8_t>> HkdfExpandLabel(uint16_t suite,
                                                     absl::Span<const uint8_t> secret,
                                                     const std::string& label, size_t length);

class RecordReader {
 public:
  // Reads records from `fd` (borrowed, non-blocking) through `sys`, up to
  // `read_bytes` per read(2). `secret` is the server's application traffic
  // secret for `suite`; sequence numbers start at 0 (no record protected
  // by it has been read yet). kInvalidArgument for another suite or a
  // secret of the wrong length.
  static absl::StatusOr<std::unique_ptr<RecordReader>> Create(sys::SysCalls& sys, int fd,
                                                              uint16_t suite,
                                                              absl::Span<const uint8_t> secret,
                                                              size_t read_bytes);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Up to `n` (> 0) bytes of application data into `out`: the count (> 0);
  // 0 with *would_block when nothing whole has arrived yet (wait for the
  // socket to be readable); 0 without it at the end of the stream
  // (close_notify). Never blocks; reads the socket only when no whole
  // record is buffered.
  absl::StatusOr<size_t> Read(char* out, size_t n, bool* would_block);

  // Bytes held that the socket's queue no longer shows: decrypted bytes not
  // yet returned plus ciphertext read ahead.
  size_t buffered() const { return (plain_end_ - plain_begin_) + (raw_end_ - raw_begin_); }
  // True once after the peer asked, with a KeyUpdate, that this side update
  // its sending keys too; the caller has that done by its sending side.
  bool TakeUpdateRequest() {
    const bool asked = update_requested_;
    update_requested_ = false;
    return asked;
  }

 private:
  RecordReader(sys::SysCalls& sys, int fd, uint16_t suite, size_t read_bytes);
  absl::Status SetSecret(absl::Span<const uint8_t> secret);
  // One read(2) after the buffered bytes (moved to the front first).
  absl::Status Fill(bool* would_block);
  // Authenticates and decrypts the whole record at raw_begin_ into `dst`
  // (room for its ciphertext length - 16 bytes), consumes it, and returns
  // its inner content type and content length.
  absl::Status Open(uint8_t* dst, uint8_t* type, size_t* length);
  // A record that is not application data: alert or handshake.
  absl::Status Control(uint8_t type, const uint8_t* body, size_t length);

  sys::SysCalls& sys_;
  const int fd_;
  const uint16_t suite_;
  const size_t read_bytes_;
  evp_cipher_ctx_st* cipher_ = nullptr;
  std::vector<uint8_t> secret_;
  uint8_t iv_[12] = {};
  uint64_t seq_ = 0;
  // Ciphertext read ahead: [raw_begin_, raw_end_) of raw_.
  std::vector<uint8_t> raw_;
  size_t raw_begin_ = 0;
  size_t raw_end_ = 0;
  // A record's plaintext that did not fit the caller's buffer.
  std::vector<uint8_t> plain_;
  size_t plain_begin_ = 0;
  size_t plain_end_ = 0;
  bool closed_ = false;  // close_notify seen
  bool update_requested_ = false;
};

}  // namespace walship::net

#endif  // WALSHIP_COMMON_NET_TLS_RECORDS_H_
