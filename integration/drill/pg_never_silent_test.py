"""Never silent, on a real PostgreSQL 15: a gap across a timeline switch is
named, and an agent beside a standby says "not a primary, retry".

1. gap_across_a_timeline_switch_is_named: a primary without a slot
   (--pg-slot=), 1 MB segments and small max_wal_size/min_wal_size,
   wal_keep_size 0. Replica r1 stops inside segment S; the primary writes
   on and checkpoints until S and the two segments after it are gone from
   pg_wal; replica r2 follows all of it. The primary, idle, is shut down
   cleanly inside a segment and r2 stops after it, at the point where the
   timeline will switch. The same data directory is started again with
   standby.signal (in recovery: the agent says it is not a primary) and
   promoted to timeline 2. r2, restarted, continues across the switch
   (its bytes of the switch segment are timeline 2's too) and ends
   byte-identical to pg_wal's timeline 2. r1, restarted, stops (exit 3)
   on a gap naming S and never holds 00000002.history or a timeline 2
   segment: WAL of timeline 1 between its position and the switch point
   was never shipped to it, and must not be skipped.
2. an_agent_beside_a_standby_answers_not_primary: r1 followed a primary
   through agent A1 and holds bytes past its walship.state (an unrecorded
   tail, as after a power loss that took walship.progress). Pointed at
   agent A2 beside a standby of that primary, it is refused as "not a
   primary" and retries: it keeps running and keeps every file as it was,
   and A2's status names the reason.
3. a_fast_shutdown_completes_while_no_replica_holds_it: the agent's flush
   feed reports what the replicas hold; with the only replica stopped, the
   walsender would wait for ever for the shutdown checkpoint's
   confirmation. With --pg-data the agent sees postmaster.pid say
   "stopping" once the shutdown ends its query session, closes the feed,
   and the fast shutdown completes.
4. an_idle_replica_at_a_segment_end_keeps_its_segment: after pg_switch_wal()
   an idle primary leaves the replica holding all of segment X before the
   agent could confirm it (X+1 has no flushed byte); the slot must keep X
   (a checkpoint would recycle it and the replica would hit a gap), and the
   replica goes on past it once the primary writes again.
"""
import os
import re
import signal
import time
import sys
import unittest

from integration.walshiptest import daemons
from integration.walshiptest.lsn import (
    fmt_lsn, parse_lsn, parse_segment, position_lsn, segment_name)
from integration.walshiptest.pg import PgCluster, PgEnv
from integration.walshiptest.ports import free_port
from integration.walshiptest.procs import Proc, log, read_text
from integration.walshiptest.waits import StepError, wait_until

from integration import statefile
from integration import wirelib

SEG = 1 << 20
NOT_PRIMARY = "is in recovery, not a primary"


class PgNeverSilentTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.dir = self.env.mkdir("ns")
        self.sock = self.env.mkdir("ns", "sock")
        self.logs = self.env.mkdir("ns", "logs")
        self.logs_to_show = []

    def tearDown(self):
        for path in self.logs_to_show:
            sys.stderr.write("---- %s\n%s\n" % (path, self.log_text(path)[-4000:]))

    # -- helpers ----------------------------------------------------------
    def log_text(self, path, since=0):
        return read_text(path, since)

    def cluster(self, name, settings=None):
        pg = PgCluster(self.env, name, os.path.join(self.dir, name), self.sock,
                       free_port(), self.logs)
        pg.initdb(1)
        conf = {"port": pg.port, "unix_socket_directories": self.sock,
                "listen_addresses": "", "wal_level": "replica", "max_replication_slots": 4,
                "max_wal_senders": 4, "checkpoint_timeout": "1h"}
        conf.update(settings or {})
        pg.configure(conf)
        pg.start()
        self.logs_to_show.append(pg.log_path)
        return pg

    def start_agent(self, pg, name, slot=None, pg_data=False):
        """An agent beside `pg`, without a slot unless `slot` names one (and
        with --pg-data when `pg_data`); returns (daemons.Agent, control address)."""
        ports = os.path.join(self.dir, "%s.ports" % name)
        self.logs_to_show.append(os.path.join(self.logs, "%s.log" % name))
        slot_args = ["--pg-slot="]
        if slot:
            slot_args = ["--pg-slot=%s" % slot,
                         "--state-dir=%s" % self.env.mkdir("ns", name + "-state")]
        if pg_data:
            slot_args.append("--pg-data=%s" % pg.datadir)
        agent = daemons.Agent(
            pg.pg_wal, self.logs, label=name,
            extra_args=["--format=postgres", "--pg-conninfo=%s" % pg.conninfo()] + slot_args,
            program=self.env.binaries["walship-agent"], port_file=ports,
            launcher=self.env).start(timeout=60)
        return agent, agent.control

    def start_replica(self, name, control, dest):
        log_path = os.path.join(self.logs, "%s.log" % name)
        if log_path not in self.logs_to_show:
            self.logs_to_show.append(log_path)
        return Proc(self.env, name, [
            self.env.binaries["walship-replica"], "--agent=%s" % control, "--dest=%s" % dest,
            "--name=%s" % name, "--insecure"], log_path)

    def status(self, control):
        """walship-status --json, parsed; None when the agent did not answer."""
        return daemons.try_agent_status(control, timeout=10)

    def durable(self, dest):
        """(segment, LSN, complete) the replica holds durably; None before any."""
        try:
            st = statefile.read_durable(dest)
        except (OSError, ValueError):
            return None
        if not st or parse_segment(st["segment"], SEG) is None:
            return None
        return st["segment"], position_lsn(st, SEG), st["complete"]

    def wait_holds(self, dest, lsn, what, timeline=1, whole_before=False):
        """Waits until the replica in `dest` holds `lsn` of `timeline`
        durably; with `whole_before`, also the segment before the one
        holding it whole (the agent vouched for it: renamed from .partial)."""
        prev = os.path.join(dest, segment_name(timeline, lsn // SEG - 1, SEG))

        def holds():
            d = self.durable(dest)
            if not d or parse_segment(d[0], SEG)[0] != timeline or d[1] < lsn:
                return False
            return not whole_before or os.path.exists(prev)
        wait_until(holds, 30, what, interval=0.05)

    def changes(self, before, after):
        """What differs between two files() listings, one line per file."""
        lines = []
        for n in sorted(set(before) | set(after)):
            if before.get(n) != after.get(n):
                lines.append("%s: %s -> %s" % (n, "%d bytes, crc32 %08x" % before[n]
                                               if n in before else "absent",
                                               "%d bytes, crc32 %08x" % after[n]
                                               if n in after else "absent"))
        return "\n".join(lines)

    def write_wal(self, pg, rows):
        pg.psql("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, %d) g" % rows)
        return pg.lsn()

    # -- 1 ----------------------------------------------------------------
    def test_gap_across_a_timeline_switch_is_named(self):
        pg = self.cluster("primary", {"max_wal_size": "4MB", "min_wal_size": "2MB",
                                      "wal_keep_size": 0})
        pg.psql("CREATE TABLE t (x int, pad text)")
        agent, control = self.start_agent(pg, "agent")
        dest1, dest2 = os.path.join(self.dir, "r1"), os.path.join(self.dir, "r2")
        r1 = self.start_replica("r1", control, dest1)
        r2 = self.start_replica("r2", control, dest2)
        end = self.write_wal(pg, 500)
        self.wait_holds(dest1, end, "r1 to hold the first rows")
        self.wait_holds(dest2, end, "r2 to hold the first rows")

        # r1 stops inside segment S.
        self.assertEqual(r1.stop(), 0)
        seg_s, lsn_s, complete = self.durable(dest1)
        self.assertFalse(complete, "r1 stopped at the end of %s; the test wants it inside"
                         % seg_s)
        log("r1 stopped at %s in %s", fmt_lsn(lsn_s), seg_s)

        # The primary writes on (r2 follows) and checkpoints until S and
        # the two segments after it are gone from pg_wal.
        segno_s = parse_segment(seg_s, SEG)[1]

        def gone():
            self.write_wal(pg, 2000)
            pg.psql("SELECT pg_switch_wal()")
            # The segment switched from is removed at the next checkpoint:
            # r2 holds it whole first (else it would stop on a gap too).
            end = self.write_wal(pg, 10)
            self.wait_holds(dest2, end, "r2 to follow the primary", whole_before=True)
            pg.psql("CHECKPOINT")
            held = [seg[1] for seg in (parse_segment(n, SEG) for n in os.listdir(pg.pg_wal))
                    if seg and seg[0] == 1]
            return min(held) > segno_s + 2
        wait_until(gone, 40, "%s and the two segments after it to be removed from "
                   "pg_wal" % seg_s, interval=0)
        log("%s and the two segments after it are gone from pg_wal: %s", seg_s,
            sorted(os.listdir(pg.pg_wal)))

        # The primary stops well inside a segment, r2 holding all of its
        # WAL (a clean shutdown waits until the agent reports its shutdown
        # checkpoint replicated); r2 stops after it, at the point where
        # the timeline will switch.
        end = self.write_wal(pg, 100)
        while end % SEG > SEG - (64 << 10) or end % SEG < (8 << 10):
            end = self.write_wal(pg, 200)
        self.wait_holds(dest2, end, "r2 to hold the primary's last rows")
        self.assertEqual(pg.stop("fast"), 0)
        self.assertEqual(r2.stop(), 0)
        seg_r2, lsn_r2, _ = self.durable(dest2)
        log("r2 stopped at %s in %s", fmt_lsn(lsn_r2), seg_r2)

        # The same data directory comes back in recovery, then is promoted.
        pg.touch("standby.signal")
        pg.start(wait_for=("ready", "standby"))
        self.assertEqual(pg.psql("SELECT pg_is_in_recovery()"), "t")

        def not_primary():
            st = self.status(control)
            return st is not None and NOT_PRIMARY in st.get("source_error", "") and st
        # Checked last: a failure of what the replicas do across the switch,
        # the main claim here, is reported first.
        try:
            in_recovery = wait_until(not_primary, 15, "the agent to say not primary",
                                     interval=0.1)
        except StepError as e:
            in_recovery = "%s; last status: %s" % (e, self.status(control))
        self.assertEqual(pg.promote(), "t")
        history = os.path.join(pg.pg_wal, "00000002.history")
        self.assertTrue(os.path.exists(history))
        with open(history) as f:
            switch = parse_lsn(f.read().split()[1])
        log("timeline 2 from %s", fmt_lsn(switch))
        self.assertEqual(segment_name(1, switch // SEG, SEG), seg_r2,
                         "set-up: the switch point %s is not in r2's segment"
                         % fmt_lsn(switch))
        self.assertLessEqual(lsn_r2, switch)
        end = self.write_wal(pg, 100)

        # r2 continues across the switch, and holds timeline 2 as pg_wal does.
        r2 = self.start_replica("r2", control, dest2)
        self.wait_holds(dest2, end, "r2 to follow onto timeline 2", timeline=2)
        self.assertEqual(r2.stop(), 0)
        self.assert_timeline_held(dest2, pg.pg_wal, 2, switch // SEG, end)

        # r1 stops on the gap, naming S, and skips nothing.
        since = len(self.log_text(r1.log_path))
        r1 = self.start_replica("r1", control, dest1)

        def outcome():
            skipped = [n for n in os.listdir(dest1) if n.startswith("00000002")]
            return skipped or not r1.alive()
        wait_until(outcome, 30, "r1 to stop or to skip to timeline 2", interval=0.05)
        skipped = [n for n in os.listdir(dest1) if n.startswith("00000002")]
        self.assertEqual(skipped, [], "r1 skipped the timeline 1 WAL after %s (removed from "
                         "pg_wal) and continued on timeline 2 with %s"
                         % (fmt_lsn(lsn_s), skipped))
        self.assertEqual(r1.wait(30), 3, self.log_text(r1.log_path, since))
        self.assertRegex(self.log_text(r1.log_path, since), r"stopping: .*gap: .*%s" % seg_s)
        self.assertRegex(self.log_text(agent.log_path), r"gap: .*%s" % seg_s)
        self.assertEqual([n for n in os.listdir(dest1) if n.startswith("00000002")], [])

        self.assertIsInstance(in_recovery, dict, in_recovery)
        self.assertEqual(agent.stop(), 0)

    def assert_timeline_held(self, dest, pg_wal, tli, first_segno, end):
        """dest holds pg_wal's history file of `tli` and its segments from
        `first_segno` up to `end`, byte for byte."""
        with open(os.path.join(dest, "%08X.history" % tli), "rb") as f:
            held = f.read()
        with open(os.path.join(pg_wal, "%08X.history" % tli), "rb") as f:
            self.assertEqual(held, f.read())
        for segno in range(first_segno, end // SEG + 1):
            name = segment_name(tli, segno, SEG)
            last = segno == end // SEG
            path = os.path.join(dest, name)
            if last and not os.path.exists(path):
                path += ".partial"
            self.assertTrue(os.path.exists(path), "r2 lacks %s" % name)
            with open(path, "rb") as f:
                held = f.read()
            want = end % SEG if last else SEG
            self.assertGreaterEqual(len(held), want, name)
            if path.endswith(".partial"):
                # What it holds up to `end`; a live .partial is pre-sized
                # with zeros past its data (replica/disk_format.md 8).
                held = held[:want]
            with open(os.path.join(pg_wal, name), "rb") as f:
                self.assertTrue(f.read(len(held)) == held,
                                "r2's %s differs from pg_wal's" % name)

    # -- 2 ----------------------------------------------------------------
    def test_an_agent_beside_a_standby_answers_not_primary(self):
        pg = self.cluster("primary")
        pg.psql("CREATE TABLE t (x int, pad text)")
        a1, control1 = self.start_agent(pg, "agent-primary")
        dest = os.path.join(self.dir, "r1")
        r1 = self.start_replica("r1", control1, dest)
        end = self.write_wal(pg, 300)
        while end % SEG < (16 << 10):  # bytes of its segment to hold
            end = self.write_wal(pg, 100)
        self.wait_holds(dest, end, "r1 to hold the rows")
        self.assertEqual(r1.stop(), 0)
        self.assertEqual(a1.stop(), 0)

        # An unrecorded tail: walship.state trails what the .partial holds
        # (walship.progress lost with a power loss).
        st = statefile.read_durable(dest)
        self.assertFalse(st["complete"], st)
        with open(os.path.join(dest, st["segment"] + ".partial"), "rb") as f:
            partial = f.read()
        # Half of what the records say it holds (a live .partial is pre-sized
        # with zeros: its length is not its data, replica/disk_format.md 8).
        recorded = st["offset"] // 2
        with open(os.path.join(dest, statefile.STATE), "wb") as f:
            f.write(statefile.encode(st["stream"], st["segment"], recorded,
                                     prefix_crc=wirelib.crc32c(partial[:recorded]),
                                     seq=st["seq"] + 1))
        if os.path.exists(os.path.join(dest, statefile.PROGRESS)):
            os.unlink(os.path.join(dest, statefile.PROGRESS))
        before = statefile.replica_files(dest)

        # A standby of that primary, and an agent beside it.
        standby = PgCluster(self.env, "standby", os.path.join(self.dir, "standby"),
                               self.sock, free_port(), self.logs)
        pg.basebackup(standby, wal="stream", write_recovery_conf=True, timeout=120)
        standby.configure({"port": standby.port})
        standby.start(wait_for=("ready", "standby"))
        self.logs_to_show.append(standby.log_path)
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "t")
        a2, control2 = self.start_agent(standby, "agent-standby")

        since = len(self.log_text(r1.log_path))
        r1 = self.start_replica("r1", control2, dest)

        def retried_or_stopped():
            text = self.log_text(r1.log_path, since)
            return not r1.alive() or len(re.findall(r"session ended: .*retrying", text)) >= 3
        wait_until(retried_or_stopped, 30, "r1 to retry three times or stop", interval=0.05)
        text = self.log_text(r1.log_path, since)
        self.assertEqual(self.changes(before, statefile.replica_files(dest)), "",
                         "r1 changed its files on a refusal by an agent beside a standby")
        self.assertTrue(r1.alive(), "r1 stopped (%s):\n%s" % (r1.returncode(), text))
        self.assertNotIn("discarding", text)
        self.assertIn(NOT_PRIMARY, text)
        st = self.status(control2)
        self.assertIsNotNone(st)
        self.assertIn(NOT_PRIMARY, st.get("source_error", ""), st)
        self.assertIn("PostgreSQL is in recovery", self.log_text(a2.log_path))
        self.assertRegex(self.log_text(a2.log_path),
                         r"handshake from replica r1 .*not now, the replica retries: .*"
                         + NOT_PRIMARY)
        self.assertEqual(r1.stop(), 0)
        self.assertEqual(self.changes(before, statefile.replica_files(dest)), "")
        self.assertEqual(a2.stop(), 0)


    # -- 3 ----------------------------------------------------------------
    def test_sigterm_stops_an_agent_still_waiting_for_postgresql(self):
        """An agent started before its PostgreSQL (a node still down for
        pg_rewind under an HA manager) waits for it; SIGTERM must stop it
        then, not once the start-up timeout (30 s) has passed."""
        wal = self.env.mkdir("ns", "no-pg-wal")
        log_path = os.path.join(self.logs, "agent-waiting.log")
        self.logs_to_show.append(log_path)
        agent = Proc(self.env, "agent-waiting", [
            self.env.binaries["walship-agent"], "--format=postgres", "--wal-dir=%s" % wal,
            "--pg-conninfo=host=127.0.0.1 port=%d user=nobody connect_timeout=2" % free_port(),
            "--pg-slot=", "--listen=127.0.0.1:0", "--data-listen=127.0.0.1:0",
            "--insecure"], log_path)
        wait_until(lambda: "waiting for PostgreSQL" in read_text(log_path), 30,
                   "the agent to wait for PostgreSQL")
        agent.signal_process(signal.SIGTERM)
        rc = agent.wait(10)
        self.assertEqual(rc, 0, "SIGTERM did not stop the agent waiting for PostgreSQL "
                         "within 10 s (exit %s)" % rc)
        self.assertRegex(read_text(log_path), r"received SIGTERM while starting")

    def test_a_fast_shutdown_completes_while_no_replica_holds_it(self):
        pg = self.cluster("primary")
        pg.psql("CREATE TABLE t (x int, pad text)")
        agent, control = self.start_agent(pg, "agent", pg_data=True)
        dest = os.path.join(self.dir, "r1")
        r1 = self.start_replica("r1", control, dest)
        self.wait_holds(dest, self.write_wal(pg, 50), "r1 to hold the rows")
        wait_until(lambda: pg.psql("SELECT count(*) FROM pg_stat_replication WHERE "
                                   "application_name = 'walship'") == "1",
                      30, "the agent's flush feed", interval=0.1)
        # The replica is down: nothing will ever confirm the shutdown
        # checkpoint. The feed must not hold the shutdown up.
        self.assertEqual(r1.stop(), 0)
        self.write_wal(pg, 50)
        os.kill(pg.proc.pid, signal.SIGINT)
        wait_until(lambda: not pg.running(), 60,
                   "PostgreSQL to finish a fast shutdown while the agent runs", interval=0.1)
        log = self.log_text(os.path.join(self.logs, "agent.log"))
        self.assertIn("PostgreSQL is shutting down: closed the flush feed", log)
        agent.stop()

    # -- 4 ----------------------------------------------------------------
    def test_an_idle_replica_at_a_segment_end_keeps_its_segment(self):
        pg = self.cluster("primary", {"max_wal_size": "4MB", "min_wal_size": "2MB",
                                      "wal_keep_size": 0})
        pg.psql("CREATE TABLE t (x int, pad text)")
        agent, control = self.start_agent(pg, "agent", slot="walship_idle")
        dest = os.path.join(self.dir, "r1")
        r1 = self.start_replica("r1", control, dest)
        self.wait_holds(dest, self.write_wal(pg, 200), "r1 to hold the rows")
        # The primary switches segments and goes idle: r1 holds all of
        # segment X, but no byte of X+1 is flushed, so X is not yet
        # confirmed (checkpointed) by the agent.
        x_end = parse_lsn(pg.psql("SELECT pg_switch_wal()"))
        x_end = (x_end // SEG + 1) * SEG
        x_name = segment_name(1, x_end // SEG - 1, SEG)
        self.wait_holds(dest, x_end, "r1 to hold %s whole" % x_name)

        def restart_lsn():
            return parse_lsn(pg.psql(
                "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'walship_idle'"))
        wait_until(lambda: restart_lsn() >= x_end - SEG, 30,
                   "the slot to reach %s" % x_name, interval=0.2)
        # Two rounds of the slot keeper: it must not move past X.
        time.sleep(2.5)
        self.assertLess(restart_lsn(), x_end,
                        "the slot left %s, which the agent still has to confirm" % x_name)
        # A checkpoint while the agent is stopped keeps X, and once the
        # primary writes again r1 goes on past it.
        agent.proc.signal_group(signal.SIGSTOP)
        pg.psql("CHECKPOINT")
        pg.psql("CHECKPOINT")
        self.assertIn(x_name, pg.psql("SELECT string_agg(name, ' ') FROM pg_ls_waldir()"))
        agent.proc.signal_group(signal.SIGCONT)
        end = self.write_wal(pg, 200)
        self.wait_holds(dest, end, "r1 to hold the rows after %s" % x_name, whole_before=True)
        self.assertTrue(r1.alive(), "r1 stopped:\n" + self.log_text(
            os.path.join(self.logs, "r1.log"))[-2000:])
        self.assertTrue(os.path.exists(os.path.join(dest, x_name)))


if __name__ == "__main__":
    unittest.main()
