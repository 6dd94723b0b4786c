"""PostgreSQL LSNs and WAL segment names: parse, format, arithmetic."""

import re

XLOG_BLCKSZ = 8192
_SHORT_PHD = 24  # SizeOfXLogShortPHD, MAXALIGNed
_LONG_PHD = 40  # SizeOfXLogLongPHD, MAXALIGNed


def parse_lsn(text):
    """'1/A2B3C4' -> int; None or '' -> None."""
    if not text:
        return None
    hi, _, lo = text.strip().partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def fmt_lsn(lsn):
    """int -> '1/A2B3C4'; None -> '-'."""
    if lsn is None:
        return "-"
    return "%X/%X" % (lsn >> 32, lsn & 0xFFFFFFFF)


_SEG_RE = re.compile(r"^([0-9A-F]{8})([0-9A-F]{8})([0-9A-F]{8})$")


def parse_segment(name, segsize):
    """'000000010000000000000003' -> (timeline, segno); None if not a segment."""
    m = _SEG_RE.match(name or "")
    if not m:
        return None
    per_id = 0x100000000 // segsize
    return int(m.group(1), 16), int(m.group(2), 16) * per_id + int(m.group(3), 16)


def segment_name(tli, segno, segsize):
    """(timeline, segno) -> the 24-hex-digit segment file name."""
    per_id = 0x100000000 // segsize
    return "%08X%08X%08X" % (tli, segno // per_id, segno % per_id)


def position_lsn(pos, segsize):
    """A walship Position {"segment": NAME, "offset": N} -> LSN, or None."""
    if not pos:
        return None
    seg = parse_segment(pos.get("segment", ""), segsize)
    if seg is None:
        return None
    return seg[1] * segsize + int(pos.get("offset", 0))


def record_end(lsn, tot_len, segsize):
    """End LSN of a WAL record of tot_len bytes starting at lsn.

    Walks the bytes over page boundaries (a long page header at a segment
    start, a short one elsewhere) and MAXALIGNs, as PostgreSQL's EndRecPtr.
    """
    pos, left = lsn, tot_len
    while left > 0:
        off = pos % XLOG_BLCKSZ
        if off == 0:
            hdr = _LONG_PHD if pos % segsize == 0 else _SHORT_PHD
            pos += hdr
            off = hdr
        take = min(XLOG_BLCKSZ - off, left)
        pos += take
        left -= take
    return (pos + 7) & ~7
