"""The agent's flush feed: a walsender pushes each flush, acks go back.

A real PostgreSQL 15 primary, walship-agent in postgres mode and one
replica. The agent's safety-net query runs only every 10 minutes here, so
WAL that reaches the replica within the test's bounded waits was pushed by
the feed, not found by a query.

1. A committed row reaches the replica; pg_stat_replication lists the agent
   as 'walship' with a flush_lsn that the replica holds durably (never more).
2. With synchronous_standby_names = 'walship', a commit waits (SyncRep)
   while the replica is stopped and returns once it is resumed and has the
   commit durably.
3. The walsender is terminated: the agent logs it, keeps shipping by query,
   and opens the feed again.
4. A role without REPLICATION: the agent logs why the feed is unavailable
   and ships by query; pg_stat_replication has no walship row.
5. The primary lists the feed as async: replica positions reach it paced
   (at most one status update per --pg-feed-async-report-ms), the last one
   without further acknowledgements. Named in synchronous_standby_names, the
   agent sees it (pg_stat_replication.sync_state) and reports at once.
6. The postmaster is killed while a backend is busy: the feed's walsender
   exits at once, so the agent applies the crash rule at once; the backend
   goes on to write and commit its transaction after that first scan, and
   the replica still ends with every valid record in pg_wal.
7. With the feed off, the flush position query is a prepared statement,
   asked at most every 2 ms while a big INSERT streams WAL in (every 25 ms
   with --pg-query-interval-ms=25); after its backend is terminated the agent
   connects again, prepares it again on the new connection and keeps
   shipping.
8. A page below the flush position with a damaged header: the agent logs
   why it stops there and ships nothing past it, and goes on once the page
   is whole again.
9. The threads a synchronous commit waits on (the agent's feed and control
   threads, the replica's receiving and flushing threads) run with the
   scheduler slice --sched-slice-us asks for; the others, those they start
   included, with the kernel's. With --sched-fifo-priority they run under
   SCHED_FIFO instead, the others under the normal policy; the replica's
   receiving thread leaves it while a backlog arrives and takes it again
   once live. Refused (an ordinary user), it is a warning in each log and
   the slice.
"""
import os
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

from integration.walshiptest import daemons
from integration.walshiptest.lsn import fmt_lsn, parse_lsn
from integration.walshiptest.pg import PgEnv, SUPERUSER, test_primary, waldump_end
from integration.walshiptest.procs import Proc, log, read_text, thread_policies, thread_slices
from integration.walshiptest.waits import wait_until

from integration import statefile

SEG = 1 << 20


class PgFeedTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.pg, self.dir, self.logs = test_primary(self.env, "feed")
        self.pg.psql("CREATE TABLE t (x int)")
        self.logs_to_show = []

    def tearDown(self):
        for path in self.logs_to_show:
            sys.stderr.write("---- %s\n%s\n" % (path, self.log_text(path)[-4000:]))

    def log_text(self, path):
        return read_text(path)

    def start_pair(self, conninfo=None, slot="walship_feed", extra=(), pg_data=True,
                   replica_extra=()):
        """An agent (with --pg-data unless `pg_data` is false) and a replica."""
        ports = os.path.join(self.dir, "agent.ports")
        self.agent_log = os.path.join(self.logs, "agent.log")
        self.replica_log = os.path.join(self.logs, "replica.log")
        self.logs_to_show += [self.agent_log, self.replica_log]
        self.agent = daemons.Agent(
            self.pg.pg_wal, self.logs, label="agent",
            extra_args=["--format=postgres",
                        "--pg-conninfo=%s" % (conninfo or self.pg.conninfo()),
                        "--pg-slot=%s" % slot,
                        "--state-dir=%s" % self.env.mkdir("feed", "agent-state"),
                        "--pg-feed-query-interval-ms=600000", "--metrics-listen=127.0.0.1:0"] +
            (["--pg-data=%s" % self.pg.datadir] if pg_data else []) + list(extra),
            program=self.env.binaries["walship-agent"], port_file=ports,
            launcher=self.env).start(timeout=30)
        control = self.agent.control
        self.metrics_url = "http://%s/metrics" % self.agent.metrics
        self.dest = os.path.join(self.dir, "replica")
        self.replica = Proc(self.env, "replica", [
            self.env.binaries["walship-replica"], "--agent=%s" % control,
            "--dest=%s" % self.dest, "--name=r1", "--insecure"] + list(replica_extra),
            self.replica_log)

    def replica_lsn(self):
        """The replica's durable LSN (walship.state, or walship.progress past
        it; 0 before any)."""
        return statefile.durable_lsn(self.dest, SEG)

    def commit_row(self):
        """Inserts a row; returns an LSN at or past the end of its commit record."""
        self.pg.psql("INSERT INTO t VALUES (1)")
        return self.pg.lsn("pg_current_wal_insert_lsn()")

    def commit_row_before(self):
        """Inserts a row; returns an LSN before the end of its commit record."""
        return parse_lsn(self.pg.psql(
            "BEGIN; INSERT INTO t VALUES (1); SELECT pg_current_wal_insert_lsn(); COMMIT"))

    def walship_row(self):
        row = self.pg.psql("SELECT flush_lsn, write_lsn FROM pg_stat_replication "
                           "WHERE application_name = 'walship'")
        if not row:
            return None
        flush, write = row.split("|")
        return (parse_lsn(flush) if flush else 0, parse_lsn(write) if write else 0)

    def feed_up(self):
        return self.walship_row() is not None

    def metric(self, name, labels=""):
        """A metric series as the agent reports it (None when absent);
        `labels` as rendered, e.g. '{when="paced"}'."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + labels + " "):
                    return float(line.split()[1])
        return None

    def feed_metric(self):
        return self.metric("walship_agent_pg_flush_feed_up")

    def acks(self):
        """Acknowledgements the agent has read from replica r1."""
        return self.metric("walship_agent_acks_total", '{replica="r1"}') or 0

    def commit_one_by_one(self, commits):
        """Commits `commits` rows, each held by the replica before the next
        (so at least one new position per commit reaches the agent); returns
        the seconds it took and the last commit's end."""
        start = time.monotonic()
        for _ in range(commits):
            end = self.commit_row()
            wait_until(lambda: self.replica_lsn() >= end, 30,
                       "the replica to hold the commit", interval=0.005)
        return time.monotonic() - start, end

    def test_feed_pushes_flushes_and_reports_what_replicas_hold(self):
        self.start_pair()
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        self.assertIn("flush feed: a walsender pushes each flush", self.log_text(self.agent_log))
        for _ in range(5):
            end = self.commit_row()
            wait_until(lambda: self.replica_lsn() >= end, 30,
                       "the replica to hold the commit (pushed by the feed)", interval=0.02)
        wait_until(lambda: (self.walship_row() or (0, 0))[0] >= end, 15,
                   "pg_stat_replication to show the replica's flush position", interval=0.05)
        # Never more than the replica holds: read the primary's view first.
        for _ in range(20):
            reported, written = self.walship_row()
            self.assertLessEqual(reported, self.replica_lsn())
            self.assertGreaterEqual(written, reported)
            self.commit_row()

    def test_synchronous_commit_waits_for_a_walship_replica(self):
        self.start_pair()
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        self.pg.psql("ALTER SYSTEM SET synchronous_standby_names = 'walship'")
        self.pg.psql("SELECT pg_reload_conf()")
        before = self.commit_row_before()  # returns: the replica acknowledged it
        self.assertGreater(self.replica_lsn(), before)
        # Stop the replica: a commit must wait for it.
        self.replica.signal_group(signal.SIGSTOP)
        try:
            argv = [self.env.pg("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                    "-d", self.pg.conninfo(), "-c",
                    "INSERT INTO t VALUES (2) RETURNING pg_current_wal_insert_lsn()"]
            waiter = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
            self.addCleanup(lambda: waiter.poll() is None and waiter.kill())
            wait_until(lambda: self.pg.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == "1",
                30, "the commit to wait for synchronous replication", interval=0.1)
            time.sleep(1.0)
            self.assertIsNone(waiter.poll(), "the commit returned while the replica was stopped")
        finally:
            self.replica.signal_group(signal.SIGCONT)
        out, _ = waiter.communicate(timeout=60)
        self.assertEqual(waiter.returncode, 0, out)
        self.assertEqual(self.pg.psql("SELECT count(*) FROM t WHERE x = 2"), "1")
        # The commit returned, so its record is durable on the replica.
        self.assertGreater(self.replica_lsn(), parse_lsn(out.strip()))
        reported, _ = self.walship_row()
        self.assertLessEqual(reported, self.replica_lsn())

    def test_threads_a_synchronous_commit_waits_on_ask_for_a_short_slice(self):
        # common/sched_slice.h: the agent's feed and control threads and the
        # replica's receiving and flushing threads; no other thread.
        self.start_pair(extra=["--sched-slice-us=250"])
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "the replica to hold the commit",
                   interval=0.02)
        agent, replica = thread_slices(self.agent.pid), thread_slices(self.replica.pid)
        log("slices in ns: agent %s; replica %s", agent, replica)
        self.assertEqual(agent["ws-pg-source"], [250000])
        self.assertEqual(agent["ws-control"], [250000])
        self.assertEqual(replica["ws-receive"], [100000], "the replica's default")
        self.assertEqual(replica["ws-flush"], [100000])
        # Every other thread, those they start included (a session's event
        # and acknowledgement writers, the spare file's, gRPC's), keeps the
        # kernel's default: the main thread's.
        for slices, main, asked in ((agent, "walship-agent", ("ws-pg-source", "ws-control")),
                                    (replica, "walship-replica", ("ws-receive", "ws-flush"))):
            default = slices[main][0]
            self.assertNotIn(default, (100000, 250000))
            others = {name: set(s) for name, s in slices.items() if name not in asked}
            self.assertEqual(others, {name: {default} for name in others})

    def test_a_fifo_priority_refused_is_a_warning_and_the_slice(self):
        # The daemons run as an ordinary user, without CAP_SYS_NICE.
        self.start_pair(extra=["--sched-fifo-priority=1"],
                        replica_extra=["--sched-fifo-priority=1"])
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "the replica to hold the commit",
                   interval=0.02)
        for path in (self.agent_log, self.replica_log):
            self.assertIn("cannot run under the real-time policy SCHED_FIFO at priority 1",
                          self.log_text(path))
        for pid, asked in ((self.agent.pid, ("ws-pg-source", "ws-control")),
                           (self.replica.pid, ("ws-receive", "ws-flush"))):
            policies, slices = thread_policies(pid), thread_slices(pid)
            self.assertEqual({p for ps in policies.values() for p in ps}, {(0, 0)})
            for name in asked:
                self.assertEqual(slices[name], [100000], name)

    def test_with_a_fifo_priority_those_threads_run_realtime_but_not_for_a_backlog(self):
        # As we are (root, with CAP_SYS_NICE), not as the ordinary user the
        # other tests' daemons run as: that one is refused, with a warning.
        user, self.env.run_as = self.env.run_as, None
        try:
            self.start_pair(extra=["--sched-fifo-priority=1"],
                            replica_extra=["--sched-fifo-priority=2"])
        finally:
            self.env.run_as = user
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "the replica to hold the commit",
                   interval=0.02)
        fifo, other = 1, 0
        agent, replica = thread_policies(self.agent.pid), thread_policies(self.replica.pid)
        log("policies: agent %s; replica %s", agent, replica)
        self.assertEqual(agent["ws-pg-source"], [(fifo, 1)])
        self.assertEqual(agent["ws-control"], [(fifo, 1)])
        self.assertEqual(replica["ws-receive"], [(fifo, 2)])
        self.assertEqual(replica["ws-flush"], [(fifo, 2)])
        for policies, asked in ((agent, ("ws-pg-source", "ws-control")),
                                (replica, ("ws-receive", "ws-flush"))):
            others = {n: set(p) for n, p in policies.items() if n not in asked}
            self.assertEqual(others, {n: {(other, 0)} for n in others})
        # A backlog (the replica stopped while a big INSERT wrote about 100 MiB
        # of WAL): received at the normal policy, then real-time again.
        self.replica.signal_group(signal.SIGSTOP)
        try:
            self.pg.psql("INSERT INTO t SELECT generate_series(1, 1500000)")
            end = self.pg.lsn("pg_current_wal_insert_lsn()")
        finally:
            self.replica.signal_group(signal.SIGCONT)
        seen = set()
        def caught_up():
            seen.update(thread_policies(self.replica.pid).get("ws-receive", []))
            return self.replica_lsn() >= end
        wait_until(caught_up, 120, "the replica to catch up", interval=0.002)
        self.assertIn((other, 0), seen, "ws-receive stayed real-time through the backlog")
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "the replica to hold the commit",
                   interval=0.02)
        self.assertEqual(thread_policies(self.replica.pid)["ws-receive"], [(fifo, 2)])

    def test_async_standby_hears_positions_paced_and_a_sync_one_at_once(self):
        # A long interval, so that pacing shows in counts, not in timings.
        self.start_pair(extra=["--ack-interval-ms=400"])
        wait_until(lambda: self.metric("walship_agent_pg_feed_synchronous") == 0, 30,
                   "the agent to read that the primary lists the feed as async", interval=0.1)
        self.assertIn("as an async standby", self.log_text(self.agent_log))
        def updates():
            return {w: self.metric("walship_agent_pg_status_updates_total",
                                   '{when="%s"}' % w) or 0 for w in ("at_once", "paced")}
        before, acks_before = updates(), self.acks()
        commits = 30
        elapsed, end = self.commit_one_by_one(commits)
        after = updates()
        # The replica acknowledged paced (one per interval, plus the one
        # that may fall due at each end, plus its 1 s keepalive), and the
        # agent reported no more often.
        acked = self.acks() - acks_before
        self.assertLessEqual(acked, elapsed / 0.4 + 2 + elapsed)
        self.assertLess(acked, commits, "the replica acknowledged every flush at once")
        sent = sum(after.values()) - sum(before.values())
        self.assertLessEqual(sent, elapsed / 0.4 + 2)
        self.assertLess(sent, commits, "every acknowledgement was reported")
        # The last position held back still reaches the primary without any
        # further acknowledgement, and never more than the replica holds.
        wait_until(lambda: (self.walship_row() or (0, 0))[0] >= end, 15,
                   "pg_stat_replication to show the last position", interval=0.05)
        self.assertLessEqual(self.walship_row()[0], self.replica_lsn())
        # Named in synchronous_standby_names: reports at once again, and a
        # commit waits for the replica as before.
        self.pg.psql("ALTER SYSTEM SET synchronous_standby_names = 'walship'")
        self.pg.psql("SELECT pg_reload_conf()")
        wait_until(lambda: self.metric("walship_agent_pg_feed_synchronous") == 1, 30,
                   "the agent to read that the primary waits for it", interval=0.1)
        self.assertIn("as a sync standby", self.log_text(self.agent_log))
        # The replica hears it too (a commit would otherwise wait for a held
        # acknowledgement).
        wait_until(lambda: "acknowledge new durable positions at once" in
                   self.log_text(self.replica_log), 30,
                   "the replica to acknowledge at once", interval=0.1)
        before, acks_before = updates(), self.acks()
        for _ in range(10):
            inside = self.commit_row_before()  # returns once a report covered it
            self.assertGreater(self.replica_lsn(), inside)
        after = updates()
        self.assertGreaterEqual(self.acks() - acks_before, 10)
        self.assertGreaterEqual(after["at_once"] - before["at_once"], 10)
        self.assertEqual(after["paced"], before["paced"], "a synchronous commit waited")

    def test_without_a_feed_replicas_acknowledge_paced(self):
        # With no feed nothing on the primary can wait for walship, so
        # --ack-interval-ms applies from the start.
        self.start_pair(extra=["--pg-feed=false", "--ack-interval-ms=400"])
        wait_until(lambda: "acknowledge new durable positions at most every 400ms" in
                   self.log_text(self.replica_log), 30,
                   "the replica to hear that it may pace its acknowledgements", interval=0.1)
        acks_before = self.acks()
        commits = 30
        elapsed, _ = self.commit_one_by_one(commits)
        acked = self.acks() - acks_before
        self.assertLessEqual(acked, elapsed / 0.4 + 2 + elapsed)
        self.assertLess(acked, commits, "the replica acknowledged every flush at once")
        self.assertIsNone(self.walship_row())
        self.assertEqual(self.feed_metric(), 0)

    def agent_query_backends(self):
        return [int(p) for p in self.pg.psql(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'walship-agent' "
            "AND query LIKE '%pg_current_wal_flush_lsn%'").split()]

    def test_lost_query_connection_is_opened_again_with_its_statement(self):
        # The flush position query is a prepared statement, which lives and
        # dies with its connection: after a reconnect the agent prepares it
        # again rather than calling one the new backend never heard of.
        self.pg.psql("ALTER ROLE %s SET log_statement = 'all'" % SUPERUSER)
        self.start_pair(extra=["--pg-feed=false"])
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "shipping by query", interval=0.05)
        old = wait_until(self.agent_query_backends, 10, "the agent's query backend",
                         interval=0.05)
        self.pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE application_name = 'walship-agent'")
        new = wait_until(lambda: [p for p in self.agent_query_backends() if p not in old],
                         30, "the agent to connect again", interval=0.05)
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30,
                   "shipping by query on the new connection", interval=0.05)
        # Executed as the statement prepared on the new connection.
        executed = "[%d] LOG:  execute walship_flush_position: SELECT" % new[0]
        wait_until(lambda: executed in self.log_text(self.pg.log_path), 10,
                   "the new backend to execute the prepared statement", interval=0.1)
        # Prepared before its first call there, not after a failed one.
        self.assertNotIn('prepared statement "walship_flush_position" does not exist',
                         self.log_text(self.pg.log_path))

    def queries_while_wal_streams_in(self, interval_s, extra=()):
        """Starts a pair without a feed, runs a big INSERT (which writes WAL
        far more often than any interval here) and checks the agent asked for
        the flush position at most once per `interval_s`, and that the
        replica holds the INSERT's WAL."""
        self.pg.psql("ALTER ROLE %s SET log_statement = 'all'" % SUPERUSER)
        self.start_pair(extra=["--pg-feed=false"] + list(extra))
        pid = wait_until(self.agent_query_backends, 30, "the agent's query backend",
                         interval=0.05)[0]
        executed = "[%d] LOG:  execute walship_flush_position: SELECT" % pid
        before = len(self.log_text(self.pg.log_path))
        start = time.monotonic()
        self.pg.psql("INSERT INTO t SELECT generate_series(1, 1500000)")
        end = self.pg.lsn("pg_current_wal_insert_lsn()")
        elapsed = time.monotonic() - start
        asked = self.log_text(self.pg.log_path)[before:].count(executed)
        self.assertLessEqual(asked, elapsed / interval_s + 5,
                             "%d queries in %.2fs" % (asked, elapsed))
        self.assertGreater(asked, min(10, elapsed / interval_s / 4),
                           "%d queries in %.2fs" % (asked, elapsed))
        wait_until(lambda: self.replica_lsn() >= end, 60, "the replica to hold it",
                   interval=0.05)

    def test_without_a_feed_queries_are_spaced_while_wal_streams_in(self):
        # PostgreSQL writing into pg_wal prompts the query, at most one per
        # 2 ms by default (--pg-query-interval-ms).
        self.queries_while_wal_streams_in(0.002)

    def test_query_interval_flag_spaces_queries_further(self):
        self.queries_while_wal_streams_in(0.025, ["--pg-query-interval-ms=25"])

    def test_damaged_page_below_the_flush_position_is_not_shipped(self):
        # A page in pg_wal below the flush position whose header is not this
        # segment's (damage, or a file that is not what its name says) stops
        # shipping at that page, with the reason logged; nothing past it
        # reaches the replica. Once the page is whole again shipping goes on.
        self.pg.psql("INSERT INTO t SELECT generate_series(1, 30000)")
        end = self.pg.lsn("pg_current_wal_flush_lsn()")
        page = (end - 3 * 8192) // 8192 * 8192  # whole, never rewritten by PostgreSQL
        name = self.pg.psql("SELECT pg_walfile_name('%X/%X')" % (page >> 32, page & 0xffffffff))
        path = os.path.join(self.pg.pg_wal, name)
        offset = page % SEG
        with open(path, "r+b") as f:
            f.seek(offset)
            whole = f.read(2)
            f.seek(offset)
            f.write(b"\xff\xff")  # xlp_magic
        self.start_pair(extra=["--pg-feed=false"])
        refused = "not shipping %s from offset %d" % (name, offset)
        wait_until(lambda: refused in self.log_text(self.agent_log), 30,
                   "the agent to refuse the damaged page", interval=0.1)
        wait_until(lambda: self.replica_lsn() == page, 30,
                   "the replica to hold everything before the damaged page", interval=0.05)
        time.sleep(0.5)
        self.assertEqual(self.replica_lsn(), page, "bytes past the damaged page were shipped")
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(whole)
        wait_until(lambda: self.replica_lsn() >= end, 30,
                   "shipping to go on once the page is whole", interval=0.05)

    def test_feed_comes_back_after_its_walsender_is_terminated(self):
        self.start_pair()
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        self.assertEqual(self.feed_metric(), 1)
        self.pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_replication "
                     "WHERE application_name = 'walship'")
        wait_until(lambda: "flush feed lost" in self.log_text(self.agent_log), 15,
                   "the agent to notice the lost feed", interval=0.1)
        wait_until(lambda: self.feed_metric() == 0, 5, "the metric to say it is down",
                   interval=0.05)
        # Still shipping (by query while the feed is down).
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "shipping by query", interval=0.05)
        wait_until(lambda: self.log_text(self.agent_log).count(
            "flush feed: a walsender pushes each flush") >= 2, 30, "the feed to reopen",
            interval=0.2)
        wait_until(self.feed_up, 15, "the feed's walsender again", interval=0.1)
        wait_until(lambda: self.feed_metric() == 1, 5, "the metric to say it is up",
                   interval=0.05)
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "shipping by the feed", interval=0.02)

    def test_role_without_replication_ships_by_query(self):
        self.pg.psql("CREATE ROLE plain LOGIN")
        conninfo = self.pg.conninfo().replace("user=%s" % SUPERUSER, "user=plain")
        self.assertIn("user=plain", conninfo)
        # Without pg_read_all_settings --pg-data cannot be checked: left out.
        self.start_pair(conninfo=conninfo, slot="", pg_data=False)
        wait_until(lambda: "flush feed unavailable" in self.log_text(self.agent_log), 30,
                   "the agent to say why there is no feed", interval=0.1)
        self.assertIn("REPLICATION attribute", self.log_text(self.agent_log))
        end = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= end, 30, "shipping by query", interval=0.05)
        self.assertIsNone(self.walship_row())

    def test_wal_written_after_the_postmaster_died_is_shipped(self):
        self.start_pair()
        wait_until(self.feed_up, 30, "the feed's walsender", interval=0.1)
        before = self.commit_row()
        wait_until(lambda: self.replica_lsn() >= before, 30, "the first commit", interval=0.02)
        # The InitPlan runs first and takes seconds without writing WAL; only
        # then are the rows inserted and the transaction committed. A backend
        # checks for postmaster death only when it waits, so it finishes.
        rows = 200000
        argv = [self.env.pg("psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-d", self.pg.conninfo(), "-c",
                "INSERT INTO t SELECT 5 FROM generate_series(1, %d) "
                "WHERE (SELECT count(*) FROM generate_series(1, 15000000)) > 0" % rows]
        busy = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        self.addCleanup(lambda: busy.poll() is None and busy.kill())
        wait_until(lambda: self.pg.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT INTO t SELECT 5%' "
            "AND state = 'active'") == "1", 30, "the busy backend", interval=0.02)
        self.pg.kill9_postmaster(timeout=60)
        out, _ = busy.communicate(timeout=60)
        self.assertEqual(busy.returncode, 0, out)
        self.assertIn("INSERT 0 %d" % rows, out, "the commit was acknowledged after the crash")
        agent_log = self.log_text(self.agent_log)
        self.assertIn("applying the crash rule", agent_log)
        end, records = waldump_end(self.env, self.pg.pg_wal, before, 1, SEG)
        self.assertGreater(records, rows, "the rows' WAL is in pg_wal")
        wait_until(lambda: self.replica_lsn() >= end, 30,
                   "the replica to hold the WAL written after the postmaster died, up to "
                   + fmt_lsn(end), interval=0.05)
        self.assertEqual(self.replica_lsn(), end, "shipped past the end of valid WAL")


if __name__ == "__main__":
    unittest.main()
