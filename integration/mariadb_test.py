"""--format=mysql-binlog with a real MariaDB (Debian's mariadb-server).

A private mariadbd writes small binlogs (max_binlog_size 64 KiB,
sync_binlog=1, CRC32 checksums) into the agent's directory, beside its
index file and, after a clean shutdown, its .state file. After the schema,
FLUSH BINARY LOGS and a mariadb-dump (its binlog position recorded) make
the starting point. Then nine rounds of 300 transactions (inserts, and
every tenth a multi-statement transaction of updates and a delete), each
ending in rotations; between rounds: FLUSH BINARY LOGS, the agent killed
(-9) for a round, the replica r1 killed (-9) for a round, a clean restart
of the server, a kill -9 of the server (its binlog left "in use"), and a
PURGE BINARY LOGS of files a second replica, r2, stopped since round 1,
still needs: r2, restarted, stops with a gap (exit status 3).

A witness hard-links each binlog as it appears, so its final bytes (the
in-use flag cleared in place at rotation) outlive the PURGE. At the end:
  * every closed binlog is on r1, complete and byte-identical to the
    source's, in-use flag included (cleared, or set in the binlog the crash
    left), and mysqlbinlog prints the same for both;
  * a fresh server loaded with the dump, then fed mysqlbinlog's replay of
    r1's binlogs from the dump's position, has the same CHECKSUM TABLE as
    the source (the restore path of docs/formats.md).

test_append_format_is_not_enough runs the base behaviour (--format=append
with a segment pattern) on the same server: the in-place rewrite of a
shipped binlog stops the shipping (or the reconnect is refused as
divergent), and the closed binlogs never become identical copies on the
replica: the checks above fail without the format.
"""

import os
import shutil
import subprocess
import unittest

from integration import binlog
from integration import harness as h
from integration import mariadb
from integration.mariadb import MariaDb
from integration.walshiptest import procs
from integration.walshiptest import waits
from integration.walshiptest.witness import Witness

ROUNDS = 9
PER_ROUND = 300
log = procs.log


def transactions(rnd, n):
    """`n` transactions of round `rnd` as SQL text."""
    out = []
    for i in range(n):
        if i % 10 == 9:
            out.append("BEGIN; UPDATE t.a SET v = CONCAT(v, 'u') WHERE k = %d; "
                       "UPDATE t.a SET k = k + 1000000 WHERE id %% 97 = %d; "
                       "DELETE FROM t.a WHERE id = %d; COMMIT;" % (i - 1, i % 97, rnd * 7 + i))
        else:
            out.append("INSERT INTO t.a (k, v) VALUES (%d, REPEAT('%s', %d));"
                       % (i, chr(ord('a') + rnd % 26), 50 + (i * 37) % 150))
    return "\n".join(out) + "\n"


