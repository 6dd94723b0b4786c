"""The drills: crash (process-crash, host-loss), in-load faults
(replica-crash, network-cut), switchover; diagnostics and finishing."""

import os
import sys
import time
import traceback

from integration.drill.drill_measure import Load, Sampler, analyze_lag, write_lag_outputs
from integration.drill.drill_setup import Setup, agent_status
from integration.drill.drill_steps import (
    Result, check_acked_present, log_mentions, promote, rejoin, table_seqs, wait_drained,
    wait_standby_replayed, wait_state_stable)
from integration.walshiptest.lsn import fmt_lsn
from integration.walshiptest.pg import waldump_end
from integration.walshiptest.procs import log
from integration.walshiptest.waits import StepError


# ---------------------------------------------------------------------------
# The drills

def run_load_until(setup, load, seconds):
    """Sleeps `seconds` into the load; raises if the loader died early."""
    deadline = load.t_start + seconds
    while time.time() < deadline:
        if not load.running():
            raise StepError("the loader stopped early (exit %s); see %s" % (
                load.loader.returncode(), load.loader.log_path))
        time.sleep(min(0.2, max(0.0, deadline - time.time())))


def drill_crash(ctx, name):
    """process-crash (postgres kill -9) or host-loss (postgres and agent kill -9)."""
    res = Result(name)
    s = Setup(ctx, name)
    sampler = None
    try:
        s.build()
        sampler = Sampler(ctx, s)
        sampler.start()
        time.sleep(0.5)
        load = Load(ctx, s, s.primary, ctx.p.load_seconds + 120, 1, "a")
        s.t0 = load.start()
        s.event("load started")
        fault_at = ctx.p.load_seconds - ctx.rng.uniform(0.0, 2.0)
        run_load_until(s, load, fault_at)
        last_flush = next((r["primary_flush"] for r in reversed(sampler.rows)
                           if r["primary_flush"] is not None), None)
        if name == "host-loss":
            t_fault = s.event("FAULT: kill -9 agent and postgres (host loss)")
            s.agent.kill()
            s.primary.kill9()
        else:
            t_fault = s.event("FAULT: kill -9 of the postmaster (process crash)")
            secs = s.primary.kill9_postmaster()
            s.event("the last orphaned backend exited %.2fs after the postmaster" % secs)
        rc = load.wait(30)
        res.metrics["loader_exit"] = rc
        res.metrics["fault_after_load_s"] = round(t_fault - s.t0, 2)
        if name == "process-crash":
            flushed, source_end, secs = wait_drained(ctx, s, s.agent, s.replica)
            s.event("agent drained in %.1fs: replica flushed %s = source end %s" % (
                secs, fmt_lsn(flushed), fmt_lsn(source_end)))
            res.metrics["drain_s"] = round(secs, 2)
        durable = (s.replica.durable_lsn() if name == "process-crash"
                   else wait_state_stable(ctx, s.replica))
        res.metrics["replica_durable_lsn"] = fmt_lsn(durable)
        s.event("replica durable at %s" % fmt_lsn(durable))
        if name == "process-crash":
            res.check("replica's durable position equals its acknowledged flushed position",
                      durable == flushed, "state %s, acked %s" % (fmt_lsn(durable),
                                                                 fmt_lsn(flushed)))
        ok, replay, detail = wait_standby_replayed(ctx, s, s.standby, s.replica, durable)
        s.event("%s replay at %s: %s" % (s.standby.name, fmt_lsn(replay),
                                         "caught up" if ok else "BEHIND"))
        res.metrics["standby_replay_lsn"] = fmt_lsn(replay)
        res.check("before promotion the standby replayed all WAL the replica acknowledged",
                  ok, detail)
        res.check("the standby replayed only WAL the replica holds (replay <= durable)",
                  replay is not None and replay <= durable,
                  "replay %s, durable %s" % (fmt_lsn(replay), fmt_lsn(durable)))
        # What the primary had: the end of valid WAL in its pg_wal (crash recovery's end).
        tli = s.replica.timeline()
        primary_end, _ = waldump_end(ctx.env, s.primary.pg_wal, replay or durable, tli,
                                     ctx.p.segsize)
        wal_lost = max(0, primary_end - (replay or 0))
        res.metrics.update({"primary_wal_end_lsn": fmt_lsn(primary_end),
                            "primary_last_sampled_flush_lsn": fmt_lsn(last_flush),
                            "wal_bytes_lost": wal_lost})
        if not ok:
            log("!!!!!! REFUSING TO PROMOTE: %s", detail)
            res.notes.append("Promotion refused: " + detail)
            res.error = "promotion refused: standby behind the replica"
            return res
        rto = promote(ctx, s, s.standby, t_fault, res)
        res.metrics["rto_s"] = round(rto, 3)
        check_acked_present(res, s.standby, [load], allow_suffix_loss=(name == "host-loss"))
        if name == "host-loss":
            # The old primary comes back (its disk survived): its unshipped
            # tail diverges from the new timeline, so pg_rewind must discard
            # it before it can follow the new primary through walship.
            old, new = s.primary, s.standby
            if rejoin(ctx, s, res, old, new, "rejoin"):
                load_on_new_primary(ctx, s, res, new, old, 1000001, "rejoin")
                rows_old, rows_new = table_seqs(old), table_seqs(new)
                res.check("rejoin: the rewound old primary holds exactly the new primary's "
                          "rows (its lost tail discarded)", rows_old == rows_new,
                          "%d rows on %s, %d on %s" % (len(rows_old), old.name, len(rows_new),
                                                       new.name))
        if name == "process-crash":
            res.check("the standby replayed up to the end of the primary's valid WAL",
                      wal_lost == 0, "primary WAL ends at %s, standby replayed to %s" % (
                          fmt_lsn(primary_end), fmt_lsn(replay)))
        return res
    finally:
        finish_drill(ctx, s, sampler, res, "FAULT")


