"""The benchmark's configuration, statistics, /proc readings (CPU, threads,
memory, I/O), and the run's context (Ctx: its directories and a
walshiptest.procs.Launcher of every process it starts)."""

import json
import os
import random
import shutil
import statistics

from integration.walshiptest import binaries
from integration.walshiptest import procs


CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
GIB = 1 << 30
BENCH_USER = "walship-bench"

log = procs.log


# ---------------------------------------------------------------------------
# Configuration


class Config(object):
    """Sizes and durations of one run; --quick shrinks everything."""

    def __init__(self, quick, rounds=None):
        self.quick = quick
        if quick:
            self.rounds = rounds or 1
            self.segment_bytes = 4 * MIB
            self.backlog_bytes = 48 * MIB
            self.small_backlog_bytes = 16 * MIB
            self.fanout_bytes = 16 * MIB
            self.fanout_counts = [1, 2, 4]
            self.live_rates = [20e6, 100e6]
            self.live_seconds = 2.0
            self.pg_segsize_mb = 1
            self.pg_backlog_bytes = 24 * MIB
            self.pgbench_scale = 1
            self.pgbench_lag_seconds = 2
            self.pgbench_seconds = 2
            self.pgbench_clients = 2
            self.pgbench_busy_cores = 0.3
            self.pgbench_variants = ["walship", "walship-paced", "walship-query-paced",
                                     "pg_receivewal", "pg_receivewal-busy", "raw-relay",
                                     "raw-relay-query"]
            self.synccost_scale = 1
            self.synccost_clients = 4
            self.synccost_seconds = 3
            self.synccost_trace = True
            self.synccost_relay = True
            self.synccost_fifo = 0
            self.synccost_order = "sync-first"
            self.compare_bin = None
            self.formats_etcd_files = 1
            self.formats_rocksdb_keys = 30000
            self.formats_binlog_rows = 24
            self.compress_scale = 1
            self.compress_wal_bytes = 24 * MIB
            self.compress_link_bytes_per_sec = 20e6
        else:
            self.rounds = rounds or 3
            self.segment_bytes = 16 * MIB
            self.backlog_bytes = 2 * GIB
            self.small_backlog_bytes = 208 * MIB  # 13 segments: >= 200 MiB
            self.fanout_bytes = 512 * MIB
            self.fanout_counts = [1, 2, 4]
            self.live_rates = [20e6, 100e6]
            self.live_seconds = 8.0
            self.pg_segsize_mb = 16
            self.pg_backlog_bytes = 1 * GIB + 64 * MIB
            self.pgbench_scale = 10
            # Each run: a lag phase, then a TPS phase (run_pgbench).
            self.pgbench_lag_seconds = 6
            self.pgbench_seconds = 10
            self.pgbench_clients = 4
            # pg_receivewal-busy: pg_receivewal beside a busy loop asking for
            # this much of a core in 2 ms slices (about the CPU walship takes
            # beyond pg_receivewal and its walsender): what that CPU alone
            # costs the primary's TPS on this machine.
            self.pgbench_busy_cores = 0.3
            # walship-paced: --ack-interval-ms=100, acknowledgements and
            # status updates paced while the primary does not wait for them.
            # walship-query-paced: that and the flush feed off, the flush
            # position found by query; nothing on the primary can wait for
            # walship then, the least walship asks of it. raw-relay-query is
            # its physical reference. walship-query (the feed off alone) and
            # raw-relay-fallocate run on request (--pgbench-variants), so
            # that the full run stays near 15 minutes.
            self.pgbench_variants = ["none", "walship", "walship-paced", "walship-query-paced",
                                     "pg_receivewal", "pg_receivewal-busy", "raw-relay",
                                     "raw-relay-query"]
            # synccost: walship and pg_receivewal --synchronous both
            # connected; rounds change only which one is synchronous
            # (bench_synccost.py); then one walship round tracing commits.
            self.synccost_scale = 10
            self.synccost_clients = 4
            self.synccost_seconds = 15
            self.synccost_trace = True
            # --synccost-relay: the raw relay as a third synchronous standby
            # (a receiver more, connected in every round; quick runs it).
            self.synccost_relay = False
            # --synccost-fifo N: the first walship's commit-path threads
            # under SCHED_FIFO at priority N (--sched-fifo-priority).
            self.synccost_fifo = 0
            # --synccost-order: "sync-first" reconnects the receivers before
            # each synchronous round, that round's first (bench_synccost.py).
            self.synccost_order = "sync-first"
            self.compare_bin = None
            # formats: etcd WAL files filled before the last (64 MB each),
            # and RocksDB's fillseq keys (about 1 KiB of log each).
            self.formats_etcd_files = 3
            self.formats_rocksdb_keys = 200000
            # formats: MariaDB rows of 1 MB (row-based binlog events).
            self.formats_binlog_rows = 240
            # compress: pgbench's WAL (its initialisation at this scale, then
            # TPC-B until this much WAL), shipped by each codec
            # (bench_compress.py), also through a link of this bandwidth.
            self.compress_scale = 20
            self.compress_wal_bytes = 384 * MIB
            self.compress_link_bytes_per_sec = 20e6

    def to_json(self):
        return dict(self.__dict__)


