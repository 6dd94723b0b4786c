"""RocksDB's WAL framing, read in Python: a second reader of the format that
agent/rocksdb/rocksdb_log.h documents, for the tests (32 KiB blocks, zero
trailers, 7- or 11-byte headers with a masked CRC-32C, FULL/FIRST/MIDDLE/LAST
fragments, recyclable records naming their log).
"""

import struct

from integration import wirelib

BLOCK = 32768
_RECYCLABLE = (5, 6, 7, 8)


def unmask(masked):
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def valid_end(data, log_number):
    """The end of the last complete logical record of log bytes `data` of
    the log numbered `log_number`."""
    pos = valid = 0
    in_fragment = False
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        rest = data[pos:pos + min(left, 11)]
        if left < 7 or (left < 11 and not any(rest)):
            pos += left  # trailer
            continue
        if len(rest) < 7:
            break
        n, t = struct.unpack_from("<HB", data, pos + 4)
        if t == 0 and n == 0:
            break
        h = 11 if t in _RECYCLABLE else 7
        if h + n > left or pos + h + n > len(data):
            break
        if t in _RECYCLABLE and struct.unpack_from("<I", data, pos + 7)[0] != log_number & 0xFFFFFFFF:
            break
        (crc,) = struct.unpack_from("<I", data, pos)
        if unmask(crc) != wirelib.crc32c(data[pos + 6:pos + h + n]):
            break
        base = t - 4 if t in _RECYCLABLE else t
        starts = base in (1, 2) or t == 9
        if t > 9 or starts == in_fragment:
            break
        pos += h + n
        if base == 2:
            in_fragment = True
        elif base in (1, 4) or t == 9:
            in_fragment = False
            valid = pos
    return valid


def log_number(name):
    """123 for "000123.log"."""
    return int(name[:-len(".log")])
