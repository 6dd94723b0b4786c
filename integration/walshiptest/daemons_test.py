"""daemons on the real binaries: ports from the port file (never picked by
binding and releasing), restarts on the same ports, a replica's metrics port
from its log, exit statuses of stop and kill."""

import os
import signal
import tempfile
import unittest
import urllib.request

from integration.walshiptest import daemons
from integration.walshiptest import ports
from integration.walshiptest import procs


class ShellDaemon(daemons.Daemon):
    """A Daemon of a shell script (no walship binary needed)."""

    def __init__(self, logdir, script):
        daemons.Daemon.__init__(self, "shell", logdir, env={"WALSHIPTEST_WORD": "hi"})
        self.script = script

    def argv(self):
        return ["/bin/sh", "-c", self.script]

    def start(self):
        self._spawn()
        return self


class DaemonsTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.wal = os.path.join(self.dir, "wal")
        os.mkdir(self.wal)
        self.started = []

    def tearDown(self):
        for d in self.started:
            d.stop(timeout=5)

    def keep(self, d):
        self.started.append(d)
        return d

    def test_agent_ports_come_from_its_port_file(self):
        agent = self.keep(daemons.Agent(self.wal, self.dir,
                                        extra_args=["--metrics-listen=127.0.0.1:0"]).start())
        kv = ports.read_port_file(agent.port_file)
        self.assertEqual((agent.control, agent.data, agent.metrics),
                         (kv["control"], kv["data"], kv["metrics"]))
        self.assertNotEqual(agent.control_port, 0)
        self.assertNotEqual(agent.data_port, agent.control_port)
        self.assertEqual(agent.argv()[2:4], ["--listen=127.0.0.1:0", "--data-listen=127.0.0.1:0"])
        with urllib.request.urlopen("http://%s/metrics" % agent.metrics, timeout=5) as r:
            self.assertEqual(r.status, 200)
        self.assertEqual(agent.stop(), 0)

    def test_pinned_ports_survive_a_kill_and_a_restart(self):
        agent = self.keep(daemons.Agent(self.wal, self.dir).start())
        first = (agent.control, agent.data)
        agent.pin_ports()
        self.assertEqual(agent.kill(), -signal.SIGKILL)
        agent.start()
        self.assertEqual((agent.control, agent.data), first)
        self.assertEqual(agent.starts, 2)
        self.assertEqual(len(agent.grep(r"^==== agent start ")), 2)

    def test_an_agent_that_exits_at_start_fails_the_test_with_its_log(self):
        agent = daemons.Agent(os.path.join(self.dir, "no-such-dir"), self.dir)
        with self.assertRaises(daemons.DaemonExited) as cm:
            agent.start(timeout=30)
        self.assertIsInstance(cm.exception, AssertionError)
        self.assertIn("agent exited (status", str(cm.exception))

    def test_replica_metrics_address_is_read_from_this_runs_log(self):
        agent = self.keep(daemons.Agent(self.wal, self.dir).start())
        dest = os.path.join(self.dir, "dest")
        replica = self.keep(daemons.Replica(agent, dest, "r1", self.dir,
                                            extra_args=["--metrics-listen=127.0.0.1:0"]).start())
        replica.metrics_address()
        self.assertEqual(replica.stop(), 0)
        replica.start()
        second = replica.metrics_address()
        self.assertNotEqual(ports.port_of(second), 0)
        # The second run's address, not the first one's line in the same log.
        self.assertEqual(len(replica.grep("metrics on http://")), 2)
        self.assertIn(second, replica.grep("metrics on http://", replica.run_offset)[0])
        with urllib.request.urlopen("http://%s/metrics" % second, timeout=5) as r:
            self.assertEqual(r.status, 200)

    def test_a_daemon_restarts_into_the_same_log_with_its_environment(self):
        d = self.keep(ShellDaemon(self.dir, "echo word=$WALSHIPTEST_WORD; exec sleep 300").start())
        d.wait_log("^word=hi$", 10)
        self.assertEqual(d.stop(), -signal.SIGTERM)
        d.start()
        d.wait_log("^word=hi$", 10, since=d.run_offset)
        self.assertEqual(len(d.grep("^word=hi$")), 2)
        with self.assertRaises(procs.waits.StepError):
            d.start()  # already running
        d.pause()
        d.resume()
        self.assertEqual(d.stop(), -signal.SIGTERM)


if __name__ == "__main__":
    unittest.main()
