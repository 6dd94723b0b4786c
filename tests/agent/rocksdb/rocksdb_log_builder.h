// rocksdb_log_builder.h: writes RocksDB WAL bytes by the framing documented
// in agent/rocksdb/rocksdb_log.h (a second writer, for tests: 32 KiB blocks,
// zero trailers, fragmentation, masked CRC-32C, recyclable headers).
#ifndef WALSHIP_TESTS_AGENT_ROCKSDB_ROCKSDB_LOG_BUILDER_H_
#define WALSHIP_TESTS_AGENT_ROCKSDB_ROCKSDB_LOG_BUILDER_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/wire/crc32c.h"

namespace walship::agent::rocksdb::testing {

class LogBuilder {
 public:
  // `recyclable`: headers carry `log_number` (types 5-8).
  explicit LogBuilder(bool recyclable = false, uint32_t log_number = 0)
      : recyclable_(recyclable), log_number_(log_number) {}

  // Appends one logical record, fragmented across blocks as RocksDB does;
  // returns the bytes appended.
  std::string Add(const std::string& payload) {
    const size_t h = recyclable_ ? 11 : 7;
    std::string out;
    size_t left = payload.size();
    const char* p = payload.data();
    bool begin = true;
    do {
      size_t leftover = 32768 - block_;
      if (leftover < h) {
        out.append(leftover, '\0');
        block_ = 0;
      }
      const size_t avail = 32768 - block_ - h;
      const size_t n = std::min(left, avail);
      const bool end = n == left;
      uint8_t type = begin && end ? 1 : begin ? 2 : end ? 4 : 3;
      if (recyclable_) type += 4;
      out += Physical(type, std::string(p, n));
      block_ += h + n;
      p += n;
      left -= n;
      begin = false;
    } while (left > 0);
    return out;
  }

  // One physical record of `type` (no fragmenting, no trailer handling).
  std::string Physical(uint8_t type, const std::string& payload) const {
    std::string hdr(4, '\0');
    hdr.push_back(static_cast<char>(payload.size() & 0xff));
    hdr.push_back(static_cast<char>(payload.size() >> 8));
    hdr.push_back(static_cast<char>(type));
    if (type >= 5 && type <= 8) {
      for (int i = 0; i < 4; ++i) hdr.push_back(static_cast<char>((log_number_ >> (8 * i)) & 0xff));
    }
    std::string body = hdr.substr(6) + payload;
    uint32_t crc = wire::Crc32c(body.data(), body.size());
    crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
    for (int i = 0; i < 4; ++i) hdr[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
    return hdr + payload;
  }

 private:
  bool recyclable_;
  uint32_t log_number_;
  size_t block_ = 0;
};

}  // namespace walship::agent::rocksdb::testing

#endif  // WALSHIP_TESTS_AGENT_ROCKSDB_ROCKSDB_LOG_BUILDER_H_
