"""The campaign's invariants, checked after every fault and at the end.

  acked:     every byte a replica ever acknowledged as flushed (the furthest
             position in the agent's acknowledgement log or walship-status,
             this epoch) is in
             its destination and equal to the source's (the world's golden
             copy); its durable position (walship.state/.progress) is at or
             past it. For PostgreSQL also the flush LSN the primary itself
             recorded for walship (pg_stat_replication), see pg_world.
  diverge:   no byte in a replica's destination differs from the source's,
             unless walship reported it first (log, status). Bytes past the
             durable position of a .partial are unconfirmed (the replica
             verifies them with the agent before it keeps them): they are
             not counted.
  converge:  once the fault is healed every replica acknowledges the source
             end the agent showed at the heal within a bound, or reports a
             documented error (the fault says which it may cause).
  alive:     no daemon exited unless a fault killed it on purpose.
  bounded:   descriptors and memory of each daemon stay bounded (end of run).

Each returns a list of problem strings ([] when it holds).
"""

import os
import time

from integration import harness as h
from integration import statefile

_cache = {}


def _key(path):
    st = os.stat(path)
    return (path, st.st_ino, st.st_size, st.st_mtime_ns)


def first_difference(a_path, b_path, length=None):
    """Offset of the first differing byte of the two files' first `length`
    bytes (all of b when None), or None; cached by (inode, size, mtime)."""
    key = (_key(a_path), _key(b_path), length)
    if key in _cache:
        return _cache[key]
    b = h.read_bytes(b_path, 0, length)
    a = h.read_bytes(a_path, 0, len(b))
    at = h.first_difference(a, b)
    if at is not None and at >= len(a) and len(b) > len(a):
        at = len(a)  # longer than the source: the first extra byte differs
    if len(_cache) > 20000:
        _cache.clear()
    _cache[key] = at
    return at


def _held(world, dest):
    """{segment number: (name, path, partial)} of the segments in dest; of
    several timelines' files for one number, the newest timeline's."""
    out = {}
    for entry in os.listdir(dest):
        partial = entry.endswith(h.PARTIAL)
        name = entry[:-len(h.PARTIAL)] if partial else entry
        parsed = world.parse(name)
        if parsed is None:
            continue
        tli, segno = parsed
        cur = out.get(segno)
        if cur is None or world.parse(cur[0])[0] < tli:
            out[segno] = (name, os.path.join(dest, entry), partial)
    return out


def acked(world, rep, tracker, acked_pos=None, label="acknowledged", require_position=True):
    """Problems: bytes before the acknowledged position rep does not hold."""
    pos = acked_pos or tracker.acked
    if not pos.segment or not tracker.first:
        return []
    first, last = world.parse(tracker.first)[1], world.parse(pos.segment)[1]
    held = _held(world, rep.dest)
    problems = []
    for segno in range(first, last + 1):
        found = held.get(segno)
        if found is None:
            problems.append("segment number %d: %s up to %s but missing" % (segno, label, pos))
            continue
        name, path, partial = found
        if segno < last and partial:
            problems.append("%s: %s as complete (up to %s) but only .partial" % (name, label, pos))
            continue
        gold = world.golden_path(name)
        if gold is None:
            continue  # the source's copy is gone and was never kept: unverifiable
        need = None if segno < last else pos.offset
        size = os.path.getsize(path)
        if need is not None and size < need:
            problems.append("%s: %s up to %d but the replica holds %d bytes" % (
                name, label, need, size))
            continue
        at = first_difference(gold, path, need)
        if at is not None:
            problems.append("%s: differs from the source at offset %d (%s up to %s)" % (
                name, at, label, pos))
    if require_position:
        problems.extend(_position_problems(world, rep, pos, label))
    return problems


def _position_problems(world, rep, pos, label):
    """The replica's durable position must be at or past `pos`."""
    st = _durable(rep.dest)
    if st is None:
        return ["no walship.state although %s was %s" % (pos, label)]
    if isinstance(st, str):
        return [st]
    if st < pos and world.parse(st.segment)[1] <= world.parse(pos.segment)[1]:
        return ["durable position %s is before the %s %s" % (st, label, pos)]
    return []


def _durable(dest):
    try:
        st = statefile.read_durable(dest)
    except ValueError as e:
        return "walship.state damaged: %s" % e
    except OSError:
        return None
    return h.Pos(st["segment"], st["offset"]) if st else None


def diverge(world, rep):
    """Problems: bytes on rep that differ from the source's."""
    st = _durable(rep.dest)
    durable = st if isinstance(st, h.Pos) else h.Pos("", 0)
    problems = []
    for segno, (name, path, partial) in sorted(_held(world, rep.dest).items()):
        gold = world.golden_path(name)
        if gold is None:
            continue
        try:
            length = None
            if partial:
                if name != durable.segment:
                    continue  # nothing of it is durable yet
                length = durable.offset
            elif not world.golden_complete(name):
                problems.append("%s: complete on the replica, still growing at the source" % name)
                continue
            at = first_difference(gold, path, length)
            if at is None and not partial and os.path.getsize(path) != os.path.getsize(gold):
                at = min(os.path.getsize(path), os.path.getsize(gold))
        except FileNotFoundError:
            continue  # renamed (.partial published) meanwhile: next check
        if at is not None:
            problems.append("%s: byte %d differs from the source%s" % (
                os.path.basename(path), at, " (durable part)" if partial else ""))
    return problems


