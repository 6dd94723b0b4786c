"""A second reader of MySQL/MariaDB binlogs (agent/mysql/binlog.h), for tests.

Walks the events of a binlog v4 file (magic, then 19-byte headers with
event_size at offset 9) and checks each CRC-32 (zlib.crc32) when the format
description event says the server writes checksums; the FDE's own CRC is
computed with the in-use flag clear.
"""

import struct
import zlib

MAGIC = b"\xfebin"
HEADER = 19
FDE = 15
IN_USE_OFFSET = 4 + 17  # the FDE's flags, low byte
CREATED_OFFSET = 4 + HEADER + 2 + 50


def in_use(data):
    """True when the FDE's LOG_EVENT_BINLOG_IN_USE_F is set."""
    return len(data) > IN_USE_OFFSET and bool(data[IN_USE_OFFSET] & 1)


def created(data):
    """The FDE's create_timestamp (non-zero: a server's first binlog)."""
    return struct.unpack_from("<I", data, CREATED_OFFSET)[0]


def events(data):
    """[(offset, type, size)] of the complete, valid events, and the valid end."""
    if data[:4] != MAGIC or len(data) < 4 + HEADER:
        return [], 0
    size = struct.unpack_from("<I", data, 4 + 9)[0]
    if data[4 + 4] != FDE or len(data) < 4 + size:
        return [], 0
    fde = bytearray(data[4:4 + size])
    checksums = fde[-5] == 1
    out = []
    pos = 4
    while pos + HEADER <= len(data):
        typ = data[pos + 4]
        size = struct.unpack_from("<I", data, pos + 9)[0]
        if size < HEADER or pos + size > len(data):
            break
        ev = bytearray(data[pos:pos + size])
        if checksums:
            if pos == 4:
                ev[17] &= 0xfe
            if zlib.crc32(bytes(ev[:-4])) & 0xffffffff != struct.unpack_from("<I", ev, size - 4)[0]:
                break
        out.append((pos, typ, size))
        pos += size
    return out, pos if out else 0


def valid_end(data):
    return events(data)[1]
