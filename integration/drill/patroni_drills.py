"""Drills with an HA manager: walship as the synchronous WAL safety net of a
three-node Patroni + etcd cluster.

The world (PatroniWorld): a Patroni cluster (integration/walshiptest/patroni.py) whose
dynamic configuration names walship in synchronous_standby_names (Patroni's
own synchronous mode off), a walship-agent beside every node (a process of
the node's host: killed with it), two walship-replicas on hosts of their own
that follow whichever agent's node is primary (`--agent=` every agent), and
the promotion gate as Patroni's pre_promote command, fetching from the
replicas' serve ports. drill-loader writes numbered commits through libpq's
multi-host connection string and records exactly those acknowledged.

Drills (each a Result, drill_steps.py):
  patroni-host-loss       the leader's host is lost (SIGKILL of its Patroni,
                          postmaster and agent together) at a seeded moment;
                          repeated --failovers times.
  patroni-lagging         the same while the streaming standbys' WAL
                          receivers are paused: the gate supplies what they lack.
  patroni-rejoin          the old leader comes back (pg_rewind through
                          Patroni); its agent ships nothing of its lost tail.
  patroni-switchover      patronictl switchover and back.
  patroni-async           host loss without walship synchronous, for the
                          side-by-side comparison.
"""

import os
import re
import shlex
import shutil
import signal
import time

from integration import statefile
from integration.drill.drill_steps import Result
from integration.drill.patroni_doc import PatroniGuide
from integration.walshiptest import lsn as lsnlib
from integration.walshiptest import daemons, ports, procs, stats, waits
from integration.walshiptest.patroni import SCOPE, PatroniCluster

ACKS_TABLE = "patroni_acks"
GATE_TIMEOUT_S = 20
SEGSIZE = 16 << 20  # Patroni's initdb: PostgreSQL's default


class Loader(object):
    """drill-loader through the multi-host connection string; one per
    stretch of load (it stops at the first error: a lost leader)."""

    def __init__(self, world, tag, start_seq, seconds=3600, create=False):
        env = world.env
        self.acks_path = os.path.join(world.out, "acks-%s.txt" % tag)
        self.start_seq = start_seq
        self.proc = procs.Proc(env, "loader-%s" % tag, [
            env.binaries["drill-loader"], "--conninfo=%s" % world.cluster.writer_conninfo(),
            "--acks=%s" % self.acks_path, "--table=%s" % ACKS_TABLE,
            "--seconds=%d" % seconds, "--start-seq=%d" % start_seq] +
            (["--create"] if create else []),
            os.path.join(world.cluster.logs, "loader-%s.log" % tag), as_user=False)

    def acked(self):
        """[(seq, ack time in seconds)] in seq order."""
        out = []
        try:
            with open(self.acks_path) as f:
                for line in f:
                    part = line.split()
                    if len(part) == 3 and part[0] == "A":
                        out.append((int(part[1]), int(part[2]) / 1e9))
        except OSError:
            pass
        return out

    def stop(self):
        if self.proc.alive():
            self.proc.stop(timeout=10)


