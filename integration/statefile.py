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
"""

import os
import zlib

from integration import wirelib

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
