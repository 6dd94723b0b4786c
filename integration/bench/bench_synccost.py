"""The synccost section: what a synchronous commit costs through walship and
through pg_receivewal --synchronous, both connected throughout; rounds change
only which of them synchronous_standby_names names (or nobody). Then one
traced round of walship (--trace-commits in both daemons) breaks a commit's
path down by stage (commit_trace.py)."""

import os
import re
import subprocess
import threading

from integration import harness as kit
from integration.bench import commit_trace, report_synccost
from integration.bench.bench_pgbench import pgbench_init, standby_flushed, start_raw_relay
from integration.bench.bench_procs import log, median_summary, rotate
from integration.walshiptest import daemons
from integration.walshiptest.lsn import parse_lsn
from integration.walshiptest.pg import SUPERUSER
from integration.walshiptest.waits import StepError

# Which standby synchronous_standby_names names in a round ("none": nobody).
# "walship-b" (with --compare DIR) is a second walship, the
# binaries in DIR, connected beside the first: two builds compared in the
# same interleaved rounds. "raw-relay" (with --synccost-relay) is the least
# any agent-beside-the-primary design does per commit (raw_relay.h: one
# thread each side, raw sockets, no checksums, state or gRPC), its new
# segments zero-filled as pg_receivewal's, its threads asking for walship's
# scheduler slice: where the architecture alone stands against
# pg_receivewal, in the same rounds.
VARIANTS = ["walship", "pg_receivewal", "none"]
# Each receiver's application_name in pg_stat_replication.
APP = {"walship": "walship", "walship-b": "walship_b", "pg_receivewal": "pg_receivewal",
       "raw-relay": "raw_relay"}
# --synccost-order: how the receivers' walsenders are ordered, as the
# report's method says. A backend that flushed WAL wakes the walsenders in
# the order they connected, and the first one's receiver gets the WAL first.
ORDER_METHOD = {
    "sync-first": "before each round with a synchronous standby, every receiver "
                  "reconnected, that round's standby first",
    "pg_receivewal-first": "connected once, pg_receivewal first (its walsender woken "
                           "first in every round)",
    "walship-first": "connected once, walship first (its walsender woken first in "
                     "every round)",
}
ORDERS = tuple(ORDER_METHOD)
# The slice walship's threads on a commit's path ask for by default
# (--sched-slice-us), given to the relay's two threads too.
RELAY_SLICE_US = 100


def receivers(variants):
    return [v for v in variants if v != "none"]


def variants_of(cfg):
    return (["walship"] + (["walship-b"] if cfg.compare_bin else []) +
            (["raw-relay"] if cfg.synccost_relay else []) + ["pg_receivewal", "none"])


def set_sync(pg, variant, variants=VARIANTS):
    """Names `variant`'s standby synchronous (nobody for "none") and waits
    until pg_stat_replication shows exactly that for each of `variants`."""
    names = "" if variant == "none" else APP[variant]
    pg.psql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % names)
    pg.psql("SELECT pg_reload_conf()")

    def states():
        out = pg.session().fetch(
            "SELECT coalesce(string_agg(application_name || '=' || sync_state, ','), '') "
            "FROM pg_stat_replication")
        return dict(x.split("=", 1) for x in out.split(",") if x)

    def ok():
        s = states()
        return all(s.get(APP[r]) == ("sync" if r == variant else "async")
                   for r in receivers(variants))
    kit.wait_until(ok, 30, lambda: "sync_state for %s (now %s)" % (variant, states()),
                   interval=0.05)


def lag_sampler(pg, stop, lags, load_from):
    """Every ~20 ms: each receiver's flush_lag (pg_stat_replication), once it
    has replied about WAL of the load; `lags` is keyed by application_name."""
    q = ("SELECT coalesce(string_agg(application_name || ' ' || flush_lsn::text || ' ' || "
         "coalesce(extract(epoch from flush_lag)::text, '-'), ','), '') "
         "FROM pg_stat_replication")
    while not stop.is_set():
        try:
            out = pg.session().fetch(q)
        except StepError:
            return
        for row in out.split(","):
            f = row.split()
            if len(f) == 3 and f[0] in lags and f[2] != "-" and parse_lsn(f[1]) > load_from:
                lags[f[0]].append(float(f[2]) * 1e3)
        stop.wait(0.02)