def load_on_new_primary(ctx, s, res, new, old, start_seq, tag):
    """After `old` rejoined as the standby of `new`: a load on `new`; checks
    that it completed and that its rows reached `old` through walship.
    Returns (the load, whether `old` caught up)."""
    ld = Load(ctx, s, new, ctx.p.switch_load_seconds, start_seq, tag)
    ld.start()
    rc = ld.wait(ctx.p.switch_load_seconds + 60)
    res.check("%s: load on the new primary %s completed" % (tag, new.name), rc == 0,
              "loader exit %s" % rc)
    try:
        s.wait_standby_near(new, old)
        caught = True
    except StepError as e:
        caught = False
        res.notes.append(str(e))
    res.check("%s: rows written on %s reached %s through walship" % (tag, new.name, old.name),
              caught, "replay %s" % fmt_lsn(old.lsn("pg_last_wal_replay_lsn()")))
    return ld, caught


def drill_in_load(ctx, name):
    """replica-crash or network-cut while the primary takes writes."""
    res = Result(name)
    s = Setup(ctx, name, proxied=(name == "network-cut"))
    sampler = None
    try:
        s.build()
        sampler = Sampler(ctx, s)
        sampler.start()
        time.sleep(0.5)
        load = Load(ctx, s, s.primary, ctx.p.load_seconds, 1, "a")
        s.t0 = load.start()
        s.event("load started")
        run_load_until(s, load, ctx.p.load_seconds * ctx.rng.uniform(0.3, 0.45))
        down = ctx.rng.uniform(1.5, 3.0) if name == "replica-crash" else ctx.rng.uniform(2.0, 4.0)
        flush_at_fault = s.primary.lsn()
        if name == "replica-crash":
            t_fault = s.event("FAULT: kill -9 replica (down %.1fs)" % down)
            s.replica.kill()
            time.sleep(down)
            s.replica.start()
            t_back = s.event("replica restarted")
        else:
            t_fault = s.event("FAULT: network cut, connections refused for %.1fs" % down)
            for p in s.proxies:
                p.refuse_for(down)
                p.cut()
            time.sleep(down)
            t_back = s.event("network restored")
        res.metrics["fault_after_load_s"] = round(t_fault - s.t0, 2)
        res.metrics["fault_duration_s"] = round(t_back - t_fault, 2)
        during = [r["connected"] for r in list(sampler.rows) if t_fault < r["t"] <= t_back]
        res.check("the fault took effect: the agent saw the replica disconnected",
                  False in during, "%d of %d samples during the fault disconnected" % (
                      during.count(False), len(during)))
        # Catch-up: the replica holds what the primary had flushed when the fault ended.
        flush_at_back = s.primary.lsn()
        t_caught = None
        deadline = time.time() + ctx.p.drain_timeout
        while time.time() < deadline:
            st = agent_status(ctx, s.agent.control)
            rep = st and st["replicas"].get(s.replica.name)
            if rep and rep["flushed"] is not None and rep["flushed"] >= flush_at_back:
                t_caught = s.event("replica caught up with the primary's flush at fault end")
                break
            time.sleep(0.1)
        res.check("the replica caught up after the fault", t_caught is not None,
                  "%.1fs after the fault ended" % (t_caught - t_back) if t_caught else
                  "did not reach %s within %ss" % (fmt_lsn(flush_at_back),
                                                   ctx.p.drain_timeout))
        if t_caught:
            res.metrics["catchup_s"] = round(t_caught - t_back, 2)
        rc = load.wait(ctx.p.load_seconds + 60)
        res.check("the primary acknowledged commits throughout (loader exit 0)", rc == 0,
                  "loader exit %s" % rc)
        s.event("load ended")
        target = s.primary.lsn("pg_current_wal_insert_lsn()")
        t = time.time()
        try:
            s.wait_standby_near(s.primary, s.standby)
            caught = True
        except StepError as e:
            caught = False
            res.notes.append(str(e))
        replay = s.standby.lsn("pg_last_wal_replay_lsn()")
        res.check("final catch-up: the standby replayed up to the primary's end of WAL", caught,
                  "replay %s, primary %s, %.1fs after the load" % (
                      fmt_lsn(replay), fmt_lsn(target), time.time() - t))
        check_acked_present(res, s.standby, [load], allow_suffix_loss=False)
        res.check("the replica is still running (no gap or divergence stop)", s.replica.running(),
                  "exit %s" % (s.replica.returncode(),))
        bad = log_mentions(s.replica.log_path, ["gap:", "divergent history"])
        res.check("the replica logged no gap or divergence", not bad, ", ".join(bad))
        # Continuous replay: the standby's position never went back and moved after the fault.
        reps = [(r["t"], r["standby_replay"]) for r in sampler.rows
                if r["standby_replay"] is not None]
        backwards = any(b[1] < a[1] for a, b in zip(reps, reps[1:]))
        moved = any(t_ > t_back and l_ > flush_at_fault for t_, l_ in reps)
        res.check("the standby replayed continuously (never backwards, moving after the fault)",
                  not backwards and moved,
                  "%d samples%s%s" % (len(reps), ", went backwards" if backwards else "",
                                      "" if moved else ", no progress after the fault"))
        res.metrics["rto_s"] = None
        res.metrics["wal_bytes_lost"] = 0 if caught else None
        return res
    finally:
        finish_drill(ctx, s, sampler, res, "FAULT")


