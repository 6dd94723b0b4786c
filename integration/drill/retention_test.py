"""The agent's replication slot keeps unshipped WAL, within a bound.

A real PostgreSQL 15 primary with 1 MiB segments, walship-agent in postgres
mode with a small --max-retained-bytes, and one replica:

1. While the replica follows, the slot's restart_lsn advances with the
   replica's acknowledged flushed position (WAL is released as it is shipped).
2. The replica dies (kill -9) and WAL keeps coming: the slot holds the
   primary's WAL for it (every segment from its position on stays in pg_wal
   across checkpoints) until the bound is reached; then the agent logs an
   alert at 80 %, releases WAL past the bound, and names the replica.
3. The replica, restarted, finds its position gone and stops with a clear gap
   error (exit status 3), instead of silently skipping WAL.
"""
import os
import sys
import time
import unittest

from integration.walshiptest import daemons
from integration.walshiptest.lsn import parse_lsn, position_lsn, segment_name
from integration.walshiptest.pg import PgEnv, test_primary
from integration.walshiptest.procs import Proc
from integration.walshiptest.waits import wait_until

SEG = 1 << 20
BOUND = 6 * SEG


def lsn_of(pos):
    return position_lsn(pos, SEG)


class RetentionTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.pg, d, self.logs = test_primary(self.env, "retention", small_wal=True)
        self.pg.psql("CREATE TABLE filler (x text)")
        self.agent = daemons.Agent(
            self.pg.pg_wal, self.logs, label="agent",
            extra_args=["--format=postgres", "--pg-data=%s" % self.pg.datadir,
                        "--pg-conninfo=%s" % self.pg.conninfo(),
                        "--pg-slot=walship_test", "--max-retained-bytes=%d" % BOUND,
                        "--state-dir=%s" % self.env.mkdir("retention", "agent-state"),
                        "--io-timeout-ms=2000"],
            program=self.env.binaries["walship-agent"],
            port_file=os.path.join(d, "agent.ports"), launcher=self.env).start(timeout=30)
        self.agent_log = self.agent.log_path
        self.control = self.agent.control
        self.replica_log = os.path.join(self.logs, "replica.log")
        self.replica_argv = [
            self.env.binaries["walship-replica"], "--agent=%s" % self.control,
            "--dest=%s" % os.path.join(d, "replica"), "--name=r1", "--insecure"]
        self.replica = Proc(self.env, "replica", self.replica_argv, self.replica_log)

    def write_wal(self, segments):
        """Fills `segments` WAL segments (a row, then a segment switch)."""
        for _ in range(segments):
            self.pg.psql("INSERT INTO filler VALUES ('x'); SELECT pg_switch_wal()")

    def slot(self):
        row = self.pg.psql("SELECT restart_lsn, pg_current_wal_flush_lsn() "
                           "FROM pg_replication_slots WHERE slot_name = 'walship_test'")
        restart, flush = row.split("|")
        return parse_lsn(restart), parse_lsn(flush)

    def replica_flushed(self):
        st = daemons.try_agent_status(self.control, timeout=10)
        if st is None:
            return None
        reps = st["replicas"]
        return lsn_of(reps[0]["flushed"]) if reps and reps[0]["flushed"]["segment"] else None

    def log_text(self, path):
        with open(path, errors="replace") as f:
            return f.read()

    def tearDown(self):
        for path in (self.agent_log, self.replica_log):
            sys.stderr.write("---- %s\n%s\n" % (path, self.log_text(path)[-4000:]))

    def test_slot_follows_replica_then_releases_past_the_bound(self):
        # 1. Following: the slot advances to the replica's flushed position.
        self.write_wal(3)
        self.pg.psql("CHECKPOINT")
        _, flush = self.slot()
        wait_until(lambda: (self.replica_flushed() or 0) >= flush, 60,
                   "replica to catch up", interval=0.1)
        acked = self.replica_flushed()
        wait_until(lambda: self.slot()[0] >= acked - SEG, 15,
                   "slot to advance to the replica's position", interval=0.2)
        restart, _ = self.slot()
        self.assertLessEqual(restart, acked, "the slot released WAL the replica lacks")

        # 2. The replica dies; WAL keeps coming; the slot holds it up to the bound.
        held = self.replica_flushed()
        self.replica.kill9()
        self.write_wal(3)
        self.pg.psql("CHECKPOINT")
        time.sleep(2.5)  # a few slot-keeper rounds
        restart, flush = self.slot()
        self.assertLess(flush - held, BOUND)
        self.assertLessEqual(restart, held, "WAL the stopped replica needs was released early")
        first_needed = segment_name(1, held // SEG, SEG)
        self.assertIn(first_needed, os.listdir(self.pg.pg_wal),
                      "a segment the replica has not flushed was recycled")

        # Past 80 % of the bound: an alert, nothing released yet. The slot
        # holds the start of the segment the replica is in (the agent keeps
        # that whole segment until it has confirmed it), so that is where
        # retention counts from.
        hold = (held - 1) // SEG * SEG
        while self.slot()[1] - hold <= BOUND * 0.8:
            self.write_wal(1)
        wait_until(lambda: "over 80% of --max-retained-bytes" in self.log_text(self.agent_log),
                   20, "the agent's 80% alert", interval=0.2)
        self.assertLessEqual(self.slot()[0], held, "released before the bound was reached")
        self.assertNotIn("bound exceeded", self.log_text(self.agent_log))

        # Past the bound: released, loudly, naming the replica at risk.
        self.write_wal(4)
        self.pg.psql("CHECKPOINT")
        wait_until(lambda: "WAL retention bound exceeded" in self.log_text(self.agent_log),
                   20, "the agent's retention alert", interval=0.2)
        self.assertIn("r1 at", self.log_text(self.agent_log))
        wait_until(lambda: self.slot()[1] - self.slot()[0] <= BOUND + SEG, 15,
                   "the slot to release WAL beyond the bound", interval=0.2)
        self.pg.psql("CHECKPOINT")
        wait_until(lambda: first_needed not in os.listdir(self.pg.pg_wal), 15,
                   "the released segment to be recycled", interval=0.2)

        # 3. The replica restarts and reports the gap; it does not skip WAL.
        self.replica = Proc(self.env, "replica", self.replica_argv, self.replica_log)
        rc = self.replica.wait(60)
        self.assertEqual(rc, 3, "replica should stop with exit status 3 (operator must act)")
        self.assertIn("gap", self.log_text(self.replica_log))


if __name__ == "__main__":
    unittest.main()