def cpu_seconds(pids):
    """utime + stime of `pids` (processes gone count 0), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # stat fields 14 and 15
    return total / float(tick)


def walsender_pids(pg):
    """Each application_name's walsender pid (pg_stat_replication)."""
    out = pg.session().fetch(
        "SELECT coalesce(string_agg(application_name || '=' || pid, ','), '') "
        "FROM pg_stat_replication")
    return {k: int(v) for k, v in (x.split("=", 1) for x in out.split(",") if x)}


def pct(vals, p):
    s = sorted(vals)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))] if s else None


def run_round(ctx, pg, variant, variants=VARIANTS, recv=None):
    """One round: `variant` synchronous (its receiver reconnected first
    with the order sync-first), CHECKPOINT, pgbench; TPS, average
    latency, each receiver's flush lag p50 / p90 during it and, with `recv`,
    the CPU each receiver's processes (its daemons and its walsender) used
    per transaction."""
    cfg = ctx.cfg
    if recv is not None and variant != "none" and cfg.synccost_order == "sync-first":
        set_sync(pg, "none", variants)
        recv.connect_first(variant)
    set_sync(pg, variant, variants)
    pg.psql("CHECKPOINT")
    pids = recv.pids() if recv is not None else {}
    cpu0 = {(r, part): cpu_seconds(p) for r, parts in pids.items() for part, p in parts.items()}
    lags = {APP[r]: [] for r in receivers(variants)}
    stop = threading.Event()
    th = threading.Thread(target=lag_sampler, args=(pg, stop, lags, pg.flush_lsn()),
                          daemon=True)
    th.start()
    try:
        out = subprocess.run([pg.tool("pgbench"), "-n", "-M", "prepared",
                              "-c", str(cfg.synccost_clients),
                              "-j", str(min(2, cfg.synccost_clients)),
                              "-T", str(cfg.synccost_seconds), "-h", pg.sockdir,
                              "-p", str(pg.port), "-U", SUPERUSER, "postgres"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=cfg.synccost_seconds + 120)
    finally:
        stop.set()
        th.join(10)
    cpu1 = {k: cpu_seconds(pids[k[0]][k[1]]) for k in cpu0}
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
    lat = re.search(r"latency average = ([0-9.]+) ms", out.stdout)
    n = re.search(r"number of transactions actually processed: ([0-9]+)", out.stdout)
    if out.returncode != 0 or not m or not lat or not n:
        raise RuntimeError("pgbench failed: %s" % out.stdout[-2000:])
    res = {"tps": float(m.group(1)), "latency_ms": float(lat.group(1))}
    xacts = max(1, int(n.group(1)))
    for r, parts in pids.items():
        us = {part: (cpu1[(r, part)] - cpu0[(r, part)]) * 1e6 / xacts for part in parts}
        res["%s_cpu_us_per_xact" % r] = sum(us.values())
        for part, v in us.items():
            res["%s_cpu_%s_us_per_xact" % (r, part)] = v
    for r in receivers(variants):
        res["%s_lag_p50_ms" % r] = pct(lags[APP[r]], 50)
        res["%s_lag_p90_ms" % r] = pct(lags[APP[r]], 90)
    return res


SLOTS = ("walship", "walship_b", "sync_rw")


class Receivers(object):
    """walship (agent with its flush feed + replica) and pg_receivewal
    --synchronous, each with a replication slot, and the raw relay when
    asked for, connected for the whole section."""

    def __init__(self, ctx, pg, variants):
        self.ctx, self.pg, self.variants = ctx, pg, variants
        self.agent = self.replica = self.rw = None
        self.agent_b = self.replica_b = None
        self.relay_send = self.relay_recv = None
        self.rw_dir = None

    def pids(self):
        """Each receiver's processes by part: its daemons and its walsender."""
        ws = walsender_pids(self.pg)
        parts_of = {"walship": (("agent", self.agent), ("replica", self.replica)),
                    "walship-b": (("agent", self.agent_b), ("replica", self.replica_b)),
                    "pg_receivewal": (("pg_receivewal", self.rw),),
                    "raw-relay": (("relay_send", self.relay_send),
                                  ("relay_recv", self.relay_recv))}
        out = {}
        for r in receivers(self.variants):
            parts = {part: [d.pid] for part, d in parts_of[r]
                     if d is not None and d.pid is not None}
            if APP[r] in ws:
                parts["walsender"] = [ws[APP[r]]]
            out[r] = parts
        return out

    def start(self):
        """Connects every receiver: walship first with the order
        walship-first, otherwise pg_receivewal; the orders that connect
        once keep that."""
        pg = self.pg
        for slot in SLOTS:
            pg.drop_slot(slot)
        pg.psql("SELECT pg_create_physical_replication_slot('sync_rw', true)")
        self.rw_dir = self.ctx.fresh_dir("sync-rw")
        self.connect_all("walship" if self.ctx.cfg.synccost_order == "walship-first"
                         else "pg_receivewal")

    def connect_all(self, first):
        """Connects every receiver, `first` before the others (then
        pg_receivewal, walship, walship-b, the relay), and checks that its
        walsender holds the first slot: a backend that flushed WAL wakes
        the walsenders in the order of their slots, which is the order
        they connected in; on busy CPUs each one woken runs before the
        backend wakes the next, so the first one's receiver gets the WAL
        first."""
        self.connect(first)
        self.await_walsender(first)
        for r in dict.fromkeys(["pg_receivewal"] + receivers(self.variants)):
            if r != first:
                self.connect(r)
        self.caught_up()
        self.check_first_slot(first)

    def connect(self, r):
        """Starts receiver `r` (again, after disconnect(), from where it
        stopped: the same directories, slot and flags)."""
        ctx, pg = self.ctx, self.pg
        if r == "pg_receivewal":
            self.rw = ctx.procs.start("pg_receivewal-sync", [
                pg.tool("pg_receivewal"), "-D", self.rw_dir, "-S", "sync_rw",
                "--synchronous", "-n", "-d", pg.conninfo()])
        elif r == "raw-relay":
            self.relay()
        elif r == "walship" and self.agent is None:
            self.agent, self.replica = self.walship("walship", None, ctx.cfg.synccost_fifo)
        elif r == "walship-b" and self.agent_b is None:
            self.agent_b, self.replica_b = self.walship("walship_b", ctx.cfg.compare_bin, 0)
        else:
            agent, replica = self.daemons_of(r)
            agent.restart()
            replica.start()

    def disconnect(self, r):
        # A walship replica before its agent: the agent's end would only
        # make it reconnect.
        procs_of = {"pg_receivewal": (self.rw,), "raw-relay": (self.relay_send, self.relay_recv),
                    "walship": self.daemons_of("walship")[::-1],
                    "walship-b": self.daemons_of("walship-b")[::-1]}
        for p in procs_of[r]:
            if p is not None:
                p.stop()

    def daemons_of(self, r):
        return (self.agent, self.replica) if r == "walship" else (self.agent_b, self.replica_b)

    def connect_first(self, first):
        """Reconnects every receiver, `first` before the others
        (connect_all). Nothing may be synchronous meanwhile (set_sync
        "none" before)."""
        for r in receivers(self.variants):
            self.disconnect(r)
        self.connect_all(first)

    def await_walsender(self, r):
        kit.wait_until(lambda: APP[r] in walsender_pids(self.pg), 60,
                       "%s's walsender" % r, interval=0.02)

    def check_first_slot(self, first):
        # pg_stat_get_wal_senders() lists the walsenders in slot order.
        slots = self.pg.session().fetch("SELECT string_agg(pid::text, ',') "
                                        "FROM pg_stat_get_wal_senders()").split(",")
        if slots[0] != str(walsender_pids(self.pg)[APP[first]]):
            raise RuntimeError("%s's walsender is not in the first slot: %s (%s)" % (
                first, slots, walsender_pids(self.pg)))

    def relay(self):
        """relay-recv (new segments zero-filled, as pg_receivewal's) and
        relay-send following a walsender, both threads with walship's
        slice. Without a slot: the others' slots keep the WAL."""
        self.relay_send, self.relay_recv = start_raw_relay(
            self.ctx, self.pg, self.ctx.fresh_dir("sync-relay"), prealloc="zero",
            send_args=["--application-name=" + APP["raw-relay"]],
            both_args=["--sched-slice-us=%d" % RELAY_SLICE_US])

    def walship(self, name, bin_dir, fifo):
        """An agent (feed and slot `name`) and its replica, started; from
        `bin_dir` when given; `fifo` above zero: their commit-path threads
        under SCHED_FIFO at that priority."""
        ctx, pg = self.ctx, self.pg
        prog = (lambda b: os.path.join(bin_dir, b)) if bin_dir else (lambda b: None)
        sched = ["--sched-fifo-priority=%d" % fifo] if fifo else []
        agent = daemons.Agent(
            os.path.join(pg.datadir, "pg_wal"), ctx.logdir, label="agent-" + name,
            program=prog("walship-agent"),
            extra_args=["--format=postgres", "--pg-data=" + pg.datadir,
                        "--pg-conninfo=" + pg.conninfo(), "--pg-slot=" + name,
                        "--pg-feed-name=" + name,
                        "--state-dir=" + ctx.fresh_dir("sync-agent-state")] + sched)
        agent.start()
        replica = daemons.Replica(agent, ctx.fresh_dir("sync-" + name), name, ctx.logdir,
                                  program=prog("walship-replica"), extra_args=sched)
        replica.start()
        return agent, replica

    def caught_up(self):
        now = self.pg.flush_lsn()
        for r in receivers(self.variants):
            kit.wait_until(lambda: standby_flushed(self.pg, APP[r]) >= now, 120,
                           "%s to catch up" % r, interval=0.05)

    def trace_walship(self, extra_agent, extra_replica):
        """Both walship daemons again, same directories, with extra flags;
        connected first with the order sync-first, in their slot otherwise."""
        self.agent.extra_args += extra_agent
        self.replica.extra_args += extra_replica
        if self.ctx.cfg.synccost_order == "sync-first":
            self.connect_first("walship")
        else:
            self.disconnect("walship")
            self.connect("walship")
            self.caught_up()

    def stop_walship(self, both=False):
        # The replica first: the agent's end would only make it reconnect.
        for d in (self.replica, self.agent) + ((self.replica_b, self.agent_b) if both else ()):
            if d is not None and d.running():
                d.stop()

    def stop(self):
        self.stop_walship(both=True)
        for p in (self.relay_send, self.relay_recv, self.rw):
            if p is not None:
                p.stop()


def traced_round(ctx, pg, recv):
    """One more walship round with both daemons tracing commits; their
    traces joined (commit_trace.analyze) and the round's own numbers."""
    a_path = os.path.join(ctx.work, "trace-agent.txt")
    r_path = os.path.join(ctx.work, "trace-replica.txt")
    set_sync(pg, "none", recv.variants)  # nothing waits on walship while it restarts
    recv.trace_walship(["--trace-commits=" + a_path], ["--trace-commits=" + r_path])
    res = run_round(ctx, pg, "walship", recv.variants)
    set_sync(pg, "none", recv.variants)
    recv.stop_walship()  # each writes its trace at exit
    for p in (a_path, r_path):
        if not os.path.exists(p):
            raise RuntimeError("no commit trace at %s (see the daemons' logs)" % p)
    res.update(commit_trace.analyze(a_path, r_path))
    return res


def section_synccost(ctx, pg):
    cfg = ctx.cfg
    pg.drop_slot("bench_hold")
    pg.psql("DROP TABLE IF EXISTS bench_fill")
    pgbench_init(pg, cfg.synccost_scale)
    variants = variants_of(cfg)
    recv = Receivers(ctx, pg, variants)
    runs = {v: [] for v in variants}
    traced = None
    try:
        recv.start()
        for rnd in range(cfg.rounds):
            for v in rotate(variants, rnd):
                res = run_round(ctx, pg, v, variants, recv)
                runs[v].append(res)
                log("synccost round %d %-13s tps %.0f latency %.3f ms; flush lag p50 %s",
                    rnd + 1, v, res["tps"], res["latency_ms"], " ".join(
                        "%s %s" % (r, "%.2f ms" % res[r + "_lag_p50_ms"]
                                   if res[r + "_lag_p50_ms"] is not None else "-")
                        for r in receivers(variants)))
        if cfg.synccost_trace:
            traced = traced_round(ctx, pg, recv)
            log("synccost traced walship round: tps %.0f, %d of %d frames joined; total "
                "p50 %.0f us", traced["tps"], traced["frames"], traced["sent"],
                commit_trace.total(traced["breakdown"])["p50_us"] or -1)
    finally:
        # Nothing may wait on a receiver that is about to stop.
        pg.psql("ALTER SYSTEM RESET synchronous_standby_names", check=False)
        pg.psql("SELECT pg_reload_conf()", check=False)
        recv.stop()
        for slot in SLOTS:
            pg.drop_slot(slot)
    return summarize(cfg, runs, traced)


def summarize(cfg, runs, traced):
    """The section's results: runs, medians, added latency and the ratio."""
    rs_ = receivers(list(runs))
    keys = (["tps", "latency_ms"] + ["%s_lag_p%d_ms" % (r, q) for r in rs_ for q in (50, 90)]
            + ["%s_cpu_us_per_xact" % r for r in rs_]
            + ["%s_cpu_%s_us_per_xact" % (r, part) for r in rs_
               for part in report_synccost.PARTS])
    summary = {v: {k: median_summary([r.get(k) for r in rs]) for k in keys}
               for v, rs in runs.items()}

    def m(v, k):
        s = summary.get(v, {}).get(k)
        return s["median"] if s else None
    base = m("none", "latency_ms")
    added = {r: (m(r, "latency_ms") - base if base is not None and m(r, "latency_ms")
                 is not None else None) for r in rs_}
    ratio = (added["walship"] / added["pg_receivewal"]
             if added["walship"] is not None and added["pg_receivewal"] else None)
    # Every receiver is connected in every round, and the sampler reads all
    # of them at the same instants: each one's flush lag over all rounds,
    # synchronous or not, compares them pairwise (two walship builds too).
    all_rounds = {r: {"p%d" % q: median_summary([x.get("%s_lag_p%d_ms" % (r, q))
                                         for rs in runs.values() for x in rs])
                      for q in (50, 90)} for r in rs_}
    return {"scale": cfg.synccost_scale, "clients": cfg.synccost_clients,
            "seconds": cfg.synccost_seconds, "rounds": cfg.rounds, "runs": runs,
            "summary": summary, "added_latency_ms": added, "added_ratio": ratio,
            "lag_all_rounds": all_rounds,
            "traced": traced, "compare_bin": cfg.compare_bin,
            "walship_fifo_priority": cfg.synccost_fifo,
            "order": cfg.synccost_order,
            "method": "both receivers connected throughout; %s; each round changes only "
                      "synchronous_standby_names (ALTER SYSTEM, pg_reload_conf, then "
                      "pg_stat_replication shows the intended sync_state), then CHECKPOINT "
                      "and pgbench -M prepared -c %d -j %d -T %d; rounds interleaved and "
                      "rotated; added latency = median average latency minus nobody's" % (
                          ORDER_METHOD[cfg.synccost_order], cfg.synccost_clients,
                          min(2, cfg.synccost_clients), cfg.synccost_seconds)}
