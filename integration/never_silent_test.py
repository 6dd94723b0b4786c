"""Never silent: refusals keep bytes, gaps are named, one replica per directory.

Real walship-agent and walship-replica daemons over append-format
directories; each case is a defect a review found, set up the way it was seen:

1. unrecorded_tail_survives_a_refusal: a replica whose walship.state trails
   the 500,000 bytes it acknowledged (walship.progress lost with a power
   loss) meets an agent restarted over a directory that is empty for a
   while. The agent cannot confirm the bytes yet; the replica must neither
   cut them nor stop, and keeps them once the directory is back.
2. gap_is_never_skipped: the replica is durable at the end of complete
   seg-0001 when seg-0001..seg-0003 are removed from the source; shipping
   must not resume at seg-0004. The replica stops with a gap naming seg-0002
   (the agent saw it) and holds nothing of seg-0004.
3. a second replica on the same --dest is refused with a clear message, and
   the first keeps shipping.
4. a damaged complete copy (a short seg-0001 on the replica's disk) is found
   at the next connection and stops the replica naming it; a complete
   segment whose walship.sums line was lost gets it back once the agent
   confirms its bytes, and restore serves it.
5. a replica that cannot advance never looks healthy: paused while the
   source grows it is "stalled (no_progress)" with its lag; once the source
   fails it is "stalled (source_failed)", the status names the source's
   error, walship_agent_source_up is 0 and walship_agent_replica_stalled is 1.
"""

import os
import random
import shutil
import subprocess
import time
import unittest

from integration import harness as h
from integration import statefile
from integration import wirelib

STREAM = "never-silent-test"


