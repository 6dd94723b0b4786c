"""The steps and checks the drills share: a drill's Result, waits for
drain and replay, promotion, rejoin, and the acknowledged-commit checks."""

import os
import shutil
import time

from integration.drill.drill_setup import ACKS_TABLE, RTO_TABLE, agent_status
from integration.walshiptest.lsn import fmt_lsn, segment_name
from integration.walshiptest.pg import waldump_end
from integration.walshiptest.procs import log
from integration.walshiptest.waits import StepError


# ---------------------------------------------------------------------------
# Checks shared by the drills

class Result(object):
    """One drill's outcome: metrics, invariants, events."""

    def __init__(self, name):
        self.name = name
        self.invariants = []  # {"name", "ok", "detail"}
        self.metrics = {}
        self.events = []
        self.notes = []
        self.error = None
        self.files = {}

    def check(self, name, ok, detail=""):
        self.invariants.append({"name": name, "ok": bool(ok), "detail": detail})
        log("%s %s: %s%s", "PASS" if ok else "FAIL", self.name, name,
            (" (%s)" % detail) if detail else "")
        return ok

    @property
    def ok(self):
        return self.error is None and all(i["ok"] for i in self.invariants)

    def to_json(self):
        return {"name": self.name, "ok": self.ok, "error": self.error,
                "metrics": self.metrics, "invariants": self.invariants,
                "events": self.events, "notes": self.notes, "files": self.files}


def wait_drained(ctx, setup, agent, replica):
    """Waits until the replica's flushed position equals the agent's source end for 0.5s.

    Returns (flushed, source_end, seconds) or raises StepError.
    """
    t = time.time()
    last, since = None, time.time()
    deadline = t + ctx.p.drain_timeout
    while True:
        st = agent_status(ctx, agent.control)
        rep = st and st["replicas"].get(replica.name)
        cur = (rep["flushed"], st["source_end"]) if rep else None
        if cur != last:
            last, since = cur, time.time()
        elif cur and cur[0] is not None and cur[0] == cur[1] and time.time() - since >= 0.5:
            return cur[0], cur[1], time.time() - t
        if time.time() > deadline:
            raise StepError("agent did not drain within %ss: replica flushed %s, source end %s"
                            % (ctx.p.drain_timeout, fmt_lsn(cur and cur[0]),
                               fmt_lsn(cur and cur[1])))
        time.sleep(0.1)


def wait_state_stable(ctx, replica, stable=0.5, timeout=30):
    """The replica's durable LSN (walship.state, or walship.progress past it)
    once unchanged for `stable` seconds."""
    last, since = None, time.time()
    deadline = time.time() + timeout
    while True:
        cur = replica.durable_lsn()
        if cur != last:
            last, since = cur, time.time()
        elif time.time() - since >= stable:
            return cur
        if time.time() > deadline:
            return cur
        time.sleep(0.1)