class PatroniWorld(object):
    """The cluster, an agent per node, two replicas, the gate."""

    def __init__(self, ctx, area, sync=True, gate=True, replicas=2):
        self.ctx = ctx
        self.env = ctx.env
        self.out = self.env.mkdir(area, "out")
        self.serve_ports = [ports.free_port() for _ in range(replicas)]
        self.agent_ports = None  # after the cluster exists (one per node)
        self.guide = PatroniGuide()
        self.sync = sync
        # The guide's node block: the gate, and walship named in the node's
        # own parameters (with walship synchronous only).
        extra = (lambda node: {"pre_promote": self.gate_command(node),
                               "parameters": self.guide.node_parameters}) if gate else {}
        def tags(node):
            """The guide's tags: the address of the agent beside `node`."""
            return self.guide.tags("127.0.0.1:%d" % self.agent_ports[node.index])

        self.cluster = PatroniCluster(self.env, area, extra_postgresql=extra, extra_tags=tags)
        self.agent_ports = [ports.free_port() for _ in self.cluster.nodes]
        self.agents = {}
        self.replicas = []
        self.replica_dirs = []
        self.loaders = []

    def gate_command(self, node):
        """Patroni's pre_promote for `node`: the guide's, with this world's names."""
        return shlex.join(self.guide.gate_argv(
            self.env.binaries["walship-replica"],
            ["127.0.0.1:%d" % p for p in self.serve_ports], node.datadir, node.conninfo()))

    def agent_list(self):
        return ",".join("127.0.0.1:%d" % p for p in self.agent_ports)

    def start(self, res):
        res.notes.append("three Patroni nodes (ttl %ds, loop_wait %ds), 16 MiB segments, an "
                         "agent beside each, two replicas, configured as docs/postgresql.md "
                         "says; load: drill-loader alone" % (
                             PatroniCluster.TTL, PatroniCluster.LOOP_WAIT))
        self.cluster.start()
        self.apply_dcs()
        for n in self.cluster.nodes:
            self.start_agent(n)
        for i in range(len(self.serve_ports)):
            self.start_replica(i)
        return self

    def apply_dcs(self):
        """The guide's dynamic configuration (asynchronous: without naming
        walship), through patronictl, until the leader runs with it."""
        text = self.guide.dcs
        if not self.sync:
            text = text.replace("synchronous_standby_names: walship",
                                "synchronous_standby_names: ''")
        self.cluster.apply_dynamic_config(text)
        want = "walship" if self.sync else ""
        waits.wait_until(lambda: self.cluster.psql(
            self.cluster.leader(), "SHOW synchronous_standby_names", check=False) == want,
            30, "the leader to run with synchronous_standby_names = '%s'" % want)

    def start_agent(self, node):
        """The guide's agent command beside `node`, one of its host's processes."""
        i = node.index
        state = self.env.mkdir(self.cluster.area, node.name, "agent-state")
        argv = self.guide.agent_argv(self.env.binaries["walship-agent"], node.datadir,
                                     node.conninfo(), state,
                                     "127.0.0.1:%d" % self.agent_ports[i], node.name,
                                     "127.0.0.1:%d" % self.cluster.etcd_port, SCOPE)
        agent = self.env.start("%s-agent" % node.name, argv + ["--log-level=debug"],
                               os.path.join(self.cluster.logs, "%s-agent.log" % node.name))
        node.host_procs = [p for p in node.host_procs if p.alive()] + [agent]
        self.agents[node.name] = agent
        return agent

    def start_replica(self, i):
        dest = os.path.join(self.env.mkdir(self.cluster.area, "r%d" % i), "dest")
        if len(self.replica_dirs) <= i:
            self.replica_dirs.append(dest)
        argv = self.guide.replica_argv(
            self.env.binaries["walship-replica"], "127.0.0.1:%d" % self.cluster.etcd_port, SCOPE, dest, "r%d" % i,
            "127.0.0.1:%d" % self.serve_ports[i])
        self.replicas.append(self.env.start("r%d" % i, argv,
                                            os.path.join(self.cluster.logs, "r%d.log" % i)))

    def load(self, tag, create=False):
        start = 1 + max([s for ld in self.loaders for s, _ in ld.acked()] +
                        [ld.start_seq - 1 for ld in self.loaders] + [0])
        # Past every seq a stopped loader may have attempted (in flight).
        start += 1000 * len(self.loaders)
        ld = Loader(self, tag, start, create=create)
        self.loaders.append(ld)
        return ld

    def acked(self):
        return sorted(s for ld in self.loaders for s, _ in ld.acked())

    def rows(self, node):
        out = self.cluster.psql(node, "SELECT seq FROM %s ORDER BY seq" % ACKS_TABLE,
                                timeout=120)
        return [int(x) for x in out.split()] if out else []

    def close(self, res):
        """Stops everything; the logs go to the report directory, as the
        other drills' do (the temp dir goes with the drill)."""
        for ld in self.loaders:
            ld.stop()
        for r in self.replicas:
            r.stop()
        self.cluster.close()
        dst = os.path.join(self.ctx.out, res.name, "logs")
        shutil.copytree(self.cluster.logs, dst, dirs_exist_ok=True)
        shutil.copytree(self.out, dst, dirs_exist_ok=True)  # the loaders' acknowledgements
        res.files["logs"] = sorted("%s/logs/%s" % (res.name, f) for f in os.listdir(dst))


