#!/usr/bin/env python3
"""The walship benchmark: walship beside a raw sendfile -> splice pipeline and
pg_receivewal --synchronous, in one run, several interleaved rounds, medians.

    python3 -m integration.bench.bench [--quick] [--out DIR]   (see README.md)

Sections (each a function below; --sections picks some):
  catchup   append-format backlog of full segments: raw (zerocopy, copy),
            walship --transport=zerocopy and copy; MB/s, CPU s/GiB per side,
            peak RSS; walship also on a small backlog (RSS must not grow).
  pg        the same PostgreSQL backlog (a big INSERT, receivers started
            afterwards) caught up by walship (--format=postgres) and by
            pg_receivewal --synchronous with a replication slot.
  live      a writer appends 8-64 KiB records at 20 and 100 MB/s; lag from
            write(2) returning to the replica's durable position covering the
            record; beside it the raw pipeline and an fdatasync probe.
  pgbench   TPC-B on the primary with walship, pg_receivewal or the raw relay
            (or nothing) beside it: the primary's TPS and flush lag.
  fanout    1, 2 and 4 replicas of one agent from an evicted backlog:
            aggregate durable throughput; the agent's storage reads
            (/proc/PID/io read_bytes) against the bytes shipped.

Timing-critical helpers are in benchtool (benchtool.cc). Every time is
CLOCK_MONOTONIC (time.monotonic() here, clock_gettime in benchtool).
Writes results.json, results.md and chart.svg (report.py) into --out.
Exit status: 0 if every section ran (targets may still be missed: they are
reported, not asserted), 1 if a section failed, 2 on bad usage.
"""

import argparse
import bisect
import json
import os
import platform
import pwd
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from integration import harness as kit
from integration.drill import drillkit as dk
from integration.bench import report
from integration.walshiptest import binaries

CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
GIB = 1 << 30
BENCH_USER = "walship-bench"

log = kit.log


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
# Processes


