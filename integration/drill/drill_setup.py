"""One drill's set-up: parameters, the walship daemons as the drill user, and
the primary, agent, replica and standby of a drill (Setup)."""

import os
import random
import shutil
import time

from integration import fault_proxy
from integration import statefile
from integration.walshiptest import daemons
from integration.walshiptest.lsn import fmt_lsn, parse_segment, position_lsn
from integration.walshiptest.pg import PgCluster, SUPERUSER
from integration.walshiptest.ports import free_port
from integration.walshiptest.procs import log
from integration.walshiptest.waits import StepError, wait_until


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
        # Patroni drills: seeded failovers in the host-loss drill.
        self.patroni_failovers = 2 if quick else 20
        self.patroni_async_failovers = 1 if quick else 5


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

class Agent(daemons.Agent):
    """walship-agent --format=postgres beside a cluster, as the drill user
    (its port file and state in the set-up's directory, which that user owns)."""

    def __init__(self, ctx, setup, cluster, name):
        self.cluster = cluster
        self.state_dir = os.path.join(setup.dir, "%s-state" % name)
        daemons.Agent.__init__(
            self, cluster.pg_wal, setup.logs, label=name,
            extra_args=["--format=postgres", "--pg-data=%s" % cluster.datadir,
                        "--pg-conninfo=%s" % cluster.conninfo(), "--pg-slot=walship",
                        "--state-dir=%s" % self.state_dir],
            program=ctx.env.binaries["walship-agent"],
            port_file=os.path.join(setup.dir, "%s.ports" % name), launcher=ctx.env)

    def start(self, timeout=30):
        return daemons.Agent.start(self, timeout)


class Replica(daemons.Replica):
    """walship-replica as the drill user, following an agent (maybe through
    fault proxies): follow() names the addresses, start() starts again."""

    def __init__(self, ctx, setup, name, dest):
        self.ctx = ctx
        daemons.Replica.__init__(self, None, dest, name, setup.logs, label=name,
                                 program=ctx.env.binaries["walship-replica"], launcher=ctx.env)

    def follow(self, agent_addr, data_addr=None):
        """Starts following the agent at control `agent_addr` (data at
        `data_addr`, else where the agent says)."""
        self.agent, self.data_address = agent_addr, data_addr
        return self.start()

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
        return position_lsn({"segment": st.get("segment"), "offset": st.get("offset", 0)},
                            self.ctx.p.segsize)

    def timeline(self):
        st = self.state() or {}
        seg = parse_segment(st.get("segment"), self.ctx.p.segsize)
        return seg[0] if seg else 1


def agent_status(ctx, control, timeout_ms=1500):
    """walship-status --json, parsed: {"source_end": LSN, "replicas": {name: {...}}} or None."""
    if not control:
        return None
    j = daemons.try_agent_status(control, timeout=timeout_ms / 1000.0 / 0.8)
    if j is None:
        return None
    seg = ctx.p.segsize
    out = {"source_end": position_lsn(j.get("source_end"), seg), "replicas": {},
           "raw_source_end": j.get("source_end")}
    for rep in j.get("replicas", []):
        out["replicas"][rep.get("name")] = {
            "flushed": position_lsn(rep.get("flushed"), seg),
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
        self.primary = PgCluster(ctx.env, names[0], os.path.join(self.dir, names[0]),
                                 self.sock, free_port(), self.logs)
        self.standby = PgCluster(ctx.env, names[1], os.path.join(self.dir, names[1]),
                                 self.sock, free_port(), self.logs)
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
                          "-h", self.sock, "-p", str(self.primary.port), "-U", SUPERUSER,
                          "postgres"], as_user=False, timeout=300)
        self.start_walship(self.primary, "agent", "replica")
        self.primary.basebackup(self.standby)
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
        rep.follow(control, data)
        self.agents.append(agent)
        self.replicas.append(rep)
        self.agent, self.replica = agent, rep

        def connected():
            st = agent_status(self.ctx, agent.control)
            r = st and st["replicas"].get(replica_name)
            if not rep.running():
                raise StepError("%s exited %s; see %s" % (replica_name, rep.returncode(),
                                                          rep.log_path))
            return r and r["connected"]
        wait_until(connected, 30, "%s to connect to %s" % (replica_name, agent_name),
                   interval=0.1)
        return agent, rep

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
        wait_until(caught_up, timeout, "%s to replay up to %s" % (
            standby.name, fmt_lsn(target)), interval=0.2)

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
            d.stop(timeout=5)
        for c in (self.primary, self.standby):
            c.teardown()
            if c in self.ctx.env.clusters:
                self.ctx.env.clusters.remove(c)
        if not self.ctx.env.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _hostport(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)
