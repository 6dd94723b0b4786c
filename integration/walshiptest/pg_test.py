"""pg on a real PostgreSQL 15 (a few seconds): a primary as the ordinary
OS user, one-shot psql and a long-lived session, a streaming standby from a
base backup, its promotion, and crash and clean stops."""

import os
import pwd
import signal
import unittest

from integration.walshiptest import lsn
from integration.walshiptest import pg
from integration.walshiptest import ports
from integration.walshiptest import waits


class PgTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.env = pg.PgEnv(base_dir="/tmp", walship_binaries=(), prefix="wspg-")
        try:
            cls.primary, cls.area, cls.logs = pg.test_primary(cls.env, "t")
        except BaseException:
            cls.env.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def test_runs_as_the_ordinary_user_never_root(self):
        with open(os.path.join(self.primary.datadir, "postmaster.pid")) as f:
            pid = int(f.readline())
        self.assertEqual(pid, self.primary.proc.pid)
        self.assertEqual(os.stat("/proc/%d" % pid).st_uid, self.env.uid)
        self.assertNotEqual(pwd.getpwuid(self.env.uid).pw_name, "root")
        self.assertEqual(os.getpgid(pid), pid)  # its own group: kill9() reaches the backends
        if os.geteuid() == 0:
            self.assertEqual(self.env.user, pg.DEFAULT_USER)

    def test_psql_one_shot_and_errors(self):
        self.assertEqual(self.primary.psql("SELECT 1 + 1"), "2")
        self.assertIsNone(self.primary.psql("SELECT no_such_column", check=False))
        with self.assertRaises(waits.StepError) as cm:
            self.primary.psql("SELECT no_such_column")
        self.assertIn("no_such_column", str(cm.exception))
        self.assertIsNotNone(self.primary.lsn())

    def test_session_answers_reports_errors_and_keeps_going(self):
        s = self.primary.session()
        self.addCleanup(s.close)
        self.assertEqual(s.query("SELECT 'a' UNION ALL SELECT 'b'"), "a\nb")
        self.assertIsNone(s.query("SELECT 1/0"))
        self.assertIn("division by zero", s.last_error)
        with self.assertRaises(waits.StepError) as cm:
            s.fetch("SELECT 1/0")
        self.assertIn("division by zero", str(cm.exception))
        self.assertEqual(s.fetch("SELECT 42"), "42")
        self.assertIsNotNone(lsn.parse_lsn(s.fetch("SELECT pg_current_wal_flush_lsn()")))

    def test_standby_from_a_base_backup_is_promoted(self):
        standby = pg.PgCluster(self.env, "standby", os.path.join(self.area, "standby"),
                               self.primary.sockdir, ports.free_port(), self.logs)
        self.primary.psql("CREATE TABLE IF NOT EXISTS t (x int); INSERT INTO t VALUES (1)")
        self.primary.basebackup(standby, wal="stream", write_recovery_conf=True, timeout=120)
        standby.configure({"port": standby.port})
        standby.start(wait_for=("ready", "standby"))
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "t")
        self.assertEqual(standby.promote(), "t")
        self.assertEqual(standby.psql("SELECT pg_is_in_recovery()"), "f")
        tli = standby.psql("SELECT pg_walfile_name(pg_current_wal_lsn())")[:8]
        self.assertEqual(int(tli, 16), 2)
        self.assertEqual(standby.psql("SELECT count(*) FROM t"), "1")
        # A crash of the whole server, then a clean stop after recovery.
        standby.kill9()
        self.assertFalse(standby.running())
        self.assertEqual(standby.proc.returncode(), -signal.SIGKILL)
        standby.start()
        self.assertEqual(standby.psql("SELECT count(*) FROM t"), "1")
        self.assertEqual(standby.stop("fast"), 0)
        self.assertIsNone(standby.stop("fast"))  # not running


def shm_ids():
    """The ids of every SysV shared memory segment (/proc/sysvipc/shm)."""
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[1]) for line in f.readlines()[1:]}


class OrphanShmTest(unittest.TestCase):
    """A postmaster killed with SIGKILL leaves its SysV segment behind with
    nothing attached; closing the environment removes the user's whose
    creator is gone. The default user's name is longer than the owner column
    `ipcs` prints."""

    @unittest.skipUnless(os.geteuid() == 0, "the environment's own user needs root")
    def test_close_removes_the_users_unattached_segments(self):
        env = pg.PgEnv(base_dir="/tmp", walship_binaries=(), prefix="wsshm-")
        try:
            self.assertGreater(len(env.user), 10)
            out = env.run(["ipcmk", "-M", "56"]).stdout
            shmid = int(out.rsplit(":", 1)[1])
            self.assertIn(shmid, shm_ids())
        finally:
            env.close()
        self.assertNotIn(shmid, shm_ids())


if __name__ == "__main__":
    unittest.main()