def _event(res, t, what):
    """An event of the drill's timeline, `t` in seconds since the epoch."""
    if not hasattr(res, "t0"):
        res.t0 = t
    res.events.append({"t_rel": t - res.t0, "event": what})


def wait_acks(world, loader, count, timeout):
    waits.wait_until(lambda: len(loader.acked()) >= count, timeout,
                     "%d acknowledged commits" % count, interval=0.05)


def lose_leader_host(ctx, world, res, before=None, after_kill=None):
    """Kills the leader's host at a seeded moment of the load; returns
    (old leader, new leader, RTO in seconds: kill to the first commit
    acknowledged by the new leader, the loader the fault stopped)."""
    c = world.cluster
    old = c.leader()
    loader = world.loaders[-1]
    time.sleep(ctx.rng.uniform(0.5, 2.0))
    if before is not None:
        before()
    t_kill = time.time()
    old.kill_host()
    _event(res, t_kill, "host of %s lost (Patroni, postmaster, agent: SIGKILL)" % old.name)
    if after_kill is not None:
        after_kill()
    loader.proc.wait(30)
    new = c.wait_leader(90, not_node=old)
    t_leader = time.time()
    ld2 = world.load("%d-after-%s" % (len(world.loaders), old.name))
    wait_acks(world, ld2, 1, 60)
    rto = ld2.acked()[0][1] - t_kill
    _event(res, t_leader, "%s writable" % new.name)
    _event(res, ld2.acked()[0][1], "first commit acknowledged by %s" % new.name)
    return old, new, rto, loader


def check_no_loss(res, world, node, expect_zero, killed):
    """Every acknowledged commit on `node` (with `expect_zero`), and what the
    loader `killed` by the fault lost is its newest commits only (no hole).
    Returns how many of `killed`'s acknowledged commits are lost."""
    acked = world.acked()  # before the rows: a commit acknowledged later is not in them
    rows = set(world.rows(node))
    mine = [seq for seq, _ in killed.acked()]
    lost = [seq for seq in mine if seq not in rows]
    if expect_zero:
        lost_all = [seq for seq in acked if seq not in rows]
        res.check("every acknowledged commit is on the new leader %s" % node.name, not lost_all,
                  "%d acked, %d lost%s" % (len(acked), len(lost_all),
                                           (" e.g. %s" % lost_all[:5]) if lost_all else ""))
    else:
        res.notes.append("%d of %d commits acknowledged before the fault lost" % (
            len(lost), len(mine)))
    present = [seq for seq in mine if seq in rows]
    hole = bool(lost) and bool(present) and max(present) > min(lost)
    res.check("no hole: the commits lost are the newest before the fault", not hole,
              ("seq %d present after lost seq %d" % (max(present), min(lost))) if hole else "")
    return len(lost)


