"""Reads walship-replica's walship.state (format: replica/state_store.h).

parse(data) -> dict with stream, segment, offset (int), complete (bool) and
seq (int; 0 for a version 2 file). Of a version 3 file's two slots the valid
record with the higher seq counts: a slot torn by a save in progress fails
its CRC32C and is skipped. Raises ValueError if no record is valid.
"""

try:
    from integration import wirelib
except ImportError:  # run as a script from the checkout
    import wirelib

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