class Procs(object):
    """Processes this run started (by pid); killed at the end if still alive."""

    def __init__(self, logdir):
        self.logdir = logdir
        self.procs = []
        self.counter = 0

    def spawn(self, label, argv, user=None, env=None, cwd=None):
        self.counter += 1
        path = os.path.join(self.logdir, "%03d-%s.log" % (self.counter, label))
        f = open(path, "ab")
        f.write(("==== %s: %s\n" % (time.strftime("%H:%M:%S"), " ".join(argv))).encode())
        f.flush()
        kw = {}
        if user is not None:
            kw = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             close_fds=True, env=env, cwd=cwd, start_new_session=True, **kw)
        f.close()
        p.log_path = path
        p.label = label
        self.procs.append(p)
        return p

    def wait_rusage(self, p, timeout):
        """Reaps `p`; returns (exit status, resource usage). Kills it after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                return p.returncode, ru
            if time.monotonic() > deadline:
                log("%s (pid %d) still running after %.0fs: killing it", p.label, p.pid, timeout)
                os.kill(p.pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                timeout = 10
            time.sleep(0.005)

    def stop(self, p, sig=signal.SIGTERM, timeout=15):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        return p.returncode

    def kill_all(self):
        for p in self.procs:
            try:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
            except Exception:  # keep cleaning up
                pass


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
        self.procs = Procs(self.logdir)
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
        p = self.procs.spawn("benchtool-" + args[0], [self.tool] + args)
        rc, _ = self.procs.wait_rusage(p, timeout)
        if rc != 0:
            raise RuntimeError("benchtool %s exited %s: %s" % (args[0], rc, tail(p.log_path)))
        return read_json_line(p.log_path)


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"


def rm(path):
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------
# Machine description


def machine_info(work):
    info = {"nproc": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            info["cpu_model"] = m.group(1).strip() if m else "?"
    except OSError:
        info["cpu_model"] = "?"
    with open("/proc/meminfo") as f:
        mem = dict(l.split(":", 1) for l in f.read().splitlines())
    info["mem_total_mib"] = int(mem["MemTotal"].split()[0]) // 1024
    try:
        df = subprocess.run(["df", "-T", "-P", work], stdout=subprocess.PIPE, text=True,
                            timeout=10).stdout.splitlines()[-1].split()
        info["disk_device"], info["fs_type"] = df[0], df[1]
        dev = os.path.basename(df[0])
        base = re.sub(r"p?\d+$", "", dev) if not os.path.exists("/sys/block/" + dev) else dev
        rot = "/sys/block/%s/queue/rotational" % base
        if os.path.exists(rot):
            info["disk_rotational"] = read_text(rot).strip() == "1"
        model = "/sys/block/%s/device/model" % base
        info["disk_model"] = read_text(model).strip() if os.path.exists(model) else (
            "virtio block device" if base.startswith("vd") else "?")
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if parts[0] == df[0] and parts[1] == df[6]:
                    info["mount_options"] = parts[3]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    info["loadavg_start"] = read_text("/proc/loadavg").split()[:3]
    return info


def busy_processes():
    """The five busiest processes right now (name, %CPU), for the report."""
    try:
        out = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"],
                             stdout=subprocess.PIPE, text=True, timeout=10).stdout
        return [l.strip() for l in out.splitlines()[:5]]
    except (OSError, subprocess.SubprocessError):
        return []


# ---------------------------------------------------------------------------
# Append-format backlogs


def make_backlogs(ctx):
    """The big backlog (generated once) and prefixes of it (hard links)."""
    cfg = ctx.cfg
    big = ctx.fresh_dir("backlog-big")
    log("generating a %d MiB backlog of %d MiB segments in %s", cfg.backlog_bytes // MIB,
        cfg.segment_bytes // MIB, big)
    ctx.tool_json(["write", "--dir=" + big, "--rate=0", "--bytes=%d" % cfg.backlog_bytes,
                   "--min-record=%d" % MIB, "--max-record=%d" % MIB,
                   "--segment-bytes=%d" % cfg.segment_bytes, "--seed=%d" % ctx.seed])
    names = sorted(os.listdir(big))

    def prefix(label, nbytes):
        d = ctx.fresh_dir(label)
        for n in names[:max(1, nbytes // cfg.segment_bytes)]:
            os.link(os.path.join(big, n), os.path.join(d, n))
        return d

    small = prefix("backlog-small", cfg.small_backlog_bytes)
    fan = prefix("backlog-fanout", cfg.fanout_bytes)
    subprocess.run(["sync"], timeout=300)
    return big, small, fan


def round_name(rnd):
    return "warm-up" if rnd < 0 else "round %d" % (rnd + 1)


def rounds_after_warm_up(variants, rounds):
    """(round, variant) pairs: round -1 (the warm-up, see WARM_UP_NOTE) runs
    every variant in order, then each recorded round rotates them."""
    for rnd in range(-1, rounds):
        for v in (variants if rnd < 0 else rotate(variants, rnd)):
            yield rnd, v


# Catch-up sections start with one unrecorded run of every variant. In this
# VM the first run to write into memory the guest had not touched since boot
# (or since a big PostgreSQL load) paid up to 3x the CPU in the kernel's copy
# into the page cache (perf: __pi_memcpy under splice, 0.89 against 0.29
# CPU s/GiB), whichever variant came first.
WARM_UP_NOTE = ("each catch-up section first runs every variant once, unrecorded: the "
                "first writer into untouched guest memory paid up to 3x the CPU")


def settle(ctx, warm_bytes):
    """Before a run: writes back every dirty page, so no run pays for the
    writeback of the backlog's creation or of the run before it; then
    touches and frees `warm_bytes` (plus a tenth) of anonymous memory. This
    VM hands memory the guest frees back to its host, and the first write
    to such a page costs 2-5 CPU s/GiB in the host's fault handler against
    0.2-0.8 for a page freed a moment ago: whoever allocates page cache
    after an idle pause pays it. Warming first gives every variant the same
    start; the cost of each warming is kept (machine.warm_memory)."""
    subprocess.run(["sync"], timeout=300)
    if warm_bytes <= 0:
        return
    avail = 0
    for line in read_text("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) * 1024
    mib = int(min(warm_bytes * 1.1, avail / 2) // MIB)
    r = ctx.tool_json(["warm-memory", "--mib=%d" % mib])
    ctx.warm_costs.append(r["s_per_gib"])


def end_of(wal_dir):
    names = kit.source_segments(wal_dir)
    return names[-1], os.path.getsize(os.path.join(wal_dir, names[-1]))


# ---------------------------------------------------------------------------
# One catch-up run of each kind


def run_raw_catchup(ctx, src, transport, verify=False):
    dest = ctx.fresh_dir("dest-raw")
    port_file = os.path.join(dest + ".port")
    recv = ctx.procs.spawn("raw-recv", [ctx.tool, "raw-recv", "--dest=" + dest,
                                        "--port-file=" + port_file, "--transport=" + transport]
                           + (["--verify"] if verify else []))
    kit.wait_until(lambda: os.path.exists(port_file) and read_text(port_file).strip(),
                       10, "raw-recv to listen", interval=0.01)
    addr = read_text(port_file).strip().split("=", 1)[1]
    t0 = time.monotonic()
    send = ctx.procs.spawn("raw-send", [ctx.tool, "raw-send", "--connect=" + addr,
                                        "--src=" + src, "--transport=" + transport]
                           + (["--verify"] if verify else []))
    rc_s, ru_s = ctx.procs.wait_rusage(send, 900)
    rc_r, ru_r = ctx.procs.wait_rusage(recv, 60)
    if rc_s != 0 or rc_r != 0:
        raise RuntimeError("raw pipeline failed: send %s recv %s\n%s\n%s" % (
            rc_s, rc_r, tail(send.log_path), tail(recv.log_path)))
    summary = read_json_line(recv.log_path)
    sent = read_json_line(send.log_path)
    t1 = summary["t_end_ns"] / 1e9
    nbytes = summary["bytes"]
    if dir_bytes(dest) != kit.total_size(src):
        raise RuntimeError("raw pipeline: %s holds %d bytes, source %d" % (
            dest, dir_bytes(dest), kit.total_size(src)))
    rm(dest)
    return {"bytes": nbytes, "seconds": t1 - t0, "mb_s": nbytes / 1e6 / (t1 - t0),
            "agent_cpu_s": ru_s.ru_utime + ru_s.ru_stime,
            "replica_cpu_s": ru_r.ru_utime + ru_r.ru_stime,
            "agent_hwm": sent["vmhwm_kb"] * 1024, "replica_hwm": summary["vmhwm_kb"] * 1024,
            "agent_read_bytes": sent["read_bytes"],
            "receive_thread_cpu_s": summary["receive_thread_cpu_s"],
            "flusher_thread_cpu_s": summary["flusher_thread_cpu_s"],
            "fdatasync": summary["fdatasync"]}


def start_watch(ctx, dest, until=None, seconds=900):
    """benchtool watch-state on `dest`; `until` = (segment, offset) to exit at."""
    wlog = dest + ".watch"
    args = [ctx.tool, "watch-state", "--dest=" + dest, "--log=" + wlog,
            "--seconds=%d" % seconds]
    if until:
        args += ["--until-segment=" + until[0], "--until-offset=%d" % until[1]]
    p = ctx.procs.spawn("watch", args)
    p.watch_log = wlog
    time.sleep(0.1)  # let it add its inotify watch
    return p


def read_watch_log(path):
    """[(segment, offset, complete, t_seconds)] from a watch-state log."""
    out = []
    with open(path) as f:
        for line in f:
            seg, off, complete, t = line.split()
            out.append((seg, int(off), complete == "1", int(t) / 1e9))
    return out


def run_walship_catchup(ctx, src, transport, until, agent_args=(), extra=None):
    """Agent + one replica over `src` until the replica is durable at `until`.

    Returns throughput, CPU and RSS of both daemons. `extra(agent)` may add
    more to the result (the PostgreSQL backends' CPU)."""
    dest = ctx.fresh_dir("dest-ws")
    agent = kit.Agent(src, ctx.logdir, label="agent-%s" % os.path.basename(dest),
                          transport=transport, extra_args=agent_args).start()
    try:
        a0 = snapshot(agent.pid)
        before = extra(agent, None) if extra else None
        watch = start_watch(ctx, dest, until)
        t0 = time.monotonic()
        replica = kit.Replica(agent, dest, "r1", ctx.logdir, transport=transport).start()
        rc, _ = ctx.procs.wait_rusage(watch, 900)
        w = read_json_line(watch.log_path)
        a1, r1 = snapshot(agent.pid), snapshot(replica.pid)
        if rc != 0 or not w.get("reached"):
            raise RuntimeError("walship did not reach %s: %s\nagent:\n%s\nreplica:\n%s" % (
                until, w, agent.tail(), replica.tail()))
        t1 = w["t_reached_ns"] / 1e9
        res = {"seconds": t1 - t0,
               "agent_cpu_s": a1["cpu_s"] - a0["cpu_s"], "replica_cpu_s": r1["cpu_s"],
               "agent_hwm": a1["hwm"], "replica_hwm": r1["hwm"],
               "agent_read_bytes": a1["io"].get("read_bytes", 0) - a0["io"].get("read_bytes", 0),
               "agent_rchar": a1["io"].get("rchar", 0) - a0["io"].get("rchar", 0)}
        if extra:
            res.update(extra(agent, before))
        rs = replica.stop()
        if rs != 0:
            log("replica exited %s:\n%s", rs, replica.tail())
        res["shipped_bytes"] = dir_bytes(dest)
        return res, dest
    finally:
        if agent.running():
            agent.stop()


def cpu_per_gib(r, nbytes):
    g = nbytes / float(GIB)
    r["agent_cpu_s_per_gib"] = r["agent_cpu_s"] / g
    r["replica_cpu_s_per_gib"] = r["replica_cpu_s"] / g
    return r


# ---------------------------------------------------------------------------
# Section: append catch-up


def section_catchup(ctx, big, small):
    cfg = ctx.cfg
    big_bytes, small_bytes = kit.total_size(big), kit.total_size(small)
    big_end, small_end = end_of(big), end_of(small)
    # raw-*-verify: the raw pipeline plus walship's checksum passes: the
    # sender's over every frame before sending it, the receiver's over every
    # byte it received; the least a verifying pipeline does.
    variants = ["raw-zerocopy", "walship-zerocopy", "walship-copy", "raw-copy",
                "walship-zerocopy-small", "walship-copy-small", "raw-zerocopy-verify",
                "raw-copy-verify"]
    runs = {v: [] for v in variants}
    for rnd, v in rounds_after_warm_up(variants, cfg.rounds):
        transport = "copy" if "copy" in v.replace("zerocopy", "") else "zerocopy"
        is_small = v.endswith("-small")
        src, nbytes, end = (small, small_bytes, small_end) if is_small else (
            big, big_bytes, big_end)
        settle(ctx, nbytes)  # the destination's page cache
        if v.startswith("raw"):
            r = run_raw_catchup(ctx, src, transport, verify=v.endswith("-verify"))
        else:
            r, dest = run_walship_catchup(ctx, src, transport, end)
            if r["shipped_bytes"] != nbytes:
                raise RuntimeError("%s: replica holds %d bytes, source %d" % (
                    v, r["shipped_bytes"], nbytes))
            if rnd == 0 and not is_small:
                problems = kit.diff_dirs(src, dest) if cfg.quick else []
                if problems:
                    raise RuntimeError("replica differs: %s" % problems)
            rm(dest)
            r["bytes"] = nbytes
            r["mb_s"] = nbytes / 1e6 / r["seconds"]
        cpu_per_gib(r, nbytes)
        log("catchup %s %-24s %7.1f MB/s  cpu/GiB agent %.2fs replica %.2fs  "
            "hwm agent %.1f MiB replica %.1f MiB", round_name(rnd), v, r["mb_s"],
            r["agent_cpu_s_per_gib"], r["replica_cpu_s_per_gib"],
            r["agent_hwm"] / MIB, r["replica_hwm"] / MIB)
        if rnd >= 0:
            runs[v].append(r)
    return {"backlog_bytes": big_bytes, "small_backlog_bytes": small_bytes,
            "segment_bytes": cfg.segment_bytes, "runs": runs, "warm_up": WARM_UP_NOTE,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib", "replica_cpu_s_per_gib",
                                        "agent_hwm", "replica_hwm"])}


