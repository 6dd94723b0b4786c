"""walship's seeded fault campaign (run it with run_chaos.sh beside this file).

    run_chaos.sh --seed N --faults N --out DIR [--quick] [--only I]
                 [--worlds append,postgres] [--keep]

Two worlds run at once, each with a real walship-agent and two replicas (the
fault-injecting test build of walship-replica, on their own network
namespaces): `append` (a writer that appends, rotates and removes segments)
and `postgres` (a real PostgreSQL 15 primary under numbered commits, half of
the time with synchronous_standby_names naming walship). Faults come from a
seeded schedule (faults.py); after each one the campaign heals what it broke
and checks the invariants (checks.py). At the end it stops the faults, waits
for every replica to converge, compares every byte, and for PostgreSQL
promotes a standby replayed from a replica's copy.

Writes DIR/report.md and DIR/report.json; exit status 0 when every
invariant held, 1 when one failed (the working directory is then kept), 2 on
bad usage.
"""

import argparse
import os
import random
import shutil
import signal
import sys
import threading
import time
import traceback

from integration.chaos import append_world
from integration.chaos import checks
from integration.chaos import faults
from integration.chaos import netfault
from integration.chaos import nodes
from integration.chaos import report
from integration.walshiptest import procs


class Params(object):
    def __init__(self, quick, netns):
        self.quick = quick
        self.netns = netns
        self.tmpfs_bytes = (256 if quick else 2048) << 20
        self.pg_rate = 200
        self.converge_timeout = 45 if quick else 90
        self.sync_every = 6 if quick else 25

    def host_index(self, world, i):
        return (1 if world == "append" else 3) + i


class Campaign(object):
    """Runs the faults of one world in order and records what happened."""

    def __init__(self, seed, quick, out):
        self.seed, self.quick, self.out = seed, quick, out
        self.lock = threading.Lock()
        self.records = []  # one dict per fault
        self.checks = {}  # invariant -> count
        self.failures = []

    def check(self, f, invariant, problems, world=None):
        with self.lock:
            self.checks[invariant] = self.checks.get(invariant, 0) + 1
            for p in problems:
                self.failures.append({
                    "seed": self.seed, "fault_index": f.index if f else None,
                    "fault": faults.describe(f) if f else "end of run",
                    "world": world.name if world else (f.world if f else None),
                    "invariant": invariant, "detail": p,
                    "replay": faults.replay_command(self.seed, f.index, self.quick) if f
                    else None})
                procs.log("INVARIANT FAILED [%s] %s: %s", invariant,
                          faults.describe(f) if f else "end", p)

    def settled(self, fn, attempts=4):
        """fn() until it returns no problem (a file renamed under the check
        is a race, not a finding); the last result."""
        probs = []
        for _ in range(attempts):
            try:
                probs = fn()
            except FileNotFoundError as e:
                probs = ["raced with a rename: %s" % e]
            if not probs:
                return []
            time.sleep(0.3)
        return probs

    def replica_checks(self, world, f):
        for r in world.replicas:
            t = world.tracker(r)
            self.check(f, "acked", self.settled(lambda: checks.acked(world, r, t)), world)
            self.check(f, "diverge", self.settled(lambda: checks.diverge(world, r)), world)
        if world.kind == "postgres":
            self.check(f, "primary_flush_lsn", self.settled(world.primary_acked_problems), world)

    def at_rest(self, f):
        """A check for a replica just killed: nothing moves, no retries.
        After a power loss the unsynced walship.progress may be gone: the
        acknowledged bytes must be in the (synced) files, and the replica
        vouches for them with the agent when it resumes (README, item 7 of
        the data flow); its durable position is checked once it has."""
        def check(world, r):
            t = world.tracker(r)
            self.check(f, "acked_at_rest", checks.acked(
                world, r, t, require_position=f.family != "power"), world)
        return check

    def handle_dead(self, world, inj, f):
        """Daemons found stopped: a documented stop this fault may cause is
        an outcome (the operator's fix applied), anything else a crash."""
        outcome = None
        reportable = faults.REPORTABLE.get(f.kind, ())
        for r in world.replicas:
            why = checks.reported_stop(r, reportable)
            if why:
                outcome = "reported: %s" % why
                if f.kind == "remove-needed":
                    world.rebuild(r)
                else:
                    r.start()
        self.check(f, "alive", checks.alive(world, inj.expected_dead), world)
        world.ensure_up()
        return outcome

    def run_fault(self, world, inj, f):
        t0 = time.monotonic()
        rec = {"index": f.index, "world": f.world, "family": f.family, "kind": f.kind,
               "target": f.target, "params": f.params}
        world.on_rest = self.at_rest(f)
        try:
            rec["what"] = inj.apply(f)
        except Exception as e:  # noqa: BLE001 - a fault that could not be applied
            rec["what"] = "could not apply: %s" % e
            self.check(f, "applied", ["%s: %s" % (type(e).__name__, e)], world)
            procs.log("%s", traceback.format_exc())
        rec["outcome"] = self.handle_dead(world, inj, f)
        secs, problem = checks.converge(world, world.p.converge_timeout,
                                        faults.REPORTABLE.get(f.kind, ()))
        if problem and problem.startswith("reported"):
            rec["outcome"] = problem
            self.handle_dead(world, inj, f)
            secs2, problem = checks.converge(world, world.p.converge_timeout)
            secs += secs2
        self.check(f, "converge", [problem] if problem else [], world)
        rec["converge_s"] = round(secs, 3)
        self.replica_checks(world, f)
        world.sample_resources()
        rec["seconds"] = round(time.monotonic() - t0, 3)
        with self.lock:
            self.records.append(rec)
        procs.log("fault %s: %s; converged in %.2fs%s", faults.describe(f), rec["what"], secs,
                  " (%s)" % rec["outcome"] if rec["outcome"] else "")

    def run_world(self, world, schedule, keep_going):
        """The world's faults in order; after one that failed an invariant
        the rest are skipped unless keep_going (what follows would be
        judged on a broken world)."""
        inj = faults.Injector(world, world.p.netns)
        pg_count = 0
        for f in schedule:
            if not keep_going and any(x["world"] == world.name for x in self.failures):
                procs.log("%s: skipping the remaining faults after a failure", world.name)
                break
            if world.kind == "postgres":
                if pg_count % world.p.sync_every == 0:
                    world.set_sync(not world.sync)
                    procs.log("postgres: synchronous_standby_names %s", "walship" if world.sync
                              else "empty")
                pg_count += 1
            self.run_fault(world, inj, f)

    def finish(self, world):
        """Faults over: converge, every byte compared, the PostgreSQL standby."""
        world.ensure_up()
        if world.kind == "append":
            world.writer.stop()
        secs, problem = checks.converge(world, world.p.converge_timeout * 2)
        self.check(None, "converge_end", [problem] if problem else [], world)
        self.replica_checks(world, None)
        if world.kind == "append":
            for r in world.replicas:
                self.check(None, "identical_end", self.settled(
                    lambda: checks.identical(world, r, world.tracker(r))), world)
        else:
            rep = world.replicas[1] if world.replicas[1].epoch == 0 else world.replicas[0]
            probs, detail = world.final_standby_check(rep)
            self.check(None, "acked_commits_on_promoted_standby", probs, world)
            world.final_detail = detail
            procs.log("postgres: %s", detail)
        self.check(None, "bounded", checks.bounded(world), world)
        return secs