def drill_switchover(ctx, name="switchover"):
    """Clean switchover to the standby, the old primary rewound into a standby, and back."""
    res = Result(name)
    s = Setup(ctx, name)
    sampler = None
    loads = []
    try:
        s.build()
        sampler = Sampler(ctx, s)
        sampler.start()
        time.sleep(0.5)
        load = Load(ctx, s, s.primary, ctx.p.load_seconds, 1, "r0")
        s.t0 = load.start()
        loads.append(load)
        s.event("load started on %s" % s.primary.name)
        rc = load.wait(ctx.p.load_seconds + 60)
        res.check("load on the first primary completed", rc == 0, "loader exit %s" % rc)
        rounds = [("r1", 1000001), ("r2", 2000001)]
        rtos = []
        for tag, start_seq in rounds:
            old, new = s.primary, s.standby
            t_fault = s.event("SWITCHOVER %s: stop %s (fast), %s takes over" % (
                tag, old.name, new.name))
            old.stop("fast")
            flushed, source_end, secs = wait_drained(ctx, s, s.agent, s.replica)
            s.event("agent drained: %s" % fmt_lsn(flushed))
            ok, replay, detail = wait_standby_replayed(ctx, s, new, s.replica, flushed)
            s.event("%s replay at %s: %s" % (new.name, fmt_lsn(replay),
                                             "caught up" if ok else "BEHIND"))
            res.check("%s: before promotion %s replayed all WAL the replica acknowledged"
                      % (tag, new.name), ok, detail)
            tli = s.replica.timeline()
            old_end, n = waldump_end(ctx.env, old.pg_wal, replay or 0, tli, ctx.p.segsize)
            res.check("%s: %s replayed every record %s wrote (nothing lost)" % (
                tag, new.name, old.name), ok and n == 0,
                "old primary's WAL ends at %s, %d records past replay %s" % (
                    fmt_lsn(old_end), n, fmt_lsn(replay)))
            if not (ok and n == 0):
                log("!!!!!! REFUSING TO PROMOTE %s: %s", new.name, detail)
                res.error = "switchover %s refused" % tag
                return res
            rto = promote(ctx, s, new, t_fault, res)
            rtos.append(round(rto, 3))
            s.agent.stop()
            s.replica.stop()
            if not rejoin(ctx, s, res, old, new, tag):
                return res
            ld, caught = load_on_new_primary(ctx, s, res, new, old, start_seq, tag)
            loads.append(ld)
            check_acked_present(res, old, loads, allow_suffix_loss=False)
            if res.error or not caught:
                break
        res.metrics["rto_s"] = rtos[0] if rtos else None
        res.metrics["switchover_rto_s"] = rtos
        res.metrics["wal_bytes_lost"] = 0 if res.ok else None
        return res
    finally:
        finish_drill(ctx, s, sampler, res, "SWITCHOVER")