def summarize(runs, keys):
    return {v: {k: median_summary([r.get(k) for r in rs]) for k in keys}
            for v, rs in runs.items()}


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


# ---------------------------------------------------------------------------
# Section: live tailing (append format)


def writer_log(path, segsize):
    """[(global end offset, t)] from benchtool write --log."""
    out = []
    with open(path) as f:
        for line in f:
            idx, off, t = line.split()
            out.append(((int(idx) - 1) * segsize + int(off), int(t) / 1e9))
    return out


def running_max(durable):
    """`durable` ([(global, t)] in time order) with each position raised to
    the furthest one recorded by then."""
    best = []
    for g, t in durable:
        best.append((max(g, best[-1][0]) if best else g, t))
    return best


def flushed_at(durable):
    """A function of time t: the furthest position in `durable` ([(global,
    t)] in time order) recorded at or before t; None before the first."""
    best = running_max(durable)
    times = [t for _, t in best]

    def at(t):
        i = bisect.bisect_right(times, t)
        return best[i - 1][0] if i else None
    return at


def lags(records, durable):
    """Per record: time from its write to the first durable position at or
    past its end. `durable` is [(global, t)] in time order. Records never
    covered are returned separately."""
    lat, missing = [], 0
    j = 0
    best = running_max(durable)
    for g, t in records:
        while j < len(best) and best[j][0] < g:
            j += 1
        if j == len(best):
            missing += 1
            continue
        lat.append(max(0.0, best[j][1] - t))
    return lat, missing


def histogram_quantile(samples, name, q):
    """The q-quantile of histogram `name` in scraped samples, interpolated
    linearly inside its bucket (as Prometheus does); None when empty."""
    buckets = sorted((float(dict(l)["le"]), v) for (n, l), v in samples.items()
                     if n == name + "_bucket")
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    lo, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= q * total:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (q * total - below) / max(cum - below, 1e-12)
        lo, below = le, cum
    return lo


def seg_global(name, off, segsize):
    return (int(name.split("-")[1]) - 1) * segsize + off


