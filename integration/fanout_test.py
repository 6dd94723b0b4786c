"""Fan-out: one agent, two replicas; a stalled replica holds back no one.

test_stopped_replica_does_not_stall_the_other: replica "slow" is stopped
with SIGSTOP while the generator appends (3 MB/s, 1 MiB segments). The agent
must stop getting bytes into slow's socket (its `sent` position stops
moving once the socket buffers are full) while "fast" keeps acknowledging,
through at least 4 new segments. After SIGCONT both end byte-identical.

test_stalled_replica_is_dropped_after_io_timeout: the same with the agent
run with --io-timeout-ms=2000 (documented: "Longest wait for a replica's
socket to take bytes before its session is dropped (other replicas are
unaffected)"): slow's session must end with a timeout, and after SIGCONT it
reconnects and catches up.
"""

import time
import unittest

from integration import harness as h
from integration.walshiptest import procs

RATE = 3e6
SEGMENT = 1 << 20


class FanoutTest(h.ClusterTestCase):

    def setup_pair(self, agent_args=()):
        c = self.cluster
        self.wal = c.dir("wal")
        self.gen = c.generator(self.wal, rate=RATE, segment_size=SEGMENT)
        self.agent = c.agent(self.wal, extra_args=agent_args).start()
        self.fast = c.replica(self.agent, "fast").start()
        self.slow = c.replica(self.agent, "slow").start()
        self.gen.start()
        for name in ("fast", "slow"):
            h.wait_until(lambda: self.entry(name) and self.entry(name)["connected"]
                         and h.pos_of(self.entry(name)["flushed"]).segment, 15,
                         "%s to follow" % name)

    def entry(self, name):
        return h.replica_entry(h.try_status(self.agent), name)

    def wait_sent_stalls(self, name, quiet=1.0, timeout=20):
        """Waits until `name`'s sent position stays put for `quiet` seconds."""
        last = {"pos": None, "since": time.monotonic()}

        def stalled():
            e = self.entry(name)
            pos = h.pos_of(e["sent"]) if e else None
            now = time.monotonic()
            if pos != last["pos"]:
                last["pos"], last["since"] = pos, now
                return None
            return pos if now - last["since"] >= quiet else None
        return h.wait_until(stalled, timeout, "%s's sent position to stop moving" % name,
                            interval=0.1)

    def fast_passes_segments(self, n, timeout=20):
        start = h.pos_of(self.entry("fast")["flushed"])
        target = "seg-%08d" % (int(start.segment[4:]) + n)
        h.wait_until(lambda: h.flushed(h.try_status(self.agent), "fast") >= h.Pos(target, 1),
                     timeout, "fast to acknowledge %d segments past %s, into %s"
                     % (n, start, target), interval=0.1)
        procs.log("fast acknowledged from %s into %s while slow was stopped", start, target)

    def finish(self):
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["fast", "slow"], timeout=60)
        h.compare_dirs(self.wal, self.fast.dest)
        h.compare_dirs(self.wal, self.slow.dest)
        self.stop_all()

    def test_stopped_replica_does_not_stall_the_other(self):
        self.setup_pair()
        slow_before = self.entry("slow")
        self.slow.pause()
        stalled_at = self.wait_sent_stalls("slow")
        procs.log("slow's sent position stalled at %s", stalled_at)
        flushed_stopped = h.pos_of(self.entry("slow")["flushed"])
        self.fast_passes_segments(4)
        e = self.entry("slow")
        self.assertEqual(h.pos_of(e["sent"]), stalled_at,
                         "the agent kept sending to a stopped replica")
        self.assertEqual(h.pos_of(e["flushed"]), flushed_stopped,
                         "a stopped replica acknowledged bytes")
        self.assertEqual(e["session_id"], slow_before["session_id"])
        self.assertLess(stalled_at, h.pos_of(self.entry("fast")["flushed"]))
        self.slow.resume()
        h.wait_until(lambda: h.flushed(h.try_status(self.agent), "slow") > stalled_at, 20,
                     "slow to acknowledge past %s after SIGCONT" % (stalled_at,))
        self.finish()

    def test_stalled_replica_is_dropped_after_io_timeout(self):
        self.setup_pair(["--io-timeout-ms=2000"])
        slow_session = self.entry("slow")["session_id"]
        self.slow.pause()
        since = self.agent.log_size()
        self.fast_passes_segments(2)
        try:
            line = self.agent.wait_log(r"replica slow \(session %s\): shipping stopped: .*"
                                       r"timed out" % slow_session, 8, since)
            procs.log("agent dropped the stalled session: %s", line)
        finally:
            self.slow.resume()
        h.wait_until(lambda: (self.entry("slow") or {}).get("session_id") != slow_session,
                     20, "slow to start a new session after SIGCONT")
        self.finish()


if __name__ == "__main__":
    unittest.main()