def write_diagnostics(ctx, s):
    """DRILL/diagnostics.txt: pg_wal listings, replica destinations, control data."""
    lines = []
    for c in (s.primary, s.standby):
        lines.append("== %s (%s) pg_wal" % (c.name, c.datadir))
        try:
            for f in sorted(os.listdir(c.pg_wal)):
                p = os.path.join(c.pg_wal, f)
                lines.append("  %-40s %d" % (f, os.path.getsize(p) if os.path.isfile(p) else -1))
        except OSError as e:
            lines.append("  %s" % e)
        try:
            cd = c.controldata()
            for k in ("Database cluster state", "Latest checkpoint location",
                      "Latest checkpoint's REDO location", "Latest checkpoint's TimeLineID",
                      "Minimum recovery ending location", "Min recovery ending loc's timeline"):
                lines.append("  %s: %s" % (k, cd.get(k)))
        except StepError as e:
            lines.append("  pg_controldata: %s" % e)
    for r in s.replicas:
        lines.append("== %s dest %s" % (r.name, r.dest))
        try:
            for f in sorted(os.listdir(r.dest)):
                lines.append("  %-40s %d" % (f, os.path.getsize(os.path.join(r.dest, f))))
        except OSError as e:
            lines.append("  %s" % e)
        lines.append("  state: %s" % (r.state(),))
    with open(os.path.join(s.out, "diagnostics.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def finish_drill(ctx, s, sampler, res, fault_word):
    """Stops the drill's processes, writes its lag CSV/SVG, fills metrics; never raises."""
    exc = sys.exc_info()[1]
    if exc is not None and res.error is None:
        res.error = "%s: %s" % (type(exc).__name__, exc)
        log("drill %s failed: %s\n%s", res.name, exc, traceback.format_exc())
    try:
        if sampler:
            sampler.stop()
        write_diagnostics(ctx, s)
        s.teardown()
    except Exception as e:  # noqa: BLE001
        log("teardown of %s: %s", s.name, e)
    try:
        rows = sampler.rows if sampler else []
        t_fault = next((t for t, l in s.events if l.startswith(fault_word)), None)
        loads_end = max([ld.t_start + ld.seconds for ld in s.loads if ld.t_start] or [0])
        t_to = min(x for x in (t_fault, loads_end, time.time()) if x)
        if s.t0:
            res.metrics["lag"] = analyze_lag(rows, s.loads, s.t0, t_to)
            res.metrics["lag_with_fault"] = analyze_lag(rows, s.loads, s.t0,
                                                        max(loads_end, t_fault or 0))
        markers = []
        for t, label in s.events:
            if label.startswith(("FAULT", "SWITCHOVER")):
                markers.append((t, label.split(":")[0].lower(), "#d62728"))
            elif label.startswith("promote"):
                markers.append((t, "promote", "#ff7f0e"))
            elif "accepts writes" in label:
                markers.append((t, "writable", "#2ca02c"))
            elif label.startswith(("replica restarted", "network restored")):
                markers.append((t, label.split()[1], "#17becf"))
            elif " is a standby of " in label:
                markers.append((t, "old primary follows", "#17becf"))
        if rows:
            csvn, svgn = write_lag_outputs(s, rows, markers, "%s: replication lag" % res.name)
            res.files.update({"csv": "%s/%s" % (s.name, csvn), "svg": "%s/%s" % (s.name, svgn)})
        res.files["logs"] = sorted("%s/logs/%s" % (s.name, f) for f in os.listdir(s.logs))
        t0 = s.t0 or (s.events[0][0] if s.events else 0)
        res.events = [{"t_rel": round(t - t0, 3), "event": l} for t, l in s.events]
    except Exception as e:  # noqa: BLE001
        log("report data for %s: %s\n%s", s.name, e, traceback.format_exc())
        if res.error is None:
            res.error = "report data: %s" % e


DRILLS = {
    "process-crash": lambda ctx: drill_crash(ctx, "process-crash"),
    "host-loss": lambda ctx: drill_crash(ctx, "host-loss"),
    "replica-crash": lambda ctx: drill_in_load(ctx, "replica-crash"),
    "network-cut": lambda ctx: drill_in_load(ctx, "network-cut"),
    "switchover": drill_switchover,
}
