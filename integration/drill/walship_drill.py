#!/usr/bin/env python3
"""walship-drill: failover drills of walship with a real PostgreSQL 15.

    python3 -m integration.drill.walship_drill [--drills process-crash,host-loss,
        replica-crash,network-cut,switchover] [--quick] [--out DIR] [--seed N]

Each drill builds, on loopback and in a temp dir, a PostgreSQL primary, a
walship-agent beside it, a walship-replica, and a standby made with
`pg_basebackup -X none` that replays only what walship shipped (its
restore_command is `walship-replica restore`); runs a write load that records
every commit the primary acknowledged; injects a fault; and checks what the
standby holds against what was acknowledged. It writes report.md,
results.json, one lag CSV and one SVG chart per drill, and the daemons' logs,
into --out. Exit status: 0 every invariant held; 1 an invariant failed (or a
drill could not be carried out); 2 bad usage. See README.md beside this file.
"""

import argparse
import bisect
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

from integration.drill import chart
from integration.drill import drillkit as dk
from integration.drill.drillkit import log, DrillError

from integration import fault_proxy
from integration import statefile

ALL_DRILLS = ["process-crash", "host-loss", "replica-crash", "network-cut", "switchover"]
QUICK_DRILLS = ["process-crash", "host-loss"]
ACKS_TABLE = "drill_acks"
RTO_TABLE = "drill_rto"


class Params(object):
    """Sizes and timings; --quick shrinks them."""

    def __init__(self, quick, load_seconds=None, segsize_mb=None):
        self.quick = quick
        self.segsize_mb = segsize_mb or (1 if quick else 16)
        self.segsize = self.segsize_mb * 1024 * 1024
        self.load_seconds = load_seconds or (10 if quick else 30)
        self.switch_load_seconds = 5
        self.sample_period = 0.25
        self.pgbench_scale = 1 if quick else 5
        self.pgbench_clients = 2
        self.max_wal_size = "32MB" if quick else "256MB"
        self.min_wal_size = "4MB" if quick else "64MB"
        self.drain_timeout = 60
        self.replay_timeout = 90
        self.replay_stall = 3.0  # s without replay progress before checking the tail
        self.promote_timeout = 60


class Ctx(object):
    """What every drill shares: the environment, output dir, seed."""

    def __init__(self, env, out, seed, params):
        self.env = env
        self.out = out
        self.seed = seed
        self.rng = random.Random(seed)
        self.p = params


# ---------------------------------------------------------------------------
# walship daemons

class _Daemon(object):
    """A walship daemon run as self.proc (a drillkit Proc, once started)."""

    proc = None

    def alive(self):
        return self.proc is not None and self.proc.alive()

    def kill9(self):
        self.proc.kill9()

    def stop(self):
        return self.proc.stop() if self.proc else None


class Agent(_Daemon):
    """walship-agent --format=postgres beside a cluster."""

    def __init__(self, ctx, setup, cluster, name):
        self.ctx, self.setup, self.cluster, self.name = ctx, setup, cluster, name
        self.port_file = os.path.join(setup.dir, "%s.ports" % name)
        self.state_dir = os.path.join(setup.dir, "%s-state" % name)
        self.log_path = os.path.join(setup.logs, "%s.log" % name)
        self.proc = None
        self.control = self.data = None

    def start(self, timeout=30):
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        argv = [self.ctx.env.binaries["walship-agent"], "--format=postgres",
                "--wal-dir=%s" % self.cluster.pg_wal, "--pg-data=%s" % self.cluster.datadir,
                "--pg-conninfo=%s" % self.cluster.conninfo(),
                "--pg-slot=walship", "--state-dir=%s" % self.state_dir,
                "--listen=127.0.0.1:0", "--data-listen=127.0.0.1:0",
                "--port-file=%s" % self.port_file, "--insecure"]
        self.proc = dk.Proc(self.ctx.env, self.name, argv, self.log_path)

        def ready():
            if not self.proc.alive():
                raise DrillError("%s exited %s at start; see %s" % (
                    self.name, self.proc.returncode(), self.log_path))
            try:
                with open(self.port_file) as f:
                    kv = dict(l.strip().split("=", 1) for l in f if "=" in l)
            except OSError:
                return False
            if "control" in kv and "data" in kv:
                self.control, self.data = kv["control"], kv["data"]
                return True
            return False
        dk.wait_until(ready, timeout, "%s port file" % self.name, interval=0.05)
        log("%s up: control %s data %s (pid %d)", self.name, self.control, self.data,
            self.proc.pid)
        return self


