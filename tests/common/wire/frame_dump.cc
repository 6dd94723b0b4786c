// Test helper that lets the Python wirelib be checked against the C++ codec.
//
//   frame_dump             prints the hex of
//                          EncodeFrame(kSegment, 7, 4096,
//                                      "000000010000000000000001")
//   frame_dump decode HEX [MAX_PAYLOAD_LENGTH]
//                          decodes the header in HEX and prints either
//                          "OK type segment_id offset payload_length
//                          payload_crc32c codec raw_length" or
//                          "ERROR CODE_NAME message".

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/types/span.h"
#include "common/wire/frame.h"

namespace {

using walship::wire::DecodeFrameHeader;
using walship::wire::EncodeFrame;
using walship::wire::FrameHeader;
using walship::wire::FrameType;
using walship::wire::kMaxPayloadLength;

int Decode(const std::string& hex, uint32_t limit) {
  const std::string bytes = absl::HexStringToBytes(hex);
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                bytes.size()),
      limit);
  if (!h.ok()) {
    std::printf("ERROR %s %s\n",
                absl::StatusCodeToString(h.status().code()).c_str(),
                std::string(h.status().message()).c_str());
    return 0;
  }
  std::printf("OK %d %llu %llu %u %u %d %u\n", static_cast<int>(h->type),
              static_cast<unsigned long long>(h->segment_id),
              static_cast<unsigned long long>(h->offset), h->payload_length,
              h->payload_crc32c, static_cast<int>(h->codec), h->raw_length);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) {
    const std::string frame =
        EncodeFrame(FrameType::kSegment, 7, 4096, "000000010000000000000001");
    std::printf("%s\n", absl::BytesToHexString(frame).c_str());
    return 0;
  }
  if ((argc == 3 || argc == 4) && std::string(argv[1]) == "decode") {
    const uint32_t limit =
        argc == 4 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10))
                  : kMaxPayloadLength;
    return Decode(argv[2], limit);
  }
  std::fprintf(stderr, "usage: %s [decode HEX [MAX_PAYLOAD_LENGTH]]\n",
               argv[0]);
  return 2;
}
