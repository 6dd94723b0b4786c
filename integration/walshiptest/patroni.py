"""A three-node Patroni + etcd cluster of PostgreSQL 15 on one machine.

Debian's `patroni` (3.0) and `etcd-server` (3.4), every node with its own
ports and directories, all run as the drill's ordinary user. A "host" is a
group of processes killed together: the node's Patroni, its postmaster
(Patroni starts it in a session of its own, so it is found through
postmaster.pid) and whatever the test adds to the host (its walship agent).

Patroni runs with a short ttl so a lost leader is replaced in about ten
seconds (see PatroniCluster.TTL). Its synchronous modes stay off: walship is
the synchronous standby through `synchronous_standby_names` set in the
cluster's dynamic configuration, which Patroni leaves alone while its own
synchronous mode is off (docs/postgresql.md, "Patroni").

Every wait is bounded and raises DrillError when it passes.
"""

import json
import os
import signal
import urllib.error
import urllib.request

from integration.walshiptest import ports
from integration.walshiptest import waits
from integration.walshiptest import procs
from integration.walshiptest.procs import Proc, log
from integration.walshiptest.waits import StepError as DrillError

PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"
ETCD = "/usr/bin/etcd"
SCOPE = "wsdrill"
SUPERUSER = "drill"


def _yaml(value, indent=0):
    """A small YAML writer for dicts, lists, strings and numbers (no library
    needed; Patroni reads it with its own YAML parser)."""
    pad = " " * indent
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append("%s%s:\n%s" % (pad, k, _yaml(v, indent + 2)))
            else:
                out.append("%s%s: %s" % (pad, k, _scalar(v)))
        return "\n".join(out)
    out = []
    for v in value:
        if isinstance(v, dict):
            body = _yaml(v, indent + 2).lstrip()
            out.append("%s- %s" % (pad, body))
        else:
            out.append("%s- %s" % (pad, _scalar(v)))
    return "\n".join(out)


def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (dict, list)):
        return "{}" if isinstance(v, dict) else "[]"
    return json.dumps(str(v))  # a JSON string is a YAML string