def drill_host_loss(ctx, name="patroni-host-loss", sync=True, lagging=False, failovers=1):
    res = Result(name)
    res.t0 = time.time()
    world = PatroniWorld(ctx, name, sync=sync, gate=sync)
    try:
        world.start(res)
        world.load("first", create=True)
        wait_acks(world, world.loaders[-1], 50, 60)
        rtos, lost_total = [], 0
        for k in range(failovers):
            pause = None
            if lagging:
                pause = _pause_standby_receivers(world)
                res.notes.append("failover %d: WAL receivers paused on %s" % (
                    k + 1, ", ".join(n for n, _ in pause) or "none"))
            lag = {}
            log_sizes = {n.name: os.path.getsize(n.log_path) for n in world.cluster.nodes}
            old, new, rto, killed = lose_leader_host(
                ctx, world, res,
                before=(lambda: lag.update(_standby_lag(world))) if lagging else None,
                after_kill=(lambda: _drop_receivers(pause)) if pause else None)
            rtos.append(rto)
            replayed = gate_replayed(new, log_sizes[new.name]) if sync else None
            if replayed:
                res.notes.append("failover %d: the gate made %s replay %d bytes from the "
                                 "walship replicas" % (k + 1, new.name, replayed))
                res.metrics["gate_replayed_bytes_max"] = max(
                    replayed, res.metrics.get("gate_replayed_bytes_max", 0))
            if lag:
                res.notes.append("failover %d: the standbys lacked %d bytes of the leader's "
                                 "flushed WAL when its host was lost" % (k + 1, lag["bytes"]))
                res.metrics["standby_lag_bytes_max"] = max(
                    lag["bytes"], res.metrics.get("standby_lag_bytes_max", 0))
            lost_total += check_no_loss(res, world, new, expect_zero=sync, killed=killed)
            if sync:
                check_replicas_follow(res, world, new)
                check_no_lost_tail(res, world, new)
            old.start()
            world.start_agent(old)
            world.cluster.wait_streaming(len(world.cluster.nodes) - 1, 120, including=[old])
            wait_acks(world, world.loaders[-1], 20, 60)
            if sync:
                check_rejoined_agent_ships_nothing(res, world, old)
        res.metrics.update({"failovers": failovers, "acked_commits": len(world.acked()),
                            "acked_lost": lost_total,
                            "rto_s": round(stats.percentiles(rtos)["p50"], 2),
                            "rto_max_s": max(rtos) if rtos else None,
                            "patroni_ttl_s": PatroniCluster.TTL,
                            "patroni_loop_wait_s": PatroniCluster.LOOP_WAIT})
    except waits.StepError as e:
        res.error = str(e)
    finally:
        world.close(res)
    return res


def _pause_standby_receivers(world):
    """Holds the standbys back: SIGSTOPs their WAL receivers. Returns
    [(standby name, receiver pid)] for _drop_receivers."""
    c = world.cluster
    leader = c.leader()
    paused = []
    for n in c.nodes:
        if n is leader:
            continue
        pid = c.psql(n, "SELECT pid FROM pg_stat_wal_receiver", check=False)
        if pid:
            os.kill(int(pid), signal.SIGSTOP)
            paused.append((n.name, int(pid)))
    return paused


def _drop_receivers(paused):
    """SIGKILLs the paused receivers once the leader is gone: what the
    leader sent and they had not read dies with them (resumed, they would
    read it from their sockets and lag no more). The postmaster restarts
    its standby after the crash of a child, as it would after any."""
    for _, pid in paused:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


_GATE_REPLAYED = re.compile(r"replayed up to (\S+) \(replicas' end \S+, from (\S+)\)")


def gate_replayed(node, since):
    """Bytes the gate made `node` replay before its promotion (from its
    Patroni log past offset `since`), or None if it replayed none."""
    m = list(_GATE_REPLAYED.finditer(procs.read_text(node.log_path, since)))
    if not m:
        return None
    return lsnlib.parse_lsn(m[-1].group(1)) - lsnlib.parse_lsn(m[-1].group(2))


def _standby_lag(world):
    """After a second of load with the receivers paused: how far the
    leader's flushed WAL is ahead of the best standby's received WAL."""
    time.sleep(1.0)
    c = world.cluster
    leader = c.leader()
    flushed = lsnlib.parse_lsn(c.psql(leader, "SELECT pg_current_wal_flush_lsn()"))
    received = 0
    for n in c.nodes:
        if n is not leader:
            out = c.psql(n, "SELECT pg_last_wal_receive_lsn()", check=False)
            if out:
                received = max(received, lsnlib.parse_lsn(out))
    return {"bytes": max(0, flushed - received)}