def run_live(ctx, variant, rate):
    cfg = ctx.cfg
    seg = cfg.segment_bytes
    src, dest = ctx.fresh_dir("live-src"), ctx.fresh_dir("live-dest")
    wlog = src + ".writes"
    writer_args = [ctx.tool, "write", "--dir=" + src, "--rate=%d" % rate,
                   "--seconds=%g" % cfg.live_seconds, "--min-record=8192",
                   "--max-record=65536", "--segment-bytes=%d" % seg,
                   "--seed=%d" % ctx.seed, "--log=" + wlog]
    res = {"rate_mb_s": rate / 1e6}
    agent = replica = recv = send = watch = None
    try:
        if variant == "probe":
            w = ctx.procs.spawn("writer", writer_args)
            probe = ctx.tool_json(["fsync-probe", "--dir=" + dest, "--rate=%d" % rate,
                                   "--seconds=%g" % cfg.live_seconds])
            ctx.procs.wait_rusage(w, 60)
            fs = probe["fdatasync"]
            res.update({"fdatasync_p50_ms": fs["p50_us"] / 1e3,
                        "fdatasync_p99_ms": fs["p99_us"] / 1e3,
                        "fdatasync_max_ms": fs["max_us"] / 1e3, "fdatasync_count": fs["count"]})
            return res
        if variant == "raw":
            port_file = dest + ".port"
            dlog = dest + ".durable"
            recv = ctx.procs.spawn("raw-recv", [ctx.tool, "raw-recv", "--dest=" + dest,
                                                "--port-file=" + port_file,
                                                "--durable-log=" + dlog])
            kit.wait_until(lambda: os.path.exists(port_file) and read_text(port_file),
                               10, "raw-recv to listen", interval=0.01)
            addr = read_text(port_file).strip().split("=", 1)[1]
            send = ctx.procs.spawn("raw-send", [ctx.tool, "raw-send", "--connect=" + addr,
                                                "--src=" + src, "--follow"])
            time.sleep(0.2)
        else:
            transport = "copy" if variant == "walship-copy" else "zerocopy"
            agent = kit.Agent(src, ctx.logdir, label="agent-live", transport=transport)
            agent.start()
            metrics_addr = "127.0.0.1:%d" % dk.free_port()
            replica = kit.Replica(agent, dest, "live", ctx.logdir, transport=transport,
                                  extra_args=["--metrics-listen=" + metrics_addr])
            replica.start()
            kit.wait_until(lambda: os.path.exists(os.path.join(dest, "walship.state")),
                               20, "the replica to bind its directory", interval=0.02)
            watch = start_watch(ctx, dest)
        w = ctx.procs.spawn("writer", writer_args)
        rc, _ = ctx.procs.wait_rusage(w, cfg.live_seconds + 60)
        if rc != 0:
            raise RuntimeError("writer failed: %s" % tail(w.log_path))
        wsum = read_json_line(w.log_path)
        records = writer_log(wlog, seg)
        end = records[-1][0] if records else 0
        if variant == "raw":
            time.sleep(1.0)  # let it drain, then end it: the final sync comes after
            ctx.procs.stop(send)
            ctx.procs.wait_rusage(recv, 60)
            own = read_json_line(recv.log_path)["fdatasync"]
            res.update({"own_fdatasync_p50_ms": own["p50_us"] / 1e3,
                        "own_fdatasync_p99_ms": own["p99_us"] / 1e3})
            durable = []
            with open(dlog) as f:
                for line in f:
                    name, off, t = line.split()
                    durable.append((seg_global(name, int(off), seg), int(t) / 1e9))
        else:
            def caught_up():
                st = kit.read_state(dest)
                return st and st["segment"] and seg_global(st["segment"], st["offset"], seg) >= end
            kit.wait_until(caught_up, 60, "the replica to flush the writer's last byte",
                               interval=0.05)
            # The replica's own device flushes during the run (its data
            # fdatasyncs), the reference the live target names.
            samples = kit.scrape(metrics_addr)
            name = "walship_replica_data_fdatasync_seconds"
            for q, key in ((0.5, "own_fdatasync_p50_ms"), (0.99, "own_fdatasync_p99_ms")):
                v = histogram_quantile(samples, name, q)
                res[key] = v * 1e3 if v is not None else None
            ctx.procs.stop(watch)
            durable = [(seg_global(s, o, seg), t) for s, o, _, t in read_watch_log(watch.watch_log)
                       if s != "-"]
        lat, missing = lags(records, durable)
        d = dist([x * 1e3 for x in lat])
        res.update({"written_mb_s": wsum["rate_mb_s"], "records": len(records),
                    "lag_p50_ms": d["p50"], "lag_p99_ms": d["p99"], "lag_max_ms": d["max"],
                    "uncovered_records": missing, "durable_updates": len(durable)})
        return res
    finally:
        for p in (send, recv, watch):
            if p is not None and p.poll() is None:
                ctx.procs.stop(p)
        if replica is not None:
            replica.stop()
        if agent is not None:
            agent.stop()
        rm(src)
        rm(dest)


def section_live(ctx):
    variants = ["probe", "raw", "walship-zerocopy"]
    out = {"writer": "benchtool write: records of 8-64 KiB appended with write(2) to "
                     "seg-%08d files; each record's time is taken when write(2) returns "
                     "(no fdatasync on the primary side)",
           "seconds": ctx.cfg.live_seconds, "rates": {}}
    for rate in ctx.cfg.live_rates:
        runs = {v: [] for v in variants}
        for rnd in range(ctx.cfg.rounds):
            for v in rotate(variants, rnd):
                r = run_live(ctx, v, rate)
                if v == "probe":
                    log("live %3d MB/s round %d %-18s fdatasync p50 %.2f ms p99 %.2f ms",
                        rate / 1e6, rnd + 1, v, r["fdatasync_p50_ms"], r["fdatasync_p99_ms"])
                else:
                    log("live %3d MB/s round %d %-18s lag p50 %.2f ms p99 %.2f ms max %.2f ms "
                        "(%d records, %d uncovered); its own fdatasync p50 %.2f p99 %.2f ms",
                        rate / 1e6, rnd + 1, v, r["lag_p50_ms"], r["lag_p99_ms"],
                        r["lag_max_ms"], r["records"], r["uncovered_records"],
                        r.get("own_fdatasync_p50_ms") or -1, r.get("own_fdatasync_p99_ms") or -1)
                runs[v].append(r)
        out["rates"]["%d" % (rate / 1e6)] = {
            "runs": runs,
            "summary": summarize(runs, ["lag_p50_ms", "lag_p99_ms", "lag_max_ms",
                                        "fdatasync_p50_ms", "fdatasync_p99_ms",
                                        "fdatasync_max_ms", "own_fdatasync_p50_ms",
                                        "own_fdatasync_p99_ms", "written_mb_s"])}
    return out


# ---------------------------------------------------------------------------
# Section: pgbench


def standby_flushed(pg, application_name):
    """flush_lsn of the walsender serving `application_name` (0 before it reports)."""
    return dk.parse_lsn(pg.session().query(
        "SELECT coalesce((SELECT flush_lsn::text FROM pg_stat_replication "
        "WHERE application_name = '%s'), '0/0')" % application_name))


