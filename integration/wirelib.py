"""Crafts and parses walship data-socket frames, for integration tests.

A pure-Python (standard library only) mirror of common/wire/frame.h; the
format is specified in common/wire/wire_format.md. Every header field can be
set to a wrong value, so tests can send a real walship-replica or
walship-agent each kind of corrupt frame:

    from integration import wirelib
    frame = wirelib.encode_frame(wirelib.SEGMENT, 1, 0, b"000000010000000000000001")
    bad = wirelib.encode_header(wirelib.DATA, 1, 0, 3, wirelib.crc32c(b"abc"),
                                version=2) + b"abc"

decode_header() applies the same checks, in the same order, as the C++
DecodeFrameHeader() and raises FrameError (a ValueError) naming the status
code the C++ decoder returns.
"""

import struct

HEADER_SIZE = 40
MAGIC = b"WSHP"
VERSION = 1
MAX_PAYLOAD_LENGTH = 16 << 20

HELLO = 1
SEGMENT = 2
DATA = 3
ZDATA = 4  # compressed DATA (wire_format.md section 9)
TYPE_NAMES = {HELLO: "HELLO", SEGMENT: "SEGMENT", DATA: "DATA", ZDATA: "ZDATA"}

# ZDATA codecs (its `flags` field), as the handshake's Compression enum.
CODEC_NONE = 0
CODEC_ZSTD = 1
CODEC_LZ4 = 2
CODEC_NAMES = {CODEC_ZSTD: "zstd", CODEC_LZ4: "lz4"}

HELLO_PAYLOAD_RANGE = (16, 64)
SEGMENT_PAYLOAD_RANGE = (1, 255)

# magic, version, type, flags, segment_id, offset, payload_length,
# payload_crc32c, reserved: bytes [0, 36); header_crc32c follows.
_SEALED = struct.Struct("<4sBBHQQIII")
_CRC = struct.Struct("<I")
assert _SEALED.size + _CRC.size == HEADER_SIZE


def _make_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _make_table()


def crc32c(data, crc=0):
    """CRC32C (Castagnoli) of `data`; pass a previous result as `crc` to extend.

    crc32c(b, crc32c(a)) == crc32c(a + b).
    """
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def encode_header(type, segment_id, offset, payload_len, payload_crc, *,
                  magic=MAGIC, version=VERSION, flags=0, reserved=0,
                  header_crc=None):
    """Returns the 40-byte header with these fields, all little-endian.

    `type` and `version` are any 0..255, so unknown ones can be sent.
    `header_crc` defaults to the correct CRC32C of bytes [0, 36); pass a
    value to send a corrupt one.
    """
    sealed = _SEALED.pack(bytes(magic), version, type, flags, segment_id,
                          offset, payload_len, payload_crc, reserved)
    if header_crc is None:
        header_crc = crc32c(sealed)
    return sealed + _CRC.pack(header_crc)


def encode_frame(type, segment_id, offset, payload):
    """Returns a valid header followed by `payload` (bytes or str)."""
    if isinstance(payload, str):
        payload = payload.encode()
    return encode_header(type, segment_id, offset, len(payload),
                         crc32c(payload)) + payload


