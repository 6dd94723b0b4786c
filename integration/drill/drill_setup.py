"""One drill's set-up: parameters, the walship daemons as the drill user, and
the primary, agent, replica and standby of a drill (Setup)."""

import json
import os
import random
import shutil
import subprocess
import time

from integration import fault_proxy
from integration import statefile
from integration.drill import drillkit as dk
from integration.drill.drillkit import log, DrillError


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
