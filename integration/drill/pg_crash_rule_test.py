"""The crash rule runs only on positive evidence that the postmaster is gone.

When the agent cannot query the flush position and the postmaster is gone,
it ships the valid WAL past the last flush position (the crash rule,
agent/postgres/postgres_source.h). Fired against a primary that is still running it
would ship WAL that is not yet durable. A real PostgreSQL 15 primary, whose
pg_wal is relocated (initdb --waldir: PGDATA/pg_wal is a symlink) and the
agent given the real path, or whose agent runs in another PID namespace:

1. crash_rule_never_fires_against_a_live_primary: the agent's role is locked
   out (NOLOGIN, its backends terminated) while WAL is written, so every
   flush-position query fails while the postmaster runs. Without --pg-data,
   and with --pg-data naming the data directory, the agent never applies
   the crash rule, never holds more than pg_current_wal_flush_lsn() on the
   replica, logs why it waits, and ships on once it may log in again.
   With --pg-data, a kill -9 of the postmaster then does apply the crash
   rule, up to the end of the valid WAL in the relocated pg_wal.
2. crash_rule_never_fires_from_another_pid_namespace: the agent, given the
   right --pg-data, runs in a PID namespace of its own: it cannot see the
   postmaster, says so, and neither a lock-out nor a kill -9 of the
   postmaster makes it apply the crash rule.
3. pg_data_of_another_directory_is_refused_at_start: --pg-data naming another
   directory, or a --wal-dir that is not --pg-data's pg_wal, stops the agent
   at start with a message naming both; --pg-data without --format=postgres
   is a usage error.
"""
import os
import shutil
import sys
import time
import unittest

from integration.walshiptest.lsn import fmt_lsn
from integration.walshiptest.pg import PgCluster, PgEnv, SUPERUSER, waldump_end
from integration.walshiptest.ports import free_port
from integration.walshiptest.procs import Proc, SBIN_PATH, read_text
from integration.walshiptest.waits import StepError, wait_until

from integration import statefile

SEG = 1 << 20
ROLE = "walship_agent"
APPLIED = "applying the crash rule"
WAITS = "the crash rule does not run"


class PgCrashRuleTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.dir = self.env.mkdir("crash")
        self.logs = self.env.mkdir("crash", "logs")
        self.logs_to_show = []
        self.agent = None

    def tearDown(self):
        for path in self.logs_to_show:
            sys.stderr.write("---- %s\n%s\n" % (path, self.log_text(path)[-4000:]))

    def start_cluster(self, relocated):
        """A primary; with `relocated`, its pg_wal is a symlink to another
        directory (initdb --waldir). Returns the real WAL directory."""
        sock = self.env.mkdir("crash", "sock")
        self.data = os.path.join(self.dir, "primary")
        self.pg = PgCluster(self.env, "primary", self.data, sock, free_port(), self.logs)
        if relocated:
            wal = os.path.join(self.dir, "wal-elsewhere")
            self.env.run([self.env.pg("initdb"), "-D", self.data, "-U", SUPERUSER,
                          "--auth=trust", "--locale=C", "--encoding=UTF8", "--no-sync",
                          "--wal-segsize=1", "--waldir=%s" % wal], timeout=120)
            self.assertTrue(os.path.islink(self.pg.pg_wal))
        else:
            self.pg.initdb(1)
            wal = self.pg.pg_wal
        self.pg.configure({"port": self.pg.port, "unix_socket_directories": sock,
                           "listen_addresses": "", "wal_level": "replica",
                           "max_replication_slots": 4, "max_wal_senders": 4,
                           "checkpoint_timeout": "30min"})
        self.pg.start()
        self.logs_to_show.append(self.pg.log_path)
        self.pg.psql("CREATE TABLE t (x int)")
        # The agent's own role, so that it alone can be locked out.
        self.pg.psql("CREATE ROLE %s LOGIN REPLICATION" % ROLE)
        self.pg.psql("GRANT pg_read_all_settings TO %s" % ROLE)
        return wal

    def conninfo(self):
        return self.pg.conninfo().replace("user=%s" % SUPERUSER, "user=%s" % ROLE)

    def log_text(self, path):
        return read_text(path)

    def agent_argv(self, wal, pg_data=None):
        argv = [self.env.binaries["walship-agent"], "--format=postgres", "--wal-dir=%s" % wal,
                "--pg-conninfo=%s" % self.conninfo(), "--pg-slot=",
                "--listen=127.0.0.1:0", "--data-listen=127.0.0.1:0",
                "--port-file=%s" % self.ports, "--insecure"]
        if pg_data is not None:
            argv.append("--pg-data=%s" % pg_data)
        return argv

    def start_pair(self, wal, pg_data=None, name="agent", namespace=False):
        """An agent and one replica; with `namespace`, the agent runs in a
        PID namespace of its own (as root, dropping to the drill user)."""
        self.ports = os.path.join(self.dir, "%s.ports" % name)
        self.agent_log = os.path.join(self.logs, "%s.log" % name)
        self.logs_to_show.append(self.agent_log)
        argv = self.agent_argv(wal, pg_data)
        if namespace:
            argv = [shutil.which("unshare", path=SBIN_PATH), "--pid", "--fork",
                    "--kill-child", "--mount-proc",
                    shutil.which("setpriv", path=SBIN_PATH), "--reuid=%d" % self.env.uid,
                    "--regid=%d" % self.env.gid, "--clear-groups", "--"] + argv
        self.agent = Proc(self.env, name, argv, self.agent_log, as_user=not namespace)

        def control():
            if not self.agent.alive():
                raise StepError("the agent exited %s at start" % self.agent.returncode())
            try:
                with open(self.ports) as f:
                    return dict(l.strip().split("=", 1) for l in f if "=" in l).get("control")
            except OSError:
                return None
        addr = wait_until(control, 30, "agent port file", interval=0.05)
        self.dest = os.path.join(self.dir, "replica-%s" % name)
        self.replica_log = os.path.join(self.logs, "replica-%s.log" % name)
        self.logs_to_show.append(self.replica_log)
        self.replica = Proc(self.env, "replica-" + name, [
            self.env.binaries["walship-replica"], "--agent=%s" % addr,
            "--dest=%s" % self.dest, "--name=r1", "--insecure"], self.replica_log)

    def stop_pair(self):
        self.replica.stop()
        self.agent.stop()

    def replica_lsn(self):
        return statefile.durable_lsn(self.dest, SEG)

    def commit_row(self):
        self.pg.psql("INSERT INTO t VALUES (1)")
        return self.pg.lsn("pg_current_wal_insert_lsn()")

    def wait_shipped(self, end, what):
        wait_until(lambda: self.replica_lsn() >= end, 30, what, interval=0.05)

    def lock_out(self):
        """Every query of the agent fails from now on, the postmaster running."""
        self.pg.psql("ALTER ROLE %s NOLOGIN" % ROLE)
        self.pg.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE usename = '%s'" % ROLE)

    def let_in(self):
        self.pg.psql("ALTER ROLE %s LOGIN" % ROLE)

    def write_while_locked_out(self, seen):
        """Writes WAL while the agent is locked out, until it has logged
        `seen` (how it decided about the crash rule) and a while after; the
        replica never holds more than the primary has flushed."""
        start = len(self.log_text(self.agent_log))
        self.lock_out()
        deadline = time.time() + 30
        decided = None
        rounds = 0
        while decided is None or rounds < 20:
            self.pg.psql("INSERT INTO t SELECT generate_series(1, 2000)")
            # Read the replica first: the flush position only grows.
            held = self.replica_lsn()
            flushed = self.pg.lsn()
            self.assertLessEqual(held, flushed, "the replica holds %s, past the flush position "
                                 "%s of a running primary" % (fmt_lsn(held),
                                                              fmt_lsn(flushed)))
            text = self.log_text(self.agent_log)[start:]
            self.assertNotIn(APPLIED, text, "the crash rule fired against a running primary")
            if decided is None and seen in text:
                decided = time.time()
            if decided is not None:
                rounds += 1
            if time.time() > deadline:
                self.fail("the agent never logged %r while locked out" % seen)
        self.assertNotIn(APPLIED, self.log_text(self.agent_log)[start:],
                         "the crash rule fired against a running primary")

    def test_crash_rule_never_fires_against_a_live_primary(self):
        wal = self.start_cluster(relocated=True)
        # Without --pg-data the crash rule is off, and the agent says so.
        self.start_pair(wal)
        end = self.commit_row()
        self.wait_shipped(end, "the replica to hold the first commit")
        self.write_while_locked_out(WAITS)
        self.assertIn("without --pg-data", self.log_text(self.agent_log))
        self.assertIn("no --pg-data", self.log_text(self.agent_log))
        self.let_in()
        end = self.commit_row()
        self.wait_shipped(end, "shipping to go on once the agent may log in")
        self.stop_pair()

        # With --pg-data the agent checks that the postmaster named in
        # PGDATA/postmaster.pid runs before it decides anything.
        self.start_pair(wal, pg_data=self.data, name="agent-pgdata")
        end = self.commit_row()
        self.wait_shipped(end, "the replica to hold the first commit")
        self.write_while_locked_out(WAITS)
        pid = open(os.path.join(self.data, "postmaster.pid")).readline().strip()
        self.assertIn("postmaster PID %s of %s is running" % (pid, self.data),
                      self.log_text(self.agent_log))
        self.let_in()
        end = self.commit_row()
        self.wait_shipped(end, "shipping to go on once the agent may log in")

        # Positive evidence: the postmaster is gone. The crash rule ships
        # the valid WAL left in the relocated pg_wal.
        before = self.pg.lsn()
        self.pg.psql("INSERT INTO t SELECT generate_series(1, 5000)")
        self.pg.kill9_postmaster(timeout=30)
        wait_until(lambda: APPLIED in self.log_text(self.agent_log), 30,
                   "the agent to apply the crash rule", interval=0.05)
        end, records = waldump_end(self.env, wal, before, 1, SEG)
        self.assertGreater(records, 0)
        wait_until(lambda: self.replica_lsn() >= end, 30,
                   "the replica to hold the valid WAL up to " + fmt_lsn(end), interval=0.05)
        self.assertEqual(self.replica_lsn(), end, "shipped past the end of valid WAL")

    def test_crash_rule_never_fires_from_another_pid_namespace(self):
        if os.geteuid() != 0 or not shutil.which("unshare", path=SBIN_PATH):
            self.skipTest("needs root and unshare(1) for a PID namespace")
        wal = self.start_cluster(relocated=False)
        self.start_pair(wal, pg_data=self.data, namespace=True)
        end = self.commit_row()
        self.wait_shipped(end, "the replica to hold the first commit")
        self.assertIn("another PID namespace", self.log_text(self.agent_log))
        self.write_while_locked_out(WAITS)
        self.let_in()
        end = self.commit_row()
        self.wait_shipped(end, "shipping to go on once the agent may log in")
        # The postmaster is really gone now, but the agent cannot know it:
        # it waits, and says why.
        start = len(self.log_text(self.agent_log))
        self.pg.kill9_postmaster(timeout=30)
        wait_until(lambda: WAITS in self.log_text(self.agent_log)[start:], 30,
                   "the agent to say why it waits", interval=0.05)
        self.assertNotIn(APPLIED, self.log_text(self.agent_log))

    def test_pg_data_of_another_directory_is_refused_at_start(self):
        wal = self.start_cluster(relocated=True)
        other = self.env.mkdir("crash", "not-pgdata")
        for pg_data, wal_dir, expect in (
                (other, wal, "is not the data directory of the cluster"),
                (os.path.dirname(wal), wal, "is not the data directory of the cluster"),
                (self.data, other, "is not the pg_wal of --pg-data")):
            self.ports = os.path.join(self.dir, "refused.ports")
            log_path = os.path.join(self.logs, "refused.log")
            with open(log_path, "w"):
                pass
            p = Proc(self.env, "agent-refused", self.agent_argv(wal_dir, pg_data), log_path)
            rc = p.wait(30)
            text = self.log_text(log_path)
            self.assertEqual(rc, 1, text)
            self.assertIn(expect, text)
            self.assertIn(pg_data if "data directory" in expect else wal_dir, text)
        # Nothing to check it against without PostgreSQL: a usage error.
        p = Proc(self.env, "agent-append", [
            self.env.binaries["walship-agent"], "--wal-dir=%s" % other,
            "--pg-data=%s" % self.data, "--insecure"], log_path)
        self.assertEqual(p.wait(30), 2)
        self.assertIn("--pg-data is only for --format=postgres", self.log_text(log_path))


if __name__ == "__main__":
    unittest.main()
