"""Checks integration/wirelib.py against RFC 3720 and the C++ frame codec."""

import os
import subprocess
import unittest

from integration import wirelib


def _frame_dump_path():
    srcdir = os.environ.get("TEST_SRCDIR")
    workspace = os.environ.get("TEST_WORKSPACE", "walship")
    if not srcdir:
        raise unittest.SkipTest("TEST_SRCDIR not set; run under bazel test")
    return os.path.join(srcdir, workspace, "tests", "common", "wire",
                        "frame_dump")


def _cpp_decode(header, max_payload_length=wirelib.MAX_PAYLOAD_LENGTH):
    """Returns ("OK", dict) or ("ERROR", code) from the C++ decoder."""
    out = subprocess.run(
        [_frame_dump_path(), "decode", header.hex(), str(max_payload_length)],
        check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    words = out.split()
    if words[0] == "OK":
        keys = ("type", "segment_id", "offset", "payload_length",
                "payload_crc32c", "codec", "raw_length")
        return "OK", dict(zip(keys, (int(w) for w in words[1:8])))
    return "ERROR", words[1]


def _py_decode(header, max_payload_length=wirelib.MAX_PAYLOAD_LENGTH):
    try:
        return "OK", wirelib.decode_header(header, max_payload_length)
    except wirelib.FrameError as e:
        return "ERROR", e.code


class Crc32cTest(unittest.TestCase):

    def test_rfc3720_vectors(self):
        self.assertEqual(wirelib.crc32c(bytes(32)), 0x8A9136AA)
        self.assertEqual(wirelib.crc32c(b"\xff" * 32), 0x62A8AB43)
        self.assertEqual(wirelib.crc32c(bytes(range(32))), 0x46DD794E)
        self.assertEqual(wirelib.crc32c(bytes(reversed(range(32)))),
                         0x113FDB5C)
        self.assertEqual(wirelib.crc32c(b"123456789"), 0xE3069283)
        self.assertEqual(wirelib.crc32c(b""), 0)

    def test_extend(self):
        data = bytes(range(256)) * 3
        whole = wirelib.crc32c(data)
        for split in (0, 1, 7, 8, 100, len(data)):
            self.assertEqual(
                wirelib.crc32c(data[split:], wirelib.crc32c(data[:split])),
                whole)


class FrameTest(unittest.TestCase):

    def test_matches_cpp_encoder(self):
        out = subprocess.run([_frame_dump_path()], check=True,
                             stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.strip()
        frame = wirelib.encode_frame(wirelib.SEGMENT, 7, 4096,
                                     b"000000010000000000000001")
        self.assertEqual(out, frame.hex())
        self.assertEqual(len(frame), wirelib.HEADER_SIZE + 24)
        self.assertEqual(frame[:4], b"WSHP")

    def test_round_trip(self):
        for type_, payload, offset in ((wirelib.HELLO, b"t" * 16, 0),
                                       (wirelib.SEGMENT, b"seg", 8192),
                                       (wirelib.DATA, b"", 2**64 - 1),
                                       (wirelib.DATA, b"abc" * 100, 5)):
            frame = wirelib.encode_frame(type_, 2**64 - 2, offset, payload)
            h = wirelib.decode_header(frame)
            self.assertEqual(h, {"type": type_, "segment_id": 2**64 - 2,
                                 "offset": offset,
                                 "payload_length": len(payload),
                                 "payload_crc32c": wirelib.crc32c(payload),
                                 "codec": 0, "raw_length": 0})
            wirelib.verify_payload(h, frame[wirelib.HEADER_SIZE:])
            with self.assertRaises(ValueError):
                wirelib.verify_payload(h, frame[wirelib.HEADER_SIZE:] + b"x")

    def test_zdata_round_trip(self):
        raw = b"walship " * 512
        header = wirelib.encode_zdata_header(3, 8192, 100, raw,
                                             wirelib.CODEC_ZSTD)
        h = wirelib.decode_header(header)
        self.assertEqual(h, {"type": wirelib.ZDATA, "segment_id": 3,
                             "offset": 8192, "payload_length": 100,
                             "payload_crc32c": wirelib.crc32c(raw),
                             "codec": wirelib.CODEC_ZSTD,
                             "raw_length": len(raw)})
        self.assertEqual(_cpp_decode(header), ("OK", h))
        wirelib.verify_payload(h, raw)  # the uncompressed bytes
        with self.assertRaises(wirelib.FrameError):
            wirelib.verify_payload(h, raw[1:])

    def test_truncated_and_flipped_headers_rejected(self):
        good = wirelib.encode_header(wirelib.DATA, 1, 2, 3, 4)
        for n in range(wirelib.HEADER_SIZE):
            with self.assertRaises(ValueError):
                wirelib.decode_header(good[:n])
        for i in range(wirelib.HEADER_SIZE):
            bad = bytearray(good)
            bad[i] ^= 0x01
            with self.assertRaises(wirelib.FrameError) as cm:
                wirelib.decode_header(bytes(bad))
            self.assertEqual(cm.exception.code, "DATA_LOSS")

    def test_agrees_with_cpp_decoder(self):
        h = wirelib.encode_header
        d, s, hl = wirelib.DATA, wirelib.SEGMENT, wirelib.HELLO
        z = wirelib.ZDATA
        max_len = wirelib.MAX_PAYLOAD_LENGTH
        cases = [
            (h(d, 1, 2, 3, 4), max_len, "OK"),
            (h(hl, 9, 0, 16, 4), max_len, "OK"),
            (h(s, 9, 7, 255, 4), max_len, "OK"),
            (h(d, 1, 2, 3, 4, magic=b"GET "), max_len, "DATA_LOSS"),
            (h(d, 1, 2, 3, 4, header_crc=0), max_len, "DATA_LOSS"),
            (h(d, 1, 2, 3, 4, version=2), max_len, "FAILED_PRECONDITION"),
            (h(d, 1, 2, 3, 4, version=0), max_len, "FAILED_PRECONDITION"),
            (h(0, 1, 2, 3, 4), max_len, "UNIMPLEMENTED"),
            (h(5, 1, 2, 3, 4), max_len, "UNIMPLEMENTED"),
            (h(4, 1, 2, 3, 4, version=2), max_len, "FAILED_PRECONDITION"),
            # ZDATA: flags = codec, reserved = uncompressed length.
            (h(z, 1, 2, 3, 4, flags=1, reserved=10), max_len, "OK"),
            (h(z, 1, 2, 3, 4, flags=2, reserved=max_len), max_len, "OK"),
            (h(z, 1, 2, 3, 4, flags=0, reserved=10), max_len, "DATA_LOSS"),
            (h(z, 1, 2, 3, 4, flags=3, reserved=10), max_len, "DATA_LOSS"),
            (h(z, 1, 2, 3, 4, flags=1, reserved=0), max_len, "DATA_LOSS"),
            (h(z, 1, 2, 3, 4, flags=1, reserved=1001), 1000, "DATA_LOSS"),
            (h(z, 1, 2, 3, 4, flags=1, reserved=max_len + 1), 2**32 - 1,
             "DATA_LOSS"),
            (h(z, 1, 2, 0, 4, flags=1, reserved=10), max_len, "DATA_LOSS"),
            (h(z, 1, 2, 10, 4, flags=1, reserved=10), max_len, "DATA_LOSS"),
            (h(z, 1, 2**64 - 11, 3, 4, flags=1, reserved=10), max_len, "OK"),
            (h(z, 1, 2**64 - 10, 3, 4, flags=1, reserved=10), max_len,
             "DATA_LOSS"),
            (h(d, 1, 2, 3, 4, flags=1, reserved=10), max_len, "DATA_LOSS"),
            (h(d, 1, 2, 3, 4, flags=1), max_len, "DATA_LOSS"),
            (h(d, 1, 2, 3, 4, reserved=1), max_len, "DATA_LOSS"),
            (h(d, 1, 2, max_len, 4), max_len, "OK"),
            (h(d, 1, 2, max_len + 1, 4), 2**32 - 1, "DATA_LOSS"),
            (h(d, 1, 2, 1001, 4), 1000, "DATA_LOSS"),
            (h(hl, 9, 0, 15, 4), max_len, "DATA_LOSS"),
            (h(hl, 9, 0, 65, 4), max_len, "DATA_LOSS"),
            (h(hl, 9, 1, 16, 4), max_len, "DATA_LOSS"),
            (h(s, 9, 0, 0, 4), max_len, "DATA_LOSS"),
            (h(s, 9, 0, 256, 4), max_len, "DATA_LOSS"),
            (h(d, 1, 2**64 - 4, 3, 4), max_len, "OK"),
            (h(d, 1, 2**64 - 3, 3, 4), max_len, "DATA_LOSS"),
            (h(d, 1, 2, 3, 4)[:39], max_len, "DATA_LOSS"),
        ]
        for header, limit, want in cases:
            with self.subTest(header=header.hex(), limit=limit):
                cpp = _cpp_decode(header, limit)
                py = _py_decode(header, limit)
                self.assertEqual(cpp, py)
                self.assertEqual(want, py[0] if py[0] == "OK" else py[1])


if __name__ == "__main__":
    unittest.main()
