"""A test case with real PostgreSQL 15 nodes and walship agents beside them.

The helpers the tests of agents that follow a cluster's roles share: a
primary, copies of it by pg_basebackup, an agent beside a node on a fixed
control port, a daemon's metrics, and what a replica holds durably. Each
test's files live under one area of its PgEnv (AREA); the logs of the
processes it shows are printed when it ends.
"""
import os
import sys
import unittest
import urllib.request

from integration import statefile
from integration.walshiptest import daemons, procs, waits
from integration.walshiptest import lsn as wlsn
from integration.walshiptest import pg as wpg
from integration.walshiptest import ports as wports

SEG = 1 << 20


class PgNodesCase(unittest.TestCase):
    AREA = "pg"

    def setUp(self):
        self.env = wpg.PgEnv(base_dir="/tmp")
        self.addCleanup(self.env.close)
        self.dir = self.env.mkdir(self.AREA)
        self.sock = self.env.mkdir(self.AREA, "sock")
        self.logs = self.env.mkdir(self.AREA, "logs")
        self.logs_to_show = []
        self.replica_metrics_port = None

    def tearDown(self):
        for path in self.logs_to_show:
            sys.stderr.write("---- %s\n%s\n" % (path, procs.read_text(path)[-5000:]))

    def show(self, path):
        """`path`, a log printed when the test ends."""
        if path not in self.logs_to_show:
            self.logs_to_show.append(path)
        return path

    def primary(self):
        """A primary with 1 MiB segments, started."""
        pg = wpg.PgCluster(self.env, "primary", os.path.join(self.dir, "primary"), self.sock,
                          wports.free_port(), self.logs)
        pg.initdb(1)
        pg.configure(dict(wpg.TEST_PRIMARY_SETTINGS, port=pg.port,
                          unix_socket_directories=self.sock, wal_keep_size="64MB"))
        pg.start()
        self.show(pg.log_path)
        return pg

    def basebackup(self, source, name, streaming=True):
        """A copy of `source` (pg_basebackup, WAL streamed); with
        `streaming` a standby streaming from it (-R); returns its PgCluster
        (not started)."""
        c = wpg.PgCluster(self.env, name, os.path.join(self.dir, name), self.sock,
                         wports.free_port(), self.logs)
        self.env.run([self.env.pg("pg_basebackup"), "-h", self.sock, "-p", str(source.port),
                      "-U", wpg.SUPERUSER, "-D", c.datadir, "-X", "stream", "-c", "fast",
                      "--no-sync"] + (["-R"] if streaming else []), timeout=120)
        c.configure({"port": c.port})
        self.show(c.log_path)
        return c

    def start_agent(self, pg, name, control_port, extra=()):
        """An agent beside `pg` at 127.0.0.1:control_port, with a slot,
        --pg-data and the flags in `extra`; returns (proc, metrics URL)."""
        self.show(os.path.join(self.logs, "%s.log" % name))
        agent = daemons.Agent(
            pg.pg_wal, self.logs, label=name, listen="127.0.0.1:%d" % control_port,
            extra_args=["--format=postgres", "--pg-conninfo=%s" % pg.conninfo(),
                        "--pg-data=%s" % pg.datadir, "--pg-slot=walship",
                        "--state-dir=%s" % self.env.mkdir(self.AREA, name + "-state"),
                        "--metrics-listen=127.0.0.1:0"] + list(extra),
            program=self.env.binaries["walship-agent"],
            port_file=os.path.join(self.dir, "%s.ports" % name), launcher=self.env)
        agent.start(timeout=60)
        return agent.proc, "http://%s/metrics" % agent.metrics

    def metric(self, url, name, labels=""):
        """A series' value as rendered at `url` (None when absent or the
        daemon does not answer); `labels` as rendered, e.g. '{reason="x"}'."""
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[1])
        return None

    def replica_metric(self, name, labels=""):
        """metric() of the replica serving self.replica_metrics_port."""
        return self.metric("http://127.0.0.1:%d/metrics" % self.replica_metrics_port, name,
                           labels)

    def durable(self, dest):
        """(timeline, LSN) the replica holds durably; None before any segment."""
        try:
            st = statefile.read_durable(dest)
        except (OSError, ValueError):
            return None
        seg = wlsn.parse_segment(st["segment"], SEG) if st else None
        if seg is None:
            return None
        return seg[0], wlsn.position_lsn(st, SEG)

    def wait_holds(self, dest, tli, lsn, what, timeout=60):
        def holds():
            d = self.durable(dest)
            return d is not None and d[0] == tli and d[1] >= lsn
        waits.wait_until(holds, timeout, what, interval=0.05)

    def wait_log(self, r, text, since, what, timeout=30):
        """Waits until `text` is in the log of process `r` (a replica) past
        offset `since`."""
        waits.wait_until(lambda: text in procs.read_text(r.log_path, since), timeout,
                         "%s (%r in R's log)" % (what, text))

    def insert(self, pg, first, last):
        """Rows first..last into table t; returns the primary's LSN after."""
        pg.psql("INSERT INTO t SELECT g, repeat('x', 300) FROM generate_series(%d, %d) g"
                % (first, last))
        return pg.lsn()