class MariadbTest(h.ClusterTestCase):

    def setUp(self):
        super().setUp()
        self.launcher = procs.Launcher(logdir=self.cluster.logdir)
        self.cluster.on_close(self.launcher.kill_all)

    def server(self, name, binlog_dir=None):
        db = MariaDb(self.launcher, self.cluster.dir(name), binlog_dir=binlog_dir, name=name)
        self.cluster.on_close(db.close)
        return db.install().start()

    def wait_shipped(self, agent, d, name="r1"):
        """Waits until `name` flushed the end of the newest binlog (at rest, binlogs end
        whole)."""
        def end():
            last = mariadb.binlogs(d)[-1]
            return h.Pos(last, os.path.getsize(os.path.join(d, last)))
        waits.wait_until(lambda: h.flushed(h.try_status(agent), name) == end(), 60,
                         lambda: "replica %s to flush %s" % (name, end()), interval=0.1)
        return end()

    def test_binlogs_ship_byte_identical_and_restore(self):
        c = self.cluster
        d = c.dir("binlog")
        db = self.server("source", binlog_dir=d)
        db.sql("CREATE DATABASE t; CREATE TABLE t.a (id INT PRIMARY KEY AUTO_INCREMENT, "
               "k INT, v VARCHAR(255)) ENGINE=InnoDB; FLUSH BINARY LOGS;")
        dump, dump_file, dump_pos = db.dump("t")
        log("dump taken at %s:%d", dump_file, dump_pos)
        witness = Witness(d, c.dir("witness"), mariadb.binlogs).start()
        c.on_close(witness.stop)
        agent = c.agent(d, extra_args=["--format=mysql-binlog"]).start()
        dest = c.dir("dest")
        r1 = c.replica(agent, "r1", dest=dest).start()
        r2 = c.replica(agent, "r2", dest=c.dir("dest2")).start()
        crashed = None
        for rnd in range(1, ROUNDS + 1):
            db.sql(transactions(rnd, PER_ROUND))
            if rnd == 1:
                db.sql("FLUSH BINARY LOGS;")
                self.wait_shipped(agent, d, "r2")
                r2.stop()  # never back before the PURGE: a gap for it
            elif rnd == 2:
                agent.kill()  # round 3 runs while it is down
            elif rnd == 3:
                db.sql("FLUSH BINARY LOGS;")
                agent.restart()
            elif rnd == 4:
                r1.kill()  # round 5 runs while it is down
            elif rnd == 5:
                db.sql("FLUSH BINARY LOGS;")
                r1.start()
            elif rnd == 6:
                db.stop()  # clean: closes its binlog, writes mysql-bin.state
                self.assertTrue(os.path.exists(os.path.join(d, "mysql-bin.state")))
                db.start()  # (reads and removes it)
            elif rnd == 7:
                crashed = mariadb.binlogs(d)[-1]
                db.kill9()  # its binlog stays "in use"
                db.start()
            elif rnd == 8:
                self.wait_shipped(agent, d)
                names = mariadb.binlogs(d)
                db.sql("PURGE BINARY LOGS TO '%s';" % names[-2])
                log("purged the binlogs before %s", names[-2])
                r2.start()
                self.assertEqual(r2.proc.wait(60), 3, "r2 should stop with a gap (exit 3)")
                self.assertTrue(r2.grep("gap"), "r2's log names the gap")
        db.sql("FLUSH BINARY LOGS;")
        last = self.wait_shipped(agent, d)
        witness.stop()
        witness.look()
        self.assertTrue(os.path.exists(os.path.join(d, "mysql-bin.index")))
        st = h.status(agent)
        self.assertEqual(st.get("source_format"), "mysql-binlog")
        self.assertEqual(st.get("held_back_reason"), "none")
        self.check_copies(c.dir("witness"), dest, last.segment, crashed)
        self.check_restore(dest, dump, dump_file, dump_pos, db)
        self.assertEqual(r1.error_lines(), [])
        # r1 came back holding the head of a binlog the server closed while it
        # was down: its in-use flag differs, and only that.
        self.assertTrue(agent.grep("differ from the source's only in bits"))

    def check_copies(self, witnessed, dest, last, crashed):
        names = mariadb.binlogs(witnessed)
        self.assertGreaterEqual(len(names), 20)
        flags = {}
        for n in names:
            src = os.path.join(witnessed, n)
            data = h.read_bytes(src)
            found = h.dest_file(dest, n)
            self.assertIsNotNone(found, "binlog %s is not on the replica" % n)
            path, partial = found
            self.assertEqual(partial, n == last, n)
            copy = h.read_bytes(path)
            self.assertEqual(binlog.valid_end(data), len(data), n)
            self.assertIsNone(h.first_difference(copy, data),
                              "%s: the replica's copy differs from the source's" % n)
            if not partial:
                flags[n] = binlog.in_use(data)
                self.assertEqual(mariadb.decoded(path), mariadb.decoded(src), n)
        self.assertTrue(flags[crashed], "the crash left %s in use" % crashed)
        self.assertEqual([n for n, f in flags.items() if f], [crashed])
        log("the replica's %d closed binlogs are byte-identical to the source's "
            "(%s left in use by the crash)", len(flags), crashed)

    def check_restore(self, dest, dump, dump_file, dump_pos, source):
        restore = os.path.join(self.cluster.root, "restore-binlogs")
        os.makedirs(restore)
        for n in sorted(os.listdir(dest)):
            if n.startswith("mysql-bin."):
                shutil.copy(os.path.join(dest, n), os.path.join(restore, n.replace(h.PARTIAL, "")))
        files = [os.path.join(restore, n) for n in mariadb.binlogs(restore) if n >= dump_file]
        fresh = self.server("restored")
        fresh.sql(dump)
        replay = mariadb.run([mariadb.BINLOG, "--no-defaults",
                              "--start-position=%d" % dump_pos] + files)
        fresh.sql(replay)
        want = source.checksum("t.a")
        self.assertEqual(fresh.checksum("t.a"), want)
        self.assertEqual(fresh.sql("SELECT COUNT(*) FROM t.a;"), source.sql("SELECT COUNT(*) FROM t.a;"))
        log("restored from the dump plus %d shipped binlogs: CHECKSUM TABLE %s as the source",
            len(files), want)
        fresh.stop()

    def test_append_format_is_not_enough(self):
        c = self.cluster
        d = c.dir("binlog")
        db = self.server("source", binlog_dir=d)
        db.sql("CREATE DATABASE t; CREATE TABLE t.a (id INT PRIMARY KEY AUTO_INCREMENT, "
               "k INT, v VARCHAR(255)) ENGINE=InnoDB;")
        agent = c.agent(d, extra_args=["--format=append",
                                       "--segment-pattern=mysql-bin\\.([0-9]{6})"]).start()
        dest = c.dir("dest")
        r1 = c.replica(agent, "r1", dest=dest).start()
        db.sql(transactions(1, PER_ROUND))
        r1.kill()
        db.sql(transactions(2, 100) + "FLUSH BINARY LOGS;\n")
        r1.start()
        closed = mariadb.binlogs(d)[:-1]

        def identical():
            for n in closed:
                found = h.dest_file(dest, n)
                if found is None or found[1]:
                    return False
                if h.first_difference(h.read_bytes(found[0]),
                                      h.read_bytes(os.path.join(d, n))) is not None:
                    return False
            return True

        with self.assertRaises(waits.StepError):
            waits.wait_until(identical, 15, "closed binlogs identical on the replica",
                             interval=0.2)
        refused = agent.grep("changed after its bytes were shipped") + \
            agent.grep("divergent history") + r1.grep("divergent")
        self.assertTrue(refused, "the append format reports the in-place rewrite")
        log("--format=append: %d closed binlogs never became identical copies; %s",
            len(closed), refused[0].strip()[:200])


if __name__ == "__main__":
    unittest.main()
