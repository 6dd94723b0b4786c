"""The replication slot keeps WAL for replicas the agent knew before a restart.

A real PostgreSQL 15 primary with 1 MiB segments (min_wal_size 2 MB,
max_wal_size 4 MB: a CHECKPOINT recycles every segment no slot holds),
walship-agent in postgres mode with --pg-slot and --state-dir, and two
replicas, r1 and r2, on fixed ports so that they reconnect to a restarted
agent.

test_slot_keeps_wal_for_a_replica_down_across_agent_restart: r2 stops
(SIGTERM) at a position; r1 follows on; the agent is restarted while r2 is
still down; r1 acknowledges new WAL and checkpoints run. The slot's
restart_lsn never passes r2's position and the segment holding it stays in
pg_wal; r2, restarted, catches up with no gap, and its copy is
byte-identical to the primary's for every segment both hold.

test_bound_releases_a_replica_known_before_the_restart_and_names_it: the
same with a small --max-retained-bytes: past the bound the agent releases
the WAL it holds for r2, names r2 in its log, records r2 as released in its
state file, and the slot then follows r1 (it does not hold the bound for r2
forever).

test_damaged_state_file_stops_the_agent_at_start: a replicas file that does
not check out stops the agent at start with DATA_LOSS naming the file,
instead of starting with no replica known.
"""
import os
import signal
import sys
import unittest

from integration.walshiptest import daemons
from integration.walshiptest.lsn import (
    fmt_lsn, parse_lsn, parse_segment, position_lsn, segment_name)
from integration.walshiptest.pg import PgEnv, test_primary
from integration.walshiptest.ports import read_port_file
from integration.walshiptest.procs import Proc, read_text
from integration.walshiptest.waits import wait_until

SEG = 1 << 20
SLOT = "walship_restart"


def segment_of(lsn):
    """Where the slot follows a replica durable at `lsn`: the start of the
    segment holding its last byte (the agent keeps that whole segment until
    it has confirmed it)."""
    return (lsn - 1) // SEG * SEG


class AgentRestartRetentionTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.pg, self.dir, self.logs = test_primary(self.env, "restart", small_wal=True)
        self.state_dir = self.env.mkdir("restart", "agent-state")
        self.pg.psql("CREATE TABLE filler (x text)")
        # Port 0 at the first start; later starts reuse the ports it got
        # (the replicas keep dialing the same address).
        self.control = self.data = "127.0.0.1:0"
        self.port_file = os.path.join(self.dir, "agent.ports")
        self.agent_log = os.path.join(self.logs, "agent.log")
        self.agent = None
        self.replicas = {}

    def tearDown(self):
        for path in [self.agent_log] + [self.replica_log(n) for n in ("r1", "r2")]:
            sys.stderr.write("---- %s\n%s\n" % (path, self.log_text(path)[-4000:]))

    # -- processes ------------------------------------------------------------
    def start_agent(self, bound):
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self.agent = Proc(self.env, "agent", [
            self.env.binaries["walship-agent"], "--format=postgres",
            "--wal-dir=%s" % self.pg.pg_wal, "--pg-conninfo=%s" % self.pg.conninfo(),
            "--pg-slot=%s" % SLOT, "--max-retained-bytes=%d" % bound,
            "--state-dir=%s" % self.state_dir,
            "--io-timeout-ms=2000", "--listen=%s" % self.control,
            "--data-listen=%s" % self.data, "--port-file=%s" % self.port_file, "--insecure"],
            self.agent_log)
        kv = wait_until(lambda: self.agent_ports(), 30, "the agent's port file", interval=0.1)
        self.control, self.data = kv["control"], kv["data"]
        wait_until(lambda: self.status() is not None, 30, "the agent to serve", interval=0.1)

    def agent_ports(self):
        """The port file's addresses once the running agent wrote them, else None."""
        if not self.agent.alive():
            raise AssertionError("the agent exited %s at start" % self.agent.returncode())
        kv = read_port_file(self.port_file) or {}
        return kv if "control" in kv and "data" in kv else None

    def stop_agent(self):
        rc = self.agent.stop(signal.SIGTERM)
        self.assertEqual(rc, 0, "the agent did not stop cleanly")

    def replica_log(self, name):
        return os.path.join(self.logs, "%s.log" % name)

    def dest(self, name):
        return os.path.join(self.dir, name)

    def start_replica(self, name):
        self.replicas[name] = Proc(self.env, name, [
            self.env.binaries["walship-replica"], "--agent=%s" % self.control,
            "--dest=%s" % self.dest(name), "--name=%s" % name, "--insecure"],
            self.replica_log(name))

    # -- observations ---------------------------------------------------------
    def status(self):
        """{replica name: acknowledged flushed LSN (0 before any)}, or None."""
        st = daemons.try_agent_status(self.control, timeout=10)
        if st is None:
            return None
        return {rep["name"]: position_lsn(rep.get("flushed"), SEG) or 0
                for rep in st.get("replicas", [])}

    def flushed(self, name):
        return (self.status() or {}).get(name, 0)

    def slot(self):
        row = self.pg.psql("SELECT restart_lsn, pg_current_wal_flush_lsn() "
                           "FROM pg_replication_slots WHERE slot_name = '%s'" % SLOT)
        restart, flush = row.split("|")
        return parse_lsn(restart), parse_lsn(flush)

    def recorded(self):
        """The agent's state file: {name: (LSN, 'held' or 'released')}."""
        try:
            with open(os.path.join(self.state_dir, "replicas")) as f:
                lines = f.read().splitlines()
        except OSError:
            return {}
        out = {}
        for line in lines:
            f = line.split()
            if len(f) == 6 and f[0] == "replica":
                out[f[1]] = (position_lsn({"segment": f[2], "offset": f[3]}, SEG), f[5])
        return out

    def log_text(self, path):
        return read_text(path)

    def write_wal(self, segments):
        """Fills `segments` WAL segments (a row, then a segment switch)."""
        for _ in range(segments):
            self.pg.psql("INSERT INTO filler VALUES ('x'); SELECT pg_switch_wal()")

    def wait_acked(self, name, lsn, what):
        return wait_until(lambda: self.flushed(name) >= lsn and self.flushed(name), 60,
                          "%s to acknowledge %s (%s)" % (name, fmt_lsn(lsn), what),
                          interval=0.1)

    def wait_keeper_round_after(self, name, acked, held):
        """Waits for a slot-keeper round that saw `name` at `acked`: either the
        agent recorded it (it records before it advances the slot), or the
        slot moved past `held` (what an agent that records nothing does)."""
        wait_until(lambda: (self.recorded().get(name, (0, ""))[0] or 0) >= acked
                   or self.slot()[0] > held, 20,
                   "a slot-keeper round after %s acknowledged %s" % (name, fmt_lsn(acked)),
                   interval=0.1)

    def assert_wal_kept_for(self, name, held):
        restart, _ = self.slot()
        self.assertLessEqual(
            restart, held, "the slot moved past %s: restart_lsn %s, %s is durable at %s" % (
                name, fmt_lsn(restart), name, fmt_lsn(held)))
        first_needed = segment_name(1, held // SEG, SEG)
        self.assertIn(first_needed, os.listdir(self.pg.pg_wal),
                      "segment %s, which %s has not flushed, was recycled" % (first_needed, name))

    def assert_copy_identical(self, name):
        """Every segment the replica holds complete, and the durable prefix of
        its .partial, equal the primary's bytes."""
        dest = self.dest(name)
        compared = 0
        for fname in sorted(os.listdir(dest)):
            base = fname[:-len(".partial")] if fname.endswith(".partial") else fname
            if parse_segment(base, SEG) is None:
                continue
            src = os.path.join(self.pg.pg_wal, base)
            if not os.path.exists(src):
                continue  # recycled on the primary since: nothing to compare with
            with open(os.path.join(dest, fname), "rb") as a, open(src, "rb") as b:
                mine = a.read()
                if fname.endswith(".partial"):
                    flushed = self.flushed(name)
                    mine = mine[:max(0, flushed - parse_segment(base, SEG)[1] * SEG)]
                theirs = b.read(len(mine))
            self.assertEqual(len(mine), len(theirs), "%s: %s is longer than the primary's" %
                             (name, fname))
            self.assertTrue(mine == theirs, "%s: %s differs from the primary's" % (name, fname))
            compared += 1
        self.assertGreater(compared, 0, "no segment of %s to compare" % name)

    # -- the set-up both tests share ---------------------------------------------
    def r2_down_then_agent_restarted(self, bound):
        """Both replicas follow; r2 stops; WAL goes on; the agent restarts;
        r1 acknowledges new WAL. Returns r2's durable LSN."""
        self.start_agent(bound)
        self.start_replica("r1")
        self.start_replica("r2")
        self.write_wal(3)
        _, flush = self.slot()
        self.wait_acked("r1", flush, "both follow")
        self.wait_acked("r2", flush, "both follow")
        wait_until(lambda: self.slot()[0] >= segment_of(flush), 20,
                   "the slot to follow both replicas", interval=0.1)
        self.assertEqual(self.replicas["r2"].stop(signal.SIGTERM), 0, "r2 did not stop cleanly")
        held = self.flushed("r2")  # its last acknowledgement, read once it stopped

        self.write_wal(2)
        _, flush = self.slot()
        self.wait_acked("r1", flush, "after r2 stopped")
        self.pg.psql("CHECKPOINT")
        self.assert_wal_kept_for("r2", held)

        self.stop_agent()
        self.start_agent(bound)
        self.write_wal(2)
        _, flush = self.slot()
        acked = self.wait_acked("r1", flush, "after the agent's restart")
        self.wait_keeper_round_after("r1", acked, held)
        return held

    def test_slot_keeps_wal_for_a_replica_down_across_agent_restart(self):
        held = self.r2_down_then_agent_restarted(bound=64 * SEG)
        self.pg.psql("CHECKPOINT")
        self.assert_wal_kept_for("r2", held)

        # More WAL and checkpoints while r2 is still down.
        for _ in range(2):
            self.write_wal(3)
            _, flush = self.slot()
            acked = self.wait_acked("r1", flush, "more WAL")
            self.wait_keeper_round_after("r1", acked, held)
            self.pg.psql("CHECKPOINT")
            self.assert_wal_kept_for("r2", held)
        self.assertEqual(self.recorded().get("r2"), (held, "held"),
                         "the agent's state file does not record r2 where it stopped")

        # r2 comes back and catches up: no gap.
        self.start_replica("r2")
        _, flush = self.slot()
        self.wait_acked("r2", flush, "r2 catching up after the restart")
        self.assertIsNone(self.replicas["r2"].returncode(),
                          "r2 exited: %s" % self.log_text(self.replica_log("r2"))[-500:])
        self.assertNotIn("gap", self.log_text(self.replica_log("r2")))
        self.assert_copy_identical("r2")
        self.assert_copy_identical("r1")

    def test_bound_releases_a_replica_known_before_the_restart_and_names_it(self):
        bound = 8 * SEG
        held = self.r2_down_then_agent_restarted(bound=bound)
        self.assert_wal_kept_for("r2", held)
        self.assertNotIn("bound exceeded", self.log_text(self.agent_log))

        # Past the bound: r2's WAL is released and r2 is named.
        while self.slot()[1] - held <= bound + SEG:
            self.write_wal(1)
        wait_until(lambda: "WAL retention bound exceeded" in self.log_text(self.agent_log),
                   20, "the agent's retention alert", interval=0.2)
        alert = [l for l in self.log_text(self.agent_log).splitlines()
                 if "WAL retention bound exceeded" in l][0]
        self.assertIn("r2 at %s" % fmt_lsn(held), alert)
        wait_until(lambda: self.recorded().get("r2", (0, ""))[1] == "released", 20,
                   "the agent to record r2 as released", interval=0.2)

        # Released, r2 holds nothing: the slot follows r1 again.
        _, flush = self.slot()
        acked = self.wait_acked("r1", flush, "after the release")
        wait_until(lambda: self.slot()[0] >= segment_of(acked), 20,
                   "the slot to follow r1 once r2 was released", interval=0.2)

    def test_damaged_state_file_stops_the_agent_at_start(self):
        path = os.path.join(self.state_dir, "replicas")
        with open(path, "w") as f:
            f.write("walship-agent-replicas 1\nstream pg-1\nreplica r2 0000000100")
        self.agent = Proc(self.env, "agent", [
            self.env.binaries["walship-agent"], "--format=postgres",
            "--wal-dir=%s" % self.pg.pg_wal, "--pg-conninfo=%s" % self.pg.conninfo(),
            "--pg-slot=%s" % SLOT, "--state-dir=%s" % self.state_dir,
            "--listen=%s" % self.control, "--data-listen=%s" % self.data, "--insecure"],
            self.agent_log)
        self.assertEqual(self.agent.wait(60), 1, "the agent started over a damaged state file")
        log = self.log_text(self.agent_log)
        self.assertIn("cannot start: DATA_LOSS: replica positions file %s: damaged" % path, log)
        self.assertIsNone(self.pg.psql("SELECT 1 FROM pg_replication_slots "
                                       "WHERE slot_name = '%s'" % SLOT) or None,
                          "the slot was created before the state file was read")


if __name__ == "__main__":
    unittest.main()