def build_worlds(names, root, rng, params):
    worlds = []
    if "append" in names:
        worlds.append(append_world.AppendWorld(root, random.Random(rng.randrange(1 << 32)),
                                               params))
    if "postgres" in names:
        from integration.walshiptest import pg
        from integration.chaos import pg_world
        # PostgreSQL runs as an ordinary user, who must reach its files:
        # they live under /tmp, the daemons' logs under the output directory.
        env = pg.PgEnv()
        worlds.append(pg_world.PgWorld(root, random.Random(rng.randrange(1 << 32)), params,
                                       env))
    return worlds


def parse_args(argv):
    ap = argparse.ArgumentParser(description="walship's seeded fault campaign")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--faults", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", type=int, default=None, help="replay fault I alone")
    ap.add_argument("--worlds", default="append,postgres")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("--keep-going", action="store_true",
                    help="go on with a world's faults after an invariant failed")
    a = ap.parse_args(argv)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    if a.faults is None:
        a.faults = 100 if a.quick else 1000
    a.out = a.out or os.path.abspath("chaos-%d" % a.seed)
    return a


def main(argv=None):
    a = parse_args(argv)
    names = [w for w in a.worlds.split(",") if w]
    os.makedirs(a.out, exist_ok=True)
    procs.log("chaos campaign seed=%d faults=%d quick=%s worlds=%s (replay: %s)", a.seed, a.faults,
              a.quick, ",".join(names), "run_chaos.sh --seed %d --faults %d%s" % (
              a.seed, a.faults, " --quick" if a.quick else ""))
    signal.signal(signal.SIGTERM, _interrupted)
    netfault.cleanup_stale()
    ok, why = netfault.available()
    params = Params(a.quick, ok)
    procs.log("network faults: %s", "network namespaces (%s)" % why if ok else
              "fault proxy only: %s" % why)
    root = os.path.join(a.out, "work")
    os.makedirs(root, exist_ok=True)
    os.chmod(root, 0o755)
    rng = random.Random(a.seed)
    indices = [a.only] if a.only is not None else range(a.faults)
    schedule = [faults.draw(a.seed, i, names) for i in indices]
    if a.only is not None:
        names = [schedule[0].world]
    camp = Campaign(a.seed, a.quick, a.out)
    started = time.time()
    worlds = []
    try:
        worlds = build_worlds(names, root, rng, params)
        for w in worlds:
            w.start()
        threads = []
        for w in worlds:
            mine = [f for f in schedule if f.world == w.name]
            t = threading.Thread(target=_guard, args=(camp, camp.run_world, w, mine,
                                                      a.keep_going),
                                 name="world-" + w.name, daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        for w in worlds:
            _guard(camp, camp.finish, w)
    finally:
        for w in worlds:
            try:
                w.stop()
            except Exception:  # noqa: BLE001 - teardown must go on
                procs.log("stopping %s: %s", w.name, traceback.format_exc())
        for w in worlds:
            if getattr(w, "env", None):
                w.env.close()
        for m in nodes.mounts_under(root):  # never leave a mount behind
            procs.log("a mount was left after the worlds stopped: %s; unmounting it", m)
            nodes.unmount(m)
    network = netfault.describe() if params.netns else ["fault proxy only: %s" % why]
    summary = report.write(a, camp, worlds, params, started, network)
    failed = bool(camp.failures)
    if not failed and not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    procs.log("%s; report in %s", summary, a.out)
    return 1 if failed else 0


def _interrupted(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def _guard(camp, fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - recorded as a failure of the run
        procs.log("%s", traceback.format_exc())
        camp.check(None, "campaign", ["%s: %s" % (type(e).__name__, e)])


if __name__ == "__main__":
    sys.exit(main())
