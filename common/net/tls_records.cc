#include "common/net/tls_records.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/errors.h"
#include "common/sys/transfer.h"

namespace walship::net {
namespace {

constexpr size_t kHeaderBytes = 5;
constexpr size_t kTagBytes = 16;
constexpr size_t kIvBytes = 12;
// RFC 8446 section 5.2: TLSCiphertext.length <= 2^14 + 256.
constexpr size_t kMaxCiphertext = (1u << 14) + 256;
constexpr size_t kMaxPlaintext = 1u << 14;
constexpr uint8_t kApplicationData = 23;
constexpr uint8_t kAlert = 21;
constexpr uint8_t kHandshake = 22;
constexpr uint8_t kNewSessionTicket = 4;
constexpr uint8_t kKeyUpdate = 24;

const char* DigestOf(uint16_t suite) {
  return suite == kTlsAes256GcmSha384 ? "SHA384" : "SHA256";
}
size_t HashBytes(uint16_t suite) { return suite == kTlsAes256GcmSha384 ? 48 : 32; }
size_t KeyBytes(uint16_t suite) { return suite == kTlsAes256GcmSha384 ? 32 : 16; }

absl::Status Corrupt(const std::string& what) {
  return WithReason(absl::DataLossError(absl::StrCat("data socket TLS: ", what)),
                    Reason::kChecksum);
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> HkdfExpandLabel(uint16_t suite,
                                                     absl::Span<const uint8_t> secret,
                                                     const std::string& label, size_t length) {
  // struct { uint16 length; opaque label<7..255>; opaque context<0..255>; }
  const std::string full = "tls13 " + label;
  std::vector<uint8_t> info = {static_cast<uint8_t>(length >> 8),
                               static_cast<uint8_t>(length & 0xff),
                               static_cast<uint8_t>(full.size())};
  info.insert(info.end(), full.begin(), full.end());
  info.push_back(0);  // empty context
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return absl::InternalError("HKDF is not available from OpenSSL");
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(DigestOf(suite)),
                                       0),
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  std::vector<uint8_t> out(length);
  const int ok = EVP_KDF_derive(ctx, out.data(), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return absl::InternalError(absl::StrCat("HKDF-Expand-Label \"", label, "\" failed"));
  return out;
}

// ---- TrafficKeys ----

absl::StatusOr<std::unique_ptr<TrafficKeys>> TrafficKeys::Create(
    uint16_t suite, bool encrypt, absl::Span<const uint8_t> secret) {
  if (suite != kTlsAes128GcmSha256 && suite != kTlsAes256GcmSha384) {
    return absl::InvalidArgumentError(absl::StrCat("TLS suite 0x", absl::Hex(suite),
                                                   " is not run by walship"));
  }
  if (secret.size() != HashBytes(suite)) {
    return absl::InvalidArgumentError(absl::StrCat("traffic secret of ", secret.size(),
                                                   " bytes, expected ", HashBytes(suite)));
  }
  std::unique_ptr<TrafficKeys> k(new TrafficKeys(suite, encrypt));
  k->cipher_ = EVP_CIPHER_CTX_new();
  if (k->cipher_ == nullptr) return absl::InternalError("EVP_CIPHER_CTX_new failed");
  WALSHIP_RETURN_IF_ERROR(k->Set(secret));
  return k;
}

TrafficKeys::~TrafficKeys() {
  EVP_CIPHER_CTX_free(cipher_);
  OPENSSL_cleanse(secret_.data(), secret_.size());
  OPENSSL_cleanse(iv_, sizeof(iv_));
}

absl::Status TrafficKeys::Set(absl::Span<const uint8_t> secret) {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<uint8_t> key,
                           HkdfExpandLabel(suite_, secret, "key", KeyBytes(suite_)));
  WALSHIP_ASSIGN_OR_RETURN(std::vector<uint8_t> iv,
                           HkdfExpandLabel(suite_, secret, "iv", kIvBytes));
  const EVP_CIPHER* aead =
      suite_ == kTlsAes256GcmSha384 ? EVP_aes_256_gcm() : EVP_aes_128_gcm();
  const int ok =
      EVP_CipherInit_ex(cipher_, aead, nullptr, key.data(), nullptr, encrypt_ ? 1 : 0);
  OPENSSL_cleanse(key.data(), key.size());
  if (ok != 1) return absl::InternalError("AES-GCM key set-up failed");
  // Copied first: `secret` may be secret_ itself (Advance).
  std::vector<uint8_t> kept(secret.begin(), secret.end());
  OPENSSL_cleanse(secret_.data(), secret_.size());
  secret_.swap(kept);
  std::memcpy(iv_, iv.data(), kIvBytes);
  OPENSSL_cleanse(iv.data(), iv.size());
  seq_ = 0;
  return absl::OkStatus();
}

absl::Status TrafficKeys::Advance() {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<uint8_t> next,
                           HkdfExpandLabel(suite_, secret_, "traffic upd", HashBytes(suite_)));
  absl::Status s = Set(next);
  OPENSSL_cleanse(next.data(), next.size());
  return s;
}

void TrafficKeys::NextNonce(uint8_t nonce[kIvBytes]) {
  std::memcpy(nonce, iv_, kIvBytes);
  for (int i = 0; i < 8; ++i) nonce[kIvBytes - 1 - i] ^= static_cast<uint8_t>(seq_ >> (8 * i));
  ++seq_;
}

// ---- RecordWriter ----

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Create(
    uint16_t suite, absl::Span<const uint8_t> secret, uint64_t records_per_key) {
  WALSHIP_ASSIGN_OR_RETURN(std::unique_ptr<TrafficKeys> keys,
                           TrafficKeys::Create(suite, /*encrypt=*/true, secret));
  return std::unique_ptr<RecordWriter>(new RecordWriter(std::move(keys), records_per_key));
}

absl::Status RecordWriter::SealRecord(const uint8_t* content, size_t k, uint8_t type,
                                      std::vector<char>* out) {
  const size_t len = k + 1 + kTagBytes;  // content, content type, tag
  const size_t start = out->size();
  out->resize(start + kHeaderBytes + len);
  auto* h = reinterpret_cast<uint8_t*>(out->data() + start);
  h[0] = kApplicationData;  // the outer type of every protected record
  h[1] = 3;
  h[2] = 3;
  h[3] = static_cast<uint8_t>(len >> 8);
  h[4] = static_cast<uint8_t>(len & 0xff);
  uint8_t* body = h + kHeaderBytes;
  uint8_t nonce[kIvBytes];
  keys_->NextNonce(nonce);
  EVP_CIPHER_CTX* c = keys_->cipher();
  int w = 0;
  const bool ok =
      EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce) == 1 &&
      EVP_EncryptUpdate(c, nullptr, &w, h, kHeaderBytes) == 1 &&
      EVP_EncryptUpdate(c, body, &w, content, static_cast<int>(k)) == 1 &&
      EVP_EncryptUpdate(c, body + k, &w, &type, 1) == 1 &&
      EVP_EncryptFinal_ex(c, body + k + 1, &w) == 1 &&
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kTagBytes, body + k + 1) == 1;
  if (!ok) {
    out->resize(start);
    return absl::InternalError("data socket TLS: AES-GCM encryption failed");
  }
  return absl::OkStatus();
}

