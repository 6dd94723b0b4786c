"""Each network fault of netfault.py has the effect it claims on real traffic.

A real walship-agent in the root namespace serves a real walship-replica
running in a NetHost (its own network namespace behind a veth pair). Each
test applies one fault to one of the agent's ports while a generator
writes, checks what the daemons do, clears the fault and checks that the
replica converges to a byte-identical copy. Needs root (hence "local").

Short timeouts make the waits short: agent --io-timeout-ms and replica
--io-timeout-ms IO_TIMEOUT_MS, agent --stall-timeout-ms STALL_TIMEOUT_MS.
"""

import os
import re
import subprocess
import time
import unittest

from integration import harness as h
from integration.chaos import netfault
from integration.walshiptest import daemons
from integration.walshiptest import procs

SEGMENT = 1 << 20
IO_TIMEOUT_MS = 5000
STALL_TIMEOUT_MS = 3000


class NetReplica(daemons.Replica):
    """A Replica whose process runs inside `host` (NetHost.wrap)."""

    def __init__(self, host, *args, **kw):
        daemons.Replica.__init__(self, *args, **kw)
        self.host = host

    def argv(self):
        return self.host.wrap(daemons.Replica.argv(self))


def stream_bytes(pos):
    """Absolute byte offset of a Pos in the generator's stream (segments of
    SEGMENT bytes named seg-%08d from 1)."""
    if pos is None or not pos.segment:
        return 0
    return (int(pos.segment[len("seg-"):]) - 1) * SEGMENT + pos.offset