def alive(world, expected_dead):
    """Problems: daemons that exited although no fault meant them to."""
    problems = []
    for d in [world.agent] + world.replicas:
        if d.proc is None or d.running() or d.label in expected_dead:
            continue
        rc = d.returncode()
        problems.append("%s exited with status %s: %s" % (
            d.label, rc, " | ".join(d.tail(3).splitlines())))
    return problems


def bounded(world, max_fds=512, max_rss_kib=1 << 20):
    """Problems: a daemon whose descriptors or memory grew without bound
    (over the limits, or its last quarter's peak far above its first
    quarter's)."""
    problems = []
    for label, series in sorted(world.resources.items()):
        if not series:
            continue
        rss = [s[1] for s in series]
        fds = [s[2] for s in series]
        if max(fds) > max_fds:
            problems.append("%s: %d open descriptors" % (label, max(fds)))
        if max(rss) > max_rss_kib:
            problems.append("%s: %d KiB resident" % (label, max(rss)))
        q = max(1, len(series) // 4)
        if len(series) >= 8 and max(fds[-q:]) > 2 * max(fds[:q]) + 32:
            problems.append("%s: descriptors grew from %d to %d" % (
                label, max(fds[:q]), max(fds[-q:])))
        if len(series) >= 8 and max(rss[-q:]) > 2 * max(rss[:q]) + 65536:
            problems.append("%s: memory grew from %d to %d KiB" % (
                label, max(rss[:q]), max(rss[-q:])))
    return problems


def resource_summary(world):
    out = {}
    for label, series in world.resources.items():
        out[label] = {"samples": len(series),
                      "max_rss_kib": max(s[1] for s in series),
                      "max_fds": max(s[2] for s in series)}
    return out


def converge(world, timeout, reportable=()):
    """Waits until every replica acknowledged the agent's source end as of
    now. Returns (seconds, None) or (seconds, problem or "reported: ...")."""
    t0 = time.monotonic()
    h.wait_until(lambda: world.agent.running() and world.sample(), 30,
                 "%s agent to answer status" % world.name, 0.1)
    target = world.source_end
    lagging = list(world.replicas)
    while True:
        st = world.sample()
        if st:
            lagging = [r for r in world.replicas if not _caught_up(world, st, r, target)]
        if not lagging:
            return time.monotonic() - t0, None
        for r in lagging:
            why = reported_stop(r, reportable)
            if why:
                return time.monotonic() - t0, "reported: %s: %s" % (r.name, why)
        if time.monotonic() - t0 > timeout:
            detail = []
            for r in lagging:
                e = h.replica_entry(st, r.name) if st else None
                detail.append("%s flushed %s state %s %s (running=%s)" % (
                    r.name, h.flushed(st, r.name) if st else "?",
                    e and e.get("state"), e and (e.get("state_reason") or e.get("last_error")),
                    r.running()))
            return time.monotonic() - t0, "not converged to %s within %ds: %s" % (
                target, timeout, "; ".join(detail))
        time.sleep(0.1)


def _caught_up(world, st, rep, target):
    """rep runs, is connected and acknowledged `target` (or the same byte
    position named otherwise: the end of a complete segment is offset 0 of
    the next, which a replica acknowledges only once it holds bytes of it)."""
    e = h.replica_entry(st, rep.name)
    if not (rep.running() and e is not None and e.get("connected")):
        return False
    flushed = h.pos_of(e.get("flushed"))
    if flushed >= target:
        return True
    return target.offset == 0 and _ends_segment_before(world, flushed, target.segment)


def _ends_segment_before(world, pos, name):
    """pos is the end of the complete segment just before `name`."""
    a, b = world.parse(pos.segment or ""), world.parse(name)
    if not a or not b or a[1] + 1 != b[1] or not world.golden_complete(pos.segment):
        return False
    gold = world.golden_path(pos.segment)
    return gold is not None and os.path.getsize(gold) == pos.offset


def reported_stop(rep, reportable):
    """The documented error a stopped replica logged, if it is one of
    `reportable` (e.g. "gap"); else None."""
    if rep.running() or not reportable:
        return None
    for line in reversed(rep.log_text().splitlines()[-40:]):
        if "stopping:" in line:
            for word in reportable:
                at = line.find(word + ":")
                if at >= 0:
                    return line[at:at + 200]
            return None
    return None


def identical(world, rep, tracker):
    """Problems keeping rep from holding every byte of the (stopped) source
    from its first acknowledged segment on, byte for byte; the last segment
    may be .partial."""
    if not tracker.first:
        return ["%s acknowledged nothing" % rep.name]
    names = sorted(n for n in os.listdir(world.golden) if n >= tracker.first)
    problems = []
    for i, name in enumerate(names):
        found = h.dest_file(rep.dest, name)
        last = i == len(names) - 1
        if found is None or (found[1] and not last):
            problems.append("%s: %s" % (name, "missing" if found is None else "only .partial"))
            continue
        gold = world.golden_path(name)
        at = first_difference(gold, found[0])
        if at is None and os.path.getsize(found[0]) != os.path.getsize(gold):
            at = os.path.getsize(found[0])
        if at is not None:
            problems.append("%s: differs from the source at offset %d" % (name, at))
    return problems