class NeverSilentTest(h.ClusterTestCase):

    def test_unrecorded_tail_survives_a_refusal(self):
        c = self.cluster
        wal, aside = c.dir("wal"), c.dir("aside")
        dest = c.dir("dest-r1")
        rng = random.Random(23)
        seg = rng.randbytes(501000)
        with open(os.path.join(aside, "seg-0001"), "wb") as f:
            f.write(seg)
        # The replica acknowledged all 501,000 bytes (they are fdatasync'ed in
        # its .partial); its record says 1,000; walship.progress is gone.
        with open(os.path.join(dest, "seg-0001.partial"), "wb") as f:
            f.write(seg)
        with open(os.path.join(dest, statefile.STATE), "wb") as f:
            f.write(statefile.encode(STREAM, "seg-0001", 1000,
                                     prefix_crc=wirelib.crc32c(seg[:1000])))
        agent = c.agent(wal, extra_args=["--stream-id=" + STREAM]).start()
        replica = c.replica(agent, "r1", dest=dest).start()
        # It asks, is told to wait, asks again.
        agent.wait_log(r"not now, the replica retries: the WAL directory shows no segment", 20)
        replica.wait_log(r"session ended: .*retrying", 20)
        time.sleep(2)
        self.assertTrue(replica.running(), "the replica stopped:\n" + replica.tail())
        self.assertEqual(h.read_bytes(os.path.join(dest, "seg-0001.partial")), seg,
                         "acknowledged bytes were cut while the agent could not compare")
        self.assertEqual(replica.grep(r"discarding"), [])
        # The directory is back: the agent confirms them and shipping goes on.
        os.rename(os.path.join(aside, "seg-0001"), os.path.join(wal, "seg-0001"))
        replica.wait_log(r"kept 500000 bytes of seg-0001 received before the last stop", 30)
        with open(os.path.join(wal, "seg-0001"), "ab") as f:
            f.write(rng.randbytes(7000))
        self.wait_caught_up(agent, wal, ["r1"])
        h.compare_dirs(wal, dest)
        self.stop_all()

    def test_gap_is_never_skipped(self):
        self.check_gap(restart_agent=False, pattern=None,
                       expect=r"gap: segment seg-0002 \(after seg-0001, by the segments the "
                              r"agent has seen\)")

    def test_gap_after_an_agent_restart_is_refused_or_named(self):
        # The agent never saw seg-0002 and seg-0003: without a sequence in the
        # names it cannot prove anything, and says so.
        self.check_gap(restart_agent=True, pattern=None,
                       expect=r"gap: cannot prove that no segment is missing between seg-0001 "
                              r"and seg-0004")

    def test_gap_after_an_agent_restart_is_named_by_the_pattern(self):
        self.check_gap(restart_agent=True, pattern=r"seg-([0-9]{4})",
                       expect=r"gap: segment seg-0002 \(after seg-0001, by the source's naming "
                              r"rule\)")

    def check_gap(self, restart_agent, pattern, expect):
        """The replica is durable at the end of complete seg-0001 when
        seg-0001..seg-0003 are removed; it must stop with `expect`."""
        c = self.cluster
        wal = c.dir("wal")
        rng = random.Random(24)
        data = {n: rng.randbytes(300000) for n in ("seg-0001", "seg-0002", "seg-0003",
                                                   "seg-0004")}

        def put(name, n=None):
            with open(os.path.join(wal, name), "ab") as f:
                f.write(data[name] if n is None else data[name][:n])

        put("seg-0001")
        extra = ["--metrics-listen=127.0.0.1:0"]
        if pattern:
            extra.append("--segment-pattern=" + pattern)
        agent = c.agent(wal, extra_args=extra).start()
        replica = c.replica(agent, "r1").start()
        # seg-0002 appears, empty: seg-0001 is complete and the replica
        # publishes it, holding nothing of seg-0002.
        put("seg-0002", 0)
        h.wait_until(lambda: os.path.exists(os.path.join(replica.dest, "seg-0001")), 30,
                     "seg-0001 published on the replica")
        self.assertEqual(replica.stop(), 0)
        st = statefile.read_durable(replica.dest)
        self.assertEqual((st["segment"], st["offset"], st["complete"]),
                         ("seg-0001", 300000, True), st)
        # While it is down, the stream moves on and retention removes
        # seg-0001..seg-0003.
        put("seg-0002")
        put("seg-0003")
        put("seg-0004")
        h.wait_until(lambda: h.pos_of(h.status(agent)["source_end"]) == h.Pos("seg-0004", 300000),
                     10, "the agent to see seg-0004")
        for n in ("seg-0001", "seg-0002", "seg-0003"):
            os.unlink(os.path.join(wal, n))
        if restart_agent:
            self.assertEqual(agent.stop(), 0)
            agent.restart()
        h.wait_until(lambda: h.metric_total(h.scrape(agent.metrics),
                                            "walship_agent_source_bytes") == 300000,
                     10, "the agent to see the removals")
        since = replica.log_size()
        replica.start()
        h.wait_until(lambda: not replica.running(), 30, "the replica to stop on the gap")
        self.assertEqual(replica.returncode(), 3, replica.tail())
        self.assertTrue(replica.grep(expect, since), replica.tail())
        self.assertTrue(agent.grep(expect), agent.tail())
        for n in os.listdir(replica.dest):
            self.assertFalse(n.startswith("seg-0004"), "the replica skipped to " + n)
        self.stop_all_but_failed_replica(replica)

    def test_a_second_replica_on_the_same_dest_is_refused(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, rate=1e6, segment_size=1 << 20)
        gen.write(50000)
        agent = c.agent(wal).start()
        first = c.replica(agent, "r1").start()
        self.wait_caught_up(agent, wal, ["r1"])
        second = c.replica(agent, "r2", dest=first.dest).start()
        h.wait_until(lambda: not second.running(), 20, "the second replica to stop")
        self.assertEqual(second.returncode(), 3, second.tail())
        self.assertTrue(second.grep(r"another walship-replica \(pid %d\) is already following "
                                    r"into" % first.pid), second.tail())
        gen.write(50000)
        self.wait_caught_up(agent, wal, ["r1"])
        h.compare_dirs(wal, first.dest)
        second.proc = None  # exited on its own, already reaped below
        self.stop_all()

    def test_a_replica_that_cannot_advance_never_looks_healthy(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, rate=2e6, segment_size=1 << 20)
        gen.write(100000)
        agent = c.agent(wal, extra_args=["--stall-timeout-ms=1000",
                                         "--metrics-listen=127.0.0.1:0"]).start()
        replica = c.replica(agent, "r1").start()
        self.wait_caught_up(agent, wal, ["r1"])
        self.assertEqual(h.replica_entry(h.status(agent), "r1")["state"], "caught_up")

        def state():
            e = h.replica_entry(h.status(agent), "r1")
            return (e["state"], e["state_reason"], int(e["lag_bytes"]))

        # Paused: connected, behind, not moving.
        replica.pause()
        gen.write(200000)
        h.wait_until(lambda: state()[:2] == ("stalled", "no_progress"), 15,
                     lambda: "r1 stalled (no_progress), it is %s" % (state(),))
        self.assertGreater(state()[2], 0)
        metrics = h.scrape(agent.metrics)
        self.assertEqual(h.metric_total(metrics, "walship_agent_replica_stalled", replica="r1",
                                        reason="no_progress"), 1)
        replica.resume()
        self.wait_caught_up(agent, wal, ["r1"])
        self.assertEqual(state(), ("caught_up", "", 0))
        # The source fails (a segment shrinks: not append-only). Nothing is
        # left to ship, yet the replica is not "caught up".
        with open(os.path.join(wal, "seg-00000001"), "r+b") as f:
            f.truncate(1000)
        # Its session ends on the source's failure; it asks again and waits.
        h.wait_until(lambda: state()[1] == "source_failed", 15,
                     lambda: "r1 stalled or stopped (source_failed), it is %s" % (state(),))
        self.assertIn(state()[0], ("stalled", "stopped"))
        st = h.status(agent)
        self.assertIn("shrank", st["source_error"])
        metrics = h.scrape(agent.metrics)
        self.assertEqual(h.metric_total(metrics, "walship_agent_source_up"), 0)
        table = subprocess.run([h.binary(h.STATUS), "--agent=" + agent.control, "--insecure"],
                               stdout=subprocess.PIPE, universal_newlines=True, timeout=10).stdout
        self.assertIn("SOURCE NOT SERVING", table)
        self.assertRegex(table, r"r1 +(stalled|stopped) \(source_failed\)")
        time.sleep(1)
        self.assertTrue(replica.running(), "the replica gave up on an agent-side failure")
        self.stop_all()

    def test_a_damaged_complete_copy_is_found_at_the_next_connection(self):
        c = self.cluster
        wal = c.dir("wal")
        rng = random.Random(25)
        data = {"seg-0001": rng.randbytes(200000), "seg-0002": rng.randbytes(100000),
                "seg-0003": rng.randbytes(5000)}
        for name, b in data.items():
            with open(os.path.join(wal, name), "wb") as f:
                f.write(b)
        agent = c.agent(wal).start()
        replica = c.replica(agent, "r1").start()
        self.wait_caught_up(agent, wal, ["r1"])
        self.assertEqual(replica.stop(), 0)
        copy = os.path.join(replica.dest, "seg-0001")
        # A short copy: the file lost its last 100 bytes on the replica's disk.
        with open(copy, "r+b") as f:
            f.truncate(199900)
        since = replica.log_size()
        replica.start()
        h.wait_until(lambda: not replica.running(), 30, "the replica to stop on its damaged copy")
        self.assertEqual(replica.returncode(), 3, replica.tail())
        self.assertTrue(replica.grep(r"complete segment seg-0001 has 199900 bytes on the replica "
                                     r"but 200000 on the source", since), replica.tail())
        e = h.replica_entry(h.status(agent), "r1")
        self.assertEqual((e["state"], e["state_reason"]), ("stopped", "damaged_copy"))
        # Mended, but seg-0002's walship.sums line is gone (damage to that
        # file): the agent confirms the bytes and the line is recorded again.
        with open(copy, "wb") as f:
            f.write(data["seg-0001"])
        sums = os.path.join(replica.dest, "walship.sums")
        with open(sums) as f:
            lines = [l for l in f if not l.startswith("seg-0002 ")]
        with open(sums, "w") as f:
            f.writelines(lines)
        since = replica.log_size()
        replica.start()
        replica.wait_log(r"seg-0002 had no walship.sums line; the agent confirmed its 100000 "
                         r"bytes, line recorded", 30, since)
        target = os.path.join(c.dir("restore"), "seg-0002")
        r = subprocess.run([h.binary(h.REPLICA), "restore", "--dest=" + replica.dest,
                            "seg-0002", target], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(h.read_bytes(target), data["seg-0002"])
        self.stop_all()

    def stop_all_but_failed_replica(self, replica):
        """stop_all(), for a test whose replica stopped on its own with 3."""
        self.exit_codes = self.cluster.close()
        bad = {k: v for k, v in self.exit_codes.items() if v != 0 and k != replica.label}
        self.assertEqual(bad, {}, "daemons that did not exit 0 on SIGTERM")


if __name__ == "__main__":
    unittest.main()