def newest_fork(node):
    """(parent timeline, switch LSN, new timeline) of `node`'s newest
    history file, or None on timeline 1."""
    best = None
    for name in os.listdir(node.pg_wal):
        if name.endswith(".history") and len(name) == 16:
            tli = int(name[:8], 16)
            if best is None or tli > best:
                best = tli
    if best is None:
        return None
    with open(os.path.join(node.pg_wal, "%08X.history" % best)) as f:
        lines = [l.split() for l in f if l.strip() and not l.startswith("#")]
    parent, switch = int(lines[-1][0]), lsnlib.parse_lsn(lines[-1][1])
    return parent, switch, best


def check_no_lost_tail(res, world, node):
    """No replica holds the old timeline past the new one's switch point
    (what the old leader wrote after it, which nobody acknowledged). The
    replica may hold the start of one record past it, never acknowledged
    (PostgreSQL flushes whole pages): up to two pages are tolerated."""
    fork = newest_fork(node)
    if fork is None:
        return res.check("the new leader %s is on a new timeline" % node.name, False)
    parent, switch, _ = fork
    bad = []
    for dest in world.replica_dirs:
        for name in os.listdir(dest):
            seg = lsnlib.parse_segment(name.split(".")[0], SEGSIZE)
            if seg is None or seg[0] != parent:
                continue
            start = seg[1] * SEGSIZE
            path = os.path.join(dest, name)
            # A live .partial is pre-sized with zeros past its data
            # (replica/disk_format.md section 8): it reaches its last
            # non-zero byte, as the replica's recovery reads it.
            end = start + (statefile.tail_end(path, 0, SEGSIZE) if name.endswith(".partial")
                           else os.path.getsize(path))
            if start >= switch or end > switch + 2 * lsnlib.XLOG_BLCKSZ:
                bad.append("%s/%s to %s" % (os.path.basename(os.path.dirname(dest)), name,
                                            lsnlib.fmt_lsn(end)))
    return res.check("no replica holds timeline %d bytes past the switch point %s" % (
        parent, lsnlib.fmt_lsn(switch)), not bad, ", ".join(bad[:4]))


def check_rejoined_agent_ships_nothing(res, world, node):
    """The agent beside the rejoined old leader (now a standby) sees it is
    one and ships nothing: no acknowledgement in its log since it started
    again."""
    agent = world.agents[node.name]

    def this_run():
        text = procs.read_text(agent.log_path)
        return text[text.rfind("==== %s start" % agent.name):]
    try:
        waits.wait_until(lambda: "is in recovery" in this_run(), 60,
                         "%s's agent to see its node in recovery" % node.name)
        standby = True
    except waits.WaitTimeout:
        standby = False
    res.check("the agent beside the rejoined %s sees a standby" % node.name, standby)
    acks = [l for l in this_run().splitlines() if "ack: replica" in l]
    return res.check("the agent beside the rejoined %s shipped nothing" % node.name, not acks,
                     acks[0] if acks else "")


def check_replicas_follow(res, world, node, timeout=60):
    """Every replica reaches the new leader's timeline."""
    fork = newest_fork(node)
    want = fork[2] if fork else 1

    def on_tli(dest):
        st = statefile.read_durable(dest)
        seg = lsnlib.parse_segment((st or {}).get("segment", ""), SEGSIZE)
        return seg is not None and seg[0] >= want
    try:
        waits.wait_until(lambda: all(on_tli(d) for d in world.replica_dirs), timeout,
                         "the replicas on timeline %d" % want, interval=0.2)
        ok = True
    except waits.WaitTimeout:
        ok = False
    ok = res.check("every walship replica follows %s on timeline %d" % (node.name, want), ok)
    ok = check_status_names_leader(res, world, node) and ok
    return check_leader_waits_for_walship(res, world, node) and ok


