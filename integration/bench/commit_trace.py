"""Where a synchronous commit's time goes: reads the two daemons'
--trace-commits files (common/commit_trace.h) and joins them into one record
per DATA frame.

Each file holds lines "NANOSECONDS STAGE SEGMENT OFFSET", times on
CLOCK_MONOTONIC (shared by both daemons on one machine), each naming the
end of the bytes its step concerns. A frame ending at (segment, end) is
followed through:

  feed      agent: the flush feed announced exactly that position
  sent      agent: the frame's payload went out (sendfile returned)
  header    replica: read the frame's header
  spliced   replica: the payload landed in the segment file
  verified  replica: its checksum matched
  synced    replica: the first fdatasync whose durable point covers it
  ack_sent  replica: the first acknowledgement covering it was handed to gRPC
  ack_written  replica: gRPC's Write of it returned (the flushing thread,
            which also reads the next frames, waits for that)
  ack       agent: read the first acknowledgement covering it
  status    agent: the first status update to the walsender covering it

The first five join by the exact position; the others by the first record
(in time and position order, which agree: durable points only grow) whose
position is at or past the frame's end. A stage no record of the whole
trace names (ack_written, from a build before it) is left out of every
frame, and the intervals that need it are empty. A frame that does not end at an
announced flush position (split by the frame size limit or a segment
boundary) has no `feed` and is left out, as are frames some stage never
covered (the end of the trace).

The replica may read a frame's header before the agent's sendfile returns
(the header goes out first, with MSG_MORE): "sent -> header" can be negative
and is reported as it is.
"""

import bisect

STAGES = ["feed", "sent", "header", "spliced", "verified", "synced", "ack_sent", "ack",
          "status", "ack_written"]
AGENT_STAGES = {"feed", "sent", "ack", "status"}
REPLICA_STAGES = {"header", "spliced", "verified", "synced", "ack_sent", "ack_written"}
# Joined by the exact end position; the others by the first covering record.
EXACT = ["feed", "sent", "header", "spliced", "verified"]
COVERING = ["synced", "ack_sent", "ack", "status", "ack_written"]
# (label, from stage, to stage) of each interval of the breakdown.
INTERVALS = [
    ("feed announced -> frame sent (publish, checksum, sendfile)", "feed", "sent"),
    ("frame sent -> replica read its header", "sent", "header"),
    ("header -> payload spliced into the file", "header", "spliced"),
    ("spliced -> checksum verified", "spliced", "verified"),
    ("verified -> fdatasync returned", "verified", "synced"),
    ("fdatasync -> acknowledgement handed to gRPC (progress file)", "synced", "ack_sent"),
    ("acknowledgement handed to gRPC -> agent read it", "ack_sent", "ack"),
    ("agent read it -> status update written to the walsender", "ack", "status"),
    ("total: feed announced -> status update written", "feed", "status"),
    ("beside: the replica's gRPC Write of the acknowledgement blocked the thread that reads "
     "the next frames", "ack_sent", "ack_written"),
]


class TraceError(ValueError):
    """A line that is not a trace record."""


def parse(text, stages=None):
    """[(ns, stage, segment, offset)] of a trace file's text, in file order.
    `stages`: the set of stage names the file may hold (None: any of STAGES).
    Raises TraceError naming the line for anything else."""
    allowed = set(STAGES) if stages is None else stages
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        f = line.split()
        if len(f) != 4 or f[1] not in allowed:
            raise TraceError("line %d: not a trace record: %r" % (n, line))
        try:
            out.append((int(f[0]), f[1], f[2], int(f[3])))
        except ValueError:
            raise TraceError("line %d: not a trace record: %r" % (n, line))
    return out


def read(path, stages=None):
    with open(path) as f:
        return parse(f.read(), stages)


def _index(records):
    """{stage: {(segment, offset): first ns}} and {stage: sorted [(pos, ns)]}."""
    exact, ordered = {}, {}
    for ns, stage, seg, off in records:
        key = (seg, off)
        d = exact.setdefault(stage, {})
        if key not in d or ns < d[key]:
            d[key] = ns
        ordered.setdefault(stage, []).append((key, ns))
    for stage in ordered:
        ordered[stage].sort()
    return exact, ordered


def _first_covering(ordered, key):
    """ns of the first record at or past position `key` (None if none)."""
    i = bisect.bisect_left(ordered, (key, -1))
    return ordered[i][1] if i < len(ordered) else None


def join(agent_records, replica_records):
    """One {stage: ns} per frame the agent sent that every stage covered,
    ordered by position; see the top of this file."""
    exact, ordered = _index(list(agent_records) + list(replica_records))
    covering = [s for s in COVERING if s in ordered]
    frames = []
    for key in sorted(exact.get("sent", {})):
        row = {}
        for stage in EXACT:
            ns = exact.get(stage, {}).get(key)
            if ns is None:
                break
            row[stage] = ns
        else:
            for stage in covering:
                ns = _first_covering(ordered[stage], key)
                if ns is None:
                    break
                row[stage] = ns
            else:
                row["segment"], row["offset"] = key
                frames.append(row)
    return frames


def _pct(sorted_vals, p):
    """Nearest-rank percentile of a sorted list (None if empty)."""
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(p / 100.0 * len(sorted_vals)))]


def breakdown(frames):
    """[{label, from, to, p50_us, p90_us, n}] per interval of INTERVALS over
    `frames` (join()'s output)."""
    out = []
    for label, a, b in INTERVALS:
        vals = sorted((f[b] - f[a]) / 1e3 for f in frames if a in f and b in f)
        out.append({"label": label, "from": a, "to": b, "p50_us": _pct(vals, 50),
                    "p90_us": _pct(vals, 90), "n": len(vals)})
    return out


def total(rows):
    """The "feed -> status" row of breakdown()'s output."""
    return next(r for r in rows if (r["from"], r["to"]) == ("feed", "status"))


def analyze(agent_path, replica_path):
    """{frames, sent, breakdown} from the two trace files: how many frames
    joined, how many the agent sent, and the breakdown."""
    agent = read(agent_path, AGENT_STAGES)
    replica = read(replica_path, REPLICA_STAGES)
    frames = join(agent, replica)
    return {"frames": len(frames), "sent": sum(1 for r in agent if r[1] == "sent"),
            "breakdown": breakdown(frames)}
