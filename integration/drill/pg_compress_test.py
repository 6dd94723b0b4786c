"""Compression on the data socket with real PostgreSQL WAL.

A PostgreSQL 15 primary (1 MiB segments), walship-agent in postgres mode
and a replica with --compress=zstd, then lz4. Rows are inserted and updated
(heap records, full-page images after the table grows, commits), the
segment is switched, and the replica must hold every complete segment byte
for byte as pg_wal has it (plain segments, as restore_command and
pg_waldump read them), with the bytes having travelled compressed: the
agent's walship_agent_compression_bytes_total counts more uncompressed
than wire bytes.
"""
import os
import re
import sys
import unittest
import urllib.request

from integration import statefile
from integration.walshiptest import daemons
from integration.walshiptest.pg import PgEnv, test_primary
from integration.walshiptest.procs import Proc, read_text
from integration.walshiptest.waits import wait_until

SEG = 1 << 20
SEGMENT_RE = re.compile(r"^[0-9A-F]{24}$")


class PgCompressTest(unittest.TestCase):
    def setUp(self):
        self.env = PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.pg, self.dir, self.logs = test_primary(self.env, "compress")
        self.logs_to_show = []

    def tearDown(self):
        for path in self.logs_to_show:
            sys.stderr.write("---- %s\n%s\n" % (path, read_text(path)[-4000:]))

    def start_pair(self, codec):
        self.agent_log = os.path.join(self.logs, "agent-%s.log" % codec)
        self.replica_log = os.path.join(self.logs, "replica-%s.log" % codec)
        self.agent = daemons.Agent(
            self.pg.pg_wal, self.logs, label="agent-" + codec,
            extra_args=["--format=postgres", "--pg-conninfo=%s" % self.pg.conninfo(),
                        "--pg-slot=walship_%s" % codec, "--pg-data=%s" % self.pg.datadir,
                        "--state-dir=%s" % self.env.mkdir("compress", "state-" + codec),
                        "--metrics-listen=127.0.0.1:0"],
            program=self.env.binaries["walship-agent"],
            port_file=os.path.join(self.dir, "agent-%s.ports" % codec),
            launcher=self.env).start(timeout=30)
        self.dest = os.path.join(self.dir, "replica-" + codec)
        self.replica = Proc(self.env, "replica-" + codec, [
            self.env.binaries["walship-replica"], "--agent=%s" % self.agent.control,
            "--dest=%s" % self.dest, "--name=r1", "--insecure", "--compress=" + codec],
            self.replica_log)
        self.logs_to_show = [self.agent_log, self.replica_log]

    def replica_lsn(self):
        return statefile.durable_lsn(self.dest, SEG)

    def agent_metric(self, name, *labels):
        """The series of `name` whose labels include every one of `labels`
        ('bytes="wire"'); 0 when absent."""
        with urllib.request.urlopen("http://%s/metrics" % self.agent.metrics, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + "{") and all(l in line for l in labels):
                    return float(line.split()[-1])
        return 0.0

    def ship(self, codec):
        self.start_pair(codec)
        self.pg.psql("CREATE TABLE t_%s (id int, pad text)" % codec)
        for i in range(4):
            self.pg.psql("INSERT INTO t_%s SELECT g, repeat(md5(g::text), 6) "
                         "FROM generate_series(%d, %d) g" % (codec, i * 8000 + 1, (i + 1) * 8000))
        self.pg.psql("UPDATE t_%s SET id = -id WHERE id %% 5 = 0" % codec)
        end = self.pg.lsn("pg_current_wal_insert_lsn()")
        self.pg.psql("SELECT pg_switch_wal()")
        wait_until(lambda: self.replica_lsn() >= end, 60,
                   "the replica to hold the WAL up to %x" % end, interval=0.05)

        names = sorted(n for n in os.listdir(self.dest) if SEGMENT_RE.match(n))
        self.assertGreaterEqual(len(names), 4, "complete segments on the replica: %s" % names)
        for n in names:
            with open(os.path.join(self.dest, n), "rb") as f:
                got = f.read()
            with open(os.path.join(self.pg.pg_wal, n), "rb") as f:
                want = f.read()
            self.assertEqual(len(got), SEG, n)
            self.assertTrue(got == want, "%s differs from pg_wal's" % n)

        name = "walship_agent_compression_bytes_total"
        raw = self.agent_metric(name, 'replica="r1"', 'bytes="uncompressed"')
        wire = self.agent_metric(name, 'replica="r1"', 'bytes="wire"')
        sys.stderr.write("%s: %d bytes of WAL in compressed frames, %d on the wire (%.2fx)\n"
                         % (codec, raw, wire, raw / max(wire, 1)))
        self.assertGreater(raw, 2 * SEG)
        self.assertLess(wire * 2, raw)
        self.assertIn("compression %s:1 agreed" % codec, read_text(self.replica_log))
        self.assertNotRegex(read_text(self.replica_log), r" error ")
        self.logs_to_show = []

    def test_zstd(self):
        self.ship("zstd")

    def test_lz4(self):
        self.ship("lz4")


if __name__ == "__main__":
    unittest.main()