# ---------------------------------------------------------------------------
# Small utilities


def median_summary(values):
    """{median, min, max, n, values} of the non-None values (None if empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals), "values": vals}


def pct(sorted_vals, p):
    """Nearest-rank percentile of a sorted list (None if empty)."""
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, int(p / 100.0 * len(sorted_vals)))
    return sorted_vals[i]


def dist(values):
    """{p50, p99, max, n} of a list of numbers."""
    s = sorted(values)
    return {"p50": pct(s, 50), "p99": pct(s, 99), "max": s[-1] if s else None, "n": len(s)}


def rotate(items, k):
    """items rotated by k: each round starts with a different variant."""
    k %= max(1, len(items))
    return items[k:] + items[:k]


def stat_cpu(text):
    """utime + stime, in seconds, of a /proc/.../stat line."""
    fields = text[text.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / float(CLK_TCK)


def proc_stat_cpu(pid):
    """utime + stime of a process (all threads), in seconds; None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return stat_cpu(f.read())
    except (FileNotFoundError, ProcessLookupError):
        return None


def proc_threads(pid):
    """{thread name: (CPU seconds, voluntary context switches)} of a process,
    threads of the same name summed; {} if gone."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except (FileNotFoundError, ProcessLookupError):
        return out
    for tid in tids:
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "stat") as f:
                text = f.read()
            switches = 0
            with open(base + "status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = text[text.find("(") + 1:text.rfind(")")]
        c, v = out.get(name, (0.0, 0))
        out[name] = (c + stat_cpu(text), v + switches)
    return out


def walship_threads(pg, agent, replica):
    """proc_threads() of the agent, the replica and the feed's walsender(s),
    keyed by side."""
    feed = [0.0, 0]
    for p in pg.backend_pids("walship"):
        c, v = proc_threads(p).get("postgres", (0.0, 0))
        feed = [feed[0] + c, feed[1] + v]
    return {"agent": proc_threads(agent.pid), "replica": proc_threads(replica.pid),
            "feed": {"walsender": tuple(feed)} if feed[1] or feed[0] else {}}


def proc_status_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except FileNotFoundError:
        return None
    return None


def proc_io(pid):
    """/proc/PID/io as a dict of ints ({} if unreadable)."""
    try:
        with open("/proc/%d/io" % pid) as f:
            return {k: int(v) for k, v in (l.split(": ") for l in f.read().splitlines())}
    except (FileNotFoundError, PermissionError, ValueError):
        return {}


def snapshot(pid):
    """CPU seconds, VmHWM bytes and io counters of a live process."""
    hwm = proc_status_kb(pid, "VmHWM")
    return {"cpu_s": proc_stat_cpu(pid), "hwm": hwm * 1024 if hwm is not None else None,
            "io": proc_io(pid)}




def dir_bytes(path):
    total = 0
    for n in os.listdir(path):
        p = os.path.join(path, n)
        if os.path.isfile(p) and not n.startswith("walship."):
            total += os.path.getsize(p)
    return total


def read_text(path):
    with open(path) as f:
        return f.read()


def read_json_line(path):
    """The last line of `path` that parses as a JSON object."""
    with open(path) as f:
        lines = f.read().splitlines()
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise RuntimeError("no JSON summary in %s: %r" % (path, lines[-5:]))


# ---------------------------------------------------------------------------
# The run context


class Ctx(object):
    def __init__(self, cfg, work, out, keep):
        self.cfg = cfg
        self.work = work
        self.out = out
        self.keep = keep
        self.logdir = os.path.join(work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.procs = procs.Launcher(logdir=self.logdir)  # every process of the run
        self.tool = binaries.find(binaries.BENCHTOOL)
        self.seed = random.SystemRandom().randrange(1 << 31)
        self.dir_counter = 0
        self.warm_costs = []  # CPU s/GiB of each settle()'s memory warming

    def fresh_dir(self, name):
        self.dir_counter += 1
        path = os.path.join(self.work, "%s-%03d" % (name, self.dir_counter))
        os.makedirs(path)
        os.chmod(path, 0o755)
        return path

    def tool_json(self, args, timeout=600):
        """Runs benchtool to completion; returns its JSON summary."""
        p = self.procs.start("benchtool-" + args[0], [self.tool] + args)
        rc, _ = p.wait_rusage(timeout)
        if rc != 0:
            raise RuntimeError("benchtool %s exited %s: %s" % (args[0], rc, p.tail(15)))
        return read_json_line(p.log_path)


def rm(path):
    shutil.rmtree(path, ignore_errors=True)
