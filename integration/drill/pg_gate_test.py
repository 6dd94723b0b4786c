"""The promotion gate: a standby replays what the walship replicas hold.

A real PostgreSQL 15 primary with synchronous_standby_names = 'walship',
walship-agent beside it, walship-replica serving its directory over the
network (--serve-listen), and a streaming standby made by pg_basebackup that
is held back: it is down while the primary commits numbered rows, each
acknowledged only once the replica holds it. Then the primary's host is lost
(postmaster and agent killed with SIGKILL) and the standby starts again with
its WAL receiver pointing at the dead primary, as a Patroni candidate does
when it runs its pre_promote callback.

1. `walship-replica gate --from=<replica>` on the standby, as its OS user,
   exits 0 once pg_last_wal_replay_lsn() has reached the replica's end;
   promoted afterwards, the standby has every acknowledged row, no holes.
   The same with a standby that streamed the first rows and runs on while
   its WAL receiver points nowhere (its pg_wal holds part of the segment the
   gate replaces).
2. No replica reachable: exit 3 (no promotion), and 0 with a warning given
   --allow-without-replicas.
3. A replica whose copy of a needed segment no longer matches walship.sums:
   the fetch is refused, the gate exits 2 and the standby does not hold the
   rows.
4. The standby cannot replay within the bound (recovery_min_apply_delay holds
   every commit back): the gate exits 2 and says how far it got. A bound too
   short for anything exits 2 too.
5. Without the gate, `walship-replica restore --from=<replica>` as the
   standby's restore_command: it replays every acknowledged row, fetched and
   verified over the network.
6. A standby whose configuration file names walship in
   synchronous_standby_names but was never reloaded (what Patroni leaves
   when the change reaches a node whose PostgreSQL is still starting): the
   gate reloads it, so the promoted primary waits for walship; with
   --synchronous-name=walship, a file that does not name walship refuses
   the promotion (exit 2).
"""
import os
import re
import sys
import unittest

from integration.walshiptest import daemons, lsn, pg, ports, procs, waits


SEG = 1 << 20
# Enough rows to fill several 1 MiB segments after the base backup.
ROWS = 400
PAD = 8000