class NetFaultTest(h.ClusterTestCase):

    @classmethod
    def setUpClass(cls):
        ok, reason = netfault.available()
        if not ok:
            raise unittest.SkipTest("network faults unavailable here: %s" % reason)
        netfault.cleanup_stale()

    def setUp(self):
        # Registered before the cluster's cleanup, so it runs after it: the
        # daemons stop first, then the namespace goes.
        self.host = netfault.NetHost("r1", 1)
        self.addCleanup(self._close_host)
        h.ClusterTestCase.setUp(self)
        self.host.create()

    def _close_host(self):
        self.host.close()
        self.assertNotIn(self.host.ns, netfault.namespaces())

    def start(self, rate=1e6, agent_args=(), replica_args=()):
        """Agent on the veth's root side, replica in the namespace, generator
        writing; returns once the replica acknowledged a second segment."""
        c = self.cluster
        self.wal = c.dir("wal")
        self.dest = c.dir("dest")
        self.gen = c.generator(self.wal, rate=rate, segment_size=SEGMENT)
        addr = self.host.agent_address + ":0"
        self.agent = c.agent(self.wal, listen=addr, data_listen=addr, extra_args=[
            "--io-timeout-ms=%d" % IO_TIMEOUT_MS,
            "--stall-timeout-ms=%d" % STALL_TIMEOUT_MS] + list(agent_args)).start()
        self.replica = NetReplica(self.host, self.agent, self.dest, "r1", c.logdir,
                                  extra_args=["--io-timeout-ms=%d" % IO_TIMEOUT_MS]
                                  + list(replica_args))
        c.daemons.append(self.replica)
        self.replica.start()
        self.gen.start()
        h.wait_until(lambda: self.flushed() >= 2 * SEGMENT, 30,
                     "the replica to acknowledge a second segment")

    def entry(self):
        return h.replica_entry(h.try_status(self.agent), "r1") or {}

    def flushed(self):
        """Bytes the agent saw the replica acknowledge as durable."""
        return stream_bytes(h.pos_of(self.entry().get("flushed")))

    def durable(self):
        """Bytes the replica holds durably by its own state files."""
        st = h.read_state(self.dest)
        return stream_bytes(st["pos"]) if st else 0

    def sessions(self, since=0):
        return self.replica.grep(r"session \d+ with ", since)

    def wait_unchanged(self, fn, still_for, timeout, what):
        """Waits until fn() returns the same value for `still_for` seconds;
        returns (value, seconds waited)."""
        t0 = time.monotonic()
        last = {"v": fn(), "t": time.monotonic()}

        def settled():
            v = fn()
            if v != last["v"]:
                last["v"], last["t"] = v, time.monotonic()
            return time.monotonic() - last["t"] >= still_for

        h.wait_until(settled, timeout, what, interval=0.2)
        return last["v"], time.monotonic() - t0

    def converge(self):
        """Clears every fault, stops the generator, waits for a byte-identical
        copy, and checks the replica never exited."""
        self.host.clear()
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["r1"], timeout=90)
        h.compare_dirs(self.wal, self.dest)
        self.assertTrue(self.replica.running(), "the replica exited")
        self.assertTrue(self.agent.running(), "the agent exited")

    # -- the faults

    def test_blackhole_from_agent_on_data_port(self):
        self.start()
        t0 = time.monotonic()
        self.host.blackhole(self.agent.data_port, "from-agent")
        at, took = self.wait_unchanged(self.flushed, 2.0, 30,
                                       "the acknowledged position to stop")
        procs.log("OBSERVED blackhole from-agent/data: acknowledged position stopped at %d "
                  "(settled after %.1fs)", at, took)

        def not_streaming():
            e = self.entry()
            return e if e.get("state") in ("stalled", "disconnected", "connecting") else None

        e = h.wait_until(not_streaming, 60, lambda: "the agent to report r1 stalled or "
                         "disconnected (last: %s)" % self.entry())
        procs.log("OBSERVED blackhole from-agent/data: agent reports r1 %s (%s) after %.1fs",
                  e.get("state"), e.get("state_reason"), time.monotonic() - t0)
        # Held past both io timeouts: the session ends (observed, reported).
        since = self.replica.log_size()
        agent_since = self.agent.log_size()
        line = self.agent.wait_log(r"(warn|error)", 60, agent_since)
        procs.log("OBSERVED blackhole from-agent/data: after %.1fs the agent logged: %s",
                  time.monotonic() - t0, line)
        line = self.replica.wait_log(r"(warn|error)", 60, since)
        procs.log("OBSERVED blackhole from-agent/data: after %.1fs the replica logged: %s",
                  time.monotonic() - t0, line)
        procs.log("OBSERVED blackhole from-agent/data: agent status now %s",
                  {k: self.entry().get(k) for k in ("state", "state_reason", "connected",
                                                 "last_error")})
        self.converge()
        procs.log("OBSERVED after clear: %d reconnections", len(self.sessions()) - 1)

    def test_blackhole_to_agent_on_control_port(self):
        self.start()
        t0 = time.monotonic()
        since = self.replica.log_size()
        self.host.blackhole(self.agent.control_port, "to-agent")
        at, took = self.wait_unchanged(self.flushed, 2.0, 30,
                                       "the acknowledged position to stop")
        durable_at = self.durable()
        procs.log("OBSERVED blackhole to-agent/control: agent-side acknowledged position "
                  "stopped at %d (settled after %.1fs); replica durable at %d", at, took,
                  durable_at)
        # Data still flows on the data socket: the replica's own durable
        # position moves past what the agent heard (up to the next segment
        # end: a segment is published only once the agent's checkpoint for
        # it arrives on the control stream, which soon stops too, as the
        # agent's side of that connection hears no TCP acknowledgement).
        h.wait_until(lambda: self.durable() > at, 30,
                     lambda: "the replica to store data the agent never heard acknowledged "
                     "(durable %d, acknowledged %d)" % (self.durable(), at))
        procs.log("OBSERVED blackhole to-agent/control: replica durable %d bytes past the "
                  "acknowledged %d after %.1fs", self.durable() - at, at, time.monotonic() - t0)
        line = self.replica.wait_log(r"(warn|error).*(silent|session|control)", 60, since)
        procs.log("OBSERVED blackhole to-agent/control: after %.1fs the replica logged: %s; "
                  "replica durable at %d, acknowledged %d", time.monotonic() - t0, line,
                  self.durable(), self.flushed())
        self.converge()

    def check_cut(self, port, what):
        since = self.replica.log_size()
        before = len(self.sessions())
        destroyed = self.host.cut(port)
        self.assertTrue(destroyed, "no connection to %s port to cut" % what)
        t0 = time.monotonic()
        line = h.wait_until(lambda: self.sessions(since), 60,
                            "the replica to open a new session after the %s cut" % what)[0]
        procs.log("OBSERVED cut %s: new session after %.1fs: %s", what,
                  time.monotonic() - t0, line)
        self.assertGreater(len(self.sessions()), before)
        start = self.flushed()
        h.wait_until(lambda: self.flushed() > start + SEGMENT // 2, 30,
                     "the acknowledged position to move again after the %s cut" % what)

    def test_cut_data_then_control(self):
        self.start()
        self.check_cut(self.agent.data_port, "data")
        self.check_cut(self.agent.control_port, "control")
        self.converge()

    def agent_state(self, pair):
        """TCP state of the agent's end of (replica local, agent peer), or
        None once it is gone."""
        local, peer = pair
        out = netfault.run(["ss", "-Htn", "src", peer, "dst", local])
        return out.split()[0] if out.strip() else None

    def test_half_open_data_port(self):
        """Only the data socket: the replica ends the session over the
        control stream at once, so the agent closes its end (its FIN is
        dropped until the drop lifts), never leaving it half-open."""
        self.start()
        since = self.replica.log_size()
        fault = self.host.half_open(self.agent.data_port, hold=3.0)
        t0 = time.monotonic()
        self.assertEqual(len(fault.destroyed), 1, fault.destroyed)
        stale = fault.destroyed[0]
        h.wait_until(lambda: self.agent_state(stale) != "ESTAB", 30,
                     "the agent to close its end %s" % (stale,), interval=0.05)
        procs.log("OBSERVED half_open data: the agent's end left ESTABLISHED after %.2fs "
                  "(now %s)", time.monotonic() - t0, self.agent_state(stale))
        line = h.wait_until(lambda: self.sessions(since), 60,
                            "the replica to open a new session")[0]
        procs.log("OBSERVED half_open data: replica new session after %.1fs: %s",
                  time.monotonic() - t0, line)
        fault.wait_lifted(10)
        h.wait_until(lambda: self.agent_state(stale) is None, 30,
                     "the agent's end %s to go" % (stale,), interval=0.1)
        self.converge()

    def assert_whole_replica(self, ends):
        """A whole replica's connections: one to the data port, two to the
        control port (its session's events, and its acknowledgements)."""
        ports = sorted(int(agent_end.rsplit(":", 1)[1]) for _, agent_end in ends)
        self.assertEqual(ports, sorted([self.agent.data_port] + [self.agent.control_port] * 2),
                         ends)

    def test_half_open_whole_replica(self):
        """Both connections: the agent keeps a stale session (both ends
        ESTABLISHED) for the whole hold, and drops it once it hears an RST."""
        hold = 6.0
        self.start()
        since = self.replica.log_size()
        agent_since = self.agent.log_size()
        fault = self.host.half_open([self.agent.control_port, self.agent.data_port],
                                    hold=hold)
        t0 = time.monotonic()
        stale = fault.destroyed
        self.assert_whole_replica(stale)
        self.assertEqual([self.agent_state(p) for p in stale], ["ESTAB"] * 3)
        e = self.entry()
        procs.log("OBSERVED half_open both: right after, the agent reports r1 %s connected=%s",
                  e.get("state"), e.get("connected"))
        gone = {}

        def all_gone():
            for p in stale:
                if p not in gone and self.agent_state(p) is None:
                    gone[p] = time.monotonic() - t0
            return len(gone) == len(stale)

        h.wait_until(all_gone, 90, lambda: "the agent to drop its stale ends (gone: %s)"
                     % gone, interval=0.1)
        procs.log("OBSERVED half_open both (hold %.1fs, agent io timeout %dms): the agent's "
                  "ends went after %s", hold, IO_TIMEOUT_MS,
                  ", ".join("%.1fs (%s)" % (gone[p], p[1]) for p in stale))
        for l in self.agent.grep(r"r1", agent_since)[:8]:
            procs.log("OBSERVED agent log: %s", l)
        line = h.wait_until(lambda: self.sessions(since), 60,
                            "the replica to open a new session")[0]
        procs.log("OBSERVED half_open both: replica new session after %.1fs: %s",
                  time.monotonic() - t0, line)
        self.converge()

    def test_half_open_whole_replica_reconnecting_at_once(self):
        """The stale ends go silent while the replica reconnects at once (only
        the old connections are dropped) and the source is idle: the new
        session must be served, and the agent must drop the stale one within
        a bounded time."""
        self.start()
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["r1"], timeout=60)
        since = self.replica.log_size()
        agent_since = self.agent.log_size()
        fault = self.host.half_open([self.agent.control_port, self.agent.data_port],
                                    hold=120.0, only_current=True)
        t0 = time.monotonic()
        stale = fault.destroyed
        self.assert_whole_replica(stale)
        line = h.wait_until(lambda: self.sessions(since), 60,
                            "the replica to open a new session")[0]
        procs.log("OBSERVED half_open current: replica new session after %.1fs: %s",
                  time.monotonic() - t0, line)
        new_id = re.search(r"session (\d+) with", line).group(1)
        h.wait_until(lambda: (self.entry().get("session_id") == new_id
                              and self.entry().get("connected")), 30,
                     lambda: "the agent to serve the new session %s (sees %s)"
                     % (new_id, self.entry()))
        gone = {}

        def stale_gone():
            for p in stale:
                if p not in gone and self.agent_state(p) in (None, "FIN-WAIT-1",
                                                             "FIN-WAIT-2"):
                    gone[p] = time.monotonic() - t0
            return len(gone) == len(stale)

        h.wait_until(stale_gone, 90, lambda: "the agent to close its stale ends %s (states "
                     "%s)" % (stale, [self.agent_state(p) for p in stale]), interval=0.2)
        procs.log("OBSERVED half_open current (idle source): the agent closed its stale ends "
                  "after %s s", ["%.1f" % gone[p] for p in stale])
        fault.clear()
        self.converge()

    def test_half_open_data_port_agent_side(self):
        """The agent's end vanishes; the replica's stays open."""
        self.start()
        since = self.replica.log_size()
        fault = self.host.half_open(self.agent.data_port, hold=3.0, side="agent")
        t0 = time.monotonic()
        self.assertEqual(len(fault.destroyed), 1, fault.destroyed)
        line = h.wait_until(lambda: self.sessions(since), 90,
                            "the replica to notice and open a new session")[0]
        procs.log("OBSERVED half_open data (agent side): replica new session after %.1fs: %s",
                  time.monotonic() - t0, line)
        for l in self.replica.log_lines(since)[:6]:
            procs.log("OBSERVED replica log: %s", l)
        fault.wait_lifted(10)
        self.converge()

    def test_limit_rate_caps_throughput(self):
        limit = 200 << 10
        self.start(rate=1.5e6)
        fault = self.host.limit_rate(limit)
        time.sleep(1.0)  # let the bucket's first burst and queued bytes pass
        a, t_a = self.durable(), time.monotonic()
        time.sleep(4.0)
        b, t_b = self.durable(), time.monotonic()
        rate = (b - a) / (t_b - t_a)
        procs.log("OBSERVED limit_rate %d B/s: replica stored %.0f B/s over %.1fs "
                  "(generator %.0f B/s)", limit, rate, t_b - t_a, 1.5e6)
        # Generous: the limit plus its whole burst over the window, doubled.
        self.assertLess(rate, 2 * (limit + fault_burst(limit) / (t_b - t_a)))
        self.assertGreater(rate, 0)
        self.converge()

    def test_latency_proxy_on_control_port(self):
        """The proxy delays the control channel; the data socket goes direct."""
        c = self.cluster
        self.start()
        proxy = self.host.latency_proxy(self.agent.control_port, 0.2)
        self.replica.stop()
        self.replica.agent = proxy.address
        since = self.replica.log_size()
        self.replica.start()
        self.replica.wait_log(r"session \d+ with %s" % proxy.address, 30, since)
        start = self.flushed()
        h.wait_until(lambda: self.flushed() > start + SEGMENT, 30,
                     "acknowledgements through the delaying proxy")
        self.assertTrue(proxy.connections, "nothing went through the proxy")
        self.converge()


