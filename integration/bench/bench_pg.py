"""The PostgreSQL section: the benchmark's cluster (Pg), CPU
sampling, walship against pg_receivewal on a backlog."""

import os
import threading
import time

from integration.bench.bench_catchup import (
    WARM_UP_NOTE, cpu_per_gib, round_name, rounds_after_warm_up, run_walship_catchup, settle,
    summarize)
from integration.bench.bench_procs import (
    BENCH_USER, MIB, log, proc_stat_cpu, proc_status_kb, rm)
from integration.walshiptest.lsn import fmt_lsn, parse_lsn, parse_segment, segment_name
from integration.walshiptest.pg import PgCluster, PgEnv
from integration.walshiptest.ports import free_port
from integration.walshiptest.waits import StepError


# ---------------------------------------------------------------------------
# PostgreSQL


class Pg(PgCluster):
    """The benchmark's PostgreSQL 15 primary: a walshiptest.pg cluster in a
    PgEnv of its own under the run's work directory (run as BENCH_USER when
    we are root), with one shared psql session for the queries the
    benchmark repeats."""

    def __init__(self, ctx, segsize_mb):
        env = PgEnv(user=BENCH_USER, base_dir=ctx.work, keep=ctx.keep, purpose="walship benchmark",
                    walship_binaries=(), prefix="pg-")
        # A unix socket only: the port names the socket (PostgreSQL takes no port 0).
        PgCluster.__init__(self, env, "postgres", os.path.join(env.work, "data"), env.work,
                           free_port(), ctx.logdir)
        self.segsize = segsize_mb * MIB
        self._session = None

    def tool(self, name):
        return self.env.pg(name)

    def setup(self):
        self.initdb(self.segsize // MIB)
        self.configure({
            "listen_addresses": "", "port": self.port, "unix_socket_directories": self.sockdir,
            "wal_level": "replica", "max_wal_senders": 10, "max_replication_slots": 10,
            "wal_keep_size": 0, "max_wal_size": "64GB", "min_wal_size": "64MB",
            "checkpoint_timeout": "1d", "synchronous_commit": "on", "fsync": "on",
            "shared_buffers": "256MB", "autovacuum": "off", "log_min_messages": "warning",
            # pg_stat_wal times the primary's own WAL syncs (pgbench section).
            "track_wal_io_timing": "on"})
        self.start()

    def psql(self, sql, timeout=600, check=True):
        return PgCluster.psql(self, sql, timeout=timeout, check=check)

    def session(self):
        """The shared PsqlSession (thread-safe)."""
        if self._session is None:
            self._session = PgCluster.session(self)
        return self._session

    def flush_lsn(self):
        return parse_lsn(self.session().fetch("SELECT pg_current_wal_flush_lsn()"))

    def drop_slot(self, name):
        for _ in range(100):
            try:
                self.psql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                          "WHERE slot_name = '%s'" % name)
                return
            except StepError as e:
                if "is active" not in str(e):
                    raise
                time.sleep(0.1)
        raise RuntimeError("slot %s stayed active" % name)

    def backend_pids(self, application_name):
        out = self.session().fetch(
            "SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity "
            "WHERE application_name = '%s'" % application_name)
        return [int(x) for x in out.split(",") if x]

    def segment_of(self, lsn):
        """(WAL file name on timeline 1, offset) of the byte before `lsn`."""
        return segment_name(1, (lsn - 1) // self.segsize, self.segsize), \
            (lsn - 1) % self.segsize + 1

    def lsn_of(self, segment, offset):
        return parse_segment(segment, self.segsize)[1] * self.segsize + offset

    def close(self):
        if self._session:
            self._session.close()
        self.stop("fast", timeout=60)
        self.env.close()


class CpuSampler(object):
    """Samples the CPU time of processes matching a predicate every 20 ms
    (the walsender, which exits with its client); keeps the last value."""

    def __init__(self, match):
        self.match = match
        self.last = {}
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_ev.wait(0.02):
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    with open("/proc/%s/cmdline" % d, "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if self.match(cmd):
                    c = proc_stat_cpu(int(d))
                    if c is not None:
                        self.last[int(d)] = c

    def total(self):
        self.stop_ev.set()
        self.t.join(5)
        return sum(self.last.values())


def pg_make_backlog(ctx, pg):
    """A big INSERT after a checkpoint and the slots that keep its WAL."""
    pg.psql("CHECKPOINT")
    pg.psql("SELECT pg_create_physical_replication_slot('bench_hold', true)")
    start = parse_lsn(pg.psql("SELECT restart_lsn FROM pg_replication_slots "
                              "WHERE slot_name = 'bench_hold'"))
    pg.psql("CREATE TABLE bench_fill (id bigint, pad text)")
    target = start + ctx.cfg.pg_backlog_bytes
    rows = 20000 if ctx.cfg.quick else 200000
    n = 0
    while pg.flush_lsn() < target:
        pg.psql("INSERT INTO bench_fill SELECT g, repeat(md5(g::text), 25) "
                "FROM generate_series(%d, %d) g" % (n + 1, n + rows))
        n += rows
    end = pg.flush_lsn()
    seg_start = start - start % pg.segsize
    log("PostgreSQL backlog: %s .. %s (%d MiB of WAL from the segment start)",
        fmt_lsn(seg_start), fmt_lsn(end), (end - seg_start) // MIB)
    return seg_start, end


def run_pg_walship(ctx, pg, start, target, transport="zerocopy"):
    until = pg.segment_of(target)
    pg.drop_slot("walship")

    def backends(agent, before):
        # The agent's own PostgreSQL connections (flush-position queries, slot
        # advances) cost CPU on the primary: counted on the agent's side.
        now = {p: proc_stat_cpu(p) or 0.0 for p in pg.backend_pids("walship-agent")}
        if before is None:
            return now
        return {"agent_backend_cpu_s": sum(c - before.get(p, 0.0) for p, c in now.items())}

    r, dest = run_walship_catchup(
        ctx, os.path.join(pg.datadir, "pg_wal"), transport, until,
        agent_args=["--format=postgres", "--pg-data=" + pg.datadir,
                    "--pg-conninfo=" + pg.conninfo(),
                    "--pg-slot=walship", "--state-dir=" + ctx.fresh_dir("agent-state")],
        extra=backends)
    rm(dest)
    nbytes = target - start
    r["bytes"] = nbytes
    r["mb_s"] = nbytes / 1e6 / r["seconds"]
    r["agent_cpu_s"] += r["agent_backend_cpu_s"]
    return cpu_per_gib(r, nbytes)


def run_pg_receivewal(ctx, pg, start, target):
    pg.drop_slot("bench_rw")
    pg.psql("SELECT pg_create_physical_replication_slot('bench_rw', true)")
    restart = parse_lsn(pg.psql("SELECT restart_lsn FROM pg_replication_slots "
                                "WHERE slot_name = 'bench_rw'"))
    if restart - restart % pg.segsize != start:
        raise RuntimeError("bench_rw starts at %s, not at the backlog start %s" % (
            fmt_lsn(restart), fmt_lsn(start)))
    dest = ctx.fresh_dir("dest-rw")
    sampler = CpuSampler(lambda cmd: cmd.startswith("postgres: walsender"))
    t0 = time.monotonic()
    p = ctx.procs.start("pg_receivewal", [pg.tool("pg_receivewal"), "-D", dest, "-S", "bench_rw",
                                          "--synchronous", "-n", "-E", fmt_lsn(target),
                                          "-d", pg.conninfo()])
    hwm = {"kb": None}

    def watch_hwm():  # VmHWM while it runs (ru_maxrss would include our RSS at fork)
        while not p.reaped:
            v = proc_status_kb(p.pid, "VmHWM")
            if v:
                hwm["kb"] = v
            time.sleep(0.05)
    th = threading.Thread(target=watch_hwm, daemon=True)
    th.start()
    rc, ru = p.wait_rusage(900)
    t1 = time.monotonic()
    th.join(1)
    sender_cpu = sampler.total()
    if rc != 0:
        raise RuntimeError("pg_receivewal exited %s: %s" % (rc, p.tail(15)))
    rm(dest)
    nbytes = target - start
    r = {"bytes": nbytes, "seconds": t1 - t0, "mb_s": nbytes / 1e6 / (t1 - t0),
         "agent_cpu_s": sender_cpu, "replica_cpu_s": ru.ru_utime + ru.ru_stime,
         "agent_hwm": None, "replica_hwm": hwm["kb"] and hwm["kb"] * 1024}
    return cpu_per_gib(r, nbytes)


def section_pg(ctx, pg):
    start, target = pg_make_backlog(ctx, pg)
    variants = ["walship-pg", "pg_receivewal"]
    runs = {v: [] for v in variants}
    for rnd, v in rounds_after_warm_up(variants, ctx.cfg.rounds):
        settle(ctx, target - start)
        if v == "walship-pg":
            r = run_pg_walship(ctx, pg, start, target)
        else:
            r = run_pg_receivewal(ctx, pg, start, target)
        log("pg catch-up %s %-14s %7.1f MB/s  cpu/GiB sender %.2fs receiver %.2fs",
            round_name(rnd), v, r["mb_s"], r["agent_cpu_s_per_gib"],
            r["replica_cpu_s_per_gib"])
        if rnd >= 0:
            runs[v].append(r)
    return {"backlog_bytes": target - start, "wal_segment_bytes": pg.segsize, "runs": runs,
            "warm_up": WARM_UP_NOTE,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib", "replica_cpu_s_per_gib",
                                        "agent_hwm", "replica_hwm"])}