class PgGateTest(unittest.TestCase):
    def setUp(self):
        self.env = pg.PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.pg, self.dir, self.logs = pg.test_primary(self.env, "gate")
        self.pg.psql("CREATE TABLE t (n int PRIMARY KEY, pad text)")
        # Uncompressed, so that the rows fill segments.
        self.pg.psql("ALTER TABLE t ALTER pad SET STORAGE EXTERNAL")
        self.logs_to_show = []

    def tearDown(self):
        for path in self.logs_to_show:
            sys.stderr.write("---- %s\n%s\n" % (path, procs.read_text(path)[-4000:]))

    # -- set-up -------------------------------------------------------------
    def start_agent_and_replica(self):
        port_path = os.path.join(self.dir, "agent.ports")
        agent_log = os.path.join(self.logs, "agent.log")
        replica_log = os.path.join(self.logs, "replica.log")
        self.logs_to_show += [agent_log, replica_log]
        self.agent = daemons.Agent(
            self.pg.pg_wal, self.logs, label="agent",
            extra_args=["--format=postgres", "--pg-conninfo=%s" % self.pg.conninfo(),
                        "--pg-data=%s" % self.pg.datadir,
                        "--state-dir=%s" % self.env.mkdir("gate", "agent-state")],
            program=self.env.binaries["walship-agent"], port_file=port_path,
            launcher=self.env).start(timeout=30)
        control = self.agent.control
        self.dest = os.path.join(self.dir, "replica")
        self.serve = "127.0.0.1:%d" % ports.free_port()
        self.replica = procs.Proc(self.env, "replica", [
            self.env.binaries["walship-replica"], "--agent=%s" % control,
            "--dest=%s" % self.dest, "--name=r1", "--serve-listen=%s" % self.serve,
            "--insecure"], replica_log)
        waits.wait_until(lambda: "serving WAL from" in procs.read_text(replica_log), 30,
                      "the replica to serve its WAL", interval=0.05)
        waits.wait_until(lambda: self.pg.psql(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'walship'")
            == "1", 30, "the agent's flush feed", interval=0.1)
        self.pg.psql("ALTER SYSTEM SET synchronous_standby_names = 'walship'")
        self.pg.psql("SELECT pg_reload_conf()")

    def make_standby(self, settings=None):
        """A standby by pg_basebackup, not started (its WAL receiver held
        back)."""
        standby = pg.PgCluster(self.env, "standby", os.path.join(self.dir, "standby"),
                               self.pg.sockdir, ports.free_port(), self.logs)
        self.env.run([self.env.pg("pg_basebackup"), "-h", self.pg.sockdir, "-p",
                      str(self.pg.port), "-U", pg.SUPERUSER, "-D", standby.datadir,
                      "-X", "stream", "-R", "-c", "fast", "--no-sync"], timeout=120)
        conf = {"port": standby.port, "wal_retrieve_retry_interval": "200ms"}
        conf.update(settings or {})
        standby.configure(conf)
        self.logs_to_show.append(standby.log_path)
        return standby

    def commit_rows(self, first=1, last=ROWS):
        """Commits rows first..last, one transaction each, every one
        acknowledged (synchronous through walship) when psql returns;
        returns `last`."""
        sql = "".join("INSERT INTO t VALUES (%d, repeat('x', %d));" % (n, PAD)
                      for n in range(first, last + 1))
        self.pg.psql(sql, timeout=300)
        self.assertEqual(self.pg.psql("SELECT max(n) FROM t"), str(last))
        return last

    def lose_primary_host(self):
        self.pg.kill9()
        self.agent.kill()

    def start_held_back(self, standby):
        """Starts the standby after the primary's loss: its WAL receiver has
        nobody to stream from; it holds none of the rows."""
        standby.start(wait_for=("ready", "standby"))
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "t")
        self.assertEqual(standby.psql("SELECT coalesce(max(n), 0) FROM t"), "0")

    def gate(self, standby, frm=None, extra=(), timeout_ms=60000, conninfo=None):
        """Runs the gate as the PostgreSQL OS user; returns (exit, output)."""
        argv = [self.env.binaries["walship-replica"], "gate",
                "--from=%s" % (frm or self.serve), "--pg-data=%s" % standby.datadir,
                "--pg-conninfo=%s" % (conninfo or standby.conninfo()),
                "--timeout-ms=%d" % timeout_ms,
                "--insecure"] + list(extra)
        r = self.env.run(argv, as_user=True, timeout=timeout_ms / 1000 + 60, check=False)
        out = r.stdout + r.stderr
        sys.stderr.write("---- gate %s: exit %d\n%s\n" % (" ".join(extra), r.returncode, out))
        return r.returncode, out

    def promote(self, standby):
        standby.psql("SELECT pg_promote(true, 60)", timeout=90)
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "f")

    # -- 1 ------------------------------------------------------------------
    def test_gate_replays_every_acknowledged_commit_before_promotion(self):
        self.start_agent_and_replica()
        standby = self.make_standby()
        last = self.commit_rows()
        self.lose_primary_host()
        self.start_held_back(standby)
        rc, out = self.gate(standby)
        self.assertEqual(rc, 0, out)
        self.assertIn("promote", out)
        # Complete segments and the one being received.
        wrote = re.findall(r"gate: wrote (0000000100000000000000[0-9A-F]{2}) into", out)
        self.assertGreaterEqual(len(wrote), 3, out)
        # Replayed before the promotion, then kept by it.
        self.assertEqual(standby.psql("SELECT max(n) FROM t"), str(last))
        self.promote(standby)
        self.assertEqual(standby.psql("SELECT max(n), count(*) FROM t"),
                         "%d|%d" % (last, last))
        # Writable (it no longer waits for the walship replica it came from).
        standby.psql("ALTER SYSTEM RESET synchronous_standby_names")
        standby.psql("SELECT pg_reload_conf()")
        standby.psql("INSERT INTO t VALUES (%d, 'after')" % (last + 1))

    def test_gate_on_a_running_standby_whose_receiver_was_cut_off(self):
        # The standby streams the first rows, then its WAL receiver points
        # nowhere while the primary goes on: the segment it was streaming is
        # partly in its pg_wal, open in its startup process, and the gate
        # replaces it with the replica's longer copy.
        self.start_agent_and_replica()
        standby = self.make_standby()
        standby.start(wait_for=("ready", "standby"))
        streamed = self.commit_rows(1, 20)
        waits.wait_until(lambda: standby.psql("SELECT coalesce(max(n), 0) FROM t") == str(streamed),
                      60, "the standby to stream the first rows", interval=0.1)
        standby.psql("ALTER SYSTEM SET primary_conninfo = 'host=/nonexistent port=1'")
        standby.psql("SELECT pg_reload_conf()")
        waits.wait_until(lambda: standby.psql("SELECT count(*) FROM pg_stat_wal_receiver "
                                           "WHERE status = 'streaming'") == "0",
                      60, "the standby's WAL receiver to stop streaming", interval=0.1)
        last = self.commit_rows(streamed + 1, ROWS)
        self.lose_primary_host()
        self.assertEqual(standby.psql("SELECT max(n) FROM t"), str(streamed))
        rc, out = self.gate(standby)
        self.assertEqual(rc, 0, out)
        self.assertEqual(standby.psql("SELECT max(n) FROM t"), str(last))
        self.promote(standby)
        self.assertEqual(standby.psql("SELECT max(n), count(*) FROM t"),
                         "%d|%d" % (last, last))

    # -- 6 ------------------------------------------------------------------
    def held_back_standby_with_unloaded_sync_names(self, written):
        """A held-back standby after the primary's loss, running with
        synchronous_standby_names = '' while its configuration says `written`."""
        self.start_agent_and_replica()
        # A role that may not reload the configuration (no superuser).
        self.pg.psql("CREATE ROLE gatekeeper LOGIN")
        standby = self.make_standby()
        last = self.commit_rows(1, 20)
        self.lose_primary_host()
        self.start_held_back(standby)
        standby.psql("ALTER SYSTEM SET synchronous_standby_names = ''")
        standby.psql("SELECT pg_reload_conf()")
        waits.wait_until(lambda: standby.psql("SHOW synchronous_standby_names") == "", 30,
                         "the standby to run without synchronous standbys", interval=0.1)
        standby.psql("ALTER SYSTEM SET synchronous_standby_names = '%s'" % written)
        self.assertEqual(standby.psql("SHOW synchronous_standby_names"), "")
        return standby, last

    def test_a_configuration_written_but_never_loaded_is_loaded_before_promotion(self):
        standby, last = self.held_back_standby_with_unloaded_sync_names("walship")
        rc, out = self.gate(standby, extra=["--synchronous-name=walship"])
        self.assertEqual(rc, 0, out)
        self.assertIn("promoted with synchronous_standby_names = 'walship'", out)
        self.assertEqual(standby.psql("SHOW synchronous_standby_names"), "walship")
        self.promote(standby)
        self.assertEqual(standby.psql("SELECT max(n) FROM t"), str(last))
        # No walship agent beside it yet: a commit waits (psql is stopped
        # while it does); without the reload it returned at once.
        r = self.env.run(["timeout", "5", self.env.pg("psql"), "-X", "-A", "-t", "-d",
                          standby.conninfo(), "-c", "INSERT INTO t VALUES (%d, 'x')" % (last + 1)],
                         as_user=False, timeout=60, check=False)
        self.assertEqual(r.returncode, 124, "the commit did not wait for walship: %s%s" % (
            r.stdout, r.stderr))

    def test_a_configuration_that_does_not_name_walship_refuses_the_promotion(self):
        standby, _ = self.held_back_standby_with_unloaded_sync_names("node1")
        rc, out = self.gate(standby, extra=["--synchronous-name=walship"])
        self.assertEqual(rc, 2, out)
        self.assertIn("which does not name 'walship'", out)
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "t")

    def test_a_reload_refused_is_said_and_the_running_value_decides(self):
        # The gate's role may not reload: it says so, and judges the value
        # the standby runs with (empty here, though the file names walship).
        standby, _ = self.held_back_standby_with_unloaded_sync_names("walship")
        conninfo = standby.conninfo().replace("user=%s" % pg.SUPERUSER, "user=gatekeeper")
        rc, out = self.gate(standby, extra=["--synchronous-name=walship"], conninfo=conninfo)
        self.assertEqual(rc, 2, out)
        self.assertIn("configuration was not reloaded", out)
        self.assertIn("permission denied", out)
        self.assertEqual(standby.psql("SHOW synchronous_standby_names"), "")

    # -- 2 ------------------------------------------------------------------
    def test_no_replica_reachable_refuses_unless_told_to_allow(self):
        standby = self.make_standby()
        self.pg.kill9()
        standby.start(wait_for=("ready", "standby"))
        nobody = "127.0.0.1:%d" % ports.free_port()
        rc, out = self.gate(standby, frm=nobody)
        self.assertEqual(rc, 3, out)
        self.assertIn("NOT promoting: no walship replica answered", out)
        rc, out = self.gate(standby, frm=nobody, extra=["--allow-without-replicas"])
        self.assertEqual(rc, 0, out)
        self.assertIn("NO walship replica answered", out)
        self.assertIn("ARE LOST", out)

    # -- 3 ------------------------------------------------------------------
    def test_a_copy_that_fails_its_checksum_is_refused(self):
        self.start_agent_and_replica()
        standby = self.make_standby()
        self.commit_rows()
        self.lose_primary_host()
        # The replica's first complete segment past the base backup's: one
        # byte flipped in the middle.
        start = lsn.parse_segment(self.standby_start_segment(standby), SEG)
        held = sorted(f for f in os.listdir(self.dest)
                      if lsn.parse_segment(f, SEG) and lsn.parse_segment(f, SEG)[1] > start[1])
        self.assertTrue(held, os.listdir(self.dest))
        path = os.path.join(self.dest, held[0])
        with open(path, "r+b") as f:
            f.seek(SEG // 2)
            b = f.read(1)
            f.seek(SEG // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        self.start_held_back(standby)
        rc, out = self.gate(standby)
        self.assertEqual(rc, 2, out)
        self.assertIn("NOT promoting", out)
        self.assertIn("fetching %s" % held[0], out)
        self.assertIn("CRC32C", out)
        self.assertIn("t", standby.psql("SELECT pg_is_in_recovery()"))
        self.assertLess(int(standby.psql("SELECT coalesce(max(n), 0) FROM t")), ROWS)

    def standby_start_segment(self, standby):
        """The segment the standby's base backup starts replay in."""
        with open(os.path.join(standby.datadir, "backup_label")) as f:
            for line in f:
                if line.startswith("START WAL LOCATION"):
                    return line.split("(file ")[1].rstrip(")\n")
        self.fail("no START WAL LOCATION in backup_label")

    # -- 4 ------------------------------------------------------------------
    def test_a_standby_that_cannot_replay_in_time_is_not_promoted(self):
        self.start_agent_and_replica()
        standby = self.make_standby({"recovery_min_apply_delay": "1h"})
        self.commit_rows()
        self.lose_primary_host()
        standby.start(wait_for=("ready", "standby"))
        rc, out = self.gate(standby, timeout_ms=3000)
        self.assertEqual(rc, 2, out)
        self.assertRegex(out, r"NOT promoting: the standby replayed only up to [0-9A-F]+/[0-9A-F]+ "
                              r"of [0-9A-F]+/[0-9A-F]+ within 3s")
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "t")
        # A bound too short for anything at all.
        rc, out = self.gate(standby, timeout_ms=1)
        self.assertEqual(rc, 2, out)
        self.assertIn("NOT promoting", out)
        self.assertRegex(out, r"(?i)timeout|deadline")


    # -- 5 ------------------------------------------------------------------
    def test_restore_from_a_replica_over_the_network(self):
        self.start_agent_and_replica()
        restore = "%s restore --from=%s --insecure %%f %%p" % (
            self.env.binaries["walship-replica"], self.serve)
        standby = self.make_standby({"restore_command": restore})
        last = self.commit_rows()
        self.lose_primary_host()
        standby.start(wait_for=("ready", "standby"))
        waits.wait_until(lambda: standby.psql("SELECT coalesce(max(n), 0) FROM t") == str(last),
                      60, "the standby to replay every row through restore --from",
                      interval=0.2)
        self.promote(standby)
        self.assertEqual(standby.psql("SELECT max(n), count(*) FROM t"),
                         "%d|%d" % (last, last))
        replica_log = procs.read_text(self.replica.log_path)
        self.assertRegex(replica_log, r"serve: served 0000000100000000000000[0-9A-F]{2} ")


if __name__ == "__main__":
    unittest.main()
