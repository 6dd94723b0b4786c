"""A private MariaDB server for tests (Debian's mariadb-server).

MariaDb(launcher, root) keeps its datadir, socket and error log under
`root` (its socket in a directory of its own under /tmp); with `binlog_dir` it writes binlogs there (log-bin), small ones
(max_binlog_size 64 KiB), synced per commit, with CRC32 checksums. It runs
as root with --user=root, or as the user running the test otherwise.
Started processes are Procs of `launcher` (integration/walshiptest/procs.py):
stop() and kill9() end them by their process group.
"""

import os
import re
import shutil
import subprocess
import tempfile

from integration.walshiptest import procs
from integration.walshiptest import waits

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
CLIENT = "/usr/bin/mariadb"
DUMP = "/usr/bin/mariadb-dump"
BINLOG = "/usr/bin/mysqlbinlog"
log = procs.log


def run(argv, input_text=None, timeout=120):
    p = subprocess.run(list(argv), input=input_text, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed (exit %d): %s" % (" ".join(argv[:3]), p.returncode,
                                                         p.stderr[-2000:]))
    return p.stdout


def available():
    return all(os.access(p, os.X_OK) for p in (MARIADBD, INSTALL_DB, CLIENT, DUMP, BINLOG))


class MariaDb(object):

    def __init__(self, launcher, root, binlog_dir=None, name="mariadb"):
        self.launcher = launcher
        self.root = root
        self.name = name
        self.datadir = os.path.join(root, "data")
        # A unix socket's path has at most 107 bytes: a short directory of
        # its own (close() removes it).
        self.rundir = tempfile.mkdtemp(prefix="wsmdb-", dir="/tmp")
        self.socket = os.path.join(self.rundir, "sock")
        self.binlog_dir = binlog_dir
        self.proc = None
        os.makedirs(self.datadir, exist_ok=True)

    def _user(self):
        return ["--user=root"] if os.geteuid() == 0 else []

    def install(self):
        run([INSTALL_DB, "--no-defaults", "--datadir=" + self.datadir,
             "--auth-root-authentication-method=normal", "--skip-test-db"] + self._user())
        return self

    def argv(self):
        a = [MARIADBD, "--no-defaults", "--datadir=" + self.datadir, "--socket=" + self.socket,
             "--pid-file=" + os.path.join(self.rundir, "pid"), "--skip-networking",
             "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
             "--innodb-flush-log-at-trx-commit=2", "--server-id=1",
             "--log-error=" + os.path.join(self.root, "error.log")] + self._user()
        if self.binlog_dir:
            a += ["--log-bin=" + os.path.join(self.binlog_dir, "mysql-bin"),
                  "--max-binlog-size=65536", "--sync-binlog=1", "--binlog-checksum=CRC32",
                  "--binlog-format=ROW"]
        return a

    def start(self, timeout=60):
        self.proc = self.launcher.start(self.name, self.argv())
        waits.wait_until(self._answers, timeout, "%s to accept connections" % self.name,
                         interval=0.1)
        return self

    def _answers(self):
        if self.proc.returncode() is not None:
            raise AssertionError("%s exited (%s): %s" % (self.name, self.proc.returncode(),
                                                         self.error_log()[-2000:]))
        p = subprocess.run([CLIENT, "--no-defaults", "-S", self.socket, "-uroot", "-e",
                            "select 1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p.returncode == 0

    def error_log(self):
        try:
            with open(os.path.join(self.root, "error.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def sql(self, text, timeout=300):
        """Runs `text` (statements) through the client; returns its output (tab-separated)."""
        return run([CLIENT, "--no-defaults", "-S", self.socket, "-uroot", "-N", "-B"],
                   input_text=text, timeout=timeout)

    def checksum(self, table):
        return self.sql("CHECKSUM TABLE %s EXTENDED;" % table).split()[-1]

    def dump(self, database):
        """mariadb-dump of `database` and the binlog position it was taken at."""
        text = run([DUMP, "--no-defaults", "-S", self.socket, "-uroot", "--single-transaction",
                    "--master-data=2", "--databases", database])
        m = re.search(r"MASTER_LOG_FILE='([^']+)', MASTER_LOG_POS=(\d+)", text)
        if m is None:
            raise AssertionError("the dump names no binlog position")
        return text, m.group(1), int(m.group(2))

    def stop(self, timeout=60):
        """Clean shutdown (SIGTERM): the server closes its binlog."""
        if self.proc is not None:
            code = self.proc.stop(timeout=timeout)
            self.proc = None
            return code
        return None

    def close(self):
        """Kills the server if it runs; removes its socket directory."""
        self.kill9()
        shutil.rmtree(self.rundir, ignore_errors=True)

    def kill9(self):
        if self.proc is not None:
            self.proc.kill9()
            self.proc = None


def binlogs(d):
    return sorted(n for n in os.listdir(d) if re.match(r"^mysql-bin\.[0-9]{6}$", n))


def decoded(path, start=None):
    """mysqlbinlog's text for `path`, less the lines that name the file."""
    argv = [BINLOG, "--no-defaults", "-vv", "--base64-output=DECODE-ROWS"]
    if start is not None:
        argv.append("--start-position=%d" % start)
    return run(argv + [path])
