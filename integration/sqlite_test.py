"""SQLite in WAL mode is refused at start-up, loudly, with why and what works.

A real sqlite3 (Debian's) keeps a database in WAL mode open, so that its
DB-wal file exists beside DB and DB-shm. walship-agent pointed at that
directory must refuse to start, never stall:
  * --format=sqlite-wal: the refusal says SQLite rewrites its -wal file
    from offset 0 after each checkpoint and names `.backup` instead;
  * --format=append with a --segment-pattern that picks the -wal file: the
    append source recognises the SQLite WAL magic and refuses the same way.
"""

import os
import subprocess
import unittest

from integration import harness as h
from integration.walshiptest import daemons
from integration.walshiptest import procs
from integration.walshiptest import waits

SQLITE3 = "/usr/bin/sqlite3"


class SqliteTest(h.ClusterTestCase):

    def open_database(self, d):
        """A sqlite3 shell holding `d`/app.db open in WAL mode, with rows written."""
        shell = procs.Proc(procs.Launcher(), "sqlite3", [SQLITE3, os.path.join(d, "app.db")],
                           os.path.join(self.cluster.logdir, "sqlite3.log"),
                           stdin=subprocess.PIPE)
        self.cluster.on_close(shell.stop)
        shell.p.stdin.write(b"PRAGMA journal_mode=WAL;\nCREATE TABLE t(x);\n"
                            b"INSERT INTO t VALUES (1), (2), (3);\n")
        shell.p.stdin.flush()
        wal = os.path.join(d, "app.db-wal")
        waits.wait_until(lambda: os.path.exists(wal) and os.path.getsize(wal) >= 32, 10,
                         "sqlite3 to write app.db-wal")
        return shell

    def refused(self, agent):
        """The agent's start fails: returns its log once it has exited."""
        with self.assertRaises(daemons.DaemonExited):
            agent.start(timeout=20)
        self.assertNotEqual(agent.returncode(), 0)
        return agent.tail(20)

    def test_sqlite_wal_format_refuses(self):
        d = self.cluster.dir("db")
        self.open_database(d)
        out = self.refused(self.cluster.agent(d, extra_args=["--format=sqlite-wal"]))
        self.assertIn("walship does not ship SQLite databases", out)
        self.assertIn("app.db-wal", out)
        self.assertIn("rewritten from offset 0 after every checkpoint", out)
        self.assertIn(".backup", out)

    def test_append_format_refuses_a_sqlite_wal(self):
        d = self.cluster.dir("db")
        self.open_database(d)
        agent = self.cluster.agent(d, extra_args=["--segment-pattern=.*-wal"])
        out = self.refused(agent)
        self.assertIn("segment app.db-wal in %s is a SQLite WAL" % d, out)
        self.assertIn(".backup", out)

    def test_backup_is_what_works(self):
        """The alternative the refusal names: a consistent copy by SQLite."""
        d = self.cluster.dir("db")
        self.open_database(d)
        copy = os.path.join(self.cluster.root, "copy.db")
        subprocess.run([SQLITE3, os.path.join(d, "app.db"), ".backup " + copy], check=True,
                       timeout=30)
        rows = subprocess.run([SQLITE3, copy, "SELECT count(*) FROM t"], check=True,
                              timeout=30, stdout=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(rows.stdout.strip(), "3")


if __name__ == "__main__":
    unittest.main()