# Asks for argv[1] of a core: busy for that share of every 2 ms, asleep for
# the rest (a load that wakes about as often as a shipper per commit).
BUSY_LOOP = '''
import sys, time
share, period = float(sys.argv[1]), 0.002
while True:
    end = time.perf_counter() + period * share
    while time.perf_counter() < end:
        pass
    time.sleep(period * (1 - share))
'''


def run_pgbench(ctx, pg, variant):
    cfg = ctx.cfg
    pg.psql("CHECKPOINT")
    agent = replica = rw = watch = relay = recv = busy = None
    dest = None
    variant, query_ms = split_query_interval(variant)
    try:
        ws = variant.startswith("walship")
        feed = not variant.startswith("walship-query")
        if ws:
            pg.drop_slot("walship")
            dest = ctx.fresh_dir("pgb-ws")
            agent = kit.Agent(os.path.join(pg.data, "pg_wal"), ctx.logdir, label="agent-pgb",
                                  extra_args=["--format=postgres", "--pg-data=" + pg.data,
                                              "--pg-conninfo=" + pg.conninfo,
                                              "--pg-slot=walship",
                                              "--state-dir=" + ctx.fresh_dir("agent-state"),
                                              "--pg-feed=%s" % ("true" if feed else "false")] +
                                  (["--ack-interval-ms=100"] if variant.endswith("-paced")
                                   else []) +
                                  (["--pg-query-interval-ms=%d" % query_ms] if query_ms
                                   else [])).start()
            metrics_addr = "127.0.0.1:%d" % dk.free_port()
            replica = kit.Replica(agent, dest, "pgb", ctx.logdir,
                                  extra_args=["--metrics-listen=" + metrics_addr]).start()
            now = pg.flush_lsn()

            def ws_flushed():
                st = kit.read_state(dest)
                return pg.lsn_of(st["segment"], st["offset"]) if st and st["segment"] else 0
            kit.wait_until(lambda: ws_flushed() >= now, 120, "walship to catch up",
                               interval=0.05)
            watch = start_watch(ctx, dest)
        elif variant.startswith("pg_receivewal"):
            pg.drop_slot("bench_rw")
            pg.psql("SELECT pg_create_physical_replication_slot('bench_rw', true)")
            dest = ctx.fresh_dir("pgb-rw")
            rw = ctx.procs.spawn("pg_receivewal", [pg.tool("pg_receivewal"), "-D", dest, "-S",
                                                   "bench_rw", "--synchronous", "-n",
                                                   "-d", pg.conninfo])
            now = pg.flush_lsn()

            kit.wait_until(lambda: standby_flushed(pg, "pg_receivewal") >= now, 120,
                           "pg_receivewal to catch up", interval=0.05)
        elif variant.startswith("raw-relay"):
            # raw-relay-query follows the flush position by query, with no
            # walsender, as walship --pg-feed=false; the others by a feed.
            follow_query = variant == "raw-relay-query"
            dest = ctx.fresh_dir("pgb-relay")
            port_file = dest + ".port"
            recv = ctx.procs.spawn("relay-recv", [
                ctx.tool, "relay-recv", "--dest=" + dest, "--port-file=" + port_file,
                "--segment-bytes=%d" % pg.segsize,
                "--prealloc=" + (variant[len("raw-relay-"):]
                                 if variant not in ("raw-relay", "raw-relay-query")
                                 else "none")])
            kit.wait_until(lambda: os.path.exists(port_file) and read_text(port_file).strip(),
                           10, "relay-recv to listen", interval=0.01)
            addr = read_text(port_file).strip().split("=", 1)[1]
            now = pg.flush_lsn()
            relay = ctx.procs.spawn("relay-send", [
                ctx.tool, "relay-send", "--conninfo=" + pg.conninfo,
                "--wal-dir=" + os.path.join(pg.data, "pg_wal"), "--connect=" + addr,
                "--system-id=" + pg.psql("SELECT system_identifier FROM pg_control_system()"),
                "--segment-bytes=%d" % pg.segsize,
                "--follow=" + ("query" if follow_query else "feed")] +
                (["--query-interval-ms=%d" % query_ms] if query_ms else []))
            if follow_query:
                # It starts at the flush position it first asks for: nothing
                # to catch up once its query backend is there.
                kit.wait_until(lambda: pg.backend_pids("raw-relay"), 30,
                               "the raw relay's query backend", interval=0.05)
            else:
                kit.wait_until(lambda: standby_flushed(pg, "raw-relay") >= now, 120,
                               "the raw relay to catch up", interval=0.05)
        # CPU of each side during the load: walship-agent and its backends /
        # the walsender; walship-replica / pg_receivewal.
        if ws:
            # The agent, its query backends and its flush feed's walsender.
            if feed:
                kit.wait_until(lambda: pg.backend_pids("walship"), 30, "the agent's flush feed",
                               interval=0.05)
            sender_pids = ([agent.pid] + pg.backend_pids("walship-agent") +
                           pg.backend_pids("walship"))
            receiver_pids = [replica.pid]
        elif variant.startswith("pg_receivewal"):
            sender_pids = pg.backend_pids("pg_receivewal")  # the walsender
            receiver_pids = [rw.pid]
        elif relay is not None:
            sender_pids = [relay.pid] + pg.backend_pids("raw-relay")
            receiver_pids = [recv.pid]
        else:
            sender_pids = receiver_pids = []
        # Two phases on the same daemons. The first measures lag: every
        # variant's sampler, and for walship the observer of its replica-side
        # lag (watch-state, one wake-up per acknowledgement), which takes CPU
        # from the primary that no other variant's measurement does. The
        # second measures TPS and CPU with that observer gone, so the load
        # beside each receiver is the same (the sampler alone).
        samples = []
        query_waits = []  # client send to server execution, seconds
        sess = pg.session()

        def sampler(stop, samples, query_waits):
            # clock_timestamp() is read in the backend next to the flush
            # position: on two saturated CPUs the query can wait milliseconds
            # for a CPU, and a client-side time before it would count that
            # wait as replication lag.
            # Both receivers stand in pg_stat_replication: pg_receivewal
            # itself, walship through its agent's flush feed, which reports
            # what the replica acknowledged. PostgreSQL's lag tracker times
            # both the same way.
            q = ("SELECT pg_current_wal_flush_lsn()::text || ' ' || "
                 "extract(epoch from clock_timestamp())::text || ' ' || coalesce((SELECT "
                 "flush_lsn::text || ' ' || coalesce(extract(epoch from flush_lag)::text, '-') "
                 "FROM pg_stat_replication WHERE application_name = '%s'), '- -')"
                 % ("walship" if ws else "raw-relay" if relay else
                    "pg_receivewal" if rw else variant))
            while not stop.is_set():
                t_sent = time.monotonic()
                try:
                    p_lsn, p_epoch, r_lsn, r_lag = sess.query(q).split()
                except RuntimeError:
                    break
                # The server's wall clock on this machine's monotonic clock.
                t = float(p_epoch) - (time.time() - time.monotonic())
                query_waits.append(max(0.0, t - t_sent))
                # walship's flushed LSN at this moment comes afterwards from
                # the watcher's log: reading its files here would load the
                # CPUs during walship's rounds only.
                ws_lsn = None
                if not ws and r_lsn != "-":
                    ws_lsn = dk.parse_lsn(r_lsn)
                samples.append((t, dk.parse_lsn(p_lsn), ws_lsn,
                                float(r_lag) if r_lag != "-" else None,
                                dk.parse_lsn(r_lsn) if r_lsn != "-" else 0))
                stop.wait(0.01)

        def load(seconds, samples, query_waits):
            """pgbench for `seconds` with the sampler beside it: (TPS, transactions)."""
            stop = threading.Event()
            th = threading.Thread(target=sampler, args=(stop, samples, query_waits),
                                  daemon=True)
            th.start()
            out = subprocess.run([pg.tool("pgbench"), "-n", "-M", "prepared",
                                  "-c", str(cfg.pgbench_clients), "-j", "2",
                                  "-T", str(seconds), "-h", pg.sock, "-p", str(pg.port),
                                  "-U", "postgres", "postgres"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=seconds + 120)
            stop.set()
            th.join(10)
            m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
            n = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
            if out.returncode != 0 or not m or not n:
                raise RuntimeError("pgbench failed: %s" % out.stdout[-2000:])
            return float(m.group(1)), int(n.group(1))

        # Only samples under load count: before pgbench's first commit the
        # byte lag is 0 for everyone, and pg_stat_replication shows the
        # flush_lag of the receiver's last reply before it, however old.
        load_from = pg.flush_lsn()
        if variant == "pg_receivewal-busy":
            busy = ctx.procs.spawn("busy", [sys.executable, "-c", BUSY_LOOP,
                                            str(cfg.pgbench_busy_cores)])
        # Phase 1: lag.
        watch_cpu0 = proc_stat_cpu(watch.pid) or 0.0 if watch is not None else None
        load(cfg.pgbench_lag_seconds, samples, query_waits)
        observer_cores = None
        if watch is not None:
            observer_cores = (((proc_stat_cpu(watch.pid) or watch_cpu0) - watch_cpu0) /
                              cfg.pgbench_lag_seconds)
            ctx.procs.stop(watch)
        # Phase 2: TPS and CPU.
        cpu0 = {p: proc_stat_cpu(p) or 0.0 for p in sender_pids + receiver_pids}
        if busy is not None:
            busy_cpu0 = proc_stat_cpu(busy.pid) or 0.0
        # Where walship's CPU goes: per thread, and per flush cycle that made
        # new bytes durable (walship_replica_flush_seconds counts those).
        if ws:
            threads0 = walship_threads(pg, agent, replica)
            cycles0 = flush_cycles(metrics_addr)
        tps, transactions = load(cfg.pgbench_seconds, [], [])
        if variant == "raw-relay-query":
            # No pg_stat_replication row tells that it kept up: the
            # receiver's segment file does.
            end = pg.flush_lsn()
            seg = pg.psql("SELECT pg_walfile_name('%X/%X')" % (end >> 32, end & 0xffffffff))
            path = os.path.join(dest, seg)
            kit.wait_until(lambda: os.path.exists(path) and
                           pg.lsn_of(seg, os.path.getsize(path)) >= end, 30,
                           "the raw relay to hold the load's WAL", interval=0.05)
        cpu1 = {p: proc_stat_cpu(p) for p in cpu0}
        busy_cores = None
        if busy is not None:
            busy_cores = ((proc_stat_cpu(busy.pid) or busy_cpu0) - busy_cpu0) / cfg.pgbench_seconds
        if ws:
            threads1 = walship_threads(pg, agent, replica)
            cycles = flush_cycles(metrics_addr) - cycles0

        def cores(pids):  # CPU seconds per second of load
            return sum((cpu1[p] or cpu0[p]) - cpu0[p] for p in pids) / cfg.pgbench_seconds
        qw = dist([x * 1e3 for x in query_waits])
        res = {"tps": tps, "samples": len(samples),
               "sample_query_wait_p50_ms": qw["p50"], "sample_query_wait_p99_ms": qw["p99"],
               "transactions": transactions,
               "sender_cores": cores(sender_pids), "receiver_cores": cores(receiver_pids)}
        if busy_cores is not None:
            res["busy_cores"] = busy_cores
        if observer_cores is not None:
            res["observer_cores"] = observer_cores
        # Replication CPU (both sides) per transaction the primary committed.
        res["cpu_us_per_txn"] = ((res["sender_cores"] + res["receiver_cores"]) * 1e6 /
                                 res["tps"] if res["tps"] else None)
        if variant == "none":
            return res
        if ws:
            res["flush_cycles_per_s"] = cycles / cfg.pgbench_seconds
            per = {}
            for side in ("agent", "replica", "feed"):
                for name, (c1, v1) in threads1[side].items():
                    c0, v0 = threads0[side].get(name, (0.0, 0))
                    if c1 - c0 <= 0 and v1 - v0 <= 0:
                        continue
                    per["%s/%s" % (side, name)] = {
                        "cores": (c1 - c0) / cfg.pgbench_seconds,
                        "us_per_cycle": (c1 - c0) * 1e6 / cycles if cycles else None,
                        "switches_per_cycle": (v1 - v0) / cycles if cycles else None}
            res["threads"] = per
            res["sender_us_per_cycle"] = (res["sender_cores"] * 1e6 / res["flush_cycles_per_s"]
                                          if cycles else None)
            res["receiver_us_per_cycle"] = (res["receiver_cores"] * 1e6 /
                                            res["flush_cycles_per_s"] if cycles else None)
        # A flush_lag counts once the receiver has replied about WAL of the load.
        td = dist([x * 1e3 for _, _, _, x, rep in samples if x is not None and rep > load_from])
        res.update({"lag_p50_ms": td["p50"], "lag_p99_ms": td["p99"], "lag_max_ms": td["max"],
                    "lag_n": td["n"]})
        if ws:
            # A second view of walship's lag, from the replica's side: a
            # flush-position sample (timed in its backend) until the replica's
            # walship.progress, rewritten before each acknowledgement, covers it
            # (phase 1).
            obs = [(pg.lsn_of(s, o), t) for s, o, _, t in read_watch_log(watch.watch_log)
                   if s != "-"]
            prim = [(p, t) for t, p, _, _, _ in samples if p > load_from]
            lat, _ = lags(prim, obs)
            sd = dist([x * 1e3 for x in lat])
            res.update({"state_lag_p50_ms": sd["p50"], "state_lag_p99_ms": sd["p99"],
                        "state_lag_max_ms": sd["max"]})
            at = flushed_at(obs)
            samples = [(t, p, at(t), lag, rep) for t, p, _, lag, rep in samples]
        byte_lag = [max(0, p - r) for _, p, r, _, _ in samples
                    if r is not None and p > load_from]
        bd = dist(byte_lag)
        res.update({"byte_lag_p50": bd["p50"], "byte_lag_p99": bd["p99"], "byte_lag_max": bd["max"]})
        return res
    finally:
        if watch is not None and watch.poll() is None:
            ctx.procs.stop(watch)
        if replica is not None:
            replica.stop()
        if agent is not None:
            agent.stop()
        for p in (rw, relay, recv, busy):
            if p is not None:
                ctx.procs.stop(p)
        if dest:
            rm(dest)


def flush_cycles(metrics_addr):
    """walship-replica's flush cycles that made new bytes durable, so far."""
    return kit.metric_total(kit.scrape(metrics_addr), "walship_replica_flush_seconds_count")


def thread_summary(rs):
    """Median over rounds of each thread's cores, CPU and switches per cycle."""
    names = sorted({n for r in rs for n in (r.get("threads") or {})})
    out = {}
    for n in names:
        out[n] = {k: median_summary([(r.get("threads") or {}).get(n, {}).get(k) for r in rs])
                  for k in ("cores", "us_per_cycle", "switches_per_cycle")}
    return out


def section_pgbench(ctx, pg):
    cfg = ctx.cfg
    pg.drop_slot("bench_hold")
    pg.drop_slot("bench_rw")
    pg.psql("DROP TABLE IF EXISTS bench_fill")
    pg.psql("CHECKPOINT")
    r = subprocess.run([pg.tool("pgbench"), "-i", "-q", "-s", str(cfg.pgbench_scale),
                        "-h", pg.sock, "-p", str(pg.port), "-U", "postgres", "postgres"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("pgbench -i failed: %s" % r.stdout[-2000:])
    variants = list(cfg.pgbench_variants)
    runs = {v: [] for v in variants}
    for rnd in range(cfg.rounds):
        for v in rotate(variants, rnd):
            res = run_pgbench(ctx, pg, v)
            if v == "none":
                log("pgbench round %d %-14s tps %.0f", rnd + 1, v, res["tps"])
            else:
                log("pgbench round %d %-14s tps %.0f  flush lag p50 %.2f ms p99 %.2f ms; "
                    "bytes p50 %d p99 %d; sample query waited p50 %.2f ms", rnd + 1, v,
                    res["tps"], *[-1 if res[k] is None else res[k] for k in (
                        "lag_p50_ms", "lag_p99_ms", "byte_lag_p50", "byte_lag_p99",
                        "sample_query_wait_p50_ms")])
            runs[v].append(res)
    return {"scale": cfg.pgbench_scale, "clients": cfg.pgbench_clients,
            "seconds": cfg.pgbench_seconds, "lag_seconds": cfg.pgbench_lag_seconds,
            "runs": runs,
            "lag_method": {
                "both": "pg_stat_replication.flush_lag (PostgreSQL's own lag tracker: from "
                        "the walsender sending WAL to the receiver's reply that it is "
                        "durable), sampled every ~10 ms; walship's row is its agent's flush "
                        "feed reporting what the replica acknowledged",
                "walship_state": "state_lag_*: time from a sample of "
                                 "pg_current_wal_flush_lsn() (timed by clock_timestamp() in "
                                 "the same backend) until walship.progress (rewritten before each "
                                 "acknowledgement; inotify) covers it",
                "bytes": "pg_current_wal_flush_lsn() minus the receiver's flushed LSN "
                         "at the same moment (walship: the newest walship.progress the "
                         "watcher saw by then; others: pg_stat_replication.flush_lsn, "
                         "sampled together)",
                "observer": "observer_cores: CPU of walship's replica-side lag watcher "
                            "during the load (it shares the primary's CPUs; the others "
                            "need none)"},
            "summary": summarize(runs, ["tps", "lag_p50_ms", "lag_p99_ms", "lag_max_ms",
                                        "state_lag_p50_ms", "state_lag_p99_ms",
                                        "byte_lag_p50", "byte_lag_p99", "sender_cores",
                                        "receiver_cores", "cpu_us_per_txn", "busy_cores",
                                        "observer_cores",
                                        "flush_cycles_per_s", "sender_us_per_cycle",
                                        "receiver_us_per_cycle"]),
            "threads": {v: thread_summary(rs) for v, rs in runs.items()
                        if any(r.get("threads") for r in rs)}}


# ---------------------------------------------------------------------------
# Section: fan-out


def run_fanout(ctx, src, n):
    nbytes = kit.total_size(src)
    ev = ctx.tool_json(["evict", "--dir=" + src])
    settle(ctx, (n + 1) * nbytes)  # the source read back, and n destinations
    end = end_of(src)
    agent = kit.Agent(src, ctx.logdir, label="agent-fan%d" % n).start()
    replicas, watches, dests = [], [], []
    try:
        a0 = snapshot(agent.pid)
        for i in range(n):
            dests.append(ctx.fresh_dir("fan-dest"))
            watches.append(start_watch(ctx, dests[-1], end))
        t0 = time.monotonic()
        for i in range(n):
            replicas.append(kit.Replica(agent, dests[i], "f%d" % i, ctx.logdir).start())
        ends = []
        for w in watches:
            rc, _ = ctx.procs.wait_rusage(w, 900)
            s = read_json_line(w.log_path)
            if rc != 0 or not s.get("reached"):
                raise RuntimeError("fan-out replica did not finish: %s\n%s" % (s, agent.tail()))
            ends.append(s["t_reached_ns"] / 1e9)
        a1 = snapshot(agent.pid)
        rss = [snapshot(r.pid)["hwm"] for r in replicas]
        t1 = max(ends)
        rb = a1["io"].get("read_bytes", 0) - a0["io"].get("read_bytes", 0)
        rc_ = a1["io"].get("rchar", 0) - a0["io"].get("rchar", 0)
        return {"replicas": n, "bytes_each": nbytes, "seconds": t1 - t0,
                "aggregate_mb_s": n * nbytes / 1e6 / (t1 - t0),
                "slowest_replica_mb_s": nbytes / 1e6 / (t1 - t0),
                "resident_after_evict": ev["resident_after"],
                "agent_read_bytes": rb, "agent_rchar": rc_,
                "read_bytes_per_source_byte": rb / float(nbytes),
                "rchar_per_source_byte": rc_ / float(nbytes),
                "agent_cpu_s": a1["cpu_s"] - a0["cpu_s"], "agent_hwm": a1["hwm"],
                "replica_hwm_max": max(rss)}
    finally:
        for r in replicas:
            r.stop()
        agent.stop()
        for w in watches:
            if w.poll() is None:
                ctx.procs.stop(w)
        for d in dests:
            rm(d)


def section_fanout(ctx, src):
    counts = ctx.cfg.fanout_counts
    runs = {str(n): [] for n in counts}
    for rnd in range(ctx.cfg.rounds):
        for n in rotate(counts, rnd):
            r = run_fanout(ctx, src, n)
            log("fan-out round %d: %d replica(s) %7.1f MB/s aggregate; agent read_bytes/source "
                "%.2f rchar/source %.2f", rnd + 1, n, r["aggregate_mb_s"],
                r["read_bytes_per_source_byte"], r["rchar_per_source_byte"])
            runs[str(n)].append(r)
    return {"backlog_bytes": kit.total_size(src), "runs": runs,
            "summary": summarize(runs, ["aggregate_mb_s", "read_bytes_per_source_byte",
                                        "rchar_per_source_byte", "agent_cpu_s", "agent_hwm",
                                        "replica_hwm_max"])}


# ---------------------------------------------------------------------------


SECTIONS = ["catchup", "pg", "live", "pgbench", "fanout"]
PGBENCH_VARIANTS = ["none", "walship", "walship-paced", "walship-query", "walship-query-paced",
                    "pg_receivewal",
                    "pg_receivewal-busy", "raw-relay", "raw-relay-query",
                    "raw-relay-zero", "raw-relay-fallocate", "raw-relay-keep-size"]



def split_query_interval(variant):
    """(base variant, N) for a variant that follows the flush position by
    query (walship-query*, raw-relay-query) with a "-Nms" suffix: the
    shortest pause between queries (walship-agent --pg-query-interval-ms);
    (variant, None) otherwise, 2 ms."""
    m = re.match(r"^(walship-query.*|raw-relay-query)-(\d+)ms$", variant)
    return (m.group(1), int(m.group(2))) if m else (variant, None)


def known_pgbench_variant(v):
    """One of PGBENCH_VARIANTS, or one following by query with "-Nms"."""
    return split_query_interval(v)[0] in PGBENCH_VARIANTS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny inputs, one round (~1 minute)")
    ap.add_argument("--out", default=None, help="report directory (default ./bench-out-TIME)")
    ap.add_argument("--work", default=None,
                    help="parent of the scratch directory (default /var/tmp; it must be on the "
                         "disk to measure and reachable by the PostgreSQL user)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per comparison")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help="comma-separated subset of %s" % ",".join(SECTIONS))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--pgbench-variants", default=None,
                    help="comma-separated subset of the pgbench section's receivers")
    a = ap.parse_args(argv)
    sections = [s for s in a.sections.split(",") if s]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error("unknown sections %s" % bad)
    cfg = Config(a.quick, a.rounds)
    if a.pgbench_variants:
        picked = [v for v in a.pgbench_variants.split(",") if v]
        bad = [v for v in picked if not known_pgbench_variant(v)]
        if bad:
            ap.error("unknown pgbench variants %s (known: %s; those following by query may "
                     "end in -Nms, the pause between queries)" % (bad, ",".join(PGBENCH_VARIANTS)))
        cfg.pgbench_variants = picked
    out = a.out or os.path.abspath("bench-out-%s" % time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="walship-bench-", dir=a.work or "/var/tmp")
    os.chmod(work, 0o755)
    ctx = Ctx(cfg, work, out, a.keep)
    started = time.monotonic()
    results = {"schema": 1, "quick": cfg.quick, "config": cfg.to_json(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "machine": machine_info(work), "busy_at_start": busy_processes(),
               "seed": ctx.seed, "sections": {}, "errors": {}}
    log("walship benchmark%s: work %s, out %s, load %s", " (quick)" if cfg.quick else "", work,
        out, " ".join(results["machine"]["loadavg_start"]))
    pg = None
    try:
        big = small = fan = None
        if any(s in sections for s in ("catchup", "fanout")):
            big, small, fan = make_backlogs(ctx)
        for name in sections:
            t = time.monotonic()
            try:
                if name == "catchup":
                    results["sections"][name] = section_catchup(ctx, big, small)
                elif name == "live":
                    results["sections"][name] = section_live(ctx)
                elif name == "fanout":
                    results["sections"][name] = section_fanout(ctx, fan)
                elif name in ("pg", "pgbench"):
                    if pg is None:
                        pg = Pg(ctx, cfg.pg_segsize_mb)
                        pg.setup()
                    results["sections"][name] = (section_pg(ctx, pg) if name == "pg"
                                                 else section_pgbench(ctx, pg))
                results["sections"].setdefault(name, {})["elapsed_s"] = time.monotonic() - t
                log("section %s done in %.0fs", name, time.monotonic() - t)
            except Exception as e:  # record, go on with the next section
                traceback.print_exc()
                results["errors"][name] = "%s: %s" % (type(e).__name__, e)
                log("section %s FAILED: %s", name, e)
    finally:
        if pg is not None:
            pg.close()
        ctx.procs.kill_all()
        results["elapsed_s"] = time.monotonic() - started
        results["machine"]["loadavg_end"] = read_text("/proc/loadavg").split()[:3]
        if ctx.warm_costs:
            w = sorted(ctx.warm_costs)
            results["machine"]["warm_memory"] = {
                "runs": len(w), "s_per_gib_min": w[0], "s_per_gib_median": w[len(w) // 2],
                "s_per_gib_max": w[-1]}
        results["targets"] = report.evaluate(results)
        report.write_all(results, out)
        if a.keep:
            log("kept %s", work)
        else:
            rm(work)
    log("done in %.0fs: %s/results.md", results["elapsed_s"], out)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