class Replica(_Daemon):
    """walship-replica following an agent (maybe through fault proxies)."""

    def __init__(self, ctx, setup, name, dest):
        self.ctx, self.setup, self.name, self.dest = ctx, setup, name, dest
        self.log_path = os.path.join(setup.logs, "%s.log" % name)
        self.proc = None
        self.agent_addr = self.data_addr = None

    def start(self, agent_addr, data_addr=None):
        self.agent_addr, self.data_addr = agent_addr, data_addr
        argv = [self.ctx.env.binaries["walship-replica"], "--agent=%s" % agent_addr,
                "--dest=%s" % self.dest, "--name=%s" % self.name, "--insecure"]
        if data_addr:
            argv.append("--data-address=%s" % data_addr)
        self.proc = dk.Proc(self.ctx.env, self.name, argv, self.log_path)
        return self

    def restart(self):
        return self.start(self.agent_addr, self.data_addr)

    def state(self):
        """The durable position (walship.state, or walship.progress past it)
        as a dict (segment, offset, ...), or None."""
        try:
            return statefile.read_durable(self.dest)
        except (OSError, ValueError):
            return None

    def durable_lsn(self):
        st = self.state()
        if not st:
            return None
        return dk.position_lsn({"segment": st.get("segment"), "offset": st.get("offset", 0)},
                               self.ctx.p.segsize)

    def timeline(self):
        st = self.state() or {}
        seg = dk.parse_segment(st.get("segment"), self.ctx.p.segsize)
        return seg[0] if seg else 1