def records_beyond(ctx, setup, replica, start_lsn, tli):
    """Complete WAL records the replica holds past start_lsn (0: nothing left to replay).

    Materializes the replica's segments with `walship-replica restore` (what
    the standby sees: the in-progress one zero-padded) and reads them with
    pg_waldump.
    """
    env, seg = ctx.env, ctx.p.segsize
    end = replica.durable_lsn()
    if end is None or end <= start_lsn:
        return 0, start_lsn
    tmp = env.mkdir(setup.name, "check-%d" % int(time.time() * 1000), mode=0o755)
    try:
        first, last = start_lsn // seg, end // seg
        for segno in range(first, last + 1):
            name = segment_name(tli, segno, seg)
            r = env.run([env.binaries["walship-replica"], "restore", "--dest=%s" % replica.dest,
                         name, os.path.join(tmp, name)], timeout=60, check=False)
            if r.returncode != 0:
                log("restore %s from %s: exit %d %s", name, replica.dest, r.returncode,
                    r.stderr.strip())
                break
        wal_end, n = waldump_end(env, tmp, start_lsn, tli, seg)
        return n, wal_end
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def wait_standby_replayed(ctx, setup, standby, replica, required):
    """Waits (bounded) until the standby has replayed all WAL the replica durably holds.

    Done when pg_last_wal_replay_lsn() >= required, or when replay has not
    moved for a while and the replica's bytes past it hold no complete record
    (the tail is the start of a record whose end was never shipped).
    Returns (ok, replay_lsn, detail).
    """
    tli = replica.timeline()
    t = time.time()
    deadline = t + ctx.p.replay_timeout
    last, since, checked_at = None, time.time(), None
    while True:
        r = standby.lsn("pg_last_wal_replay_lsn()") if standby.running() else None
        if r != last:
            last, since = r, time.time()
        if r is not None and r >= required:
            return True, r, "replay %s >= replica durable %s after %.1fs" % (
                fmt_lsn(r), fmt_lsn(required), time.time() - t)
        if r is not None and time.time() - since >= ctx.p.replay_stall and checked_at != r:
            checked_at = r
            n, wal_end = records_beyond(ctx, setup, replica, r, tli)
            if n == 0:
                return True, r, ("replay %s; the replica's %d durable bytes past it (to %s) "
                                 "hold no complete record" % (fmt_lsn(r), required - r,
                                                              fmt_lsn(required)))
            log("standby at %s but the replica holds %d more complete records (to %s): waiting",
                fmt_lsn(r), n, fmt_lsn(wal_end))
        if time.time() > deadline:
            n, wal_end = records_beyond(ctx, setup, replica, r or 0, tli) if r else (-1, None)
            return False, r, ("standby replay %s is behind the replica's durable %s after %ss: "
                              "%d complete records (to %s) not replayed" % (
                                  fmt_lsn(r), fmt_lsn(required), ctx.p.replay_timeout, n,
                                  fmt_lsn(wal_end)))
        time.sleep(0.2)


def promote(ctx, setup, standby, t_fault, res):
    """Reserves the walship slot, promotes, waits for the first INSERT; returns RTO seconds.

    The slot is created on the standby before promotion (see README.md,
    "Switchover needs the slot reserved"): the new timeline's first segment
    must survive until a new agent on the promoted server has shipped it, or
    the old primary can never follow it.
    """
    standby.psql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE slot_name = 'walship'; "
                 "SELECT pg_create_physical_replication_slot('walship', true)")
    setup.event("promote %s (slot walship reserved)" % standby.name)
    out = standby.promote(ctx.p.promote_timeout, check=False)
    if out != "t":
        log("pg_promote returned %r", out)
    deadline = time.time() + ctx.p.promote_timeout
    while True:
        if standby.psql("INSERT INTO %s DEFAULT VALUES" % RTO_TABLE, timeout=10,
                        check=False) is not None:
            t = setup.event("%s accepts writes" % standby.name)
            return t - t_fault
        if time.time() > deadline:
            raise StepError("%s accepted no write within %ss of promotion" % (
                standby.name, ctx.p.promote_timeout))
        time.sleep(0.05)


