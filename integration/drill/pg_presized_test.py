"""Live segments pre-sized from a spare, and a restart over one.

A real PostgreSQL 15 primary (1 MiB segments), walship-agent in postgres
mode and one replica. While the stream is live, the replica starts each new
segment from a spare file zero-filled to the segment size
(replica/spare_segment.h), so a NAME.partial is longer than the bytes it
holds (replica/disk_format.md section 8).

1. Commits one by one across segment switches: the replica learns the
   segment size from the first page header, its live NAME.partial is 1 MiB
   long, and every byte it holds equals the primary's (the held prefix of
   the partial, whole complete segments).
2. The replica is killed (SIGKILL) with such a partial; more commits follow;
   a new replica process over the same directory resumes from what the
   records prove, not from the partial's length, and holds the new commits.
   (The zeros past the data used to be presented to the agent as held
   bytes: "the source shows only N so far", and the replica never resumed.)
"""
import os
import signal
import unittest

from integration.walshiptest import daemons
from integration.walshiptest.pg import PgEnv, test_primary
from integration.walshiptest.procs import Proc, read_text
from integration.walshiptest.waits import wait_until

from integration import statefile

SEG = 1 << 20


class PgPresizedTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.pg, self.dir, self.logs = test_primary(self.env, "presized")
        self.pg.psql("CREATE TABLE t (x int)")
        self.agent = daemons.Agent(
            self.pg.pg_wal, self.logs, label="agent",
            extra_args=["--format=postgres", "--pg-conninfo=%s" % self.pg.conninfo(),
                        "--pg-slot=walship_presized",
                        "--state-dir=%s" % self.env.mkdir("presized", "agent-state"),
                        "--pg-data=%s" % self.pg.datadir],
            program=self.env.binaries["walship-agent"],
            port_file=os.path.join(self.dir, "agent.ports"), launcher=self.env).start(timeout=30)
        self.dest = os.path.join(self.dir, "replica")
        self.replica_logs = []
        self.replica = None

    def dump_logs(self):
        for path in self.replica_logs:
            print("---- %s\n%s" % (path, read_text(path)[-6000:]))

    def start_replica(self):
        log = os.path.join(self.logs, "replica-%d.log" % len(self.replica_logs))
        self.replica_logs.append(log)
        self.replica = Proc(self.env, "replica", [
            self.env.binaries["walship-replica"], "--agent=%s" % self.agent.control,
            "--dest=%s" % self.dest, "--name=r1", "--insecure"], log)

    def replica_lsn(self):
        return statefile.durable_lsn(self.dest, SEG)

    def commit_rows(self, n):
        """Commits n rows one by one, each held by the replica before the next."""
        end = 0
        for _ in range(n):
            self.pg.psql("INSERT INTO t VALUES (1)")
            end = self.pg.lsn("pg_current_wal_insert_lsn()")
            wait_until(lambda: self.replica_lsn() >= end, 30,
                       "the replica to hold the commit", interval=0.005)
        return end

    def switch_segment(self):
        self.pg.psql("SELECT pg_switch_wal()")

    def check_copy(self):
        """Every byte the replica holds equals the primary's."""
        st = statefile.read_durable(self.dest)
        for name in sorted(os.listdir(self.dest)):
            if len(name) != 24:
                continue
            with open(os.path.join(self.dest, name), "rb") as f, \
                    open(os.path.join(self.pg.pg_wal, name), "rb") as g:
                self.assertEqual(f.read(), g.read(), name)
        if not st["complete"] and st["segment"]:
            with open(os.path.join(self.dest, st["segment"] + ".partial"), "rb") as f, \
                    open(os.path.join(self.pg.pg_wal, st["segment"]), "rb") as g:
                n = st["offset"]
                self.assertEqual(f.read(n), g.read(n), st["segment"])
        return st

    def test_live_partial_is_presized_and_a_restart_resumes_over_it(self):
        try:
            self.live_partial_then_restart()
        except Exception:
            self.dump_logs()
            raise

    def live_partial_then_restart(self):
        self.start_replica()
        self.commit_rows(5)
        # Segments switched while live: each new one should start from the spare.
        for _ in range(3):
            self.switch_segment()
            self.commit_rows(20)
        st = self.check_copy()
        self.assertFalse(st["complete"])
        partial = os.path.join(self.dest, st["segment"] + ".partial")
        presized_by_replica = os.path.getsize(partial) == SEG
        self.replica.kill9()
        self.replica.wait(10)
        # The file a pre-sizing replica leaves (a no-op when it pre-sized it).
        with open(partial, "r+b") as f:
            f.truncate(SEG)
        end = 0
        for _ in range(10):
            self.pg.psql("INSERT INTO t VALUES (2)")
            end = self.pg.lsn("pg_current_wal_insert_lsn()")
        self.start_replica()
        wait_until(lambda: self.replica_lsn() >= end, 30,
                   "the restarted replica to resume over the pre-sized partial and hold the "
                   "commits made while it was down", interval=0.02)
        self.commit_rows(5)
        self.switch_segment()
        self.commit_rows(5)
        self.check_copy()
        self.assertTrue(presized_by_replica, "the live partial was not pre-sized")
        self.assertIn("zero-filled to that size in advance", read_text(self.replica_logs[0]))
        self.replica.stop()


if __name__ == "__main__":
    unittest.main()
