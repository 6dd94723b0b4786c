"""The PostgreSQL section: the benchmark's cluster (Pg, PsqlSession), CPU
sampling, walship against pg_receivewal on a backlog."""

import os
import pwd
import signal
import subprocess
import threading
import time

from integration import harness as kit
from integration.bench.bench_catchup import (
    WARM_UP_NOTE, cpu_per_gib, round_name, rounds_after_warm_up, run_walship_catchup, settle,
    summarize)
from integration.bench.bench_procs import (
    BENCH_USER, MIB, log, proc_stat_cpu, proc_status_kb, rm, tail)
from integration.drill import drillkit as dk


# ---------------------------------------------------------------------------
# PostgreSQL


class Pg(object):
    """A PostgreSQL 15 primary owned by this run (postgres -D, as BENCH_USER)."""

    def __init__(self, ctx, segsize_mb):
        self.ctx = ctx
        self.bin = dk.find_pg_bin()  # raises, naming where it looked
        self.user = (dk.ensure_user(BENCH_USER, "walship benchmark") if os.geteuid() == 0
                     else pwd.getpwuid(os.getuid()))
        self.root = ctx.fresh_dir("pg")
        self.data = os.path.join(self.root, "data")
        self.sock = self.root
        self.port = dk.free_port()
        self.segsize = segsize_mb * MIB
        os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                    "HOME": self.user.pw_dir if os.path.isdir(self.user.pw_dir) else self.root}
        self.conninfo = "host=%s port=%d user=postgres dbname=postgres" % (self.sock, self.port)
        self.proc = None
        self._session = None

    def tool(self, name):
        return os.path.join(self.bin, name)

    def as_user(self, argv, timeout=300):
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=self.env, cwd=self.root,
                           user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (" ".join(argv), r.stdout[-2000:]))
        return r.stdout

    def setup(self):
        self.as_user([self.tool("initdb"), "-D", self.data, "-U", "postgres", "-A", "trust",
                      "--wal-segsize=%d" % (self.segsize // MIB)])
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# walship benchmark\n"
                    "listen_addresses = ''\nport = %d\nunix_socket_directories = '%s'\n"
                    "wal_level = replica\nmax_wal_senders = 10\nmax_replication_slots = 10\n"
                    "wal_keep_size = 0\nmax_wal_size = '64GB'\nmin_wal_size = '64MB'\n"
                    "checkpoint_timeout = '1d'\nsynchronous_commit = on\nfsync = on\n"
                    "shared_buffers = '256MB'\nautovacuum = off\n"
                    "log_min_messages = warning\n" % (self.port, self.sock))
        self.start()

    def start(self):
        self.proc = self.ctx.procs.spawn("postgres", [self.tool("postgres"), "-D", self.data],
                                         user=self.user, env=self.env, cwd=self.root)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited: %s" % tail(self.proc.log_path))
            return subprocess.run([self.tool("pg_isready"), "-q", "-h", self.sock, "-p",
                                   str(self.port)], timeout=10).returncode == 0
        kit.wait_until(ready, 60, "PostgreSQL to accept connections", interval=0.1)

    def psql(self, sql, timeout=600):
        r = subprocess.run([self.tool("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                            "-h", self.sock, "-p", str(self.port), "-U", "postgres",
                            "-c", sql, "postgres"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("psql %r failed: %s" % (sql, r.stdout.strip()))
        return r.stdout.strip()

    def session(self):
        if self._session is None:
            self._session = PsqlSession(self)
        return self._session

    def flush_lsn(self):
        return dk.parse_lsn(self.session().query("SELECT pg_current_wal_flush_lsn()"))

    def drop_slot(self, name):
        for _ in range(100):
            try:
                self.psql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                          "WHERE slot_name = '%s'" % name)
                return
            except RuntimeError as e:
                if "is active" not in str(e):
                    raise
                time.sleep(0.1)
        raise RuntimeError("slot %s stayed active" % name)

    def backend_pids(self, application_name):
        out = self.session().query(
            "SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity "
            "WHERE application_name = '%s'" % application_name)
        return [int(x) for x in out.split(",") if x]

    def segment_of(self, lsn):
        """(WAL file name on timeline 1, offset) of the byte before `lsn`."""
        seg, off = (lsn - 1) // self.segsize, (lsn - 1) % self.segsize + 1
        per_xlogid = 0x100000000 // self.segsize
        return "%08X%08X%08X" % (1, seg // per_xlogid, seg % per_xlogid), off

    def lsn_of(self, segment, offset):
        tli, hi, lo = int(segment[:8], 16), int(segment[8:16], 16), int(segment[16:24], 16)
        return (hi * (0x100000000 // self.segsize) + lo) * self.segsize + offset

    def close(self):
        if self._session:
            self._session.close()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class PsqlSession(object):
    """One long-lived psql for frequent one-row queries."""

    def __init__(self, pg):
        self.p = subprocess.Popen([pg.tool("psql"), "-X", "-A", "-t", "-q", "-h", pg.sock,
                                   "-p", str(pg.port), "-U", "postgres", "postgres"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lock = threading.Lock()

    def query(self, sql):
        with self.lock:
            self.p.stdin.write(sql + ";\n\\echo __EOQ__\n")
            self.p.stdin.flush()
            lines = []
            while True:
                line = self.p.stdout.readline()
                if not line:
                    raise RuntimeError("psql session ended")
                line = line.rstrip("\n")
                if line == "__EOQ__":
                    break
                lines.append(line)
        if len(lines) != 1:
            raise RuntimeError("query %r: %r" % (sql, lines))
        return lines[0]

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(10)
        except Exception:
            self.p.kill()
        self.p.stdout.close()


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
    start = dk.parse_lsn(pg.psql("SELECT restart_lsn FROM pg_replication_slots "
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
        dk.fmt_lsn(seg_start), dk.fmt_lsn(end), (end - seg_start) // MIB)
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
        ctx, os.path.join(pg.data, "pg_wal"), transport, until,
        agent_args=["--format=postgres", "--pg-data=" + pg.data, "--pg-conninfo=" + pg.conninfo,
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
    restart = dk.parse_lsn(pg.psql("SELECT restart_lsn FROM pg_replication_slots "
                                "WHERE slot_name = 'bench_rw'"))
    if restart - restart % pg.segsize != start:
        raise RuntimeError("bench_rw starts at %s, not at the backlog start %s" % (
            dk.fmt_lsn(restart), dk.fmt_lsn(start)))
    dest = ctx.fresh_dir("dest-rw")
    sampler = CpuSampler(lambda cmd: cmd.startswith("postgres: walsender"))
    t0 = time.monotonic()
    p = ctx.procs.spawn("pg_receivewal", [pg.tool("pg_receivewal"), "-D", dest, "-S", "bench_rw",
                                          "--synchronous", "-n", "-E", dk.fmt_lsn(target),
                                          "-d", pg.conninfo])
    hwm = {"kb": None}

    def watch_hwm():  # VmHWM while it runs (ru_maxrss would include our RSS at fork)
        while p.returncode is None:
            v = proc_status_kb(p.pid, "VmHWM")
            if v:
                hwm["kb"] = v
            time.sleep(0.05)
    th = threading.Thread(target=watch_hwm, daemon=True)
    th.start()
    rc, ru = ctx.procs.wait_rusage(p, 900)
    t1 = time.monotonic()
    th.join(1)
    sender_cpu = sampler.total()
    if rc != 0:
        raise RuntimeError("pg_receivewal exited %s: %s" % (rc, tail(p.log_path)))
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