def rejoin(ctx, s, res, old, new, tag):
    """Makes the stopped old primary a standby of the promoted `new` through walship.

    pg_rewind (which first completes crash recovery of a crashed target in
    single-user mode, and says "no rewind required" when the old primary
    never went past the switch point), then a new agent on `new`, a fresh
    replica, and the old primary started with restore_command from it.
    Returns False (with res.error set) when it could not.
    """
    # PostgreSQL 15's pg_rewind reads the source's timeline from its control
    # file, which a promotion updates only at the (spread) end-of-recovery
    # checkpoint: force it first, as the docs advise.
    new.psql("CHECKPOINT", timeout=120)
    # pg_rewind reads the old primary's WAL back from the divergence point to
    # the last checkpoint before it; the old primary may have recycled those
    # segments (its own crash recovery ends with a checkpoint), but the
    # replica that followed it has them: --restore-target-wal fetches them
    # through walship's restore_command.
    prev = s.replica
    if prev.running():
        prev.stop()
    old.configure({"restore_command": "%s restore --dest=%s %%f %%p" % (
        ctx.env.binaries["walship-replica"], prev.dest)})
    r = ctx.env.run([ctx.env.pg("pg_rewind"), "--target-pgdata=%s" % old.datadir,
                     "--source-server=%s" % new.conninfo(), "--restore-target-wal",
                     "--no-sync"], timeout=300, check=False)
    out = [l for l in (r.stdout + r.stderr).strip().splitlines() if l.strip()]
    s.event("pg_rewind %s: exit %d: %s" % (old.name, r.returncode, out[-1] if out else ""))
    with open(os.path.join(s.logs, "pg_rewind-%s.log" % tag), "w") as f:
        f.write(r.stdout + r.stderr)
    diverged = [l for l in out if "diverged" in l or "rewind required" in l or "Done" in l]
    res.check("%s: pg_rewind of %s succeeded" % (tag, old.name), r.returncode == 0,
              " / ".join(diverged or out[-2:]))
    if r.returncode != 0:
        res.error = "pg_rewind failed"
        return False
    agent, rep = s.start_walship(new, "agent-%s" % tag, "replica-%s" % tag)
    s.standby_conf(old, rep)
    try:
        os.unlink(os.path.join(old.datadir, "recovery.signal"))
    except OSError:
        pass
    s.primary, s.standby = new, old
    old.start(wait_for=("ready", "standby"), timeout=ctx.p.replay_timeout)
    s.event("%s is a standby of %s, fed by %s" % (old.name, new.name, rep.name))
    return True


def table_seqs(cluster):
    out = cluster.psql("SELECT seq FROM %s ORDER BY seq" % ACKS_TABLE, timeout=120)
    return [int(x) for x in out.split()] if out else []


def check_acked_present(res, cluster, loads, allow_suffix_loss):
    """Compares the acknowledged seqs of `loads` with the rows on `cluster`.

    Returns (lost, present) counts; records the invariants in res.
    """
    rows = set(table_seqs(cluster))
    acked, attempted = [], set()
    for ld in loads:
        seqs, _, _ = ld.acks()
        acked.extend(seqs)
        attempted.update(range(ld.start_seq, (max(seqs) if seqs else ld.start_seq - 1) + 2))
    acked_set = set(acked)
    lost = sorted(acked_set - rows)
    present = sorted(acked_set & rows)
    unknown = sorted(rows - attempted)
    in_flight = sorted((rows - acked_set) & attempted)
    res.metrics.update({"acked_commits": len(acked), "acked_lost": len(lost),
                        "rows_on_standby": len(rows), "in_flight_present": len(in_flight)})
    res.check("every row on %s was attempted by the loader" % cluster.name, not unknown,
              "%d unknown seqs %s" % (len(unknown), unknown[:5]) if unknown else
              "%d rows, %d of them in flight (never acknowledged)" % (len(rows), len(in_flight)))
    if allow_suffix_loss:
        hole = bool(lost) and bool(present) and max(present) > min(lost)
        res.check("lost acknowledged commits are a suffix of the sequence (no hole)", not hole,
                  "%d of %d acked commits lost%s" % (
                      len(lost), len(acked),
                      (", seqs %d..%d" % (lost[0], lost[-1])) if lost else "") +
                  ("; present seq %d > lost seq %d" % (max(present), min(lost)) if hole else ""))
    else:
        res.check("every acknowledged commit is on %s" % cluster.name, not lost,
                  "%d acked, %d lost%s" % (len(acked), len(lost),
                                           (" e.g. %s" % lost[:5]) if lost else ""))
    return len(lost), len(present)


def log_mentions(path, needles):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    return [n for n in needles if n in text]