def agent_status(ctx, control, timeout_ms=1500):
    """walship-status --json, parsed: {"source_end": LSN, "replicas": {name: {...}}} or None."""
    if not control:
        return None
    try:
        r = subprocess.run([ctx.env.binaries["walship-status"], "--agent=%s" % control, "--json",
                            "--timeout-ms=%d" % timeout_ms, "--insecure"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout_ms / 1000.0 + 3)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        return None
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return None
    seg = ctx.p.segsize
    out = {"source_end": dk.position_lsn(j.get("source_end"), seg), "replicas": {},
           "raw_source_end": j.get("source_end")}
    for rep in j.get("replicas", []):
        out["replicas"][rep.get("name")] = {
            "flushed": dk.position_lsn(rep.get("flushed"), seg),
            "raw_flushed": rep.get("flushed"),
            "connected": bool(rep.get("connected")),
            "lag_bytes": int(rep.get("lag_bytes", 0) or 0),
            "lag_ms": int(rep.get("lag_ms", 0) or 0),
            "last_error": rep.get("last_error", ""),
        }
    return out


# ---------------------------------------------------------------------------
# One drill's clusters and daemons

PRIMARY_CONF = {
    "listen_addresses": "",
    "wal_level": "replica",
    "max_wal_senders": 5,
    "max_replication_slots": 5,
    "wal_keep_size": 0,
    "archive_mode": "off",
    "synchronous_commit": "on",
    "fsync": "on",
    "full_page_writes": "on",
    "wal_log_hints": "on",
    "checkpoint_timeout": "30s",
    "shared_buffers": "32MB",
    "max_connections": 30,
    "hot_standby": "on",
    "wal_retrieve_retry_interval": "200ms",
    "log_line_prefix": "%m [%p] ",
    "log_checkpoints": "on",
    "restart_after_crash": "off",
    "autovacuum_naptime": "5s",
}


class Setup(object):
    """A primary, its agent, a replica, and a standby fed by the replica."""

    def __init__(self, ctx, name, proxied=False, names=("node-a", "node-b")):
        self.ctx = ctx
        self.name = name
        self.dir = ctx.env.mkdir(name)
        self.sock = ctx.env.mkdir(name, "sock")
        self.out = os.path.join(ctx.out, name)
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.primary = dk.PgCluster(ctx.env, names[0], os.path.join(self.dir, names[0]),
                                    self.sock, dk.free_port(), self.logs)
        self.standby = dk.PgCluster(ctx.env, names[1], os.path.join(self.dir, names[1]),
                                    self.sock, dk.free_port(), self.logs)
        self.proxied = proxied
        self.proxies = []
        self.agents = []
        self.replicas = []
        self.loads = []
        self.agent = None
        self.replica = None
        self.events = []  # (unix time, label)
        self.t0 = None  # load start

    def event(self, label):
        t = time.time()
        self.events.append((t, label))
        log("[%s] %s", self.name, label)
        return t

    # -- building -----------------------------------------------------------
    def build(self):
        p = self.ctx.p
        t = time.time()
        self.primary.initdb(p.segsize_mb)
        conf = dict(PRIMARY_CONF)
        conf.update({"port": self.primary.port, "unix_socket_directories": self.sock,
                     "max_wal_size": p.max_wal_size, "min_wal_size": p.min_wal_size})
        self.primary.configure(conf)
        self.primary.start()
        self.primary.psql("CREATE TABLE %s (seq bigint PRIMARY KEY, at timestamptz DEFAULT now());"
                          "CREATE TABLE %s (id serial PRIMARY KEY, at timestamptz DEFAULT now())"
                          % (ACKS_TABLE, RTO_TABLE))
        self.ctx.env.run([self.ctx.env.pg("pgbench"), "-i", "-q", "-s", str(p.pgbench_scale),
                          "-h", self.sock, "-p", str(self.primary.port), "-U", dk.PG_SUPERUSER,
                          "postgres"], as_user=False, timeout=300)
        self.start_walship(self.primary, "agent", "replica")
        self.basebackup(self.primary, self.standby)
        self.standby_conf(self.standby, self.replica)
        self.standby.start(wait_for=("ready", "standby"), timeout=p.replay_timeout)
        self.wait_standby_near(self.primary, self.standby)
        self.event("set up in %.1fs (primary port %d, standby port %d)"
                   % (time.time() - t, self.primary.port, self.standby.port))

    def start_walship(self, cluster, agent_name, replica_name):
        """A new agent on `cluster` and a fresh replica (own dest) following it."""
        agent = Agent(self.ctx, self, cluster, agent_name).start()
        rep = Replica(self.ctx, self, replica_name,
                      os.path.join(self.dir, "%s-dest" % replica_name))
        control, data = agent.control, None
        if self.proxied:
            for p in self.proxies:
                p.close()
            self.proxies = [fault_proxy.FaultProxy(_hostport(agent.control)).start(),
                            fault_proxy.FaultProxy(_hostport(agent.data)).start()]
            control, data = self.proxies[0].address, self.proxies[1].address
            log("replica %s through fault proxies: control %s, data %s", replica_name,
                control, data)
        rep.start(control, data)
        self.agents.append(agent)
        self.replicas.append(rep)
        self.agent, self.replica = agent, rep

        def connected():
            st = agent_status(self.ctx, agent.control)
            r = st and st["replicas"].get(replica_name)
            if not rep.alive():
                raise DrillError("%s exited %s; see %s" % (replica_name, rep.proc.returncode(),
                                                           rep.log_path))
            return r and r["connected"]
        dk.wait_until(connected, 30, "%s to connect to %s" % (replica_name, agent_name),
                      interval=0.1)
        return agent, rep

    def basebackup(self, source, target):
        t = time.time()
        self.ctx.env.run([self.ctx.env.pg("pg_basebackup"), "-h", self.sock, "-p",
                          str(source.port), "-U", dk.PG_SUPERUSER, "-D", target.datadir,
                          "-X", "none", "-c", "fast", "--no-sync"], timeout=300)
        log("pg_basebackup -X none of %s into %s in %.1fs", source.name, target.name,
            time.time() - t)

    def standby_conf(self, standby, replica):
        """standby.signal + restore_command from `replica`'s destination; no primary_conninfo."""
        standby.configure({
            "port": standby.port,
            "unix_socket_directories": self.sock,
            "restore_command": "%s restore --dest=%s %%f %%p" % (
                self.ctx.env.binaries["walship-replica"], replica.dest),
            "recovery_target_timeline": "latest",
            "primary_conninfo": "",
            "hot_standby": "on",
            "wal_retrieve_retry_interval": "200ms",
        })
        standby.touch("standby.signal")

    def wait_standby_near(self, primary, standby, timeout=None):
        """Waits until the standby replayed what the primary had flushed when called."""
        target = primary.lsn("pg_current_wal_insert_lsn()")
        timeout = timeout or self.ctx.p.replay_timeout

        def caught_up():
            r = standby.lsn("pg_last_wal_replay_lsn()")
            return r is not None and r >= target
        dk.wait_until(caught_up, timeout, "%s to replay up to %s" % (
            standby.name, dk.fmt_lsn(target)), interval=0.2)

    # -- teardown -----------------------------------------------------------
    def teardown(self):
        for ld in self.loads:
            ld.stop()
        for p in self.proxies:
            try:
                p.close()
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
        for d in self.replicas + self.agents:
            if d.proc and d.proc.alive():
                d.proc.stop(timeout=5)
        for c in (self.primary, self.standby):
            c.teardown()
            if c in self.ctx.env.clusters:
                self.ctx.env.clusters.remove(c)
        if not self.ctx.env.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _hostport(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


# ---------------------------------------------------------------------------
# Load

class Load(object):
    """drill-loader (acknowledged commits) plus pgbench TPC-B for volume."""

    def __init__(self, ctx, setup, cluster, seconds, start_seq, tag):
        self.ctx, self.setup, self.cluster = ctx, setup, cluster
        self.seconds, self.start_seq, self.tag = seconds, start_seq, tag
        self.acks_path = os.path.join(setup.out, "acks-%s.txt" % tag)
        self.loader = self.pgbench = None
        self.t_start = None
        setup.loads.append(self)

    def start(self):
        env = self.ctx.env
        self.t_start = time.time()
        self.loader = dk.Proc(env, "loader-%s" % self.tag, [
            env.binaries["drill-loader"], "--conninfo=%s" % self.cluster.conninfo(),
            "--acks=%s" % self.acks_path, "--table=%s" % ACKS_TABLE,
            "--seconds=%d" % self.seconds, "--start-seq=%d" % self.start_seq],
            os.path.join(self.setup.logs, "loader-%s.log" % self.tag), as_user=False)
        self.pgbench = dk.Proc(env, "pgbench-%s" % self.tag, [
            env.pg("pgbench"), "-n", "-c", str(self.ctx.p.pgbench_clients), "-j", "2",
            "-T", str(self.seconds), "-P", "5", "-h", self.setup.sock, "-p",
            str(self.cluster.port), "-U", dk.PG_SUPERUSER, "postgres"],
            os.path.join(self.setup.logs, "pgbench-%s.log" % self.tag), as_user=False)
        return self.t_start

    def running(self):
        return self.loader is not None and self.loader.alive()

    def wait(self, timeout):
        rc = self.loader.wait(timeout)
        self.pgbench.wait(10)
        return rc

    def stop(self):
        for p in (self.loader, self.pgbench):
            if p and p.alive():
                p.stop(timeout=10)

    def acks(self):
        """(seqs, ack_times, flush_lsns) in seq order; lsn None where unknown."""
        seqs, times, lsns = [], [], {}
        try:
            with open(self.acks_path) as f:
                for line in f:
                    part = line.split()
                    if len(part) == 3 and part[0] == "A":
                        seqs.append(int(part[1]))
                        times.append(int(part[2]) / 1e9)
                    elif len(part) == 3 and part[0] == "L":
                        lsns[int(part[1])] = dk.parse_lsn(part[2])
        except OSError:
            pass
        return seqs, times, [lsns.get(s) for s in seqs]


# ---------------------------------------------------------------------------
# Sampling

class Sampler(threading.Thread):
    """Samples the primary's flush LSN, walship's positions and the standby's replay."""

    def __init__(self, ctx, setup):
        super().__init__(daemon=True)
        self.ctx, self.setup = ctx, setup
        self.rows = []
        self._halt = threading.Event()
        self._sessions = {}

    def _query(self, cluster, sql):
        if cluster is None or not cluster.running():
            return None
        s = self._sessions.get(id(cluster))
        if s is None:
            s = self._sessions[id(cluster)] = cluster.session()
        return dk.parse_lsn(s.query(sql, timeout=1.0))

    def tick(self):
        # Followers first, the primary last: a position is never compared with
        # an older primary position, so lag is an upper bound, never negative.
        s = self.setup
        sr = self._query(s.standby, "SELECT pg_last_wal_replay_lsn()")
        st = agent_status(self.ctx, s.agent.control if s.agent and s.agent.alive() else None)
        rep = st["replicas"].get(s.replica.name) if st and s.replica else None
        t = time.time()
        pf = self._query(s.primary, "SELECT pg_current_wal_flush_lsn()")
        self.rows.append({
            "t": t, "primary_flush": pf, "source_end": st["source_end"] if st else None,
            "replica_flushed": rep["flushed"] if rep else None,
            "standby_replay": sr, "agent_lag_ms": rep["lag_ms"] if rep else None,
            "connected": rep["connected"] if rep else None})

    def run(self):
        period = self.ctx.p.sample_period
        while not self._halt.is_set():
            t = time.time()
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - sampling must not kill a drill
                log("sampler: %s", e)
            self._halt.wait(max(0.0, period - (time.time() - t)))

    def stop(self):
        self._halt.set()
        self.join(10)
        for s in self._sessions.values():
            s.close()


def commit_age(t, pos, ack_times, ack_lsns):
    """Age (ms) at time t of the oldest acknowledged commit beyond position pos."""
    if pos is None:
        return None
    i = bisect.bisect_right(ack_lsns, pos)
    if i >= len(ack_lsns) or ack_times[i] > t:
        return 0.0
    return (t - ack_times[i]) * 1000.0


def analyze_lag(rows, loads, t_from, t_to):
    """Per-row derived lag fields, and percentiles over [t_from, t_to]."""
    ack_t, ack_l = [], []
    for ld in loads:
        seqs, times, lsns = ld.acks()
        for tt, l in zip(times, lsns):
            if l is not None:
                ack_t.append(tt)
                ack_l.append(l)
    order = sorted(range(len(ack_l)), key=lambda i: ack_t[i])
    ack_t = [ack_t[i] for i in order]
    ack_l = [ack_l[i] for i in order]
    # Flush LSNs are non-decreasing in ack time; keep the sequence monotonic for bisect.
    for i in range(1, len(ack_l)):
        ack_l[i] = max(ack_l[i], ack_l[i - 1])
    for r in rows:
        pf, rf, sr = r["primary_flush"], r["replica_flushed"], r["standby_replay"]
        r["lag_bytes"] = (pf - rf) if pf is not None and rf is not None else None
        r["standby_lag_bytes"] = (pf - sr) if pf is not None and sr is not None else None
        r["lag_ms"] = commit_age(r["t"], rf, ack_t, ack_l)
        r["standby_lag_ms"] = commit_age(r["t"], sr, ack_t, ack_l)
    win = [r for r in rows if t_from <= r["t"] <= t_to]
    return {
        "window_s": [t_from, t_to],
        "samples": len(win),
        "replica_bytes": chart.percentiles([r["lag_bytes"] for r in win]),
        "replica_ms": chart.percentiles([r["lag_ms"] for r in win]),
        "standby_bytes": chart.percentiles([r["standby_lag_bytes"] for r in win]),
        "standby_ms": chart.percentiles([r["standby_lag_ms"] for r in win]),
        "agent_lag_ms": chart.percentiles([r["agent_lag_ms"] for r in win]),
    }


def write_lag_outputs(setup, rows, markers, title):
    """lag.csv and lag.svg in the drill's output dir; returns their names."""
    t0 = setup.t0 or (rows[0]["t"] if rows else time.time())
    cols = ["t", "t_rel", "primary_flush_lsn", "source_end_lsn", "replica_flushed_lsn",
            "standby_replay_lsn", "lag_bytes", "lag_ms", "standby_lag_bytes", "standby_lag_ms",
            "agent_lag_ms", "replica_connected"]
    with open(os.path.join(setup.out, "lag.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["%.3f" % r["t"], "%.3f" % (r["t"] - t0), dk.fmt_lsn(r["primary_flush"]),
                        dk.fmt_lsn(r["source_end"]), dk.fmt_lsn(r["replica_flushed"]),
                        dk.fmt_lsn(r["standby_replay"]), _opt(r.get("lag_bytes")),
                        _opt(r.get("lag_ms")), _opt(r.get("standby_lag_bytes")),
                        _opt(r.get("standby_lag_ms")), _opt(r["agent_lag_ms"]),
                        "" if r["connected"] is None else int(r["connected"])])
    times = [r["t"] - t0 for r in rows]
    svg = chart.lag_chart(title, times, [
        {"label": "lag (bytes)", "unit": "bytes", "series": [
            ("primary flush - replica flushed", [r.get("lag_bytes") for r in rows]),
            ("primary flush - standby replay", [r.get("standby_lag_bytes") for r in rows])]},
        {"label": "lag (ms)", "unit": "ms", "series": [
            ("oldest acked commit not on the replica", [r.get("lag_ms") for r in rows]),
            ("oldest acked commit not replayed", [r.get("standby_lag_ms") for r in rows])]},
    ], markers=[(t - t0, label, color) for t, label, color in markers])
    with open(os.path.join(setup.out, "lag.svg"), "w") as f:
        f.write(svg)
    return "lag.csv", "lag.svg"


def _opt(v):
    if v is None:
        return ""
    return "%.1f" % v if isinstance(v, float) else str(v)


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

    Returns (flushed, source_end, seconds) or raises DrillError.
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
            raise DrillError("agent did not drain within %ss: replica flushed %s, source end %s"
                             % (ctx.p.drain_timeout, dk.fmt_lsn(cur and cur[0]),
                                dk.fmt_lsn(cur and cur[1])))
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
            name = dk.segment_name(tli, segno, seg)
            r = env.run([env.binaries["walship-replica"], "restore", "--dest=%s" % replica.dest,
                         name, os.path.join(tmp, name)], timeout=60, check=False)
            if r.returncode != 0:
                log("restore %s from %s: exit %d %s", name, replica.dest, r.returncode,
                    r.stderr.strip())
                break
        wal_end, n = dk.waldump_end(env, tmp, start_lsn, tli, seg)
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
                dk.fmt_lsn(r), dk.fmt_lsn(required), time.time() - t)
        if r is not None and time.time() - since >= ctx.p.replay_stall and checked_at != r:
            checked_at = r
            n, wal_end = records_beyond(ctx, setup, replica, r, tli)
            if n == 0:
                return True, r, ("replay %s; the replica's %d durable bytes past it (to %s) "
                                 "hold no complete record" % (dk.fmt_lsn(r), required - r,
                                                              dk.fmt_lsn(required)))
            log("standby at %s but the replica holds %d more complete records (to %s): waiting",
                dk.fmt_lsn(r), n, dk.fmt_lsn(wal_end))
        if time.time() > deadline:
            n, wal_end = records_beyond(ctx, setup, replica, r or 0, tli) if r else (-1, None)
            return False, r, ("standby replay %s is behind the replica's durable %s after %ss: "
                              "%d complete records (to %s) not replayed" % (
                                  dk.fmt_lsn(r), dk.fmt_lsn(required), ctx.p.replay_timeout, n,
                                  dk.fmt_lsn(wal_end)))
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
    out = standby.psql("SELECT pg_promote(true, %d)" % ctx.p.promote_timeout,
                       timeout=ctx.p.promote_timeout + 10, check=False)
    if out != "t":
        log("pg_promote returned %r", out)
    deadline = time.time() + ctx.p.promote_timeout
    while True:
        if standby.psql("INSERT INTO %s DEFAULT VALUES" % RTO_TABLE, timeout=10,
                        check=False) is not None:
            t = setup.event("%s accepts writes" % standby.name)
            return t - t_fault
        if time.time() > deadline:
            raise DrillError("%s accepted no write within %ss of promotion" % (
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
    if prev.alive():
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


# ---------------------------------------------------------------------------
# The drills

def run_load_until(setup, load, seconds):
    """Sleeps `seconds` into the load; raises if the loader died early."""
    deadline = load.t_start + seconds
    while time.time() < deadline:
        if not load.running():
            raise DrillError("the loader stopped early (exit %s); see %s" % (
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
            s.agent.kill9()
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
                secs, dk.fmt_lsn(flushed), dk.fmt_lsn(source_end)))
            res.metrics["drain_s"] = round(secs, 2)
        durable = (s.replica.durable_lsn() if name == "process-crash"
                   else wait_state_stable(ctx, s.replica))
        res.metrics["replica_durable_lsn"] = dk.fmt_lsn(durable)
        s.event("replica durable at %s" % dk.fmt_lsn(durable))
        if name == "process-crash":
            res.check("replica's durable position equals its acknowledged flushed position",
                      durable == flushed, "state %s, acked %s" % (dk.fmt_lsn(durable),
                                                                 dk.fmt_lsn(flushed)))
        ok, replay, detail = wait_standby_replayed(ctx, s, s.standby, s.replica, durable)
        s.event("%s replay at %s: %s" % (s.standby.name, dk.fmt_lsn(replay),
                                         "caught up" if ok else "BEHIND"))
        res.metrics["standby_replay_lsn"] = dk.fmt_lsn(replay)
        res.check("before promotion the standby replayed all WAL the replica acknowledged",
                  ok, detail)
        res.check("the standby replayed only WAL the replica holds (replay <= durable)",
                  replay is not None and replay <= durable,
                  "replay %s, durable %s" % (dk.fmt_lsn(replay), dk.fmt_lsn(durable)))
        # What the primary had: the end of valid WAL in its pg_wal (crash recovery's end).
        tli = s.replica.timeline()
        primary_end, _ = dk.waldump_end(ctx.env, s.primary.pg_wal, replay or durable, tli,
                                        ctx.p.segsize)
        wal_lost = max(0, primary_end - (replay or 0))
        res.metrics.update({"primary_wal_end_lsn": dk.fmt_lsn(primary_end),
                            "primary_last_sampled_flush_lsn": dk.fmt_lsn(last_flush),
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
                ld = Load(ctx, s, new, ctx.p.switch_load_seconds, 1000001, "rejoin")
                ld.start()
                rc = ld.wait(ctx.p.switch_load_seconds + 60)
                res.check("rejoin: load on the new primary completed", rc == 0,
                          "loader exit %s" % rc)
                try:
                    s.wait_standby_near(new, old)
                    caught = True
                except DrillError as e:
                    caught = False
                    res.notes.append(str(e))
                res.check("rejoin: rows written on the new primary reached the rewound old "
                          "primary through walship", caught,
                          "replay %s" % dk.fmt_lsn(old.lsn("pg_last_wal_replay_lsn()")))
                rows_old, rows_new = table_seqs(old), table_seqs(new)
                res.check("rejoin: the rewound old primary holds exactly the new primary's "
                          "rows (its lost tail discarded)", rows_old == rows_new,
                          "%d rows on %s, %d on %s" % (len(rows_old), old.name, len(rows_new),
                                                       new.name))
        if name == "process-crash":
            res.check("the standby replayed up to the end of the primary's valid WAL",
                      wal_lost == 0, "primary WAL ends at %s, standby replayed to %s" % (
                          dk.fmt_lsn(primary_end), dk.fmt_lsn(replay)))
        return res
    finally:
        finish_drill(ctx, s, sampler, res, "FAULT")


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
            s.replica.kill9()
            time.sleep(down)
            s.replica.restart()
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
                  "did not reach %s within %ss" % (dk.fmt_lsn(flush_at_back),
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
        except DrillError as e:
            caught = False
            res.notes.append(str(e))
        replay = s.standby.lsn("pg_last_wal_replay_lsn()")
        res.check("final catch-up: the standby replayed up to the primary's end of WAL", caught,
                  "replay %s, primary %s, %.1fs after the load" % (
                      dk.fmt_lsn(replay), dk.fmt_lsn(target), time.time() - t))
        check_acked_present(res, s.standby, [load], allow_suffix_loss=False)
        res.check("the replica is still running (no gap or divergence stop)", s.replica.alive(),
                  "exit %s" % (s.replica.proc.returncode(),))
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
            s.event("agent drained: %s" % dk.fmt_lsn(flushed))
            ok, replay, detail = wait_standby_replayed(ctx, s, new, s.replica, flushed)
            s.event("%s replay at %s: %s" % (new.name, dk.fmt_lsn(replay),
                                             "caught up" if ok else "BEHIND"))
            res.check("%s: before promotion %s replayed all WAL the replica acknowledged"
                      % (tag, new.name), ok, detail)
            tli = s.replica.timeline()
            old_end, n = dk.waldump_end(ctx.env, old.pg_wal, replay or 0, tli, ctx.p.segsize)
            res.check("%s: %s replayed every record %s wrote (nothing lost)" % (
                tag, new.name, old.name), ok and n == 0,
                "old primary's WAL ends at %s, %d records past replay %s" % (
                    dk.fmt_lsn(old_end), n, dk.fmt_lsn(replay)))
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
            ld = Load(ctx, s, new, ctx.p.switch_load_seconds, start_seq, tag)
            ld.start()
            loads.append(ld)
            rc = ld.wait(ctx.p.switch_load_seconds + 60)
            res.check("%s: load on the new primary %s completed" % (tag, new.name), rc == 0,
                      "loader exit %s" % rc)
            try:
                s.wait_standby_near(new, old)
                caught = True
            except DrillError as e:
                caught = False
                res.notes.append(str(e))
            res.check("%s: rows written on %s reached %s through walship" % (
                tag, new.name, old.name), caught,
                "replay %s" % dk.fmt_lsn(old.lsn("pg_last_wal_replay_lsn()")))
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
        except DrillError as e:
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


# ---------------------------------------------------------------------------
# Report

def _n(v, unit=""):
    if v is None:
        return "-"
    if unit == "bytes":
        return "%d (%s)" % (v, chart.human_bytes(v)) if v >= 1024 else "%d" % v
    if isinstance(v, float):
        return "%.1f" % v
    return str(v)


def write_report(out, seed, params, results, started, argv):
    ok = all(r.ok for r in results)
    doc = {"ok": ok, "seed": seed, "quick": params.quick, "started": started,
           "duration_s": round(time.time() - started, 1), "command": argv,
           "segment_size_mb": params.segsize_mb, "load_seconds": params.load_seconds,
           "drills": [r.to_json() for r in results]}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    L = []
    L.append("# walship failover drill report")
    L.append("")
    L.append("- result: **%s**" % ("PASS" if ok else "FAIL"))
    L.append("- seed: `%d` (replay with `--seed %d`)" % (seed, seed))
    L.append("- mode: %s; WAL segment size %d MiB; load %ds per drill (drill-loader + pgbench "
             "-c %d)" % ("quick" if params.quick else "full", params.segsize_mb,
                        params.load_seconds, params.pgbench_clients))
    L.append("- started %s, took %.0fs" % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(
        started)), time.time() - started))
    L.append("- command: `%s`" % " ".join(argv))
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("| drill | result | RPO: acked commits lost | RPO: WAL bytes lost | RTO (s) "
             "| lag p99 (bytes) | lag p99 (ms) |")
    L.append("|---|---|---|---|---|---|---|")
    for r in results:
        m = r.metrics
        lag = m.get("lag", {})
        L.append("| [%s](#%s) | %s | %s | %s | %s | %s | %s |" % (
            r.name, r.name, "PASS" if r.ok else "**FAIL**", _n(m.get("acked_lost")),
            _n(m.get("wal_bytes_lost")), _n(m.get("rto_s")),
            _n(lag.get("replica_bytes", {}).get("p99")),
            _n(lag.get("replica_ms", {}).get("p99"))))
    L.append("")
    for r in results:
        m = r.metrics
        L.append("## %s" % r.name)
        L.append("")
        L.append("Result: **%s**%s" % ("PASS" if r.ok else "FAIL",
                                      (" — %s" % r.error) if r.error else ""))
        L.append("")
        L.append("### RPO and RTO")
        L.append("")
        L.append("| measure | value |")
        L.append("|---|---|")
        rows = [("acknowledged commits", m.get("acked_commits")),
                ("acknowledged commits lost (RPO)", m.get("acked_lost")),
                ("WAL bytes lost (RPO)", m.get("wal_bytes_lost")),
                ("RTO: fault to first write on the promoted standby (s)", m.get("rto_s")),
                ("switchover RTOs (s)", m.get("switchover_rto_s")),
                ("replica catch-up after the fault (s)", m.get("catchup_s")),
                ("agent drain after the crash (s)", m.get("drain_s")),
                ("primary's end of valid WAL", m.get("primary_wal_end_lsn")),
                ("primary's last sampled flush LSN", m.get("primary_last_sampled_flush_lsn")),
                ("replica durable LSN", m.get("replica_durable_lsn")),
                ("standby replay LSN at promotion", m.get("standby_replay_lsn")),
                ("rows on the standby", m.get("rows_on_standby")),
                ("in-flight (unacknowledged) commits present", m.get("in_flight_present")),
                ("fault at (s after load start)", m.get("fault_after_load_s")),
                ("fault duration (s)", m.get("fault_duration_s"))]
        for k, v in rows:
            if v is not None:
                L.append("| %s | %s |" % (k, _n(v, "bytes") if "bytes" in k else _n(v)))
        L.append("")
        L.append("### Lag during load")
        L.append("")
        lag = m.get("lag")
        if lag:
            L.append("Samples every %.2fs from load start to the %s (%d samples). Bytes: the "
                     "primary's `pg_current_wal_flush_lsn()` minus the position; ms: age of the "
                     "oldest acknowledged commit beyond the position." % (
                         params.sample_period, "fault" if r.name != "switchover" else
                         "end of the first load", lag["samples"]))
            L.append("")
            L.append("| series | p50 | p90 | p99 | max |")
            L.append("|---|---|---|---|---|")
            for key, label, unit in [("replica_bytes", "replica flushed, bytes", "bytes"),
                                     ("replica_ms", "replica flushed, ms", ""),
                                     ("standby_bytes", "standby replayed, bytes", "bytes"),
                                     ("standby_ms", "standby replayed, ms", ""),
                                     ("agent_lag_ms", "agent-reported lag_ms", "")]:
                p = lag[key]
                L.append("| %s | %s | %s | %s | %s |" % (
                    label, _n(p["p50"], unit), _n(p["p90"], unit), _n(p["p99"], unit),
                    _n(p["max"], unit)))
            lwf = m.get("lag_with_fault")
            if lwf and r.name in ("replica-crash", "network-cut"):
                p, q = lwf["replica_bytes"], lwf["replica_ms"]
                L.append("")
                L.append("Including the fault: replica lag p99 %s bytes / %s ms, max %s bytes / "
                         "%s ms." % (_n(p["p99"]), _n(q["p99"]), _n(p["max"]), _n(q["max"])))
        else:
            L.append("No load samples.")
        L.append("")
        L.append("### Invariants")
        L.append("")
        L.append("| invariant | result | detail |")
        L.append("|---|---|---|")
        for inv in r.invariants:
            L.append("| %s | %s | %s |" % (inv["name"], "pass" if inv["ok"] else "**FAIL**",
                                          inv["detail"].replace("|", "/")))
        if r.error:
            L.append("| drill completed | **FAIL** | %s |" % r.error.replace("|", "/"))
        L.append("")
        if r.files.get("svg"):
            L.append("### Replication lag over time")
            L.append("")
            L.append("![%s lag](%s)" % (r.name, r.files["svg"]))
            L.append("")
            L.append("Data: [%s](%s). Dashed lines mark the events below." % (
                r.files["csv"], r.files["csv"]))
            L.append("")
        L.append("### Timeline")
        L.append("")
        for e in r.events:
            L.append("- %+.2fs %s" % (e["t_rel"], e["event"]))
        for n in r.notes:
            L.append("- note: %s" % n)
        L.append("")
        if r.files.get("logs"):
            L.append("Logs: " + ", ".join("[%s](%s)" % (os.path.basename(p), p)
                                          for p in r.files["logs"]))
            L.append("")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return ok


# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drills", default=None,
                    help="comma-separated: %s (default: all; --quick: %s)" % (
                        ",".join(ALL_DRILLS), ",".join(QUICK_DRILLS)))
    ap.add_argument("--quick", action="store_true",
                    help="small load and 1 MiB WAL segments; process-crash and host-loss")
    ap.add_argument("--out", default=None, help="report directory (default ./drill-out-TIME)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the fault timings")
    ap.add_argument("--load-seconds", type=int, default=None, help="load before the fault")
    ap.add_argument("--segsize-mb", type=int, default=None, help="initdb --wal-segsize")
    ap.add_argument("--user", default=dk.DEFAULT_USER,
                    help="OS user for PostgreSQL and walship when run as root")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args(argv)
    drills = (args.drills.split(",") if args.drills else
              (QUICK_DRILLS if args.quick else ALL_DRILLS))
    for d in drills:
        if d not in DRILLS:
            ap.error("unknown drill %r (known: %s)" % (d, ", ".join(ALL_DRILLS)))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print("walship-drill seed %d (replay with --seed %d)" % (seed, seed))
    sys.stdout.flush()
    base = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())  # bazel run
    out = os.path.join(base, args.out or "drill-out-%s" % time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    params = Params(args.quick, args.load_seconds, args.segsize_mb)
    started = time.time()

    def on_signal(signum, _frame):
        raise SystemExit("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    results = []
    env = None
    try:
        env = dk.DrillEnv(user=args.user, keep=args.keep)
        ctx = Ctx(env, out, seed, params)
        for d in drills:
            log("==== drill %s", d)
            t = time.time()
            r = DRILLS[d](ctx)
            r.metrics["duration_s"] = round(time.time() - t, 1)
            results.append(r)
            log("==== drill %s: %s in %.0fs", d, "PASS" if r.ok else "FAIL", time.time() - t)
    except DrillError as e:
        r = Result("set-up")
        r.error = str(e)
        results.append(r)
        log("drill set-up failed: %s", e)
    except (SystemExit, KeyboardInterrupt) as e:
        r = Result("interrupted")
        r.error = "interrupted (%s) during drill %s" % (e or "SIGINT", len(results) + 1)
        results.append(r)
        log("%s", r.error)
    finally:
        if env is not None:
            env.close()
    ok = write_report(out, seed, params, results, started, ["walship_drill.py"] + (
        argv if argv is not None else sys.argv[1:]))
    for r in results:
        m = r.metrics
        print("%-14s %s  acked_lost=%s wal_bytes_lost=%s rto_s=%s lag_p99_bytes=%s" % (
            r.name, "PASS" if r.ok else "FAIL", m.get("acked_lost"), m.get("wal_bytes_lost"),
            m.get("rto_s"), m.get("lag", {}).get("replica_bytes", {}).get("p99")))
    print("report: %s" % os.path.join(out, "report.md"))
    print("walship-drill seed %d: %s" % (seed, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
