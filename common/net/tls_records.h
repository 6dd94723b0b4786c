// tls_records.h: the data socket's TLS 1.3 record layer for the direction
// WAL travels (agent -> replica), run by walship after OpenSSL's handshake:
// the userspace counterpart of kernel TLS.
//
// OpenSSL 3.0 encrypts and decrypts a record only inside its own record
// buffer: through its record layer every byte of WAL is copied twice more
// on each side than on a plaintext socket (agent: caller -> record buffer
// -> send buffer; replica: read buffer -> record buffer -> caller). Kernel TLS
// avoids this by taking the record layer once the handshake is done, with
// the keys OpenSSL hands it. RecordWriter (agent) and RecordReader
// (replica) do the same in user space for that one direction: the agent
// encrypts from its file buffer straight into the buffer it sends; the
// replica reads the socket a buffer at a time and decrypts each record
// from that buffer straight into the caller's memory. OpenSSL keeps the
// handshake, the certificate checks and the other direction (the replica's
// HELLO).
//
// Both take the server's application traffic secret from OpenSSL's key-log
// callback (SERVER_TRAFFIC_SECRET_0), derive key and IV with
// HKDF-Expand-Label (RFC 8446 sections 7.1 and 7.3), and start at sequence
// number 0: the caller hands over before any record under these keys was
// sent or read (the agent sends no session tickets). Once RecordWriter
// sends, OpenSSL must never write again with the same keys (its nonces
// would repeat): the caller gives OpenSSL a write side that refuses.
//
// RecordWriter writes application_data records of at most 2^14 bytes of
// plaintext, no padding, and updates its keys (KeyUpdate) every 2^23
// records.
//
// What RecordReader accepts (RFC 8446 section 5), and nothing else:
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

// One direction's AES-GCM state (RFC 8446 section 5.3): the key, the IV and
// the sequence number, derived from a traffic secret.
class TrafficKeys {
 public:
  // kInvalidArgument for a suite other than the two AES-GCM ones or a
  // secret of the wrong length.
  static absl::StatusOr<std::unique_ptr<TrafficKeys>> Create(uint16_t suite, bool encrypt,
                                                             absl::Span<const uint8_t> secret);
  ~TrafficKeys();
  TrafficKeys(const TrafficKeys&) = delete;
  TrafficKeys& operator=(const TrafficKeys&) = delete;

  // KeyUpdate: the next traffic secret, its key and IV; sequence number 0.
  absl::Status Advance();
  // The nonce of the next record (IV xor sequence number); the sequence
  // number then moves on.
  void NextNonce(uint8_t nonce[12]);
  uint64_t seq() const { return seq_; }
  // The AES-GCM context, keyed; each record sets its nonce.
  evp_cipher_ctx_st* cipher() const { return cipher_; }

 private:
  TrafficKeys(uint16_t suite, bool encrypt) : suite_(suite), encrypt_(encrypt) {}
  absl::Status Set(absl::Span<const uint8_t> secret);

  const uint16_t suite_;
  const bool encrypt_;
  evp_cipher_ctx_st* cipher_ = nullptr;
  std::vector<uint8_t> secret_;
  uint8_t iv_[12] = {};
  uint64_t seq_ = 0;
};

class RecordWriter {
 public:
  // RFC 8446 section 5.5: AES-GCM protects at most 2^24.5 full records
  // under one key; the writer moves to the next key (KeyUpdate) well
  // before, every 2^23 records (128 GiB of WAL).
  static constexpr uint64_t kRecordsPerKey = uint64_t{1} << 23;

  // Encrypts under `secret` (the server's application traffic secret for
  // `suite`); see TrafficKeys::Create for the errors. `records_per_key`
  // is for tests.
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Create(
      uint16_t suite, absl::Span<const uint8_t> secret,
      uint64_t records_per_key = kRecordsPerKey);
  // Appends `data` to `out` as application_data records (one per 2^14
  // bytes), preceded by a KeyUpdate when the key's records are used up.
  // kInternal if OpenSSL's AES-GCM fails (nothing usable is then appended;
  // the connection must not be used again).
  absl::Status Seal(const char* data, size_t n, std::vector<char>* out);

 private:
  RecordWriter(std::unique_ptr<TrafficKeys> keys, uint64_t records_per_key)
      : keys_(std::move(keys)), records_per_key_(records_per_key) {}
  // One record of `type` holding `content` (k <= 2^14 bytes).
  absl::Status SealRecord(const uint8_t* content, size_t k, uint8_t type,
                          std::vector<char>* out);

  std::unique_ptr<TrafficKeys> keys_;
  const uint64_t records_per_key_;
};

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
  RecordReader(sys::SysCalls& sys, int fd, std::unique_ptr<TrafficKeys> keys,
               size_t read_bytes);
  // One read(2) after the buffered bytes (moved to the front first).
  absl::Status Fill(bool* would_block);
  // Authenticates and decrypts the whole record at raw_begin_ (its header
  // checked, `len` bytes of ciphertext) into `dst` (room for len - 16
  // bytes), consumes it, and returns its inner content type and content
  // length.
  absl::Status Open(size_t len, uint8_t* dst, uint8_t* type, size_t* length);
  // A record that is not application data: alert or handshake.
  absl::Status Control(uint8_t type, const uint8_t* body, size_t length);

  sys::SysCalls& sys_;
  const int fd_;
  const std::unique_ptr<TrafficKeys> keys_;
  const size_t read_bytes_;
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