def fault_burst(limit):
    return max(limit // 10, 65536)


class NetHostTest(unittest.TestCase):
    """The NetHost plumbing itself."""

    @classmethod
    def setUpClass(cls):
        ok, reason = netfault.available()
        if not ok:
            raise unittest.SkipTest("network faults unavailable here: %s" % reason)

    def test_wrap_runs_the_program_itself_in_the_namespace(self):
        with netfault.NetHost("w", 2) as host:
            p = subprocess.Popen(host.wrap(["sleep", "30"]))
            try:
                h.wait_until(lambda: os.readlink("/proc/%d/exe" % p.pid).endswith("/sleep"),
                             10, "ip netns exec to exec sleep")
                self.assertNotEqual(os.readlink("/proc/%d/ns/net" % p.pid),
                                    os.readlink("/proc/self/ns/net"))
            finally:
                p.kill()
                p.wait(10)
            self.assertIn(host.ns, netfault.namespaces())
        self.assertNotIn(host.ns, netfault.namespaces())
        host.close()  # idempotent

    def test_cleanup_stale_deletes_dead_runs_only(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = "%s-%d-7" % (netfault.NS_PREFIX, dead.pid)
        netfault.run(["ip", "netns", "add", stale])
        try:
            with netfault.NetHost("live", 3) as live:
                gone = netfault.cleanup_stale()
                self.assertIn(stale, gone)
                self.assertIn(live.ns, netfault.namespaces())
        finally:
            if stale in netfault.namespaces():
                netfault.run(["ip", "netns", "delete", stale])
        self.assertNotIn(stale, netfault.namespaces())


if __name__ == "__main__":
    unittest.main()