def check_status_names_leader(res, world, node, timeout=30):
    """The guide's walship-status command (the agents from the member keys)
    names the agent beside `node`, and it alone, as serving, and does not
    disagree with the leader key."""
    flags = world.guide.status_argv("127.0.0.1:%d" % world.cluster.etcd_port, SCOPE)
    want = ["127.0.0.1:%d" % world.agent_ports[node.index]]
    seen = {}

    def named():
        _, j = daemons.agents_status([], as_json=True, tls_args=(), extra=flags)
        j = j or {}
        seen.update(serving=j.get("serving"), leader=j.get("leader"))
        return j.get("serving") == want and not (j.get("leader") or {}).get("disagreement")
    try:
        waits.wait_until(named, timeout, "walship-status to name %s's agent" % node.name,
                         interval=0.5)
        ok = True
    except waits.WaitTimeout:
        ok = False
    return res.check("walship-status names the agent beside %s, alone, as serving" % node.name,
                     ok, "" if ok else "serving: %(serving)s, leader key: %(leader)s" % seen)


def check_leader_waits_for_walship(res, world, node, timeout=30):
    """The new leader runs with walship in synchronous_standby_names and
    lists the agent's flush feed as its synchronous standby: its commits
    wait for a walship replica (a leader whose configuration was written
    but never loaded acknowledges them without)."""
    def sync():
        return world.cluster.psql(node, "SELECT current_setting('synchronous_standby_names') "
                                  "|| '|' || coalesce((SELECT sync_state FROM pg_stat_replication "
                                  "WHERE application_name = 'walship'), 'none')", check=False)
    try:
        waits.wait_until(lambda: sync() == "walship|sync", timeout,
                         "%s to wait for walship" % node.name, interval=0.2)
        ok, detail = True, ""
    except waits.WaitTimeout:
        ok, detail = False, "synchronous_standby_names|sync_state: %s" % sync()
    return res.check("the new leader %s waits for walship (its feed is the synchronous "
                     "standby)" % node.name, ok, detail)


def drill_switchover(ctx, name="patroni-switchover"):
    res = Result(name)
    res.t0 = time.time()
    world = PatroniWorld(ctx, name)
    c = world.cluster
    try:
        world.start(res)
        world.load("first", create=True)
        wait_acks(world, world.loaders[-1], 50, 60)
        first = c.leader()
        lost = 0
        for k in range(2):
            old = c.leader()
            cand = [n for n in c.nodes if n is not old][0] if k == 0 else first
            c.wait_streaming(len(c.nodes) - 1, 120)  # the candidate is a healthy replica
            t = time.time()
            c.patronictl("switchover", "--leader", old.name, "--candidate", cand.name,
                         "--force", timeout=120)
            killed = world.loaders[-1]
            killed.proc.wait(30)
            new = c.wait_leader(90, not_node=old)
            res.check("switchover %d: %s leads" % (k + 1, cand.name), new is cand, new.name)
            ld = world.load("after-switchover-%d" % (k + 1))
            wait_acks(world, ld, 20, 60)
            _event(res, t, "switchover %s -> %s" % (old.name, new.name))
            lost += check_no_loss(res, world, new, expect_zero=True, killed=killed)
            check_replicas_follow(res, world, new)
        res.metrics.update({"acked_commits": len(world.acked()), "acked_lost": lost})
    except waits.StepError as e:
        res.error = str(e)
    finally:
        world.close(res)
    return res


DRILLS = {
    "patroni-host-loss": lambda ctx: drill_host_loss(
        ctx, failovers=ctx.p.patroni_failovers),
    "patroni-lagging": lambda ctx: drill_host_loss(ctx, "patroni-lagging", lagging=True),
    "patroni-async": lambda ctx: drill_host_loss(ctx, "patroni-async", sync=False,
                                                 failovers=ctx.p.patroni_async_failovers),
    "patroni-switchover": drill_switchover,
}
