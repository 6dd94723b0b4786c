#include "common/net/tls_bio.h"

#include <openssl/bio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/sys/transfer.h"

namespace walship::net {
namespace {

int GatherWrite(BIO* b, const char* data, int n) {
  auto* out = static_cast<std::vector<char>*>(BIO_get_data(b));
  out->insert(out->end(), data, data + n);
  return n;
}

// Write-only BIOs answer flush, and nothing else.
long WriteOnlyCtrl(BIO* /*b*/, int cmd, long /*num*/, void* /*ptr*/) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

BIO_METHOD* NewWriteOnlyMethod(const char* name, int (*write)(BIO*, const char*, int)) {
  BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, name);
  BIO_meth_set_write(m, write);
  BIO_meth_set_ctrl(m, WriteOnlyCtrl);
  return m;
}

int RefuseWrite(BIO* b, const char* /*data*/, int /*n*/) {
  BIO_clear_retry_flags(b);
  return -1;
}

const BIO_METHOD* GatherMethod() {
  static BIO_METHOD* const method = NewWriteOnlyMethod("walship-gather", GatherWrite);
  return method;
}

const BIO_METHOD* RefusingMethod() {
  static BIO_METHOD* const method = NewWriteOnlyMethod("walship-refuse", RefuseWrite);
  return method;
}

int ReadAheadRead(BIO* b, char* out, int n) {
  BIO_clear_retry_flags(b);
  if (n <= 0) return 0;
  bool retry = false;
  const int got =
      static_cast<ReadAhead*>(BIO_get_data(b))->Read(out, static_cast<size_t>(n), &retry);
  if (retry) BIO_set_retry_read(b);
  return got;
}

long ReadAheadCtrl(BIO* b, int cmd, long /*num*/, void* /*ptr*/) {
  const auto* state = static_cast<const ReadAhead*>(BIO_get_data(b));
  switch (cmd) {
    case BIO_CTRL_PENDING:
      return static_cast<long>(std::min<size_t>(state->buffered(), LONG_MAX));
    case BIO_CTRL_EOF:
      return state->eof() && state->buffered() == 0 ? 1 : 0;
    case BIO_CTRL_FLUSH:
      return 1;
    default:
      return 0;
  }
}

const BIO_METHOD* ReadAheadMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "walship-read-ahead");
    BIO_meth_set_read(m, ReadAheadRead);
    BIO_meth_set_ctrl(m, ReadAheadCtrl);
    return m;
  }();
  return method;
}

BIO* NewBio(const BIO_METHOD* method, void* data) {
  BIO* b = BIO_new(method);
  if (b == nullptr) return nullptr;
  BIO_set_data(b, data);
  BIO_set_init(b, 1);
  return b;
}

}  // namespace

bio_st* NewGatherBio(std::vector<char>* out) { return NewBio(GatherMethod(), out); }

bio_st* NewRefusingBio() { return NewBio(RefusingMethod(), nullptr); }

bio_st* NewReadAheadBio(ReadAhead* state) { return NewBio(ReadAheadMethod(), state); }

ReadAhead::ReadAhead(sys::SysCalls& sys, int fd, size_t capacity)
    : sys_(sys), fd_(fd), buf_(capacity) {}

int ReadAhead::Read(char* out, size_t n, bool* retry) {
  *retry = false;
  if (begin_ == end_) {
    const sys::SysResult r = sys::ReadOnce(sys_, fd_, buf_.data(), buf_.size());
    if (!r.ok()) {
      if (r.err == EAGAIN || r.err == EWOULDBLOCK) {
        *retry = true;
      } else {
        errno = r.err;
      }
      return -1;
    }
    if (r.rc == 0) {
      eof_ = true;
      return 0;
    }
    begin_ = 0;
    end_ = std::min(static_cast<size_t>(r.rc), buf_.size());
  }
  const size_t k = std::min({n, end_ - begin_, static_cast<size_t>(INT_MAX)});
  std::memcpy(out, buf_.data() + begin_, k);
  begin_ += k;
  return static_cast<int>(k);
}

}  // namespace walship::net