class FrameError(ValueError):
    """A frame check failed. `code` is the C++ absl status code name."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code


def decode_header(b, max_payload_length=MAX_PAYLOAD_LENGTH):
    """Decodes the header in the first 40 bytes of `b`.

    Returns a dict with keys type, segment_id, offset, payload_length,
    payload_crc32c, codec and raw_length (the last two 0 except for ZDATA,
    whose `flags` carry the codec and `reserved` the uncompressed length).
    Raises FrameError (a ValueError) on any failed check.
    """
    b = bytes(b)
    if len(b) < HEADER_SIZE:
        raise FrameError("DATA_LOSS", "truncated frame header: got %d bytes, "
                         "need %d" % (len(b), HEADER_SIZE))
    (magic, version, type_, flags, segment_id, offset, payload_length,
     payload_crc, reserved) = _SEALED.unpack_from(b, 0)
    (header_crc,) = _CRC.unpack_from(b, _SEALED.size)
    if magic != MAGIC:
        raise FrameError("DATA_LOSS", "bad magic (not a walship data stream?)"
                         ": got %r" % magic)
    computed = crc32c(b[:_SEALED.size])
    if header_crc != computed:
        raise FrameError("DATA_LOSS", "frame header checksum mismatch: "
                         "header_crc32c field is 0x%08x, computed 0x%08x"
                         % (header_crc, computed))
    if version != VERSION:
        raise FrameError("FAILED_PRECONDITION",
                         "unsupported protocol version %d" % version)
    if type_ not in TYPE_NAMES:
        raise FrameError("UNIMPLEMENTED", "unknown frame type %d" % type_)
    zdata = type_ == ZDATA
    if zdata and flags not in CODEC_NAMES:
        raise FrameError("DATA_LOSS", "ZDATA frame names codec %d" % flags)
    if not zdata and flags != 0:
        raise FrameError("DATA_LOSS", "non-zero frame flags 0x%04x" % flags)
    if not zdata and reserved != 0:
        raise FrameError("DATA_LOSS", "non-zero reserved frame header field "
                         "0x%08x" % reserved)
    limit = min(max_payload_length, MAX_PAYLOAD_LENGTH)
    if payload_length > limit:
        raise FrameError("DATA_LOSS", "payload length %d exceeds limit %d"
                         % (payload_length, limit))
    if type_ == HELLO:
        lo, hi = HELLO_PAYLOAD_RANGE
        if not lo <= payload_length <= hi:
            raise FrameError("DATA_LOSS", "HELLO payload length %d outside "
                             "[%d, %d]" % (payload_length, lo, hi))
        if offset != 0:
            raise FrameError("DATA_LOSS", "HELLO offset %d must be 0" % offset)
    elif type_ == SEGMENT:
        lo, hi = SEGMENT_PAYLOAD_RANGE
        if not lo <= payload_length <= hi:
            raise FrameError("DATA_LOSS", "SEGMENT payload length %d outside "
                             "[%d, %d]" % (payload_length, lo, hi))
    elif zdata:
        _check_zdata_lengths(offset, payload_length, reserved, limit)
    elif offset + payload_length > 0xFFFFFFFFFFFFFFFF:
        raise FrameError("DATA_LOSS", "DATA offset %d + payload length %d "
                         "overflows 64 bits" % (offset, payload_length))
    return {
        "type": type_,
        "segment_id": segment_id,
        "offset": offset,
        "payload_length": payload_length,
        "payload_crc32c": payload_crc,
        "codec": flags if zdata else 0,
        "raw_length": reserved if zdata else 0,
    }


def _check_zdata_lengths(offset, payload_length, raw_length, limit):
    if not 1 <= raw_length <= limit:
        raise FrameError("DATA_LOSS", "ZDATA uncompressed length %d outside "
                         "[1, %d]" % (raw_length, limit))
    if not 1 <= payload_length < raw_length:
        raise FrameError("DATA_LOSS", "ZDATA payload length %d outside "
                         "[1, %d)" % (payload_length, raw_length))
    if offset + raw_length > 0xFFFFFFFFFFFFFFFF:
        raise FrameError("DATA_LOSS", "ZDATA offset %d + uncompressed length "
                         "%d overflows 64 bits" % (offset, raw_length))


def encode_zdata_header(segment_id, offset, compressed_len, raw, codec, **kw):
    """A ZDATA header for `compressed_len` compressed bytes of `raw`: the
    CRC32C is of the uncompressed bytes, `flags` the codec, `reserved` the
    uncompressed length. Keyword arguments as encode_header's."""
    kw.setdefault("flags", codec)
    kw.setdefault("reserved", len(raw))
    return encode_header(ZDATA, segment_id, offset, compressed_len,
                         crc32c(raw), **kw)


def verify_payload(header, payload):
    """Raises FrameError unless `payload` matches the decoded `header`.

    For ZDATA, `payload` is the uncompressed bytes (as in the C++
    VerifyPayload): their length must be raw_length."""
    payload = bytes(payload)
    want = (header["raw_length"] if header.get("type") == ZDATA
            else header["payload_length"])
    if len(payload) != want:
        raise FrameError("DATA_LOSS", "payload is %d bytes, header says %d"
                         % (len(payload), want))
    crc = crc32c(payload)
    if crc != header["payload_crc32c"]:
        raise FrameError("DATA_LOSS", "payload checksum mismatch: header says "
                         "0x%08x, computed 0x%08x"
                         % (header["payload_crc32c"], crc))
