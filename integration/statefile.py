"""Reads walship-replica's walship.state and walship.progress (format:
replica/state_store.h).

parse(data) -> dict with stream, segment, offset (int), complete (bool) and
seq (int; 0 for a version 2 file). Of a version 3 file's two slots the valid
record with the higher seq counts: a slot torn by a save in progress fails
its CRC32C and is skipped. Raises ValueError if no record is valid.

read_durable(dest) -> the replica's durable position: walship.state, or
walship.progress where it names acknowledged bytes of the same segment past
the state (the state is saved lazily inside a segment). The progress claim
is taken as written, without checking the segment file's bytes as the
replica's own recovery does: for a running or killed replica whose machine
kept its page cache. None when there is no state file.

held_partial(dest) -> (segment, bytes) of the segment being received, as
far as the records prove it (read_durable), never the file's length: a
live segment's NAME.partial is pre-sized with zeros to the segment size
(section 8 of replica/disk_format.md). None when the durable position is a
complete segment or there is none. partial_kind(path) says "pre-sized" or
"grown" by that section's rule; tail_end(path, offset) is where the bytes
past `offset` that a restart offers the agent end.
"""

import os
import struct
import zlib

from integration import wirelib
from integration.walshiptest import lsn

SLOT = 4096


def _record(text):
    at = text.rfind("crc=")
    if at < 0:
        raise ValueError("no crc line: %r" % text)
    body, crc = text[:at], int(text[at + 4:].strip() or "x", 16)
    if wirelib.crc32c(body.encode()) != crc:
        raise ValueError("CRC32C mismatch: %r" % text)
    lines = body.strip("\n").split("\n")
    kv = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    if lines[0] not in ("walship-replica-state 2", "walship-replica-state 3") or not all(
            k in kv for k in ("stream", "segment", "offset", "complete")):
        raise ValueError("unknown layout %r" % text)
    return {"stream": kv["stream"], "segment": kv["segment"], "offset": int(kv["offset"]),
            "complete": kv["complete"] == "1", "seq": int(kv.get("seq", 0))}


def parse(data):
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    if len(text) != 2 * SLOT:
        return _record(text)
    best, errors = None, []
    for slot in (text[:SLOT], text[SLOT:]):
        record = slot.split("\0", 1)[0]
        if not record:
            continue
        try:
            st = _record(record)
        except ValueError as e:
            errors.append(str(e))
            continue
        if best is None or st["seq"] > best["seq"]:
            best = st
    if best is None:
        raise ValueError("no valid slot: %s" % ("; ".join(errors) or "both empty"))
    return best


def encode(stream, segment, offset, complete=False, prefix_crc=0, seq=1):
    """A whole walship.state file (version 3, the record in slot 0), as
    replica/state_store.h specifies: for tests that set up a destination."""
    body = ("walship-replica-state 3\nseq=%d\nstream=%s\nsegment=%s\noffset=%d\n"
            "complete=%d\nprefix_crc=%08x\n" % (seq, stream, segment, offset,
                                                  1 if complete else 0, prefix_crc))
    record = (body + "crc=%08x\n" % wirelib.crc32c(body.encode())).encode()
    return record.ljust(SLOT, b"\0") + b"\0" * SLOT


STATE = "walship.state"
PROGRESS = "walship.progress"


def parse_progress(data):
    """The single record of walship.progress (NUL-padded)."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    return _record(text.split("\0", 1)[0])


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_durable(dest):
    data = _read(os.path.join(dest, STATE))
    if data is None:
        return None
    st = parse(data)
    st["file"] = STATE
    pdata = _read(os.path.join(dest, PROGRESS))
    try:
        p = parse_progress(pdata) if pdata else None
    except ValueError:
        p = None  # torn by a write in progress: the state still holds
    if (p and p["stream"] == st["stream"] and not st["complete"] and not p["complete"]
            and p["segment"] == st["segment"] and p["offset"] > st["offset"]):
        p["file"] = PROGRESS
        return p
    return st


def replica_files(dest):
    """Every file of a replica directory but its lock: {name: (size, crc32)},
    to compare a directory before and after."""
    out = {}
    for n in sorted(os.listdir(dest)):
        if n == "walship.lock":
            continue
        with open(os.path.join(dest, n), "rb") as f:
            data = f.read()
        out[n] = (len(data), zlib.crc32(data))
    return out


# PostgreSQL's long page header (common/pgwal/wal_page.h): xlp_info at 2,
# XLP_LONG_HEADER 0x0002, xlp_seg_size at 32.
_XLP_LONG_HEADER = 0x0002


def segment_size_of(path):
    """The segment size the long page header at the start of `path` names
    (a power of two from 1 MiB to 1 GiB), or 0 when it has none."""
    with open(path, "rb") as f:
        head = f.read(40)
    if len(head) < 40:
        return 0
    info, = struct.unpack_from("<H", head, 2)
    size, = struct.unpack_from("<I", head, 32)
    if not info & _XLP_LONG_HEADER or size < (1 << 20) or size > (1 << 30) or size & (size - 1):
        return 0
    return size


def partial_kind(path, segment_size=None):
    """"pre-sized" when the file's length is its stream's segment size
    (`segment_size`, else the size its first page header names), else
    "grown" (disk_format.md section 8)."""
    size = segment_size or segment_size_of(path)
    return "pre-sized" if size and os.path.getsize(path) == size else "grown"


def tail_end(path, offset, segment_size=None):
    """The end of the bytes past `offset` that a restart offers the agent to
    confirm: the file's length when grown, the end of its last non-zero
    byte when pre-sized; `offset` when there are none (replica/recovery.h,
    PartialTailEnd)."""
    length = os.path.getsize(path)
    if partial_kind(path, segment_size) == "grown":
        return max(offset, length)
    with open(path, "rb") as f:
        f.seek(offset)
        rest = f.read()
    return offset + len(rest.rstrip(b"\0"))


def durable_lsn(dest, segment_size):
    """The LSN up to which the replica in `dest` holds a PostgreSQL stream
    durably (walship.state, or walship.progress past it): 0 before any
    record, and while the records cannot be read (a test polls this)."""
    try:
        st = read_durable(dest)
    except (OSError, ValueError):
        return 0
    return lsn.position_lsn(st, segment_size) or 0


def held_partial(dest):
    """(segment, bytes held) of the segment being received, from the records."""
    st = read_durable(dest)
    if st is None or st["complete"] or not st["segment"]:
        return None
    return st["segment"], st["offset"]