absl::Status RecordWriter::Seal(const char* data, size_t n, std::vector<char>* out) {
  for (size_t at = 0; at < n;) {
    if (keys_->seq() >= records_per_key_) {
      // KeyUpdate (update_not_requested) under the old keys, then the new.
      static constexpr uint8_t kUpdate[] = {kKeyUpdate, 0, 0, 1, 0};
      WALSHIP_RETURN_IF_ERROR(SealRecord(kUpdate, sizeof(kUpdate), kHandshake, out));
      WALSHIP_RETURN_IF_ERROR(keys_->Advance());
    }
    const size_t k = std::min(n - at, kMaxPlaintext);
    WALSHIP_RETURN_IF_ERROR(
        SealRecord(reinterpret_cast<const uint8_t*>(data + at), k, kApplicationData, out));
    at += k;
  }
  return absl::OkStatus();
}

// ---- RecordReader ----

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Create(
    sys::SysCalls& sys, int fd, uint16_t suite, absl::Span<const uint8_t> secret,
    size_t read_bytes) {
  WALSHIP_ASSIGN_OR_RETURN(std::unique_ptr<TrafficKeys> keys,
                           TrafficKeys::Create(suite, /*encrypt=*/false, secret));
  return std::unique_ptr<RecordReader>(new RecordReader(sys, fd, std::move(keys), read_bytes));
}

RecordReader::RecordReader(sys::SysCalls& sys, int fd, std::unique_ptr<TrafficKeys> keys,
                           size_t read_bytes)
    : sys_(sys),
      fd_(fd),
      keys_(std::move(keys)),
      read_bytes_(read_bytes),
      // A partial record moved to the front, then one whole read after it.
      raw_(read_bytes + kHeaderBytes + kMaxCiphertext),
      plain_(kMaxCiphertext) {}

absl::Status RecordReader::Fill(bool* would_block) {
  *would_block = false;
  if (raw_begin_ > 0) {
    std::memmove(raw_.data(), raw_.data() + raw_begin_, raw_end_ - raw_begin_);
    raw_end_ -= raw_begin_;
    raw_begin_ = 0;
  }
  const sys::SysResult r = sys::ReadOnce(sys_, fd_, raw_.data() + raw_end_, read_bytes_);
  if (!r.ok()) {
    if (r.err == EAGAIN || r.err == EWOULDBLOCK) {
      *would_block = true;
      return absl::OkStatus();
    }
    return sys::ErrnoToStatus(r.err, "reading the data socket");
  }
  if (r.rc == 0) {
    return absl::UnavailableError(absl::StrCat(
        "the peer closed the data socket without a TLS close_notify",
        raw_end_ > 0 ? absl::StrCat(", ", raw_end_, " bytes into a record") : ""));
  }
  raw_end_ += static_cast<size_t>(r.rc);
  return absl::OkStatus();
}

