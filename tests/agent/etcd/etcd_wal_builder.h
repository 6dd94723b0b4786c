// etcd_wal_builder.h: writes etcd 3.4 WAL bytes by the framing documented in
// agent/etcd/etcd_wal.h (a second writer, for tests: length word with
// padding bits, walpb.Record protobuf, CRC-32C chain).
#ifndef WALSHIP_TESTS_AGENT_ETCD_ETCD_WAL_BUILDER_H_
#define WALSHIP_TESTS_AGENT_ETCD_ETCD_WAL_BUILDER_H_

#include <cstdint>
#include <string>

#include "common/wire/crc32c.h"

namespace walship::agent::etcd::testing {

inline void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// One frame: length word, protobuf {type, crc, data}, zero padding.
inline std::string Frame(int64_t type, uint32_t crc, const std::string& data) {
  std::string proto;
  proto.push_back(0x08);
  PutVarint(proto, static_cast<uint64_t>(type));
  proto.push_back(0x10);
  PutVarint(proto, crc);
  if (!data.empty()) {
    proto.push_back(0x1a);
    PutVarint(proto, data.size());
    proto += data;
  }
  const uint64_t pad = (8 - proto.size() % 8) % 8;
  uint64_t word = proto.size();
  if (pad != 0) word |= (0x80 | pad) << 56;
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((word >> (8 * i)) & 0xff));
  return out + proto + std::string(pad, '\0');
}

// A WAL file being written: the chain continues across files.
class WalBuilder {
 public:
  explicit WalBuilder(uint32_t crc = 0) : crc_(crc) {}
  // The crcType record that starts a file.
  std::string StartFile() { return Frame(4, crc_, ""); }
  // A record of `type` carrying `data`, chained.
  std::string Add(int64_t type, const std::string& data) {
    crc_ = wire::Crc32cExtend(crc_, data.data(), data.size());
    return Frame(type, crc_, data);
  }
  uint32_t crc() const { return crc_; }

 private:
  uint32_t crc_;
};

}  // namespace walship::agent::etcd::testing

#endif  // WALSHIP_TESTS_AGENT_ETCD_ETCD_WAL_BUILDER_H_
