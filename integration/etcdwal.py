"""etcd 3.4's WAL framing, read in Python: a second reader of the format that
agent/etcd/etcd_wal.h documents, for the tests.

valid_end() walks a .wal file's frames (8-byte little-endian length word,
padding bits in its top byte, a walpb.Record protobuf) and stops at a zero
length word, a frame past the end of the file, or one whose protobuf does not
decode. It does not check the CRC chain (pure-Python CRC-32C over hundreds
of megabytes is too slow for a quick test): etcd itself checks it when a
member starts from the shipped files.
"""

import struct

MAX_RECORD = 10 << 20


def _varint(b, i):
    v = shift = 0
    while i < len(b) and shift < 70:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
    raise ValueError("bad varint")


def decode_record(b):
    """{type, crc, data} of a walpb.Record encoding; ValueError if it does not
    decode."""
    rec = {"type": 0, "crc": 0, "data": b""}
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise ValueError("field 0")
        if wt == 0:
            v, i = _varint(b, i)
            if field == 1:
                rec["type"] = v
            elif field == 2:
                rec["crc"] = v & 0xFFFFFFFF
        elif wt == 2:
            n, i = _varint(b, i)
            if n > len(b) - i:
                raise ValueError("field past the record")
            if field == 3:
                rec["data"] = bytes(b[i:i + n])
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        if i > len(b):
            raise ValueError("field past the record")
    return rec


def frames(data):
    """(offset, end, record) of each frame of `data` up to the valid end."""
    off = 0
    out = []
    while off + 8 <= len(data):
        (word,) = struct.unpack_from("<Q", data, off)
        if word == 0:
            break
        n = word & ((1 << 56) - 1)
        pad = (word >> 56) & 7 if word >> 63 else 0
        end = off + 8 + n + pad
        if n >= MAX_RECORD - pad or end > len(data):
            break
        try:
            rec = decode_record(data[off + 8:off + 8 + n])
        except ValueError:
            break
        out.append((off, end, rec))
        off = end
    return out


def valid_end(path):
    """The offset where the valid frames of the file at `path` end."""
    with open(path, "rb") as f:
        data = f.read()
    fr = frames(data)
    return fr[-1][1] if fr else 0