absl::Status RecordReader::Open(size_t len, uint8_t* dst, uint8_t* type, size_t* length) {
  const uint8_t* h = raw_.data() + raw_begin_;
  const uint64_t seq = keys_->seq();
  uint8_t nonce[kIvBytes];
  keys_->NextNonce(nonce);
  const uint8_t* body = h + kHeaderBytes;
  const size_t inner = len - kTagBytes;
  EVP_CIPHER_CTX* c = keys_->cipher();
  int out = 0;
  const bool ok =
      EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, nonce) == 1 &&
      EVP_DecryptUpdate(c, nullptr, &out, h, kHeaderBytes) == 1 &&
      EVP_DecryptUpdate(c, dst, &out, body, static_cast<int>(inner)) == 1 &&
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kTagBytes,
                          const_cast<uint8_t*>(body + inner)) == 1 &&
      EVP_DecryptFinal_ex(c, dst + out, &out) == 1;
  if (!ok) {
    return Corrupt(absl::StrCat("record ", seq, " (", len,
                                " bytes) failed authentication: altered in transit"));
  }
  raw_begin_ += kHeaderBytes + len;
  // TLSInnerPlaintext: content, the real content type, then zero padding.
  size_t n = inner;
  while (n > 0 && dst[n - 1] == 0) --n;
  if (n == 0) return Corrupt("a record without a content type");
  *type = dst[n - 1];
  *length = n - 1;
  return absl::OkStatus();
}

absl::Status RecordReader::Control(uint8_t type, const uint8_t* body, size_t length) {
  if (type == kAlert) {
    if (length == 2 && body[1] == 0) {
      closed_ = true;  // close_notify
      return absl::OkStatus();
    }
    return absl::UnavailableError(absl::StrCat(
        "the agent ended the data socket with TLS alert ", length == 2 ? body[1] : -1));
  }
  if (type != kHandshake) {
    return Corrupt(absl::StrCat("a record of content type ", type, " after the handshake"));
  }
  for (size_t at = 0; at < length;) {
    if (length - at < 4) return Corrupt("a handshake message split across records");
    const uint8_t msg = body[at];
    const size_t n = (static_cast<size_t>(body[at + 1]) << 16) |
                     (static_cast<size_t>(body[at + 2]) << 8) | body[at + 3];
    if (n > length - at - 4) return Corrupt("a handshake message split across records");
    if (msg == kKeyUpdate) {
      if (n != 1 || body[at + 4] > 1) return Corrupt("a malformed KeyUpdate");
      if (body[at + 4] == 1) update_requested_ = true;
      WALSHIP_RETURN_IF_ERROR(keys_->Advance());
    } else if (msg != kNewSessionTicket) {
      return Corrupt(absl::StrCat("handshake message ", msg, " after the handshake"));
    }
    at += 4 + n;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> RecordReader::Read(char* out, size_t n, bool* would_block) {
  *would_block = false;
  for (;;) {
    if (plain_end_ > plain_begin_) {
      const size_t k = std::min(n, plain_end_ - plain_begin_);
      std::memcpy(out, plain_.data() + plain_begin_, k);
      plain_begin_ += k;
      return k;
    }
    if (closed_) return 0;
    const size_t have = raw_end_ - raw_begin_;
    const uint8_t* h = raw_.data() + raw_begin_;
    const size_t len = have >= kHeaderBytes ? (static_cast<size_t>(h[3]) << 8) | h[4] : 0;
    if (have >= kHeaderBytes) {
      if (h[0] != kApplicationData || h[1] != 3 || h[2] != 3 || len <= kTagBytes ||
          len > kMaxCiphertext) {
        return Corrupt(absl::StrCat("a malformed record header (type ", h[0], ", length ", len,
                                    ")"));
      }
    }
    if (have < kHeaderBytes || have < kHeaderBytes + len) {
      WALSHIP_RETURN_IF_ERROR(Fill(would_block));
      if (*would_block) return 0;
      continue;
    }
    // Straight into the caller's memory when the record's plaintext fits.
    const bool direct = len - kTagBytes <= n;
    uint8_t* dst = direct ? reinterpret_cast<uint8_t*>(out) : plain_.data();
    uint8_t type = 0;
    size_t got = 0;
    WALSHIP_RETURN_IF_ERROR(Open(len, dst, &type, &got));
    if (type != kApplicationData) {
      WALSHIP_RETURN_IF_ERROR(Control(type, dst, got));
      continue;
    }
    if (got == 0) continue;
    if (direct) return got;
    plain_begin_ = 0;
    plain_end_ = got;
  }
}

}  // namespace walship::net
