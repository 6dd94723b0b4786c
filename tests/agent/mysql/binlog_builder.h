// binlog_builder.h: writes binlog v4 files for tests (agent/mysql/binlog.h):
// the magic, a format description event, then events of any size, with or
// without CRC-32 checksums.
#ifndef WALSHIP_TESTS_AGENT_MYSQL_BINLOG_BUILDER_H_
#define WALSHIP_TESTS_AGENT_MYSQL_BINLOG_BUILDER_H_

#include <cstdint>
#include <string>

#include "absl/base/internal/endian.h"
#include "agent/mysql/binlog.h"

namespace walship::agent::mysql::testing {

class BinlogBuilder {
 public:
  // `created`: the FDE's create_timestamp (non-zero: a server's first binlog).
  explicit BinlogBuilder(bool checksums = true, uint32_t created = 0, bool in_use = true)
      : checksums_(checksums) {
    bytes_.assign(kMagic, kMagicSize);
    std::string body;
    body += std::string("\x04\x00", 2);
    std::string version = "10.11.6-MariaDB-0+deb12u1";
    version.resize(50, '\0');
    body += version;
    char c[4];
    absl::little_endian::Store32(c, created);
    body.append(c, 4);
    body.push_back(static_cast<char>(kHeaderSize));
    body += std::string(40, '\x08');         // post-header lengths
    body.push_back(checksums ? '\x01' : '\x00');  // checksum algorithm
    Append(kFormatDescriptionEvent, body, in_use ? kInUseFlag : 0, /*always_crc_room=*/true);
  }

  // An event of `type` whose whole size is `size` bytes (>= 23).
  std::string Event(uint8_t type, size_t size) {
    const size_t extra = kHeaderSize + (checksums_ ? kChecksumSize : 0);
    return Append(type, std::string(size - extra, static_cast<char>('a' + type % 26)), 0, false);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string Append(uint8_t type, const std::string& body, uint16_t flags, bool fde) {
    const bool crc_room = checksums_ || fde;
    const uint64_t size = kHeaderSize + body.size() + (crc_room ? kChecksumSize : 0);
    std::string ev(kHeaderSize, '\0');
    absl::little_endian::Store32(&ev[0], 1700000000);
    ev[4] = static_cast<char>(type);
    absl::little_endian::Store32(&ev[5], 1);
    absl::little_endian::Store32(&ev[9], static_cast<uint32_t>(size));
    absl::little_endian::Store32(&ev[13], static_cast<uint32_t>(bytes_.size() + size));
    absl::little_endian::Store16(&ev[17], flags);
    ev += body;
    if (crc_room) {
      std::string for_crc = ev;
      if (fde) for_crc[17] = static_cast<char>(static_cast<uint8_t>(for_crc[17]) & ~kInUseFlag);
      char c[4];
      absl::little_endian::Store32(c, checksums_ ? Crc32(for_crc) : 0);
      ev.append(c, 4);
    }
    bytes_ += ev;
    return ev;
  }

  bool checksums_;
  std::string bytes_;
};

}  // namespace walship::agent::mysql::testing

#endif  // WALSHIP_TESTS_AGENT_MYSQL_BINLOG_BUILDER_H_
