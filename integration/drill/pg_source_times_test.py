"""The agent does not make the primary's WAL syncs write more.

On Linux 6.13 and later (multigrain timestamps), asking for a file's times
(stat, fstat, lstat) marks them as seen, and the file's next write takes a
fine-grained timestamp: its inode changes at every write instead of once a
clock tick. On ext4 without a journal an fdatasync then writes the inode
as well as the data: one more synchronous write on the primary's commit
path for every time walship-agent looked. The agent checks at every frame
that the segment it ships is still the file of that name; it must ask
statx(2) for the inode, links, type and size alone (common/sys/file_util.h).

A real PostgreSQL 15 primary with pg_wal on an ext4 file system of its own
(a loop device over a file; no journal, as this machine's root; noatime, so
that reading the WAL changes no inode), so the device's write count is
PostgreSQL's WAL I/O alone:

0. The kernel shows the effect: a write, an fstat and an fdatasync, again
   and again, cost a device write per sync more than without the fstat
   (otherwise the test is skipped: nothing here could tell).
1. pgbench commits one-row transactions one at a time with nothing
   following the WAL: block writes per WAL sync (pg_stat_wal) are the
   baseline.
2. The same with walship-agent following and a replica acknowledging every
   commit: block writes per WAL sync stay within 0.35 of the baseline.
   (With an lstat per frame they were about one more.)
"""
import os
import shutil
import unittest

from integration.walshiptest import daemons, loopfs, ports
from integration.walshiptest.pg import PgCluster, PgEnv, TEST_PRIMARY_SETTINGS
from integration.walshiptest.procs import Proc, log, read_text
from integration.walshiptest.waits import wait_until

from integration import statefile

SEG = 1 << 20
COMMITS = 1500


def probe_writes_per_sync(fs, look, n=300):
    """Device writes per fdatasync of 8 KiB writes into a zero-filled file,
    with an fstat between write and sync when `look`."""
    path = os.path.join(fs.mountpoint, "probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * (n * 8192))
        os.fsync(fd)
        before = fs.writes()
        for i in range(n):
            os.pwrite(fd, b"x" * 8192, i * 8192)
            if look:
                os.fstat(fd)
            os.fdatasync(fd)
        return (fs.writes() - before) / n
    finally:
        os.close(fd)
        os.unlink(path)


class PgSourceTimesTest(unittest.TestCase):
    def setUp(self):
        # noatime: the walsender's and the agent's reads of the WAL never
        # change its inode, so the count is the writes' and the looks' alone.
        self.fs = loopfs.LoopFs(size_mb=256, journal=False, options="noatime")
        self.addCleanup(self.fs.close)
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)  # runs first: nothing uses the file system after it
        self.dir = self.env.mkdir("times")
        sock = self.env.mkdir("times", "sock")
        self.logs = self.env.mkdir("times", "logs")
        self.pg = PgCluster(self.env, "primary", os.path.join(self.dir, "primary"), sock,
                            ports.free_port(), self.logs)
        self.pg.initdb(1)
        # pg_wal on the loop file system, as initdb --waldir makes it.
        wal = os.path.join(self.fs.mountpoint, "pg_wal")
        shutil.copytree(self.pg.pg_wal, wal)
        shutil.rmtree(self.pg.pg_wal)
        os.symlink(wal, self.pg.pg_wal)
        for root, dirs, files in os.walk(wal):
            self.env.chown(root)
            for f in files:
                self.env.chown(os.path.join(root, f))
        os.chmod(wal, 0o700)
        self.pg.configure(dict(TEST_PRIMARY_SETTINGS, port=self.pg.port,
                               unix_socket_directories=sock, synchronous_commit="on"))
        self.pg.start()
        self.pg.psql("CREATE TABLE t (x int)")
        self.script = os.path.join(self.dir, "commit.sql")
        with open(self.script, "w") as f:
            f.write("INSERT INTO t VALUES (1);\n")
        self.env.chown(self.script)

    def writes_per_sync(self):
        """pgbench, one client, COMMITS one-row transactions: device writes
        per WAL sync PostgreSQL counted."""
        self.pg.psql("SELECT pg_stat_reset_shared('wal')")
        before = self.fs.writes()
        self.env.run([self.env.pg("pgbench"), "-n", "-c", "1", "-t", str(COMMITS),
                      "-f", self.script, self.pg.conninfo()], timeout=300)
        writes = self.fs.writes() - before
        # pgbench's backend has exited and reported its syncs.
        syncs = int(self.pg.psql("SELECT wal_sync FROM pg_stat_wal"))
        self.assertGreaterEqual(syncs, COMMITS)
        return writes / syncs

    def start_following(self):
        agent = daemons.Agent(
            self.pg.pg_wal, self.logs, label="agent",
            extra_args=["--format=postgres", "--pg-conninfo=%s" % self.pg.conninfo(),
                        "--pg-slot=walship_times",
                        "--state-dir=%s" % self.env.mkdir("times", "agent-state"),
                        "--pg-data=%s" % self.pg.datadir],
            program=self.env.binaries["walship-agent"],
            port_file=os.path.join(self.dir, "agent.ports"), launcher=self.env).start(timeout=30)
        dest = os.path.join(self.dir, "replica")
        replica_log = os.path.join(self.logs, "replica.log")
        Proc(self.env, "replica", [
            self.env.binaries["walship-replica"], "--agent=%s" % agent.control,
            "--dest=%s" % dest, "--name=r1", "--insecure"], replica_log)
        self.pg.psql("INSERT INTO t VALUES (0)")
        end = self.pg.lsn("pg_current_wal_insert_lsn()")
        try:
            wait_until(lambda: statefile.durable_lsn(dest, SEG) >= end, 60,
                       "the replica to hold the first commit", interval=0.05)
        except Exception:
            print("---- replica\n%s" % read_text(replica_log)[-4000:])
            raise
        return dest

    def test_following_costs_the_primary_no_write_per_sync(self):
        plain = probe_writes_per_sync(self.fs, look=False)
        looked = probe_writes_per_sync(self.fs, look=True)
        log("probe: %.2f device writes per fdatasync, %.2f with an fstat before each",
            plain, looked)
        if looked - plain < 0.5:
            self.skipTest("this kernel or file system writes no more after a look at a "
                          "file's times (%.2f against %.2f)" % (looked, plain))
        alone = self.writes_per_sync()
        dest = self.start_following()
        followed = self.writes_per_sync()
        end = self.pg.lsn("pg_current_wal_insert_lsn()")
        wait_until(lambda: statefile.durable_lsn(dest, SEG) >= end, 60,
                   "the replica to hold every commit", interval=0.05)
        log("PostgreSQL's WAL: %.2f device writes per sync alone, %.2f with the agent "
            "following", alone, followed)
        self.assertLessEqual(
            followed, alone + 0.35,
            "with walship-agent following, each WAL sync of the primary wrote %.2f blocks "
            "against %.2f alone" % (followed, alone))


if __name__ == "__main__":
    unittest.main()