class PatroniNode(object):
    """One node: its ports, directories and the processes of its "host"."""

    def __init__(self, cluster, index):
        env = cluster.env
        self.cluster = cluster
        self.name = "node%d" % index
        self.index = index
        self.dir = env.mkdir(cluster.area, self.name)
        self.datadir = os.path.join(self.dir, "data")
        self.sockdir = env.mkdir(cluster.area, self.name, "sock")
        self.pg_port = ports.free_port()  # postgres cannot take port 0
        self.rest_port = ports.free_port()  # nor can Patroni's REST API
        self.config_path = os.path.join(self.dir, "patroni.yml")
        self.log_path = os.path.join(cluster.logs, "%s-patroni.log" % self.name)
        self.patroni = None
        self.host_procs = []  # the test's processes on this host (agents)

    @property
    def pg_wal(self):
        return os.path.join(self.datadir, "pg_wal")

    def conninfo(self, dbname="postgres"):
        return "host=127.0.0.1 port=%d user=%s dbname=%s connect_timeout=5" % (
            self.pg_port, SUPERUSER, dbname)

    def rest(self, path, timeout=2.0):
        """GET of Patroni's REST API: (status, parsed JSON or None); (None, None) when down."""
        url = "http://127.0.0.1:%d%s" % (self.rest_port, path)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return r.status, json.loads(r.read().decode() or "null")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read().decode() or "null")
            except ValueError:
                return e.code, None
        except (OSError, ValueError):
            return None, None

    def write_config(self, etcd_port, dcs_parameters, extra_postgresql, extra_tags=None):
        env = self.cluster.env
        pgpass = os.path.join(self.dir, "pgpass")
        extra = dict(extra_postgresql(self) if callable(extra_postgresql) else extra_postgresql)
        tags = dict(extra_tags(self) if callable(extra_tags) else (extra_tags or {}))
        # The node's own parameters: its socket directory, and any the
        # caller adds.
        extra["parameters"] = dict({"unix_socket_directories": self.sockdir},
                                   **extra.get("parameters", {}))
        cfg = {
            "scope": SCOPE,
            "namespace": "/service/",
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": "127.0.0.1:%d" % self.rest_port,
                        "connect_address": "127.0.0.1:%d" % self.rest_port},
            "etcd3": {"hosts": "127.0.0.1:%d" % etcd_port, "protocol": "http"},
            "bootstrap": {
                "dcs": {"ttl": PatroniCluster.TTL, "loop_wait": PatroniCluster.LOOP_WAIT,
                        "retry_timeout": PatroniCluster.RETRY_TIMEOUT,
                        "maximum_lag_on_failover": 1 << 30,
                        "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                       "parameters": dcs_parameters}},
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "data-checksums"],
            },
            "postgresql": dict({
                "listen": "127.0.0.1:%d" % self.pg_port,
                "connect_address": "127.0.0.1:%d" % self.pg_port,
                "data_dir": self.datadir,
                "bin_dir": env.pg_bin,
                "pgpass": pgpass,
                "authentication": {
                    "superuser": {"username": SUPERUSER, "password": "drill"},
                    "replication": {"username": "replicator", "password": "drill"},
                    "rewind": {"username": SUPERUSER, "password": "drill"},
                },
                "pg_hba": ["local all all trust",
                           "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            }, **extra),
            "watchdog": {"mode": "off"},
            "tags": dict({"nofailover": False, "noloadbalance": False, "clonefrom": False},
                         **tags),
        }
        with open(self.config_path, "w") as f:
            f.write(_yaml(cfg) + "\n")
        env.chown(self.config_path)

    def start(self):
        if self.patroni is not None and self.patroni.alive():
            raise DrillError("%s: Patroni already runs" % self.name)
        self.patroni = Proc(self.cluster.env, "%s-patroni" % self.name,
                            [PATRONI, self.config_path], self.log_path)
        return self

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def kill_host(self):
        """SIGKILL of Patroni, the postmaster and its backends, and the host's
        other processes at once, as when the machine loses power."""
        victims = []
        pm = self.postmaster_pid()
        if self.patroni is not None:
            self.patroni.signal_group(signal.SIGKILL)
            victims.append(self.patroni)
        if pm is not None:
            for sig_target in (lambda: os.killpg(pm, signal.SIGKILL),
                               lambda: os.kill(pm, signal.SIGKILL)):
                try:
                    sig_target()
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.host_procs:
            p.signal_group(signal.SIGKILL)
            victims.append(p)
        for p in victims:
            p.wait(10)
        if pm is not None:
            # Its backends too: one still attached to the shared memory
            # would stop the node's PostgreSQL from starting again.
            waits.wait_until(lambda: not procs.pid_alive(pm) and not procs.group_members(pm), 15,
                             "%s's postmaster %d and its backends to die" % (self.name, pm))

    def stop(self, timeout=60):
        """Patroni's own clean stop (it stops PostgreSQL first)."""
        if self.patroni is not None and self.patroni.alive():
            self.patroni.stop(signal.SIGTERM, timeout=timeout)
        pm = self.postmaster_pid()
        if pm is not None and procs.pid_alive(pm):
            try:
                os.kill(pm, signal.SIGQUIT)
            except ProcessLookupError:
                pass
            waits.wait_until(lambda: not procs.pid_alive(pm), 15, "%s's postmaster to exit" % self.name)
        for p in self.host_procs:
            p.stop()


class PatroniCluster(object):
    """etcd and `n` Patroni nodes in `area` of a PgEnv. `extra_postgresql`:
    more keys of each node's `postgresql:` section, a dict or a function of
    the node giving one (e.g. a pre_promote command naming its data);
    `extra_tags`: more of each node's `tags:`, the same way."""

    TTL = 10
    LOOP_WAIT = 2
    RETRY_TIMEOUT = 5

    def __init__(self, env, area, n=3, extra_postgresql=None, extra_tags=None):
        self.env = env
        self.area = area
        env.mkdir(area)
        self.logs = env.mkdir(area, "logs")
        self.etcd_port = ports.free_port()
        self.etcd_peer_port = ports.free_port()
        self.etcd = None
        self.dcs_parameters = {
            "wal_level": "replica", "hot_standby": "on", "max_wal_senders": 10,
            "max_replication_slots": 10, "wal_log_hints": "on", "wal_keep_size": "128MB",
            "checkpoint_timeout": "30min"}
        self.extra_postgresql = extra_postgresql or {}
        self.extra_tags = extra_tags
        self.nodes = [PatroniNode(self, i) for i in range(n)]

    # -- lifecycle ----------------------------------------------------------
    def start(self, timeout=120):
        """etcd, then the first node (it bootstraps), then the others as
        replicas; returns once every node streams from the leader."""
        self._start_etcd()
        for n in self.nodes:
            n.write_config(self.etcd_port, self.dcs_parameters, self.extra_postgresql,
                           self.extra_tags)
        self.nodes[0].start()
        self.wait_leader(timeout)
        for n in self.nodes[1:]:
            n.start()
        self.wait_streaming(len(self.nodes) - 1, timeout)
        return self

    def _start_etcd(self):
        d = self.env.mkdir(self.area, "etcd")
        peer = "http://127.0.0.1:%d" % self.etcd_peer_port
        client = "http://127.0.0.1:%d" % self.etcd_port
        self.etcd = Proc(self.env, "etcd", [
            ETCD, "--name", "e0", "--data-dir", os.path.join(d, "data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "e0=" + peer, "--initial-cluster-state", "new",
            "--logger", "zap", "--log-outputs", "stderr"],
            os.path.join(self.logs, "etcd.log"))

        def healthy():
            if not self.etcd.alive():
                raise DrillError("etcd exited %s; see %s" % (self.etcd.returncode(),
                                                             self.etcd.log_path))
            try:
                with urllib.request.urlopen(client + "/health", timeout=1) as r:
                    return json.loads(r.read().decode()).get("health") == "true"
            except (OSError, ValueError):
                return False
        waits.wait_until(healthy, 30, "etcd to be healthy", interval=0.1)

    def close(self):
        """Stops every node and etcd (the DrillEnv kills stragglers)."""
        for n in self.nodes:
            try:
                n.stop(timeout=30)
            except DrillError as e:
                log("%s: %s", n.name, e)
        if self.etcd is not None:
            self.etcd.stop()

    # -- roles ----------------------------------------------------------------
    def members(self):
        """Patroni's /cluster view from any node that answers: [member dict]."""
        for n in self.nodes:
            status, body = n.rest("/cluster")
            if status == 200 and body:
                return body.get("members", [])
        return []

    def leader(self):
        """The node holding the leader key and running as a primary, or None."""
        for m in self.members():
            if m.get("role") == "leader" and m.get("state") == "running":
                return self.node(m["name"])
        return None

    def node(self, name):
        for n in self.nodes:
            if n.name == name:
                return n
        raise DrillError("no node %s" % name)

    def wait_leader(self, timeout, not_node=None):
        """The leader once it accepts writes (REST /primary answers 200 while
        pre_promote still runs, so this asks PostgreSQL itself)."""
        def writable():
            ld = self.leader()
            if ld is None or ld is not_node:
                return None
            r = self.env.run([self.env.pg("psql"), "-X", "-A", "-t", "-d", ld.conninfo(),
                              "-c", "SELECT pg_is_in_recovery()"], as_user=False,
                             timeout=10, check=False)
            return ld if r.returncode == 0 and r.stdout.strip() == "f" else None
        return waits.wait_until(writable, timeout, "a writable Patroni leader", interval=0.2)

    def wait_streaming(self, count, timeout, including=()):
        """Until the leader's pg_stat_replication lists `count` distinct
        nodes streaming, the nodes `including` among them."""
        want = {n.name for n in including}

        def streaming():
            ld = self.leader()
            if ld is None:
                return False
            out = self.psql(ld, "SELECT DISTINCT application_name FROM pg_stat_replication "
                                "WHERE state = 'streaming' AND application_name LIKE 'node%'",
                            check=False)
            names = set((out or "").split())
            return len(names) >= count and want <= names
        waits.wait_until(streaming, timeout, "%d nodes streaming from the leader%s" % (
            count, (" (%s among them)" % ", ".join(sorted(want))) if want else ""),
            interval=0.3)

    # -- SQL and patronictl ---------------------------------------------------
    def psql(self, node, sql, timeout=30, check=True):
        r = self.env.run([self.env.pg("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                          "-d", node.conninfo(), "-c", sql], as_user=False, timeout=timeout,
                         check=check)
        return r.stdout.strip() if r.returncode == 0 else None

    def writer_conninfo(self, dbname="postgres"):
        """libpq's multi-host form: whichever node is writable."""
        return ("host=%s port=%s user=%s dbname=%s connect_timeout=3 "
                "target_session_attrs=read-write" % (
                    ",".join("127.0.0.1" for _ in self.nodes),
                    ",".join(str(n.pg_port) for n in self.nodes), SUPERUSER, dbname))

    def apply_dynamic_config(self, yaml_text, timeout=60):
        """patronictl edit-config --apply of `yaml_text` (merged into the
        cluster's dynamic configuration)."""
        path = os.path.join(self.env.mkdir(self.area), "dynamic-config.yml")
        with open(path, "w") as f:
            f.write(yaml_text)
        self.env.chown(path)
        return self.patronictl("edit-config", "--apply", path, "--force", timeout=timeout)

    def patronictl(self, *args, timeout=60, check=True):
        return self.env.run([PATRONICTL, "-c", self.nodes[0].config_path] + list(args),
                            timeout=timeout, check=check)

    def edit_config(self, settings, timeout=60):
        """patronictl edit-config --set KEY=VALUE for each setting (dynamic config)."""
        argv = ["edit-config", "--force"]
        for k, v in settings.items():
            argv += ["--set", "%s=%s" % (k, v)]
        return self.patronictl(*argv, timeout=timeout)
