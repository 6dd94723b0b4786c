"""PostgreSQL 15 for the tests, the drill, the benchmark and the fault
campaign.

  * PgEnv: a work directory, the ordinary OS user PostgreSQL runs as
    (created when we run as root: PostgreSQL refuses to run as root; we
    ourselves otherwise), copies of the walship binaries that user runs, and
    a procs.Launcher whose processes (and clusters) close() kills even after
    a failure.
  * PgCluster: initdb, configuration, start/stop/kill -9 of a cluster
    started as `postgres -D` (not pg_ctl, so we own its process group),
    one-shot psql, base backups, promotion, pg_controldata.
  * PsqlSession: one long-lived psql for frequent cheap queries.
  * test_primary(): a started primary with 1 MiB segments for a test.
  * waldump_end(): where pg_waldump finds the valid WAL of a directory ends.

Every wait is bounded: a helper that waits takes a timeout and raises
waits.StepError (or returns None, as documented) when it passes.
"""

import os
import pwd
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from integration.walshiptest import binaries
from integration.walshiptest import lsn
from integration.walshiptest import ports
from integration.walshiptest import procs
from integration.walshiptest import waits

log = procs.log

SUPERUSER = "drill"  # the clusters' superuser role (trust authentication)
DEFAULT_USER = "walship-drill"
PG_BIN_CANDIDATES = ["/usr/lib/postgresql/15/bin"]
# What PgEnv copies for its user by default.
WALSHIP_BINARIES = (binaries.AGENT, binaries.STATUS, binaries.REPLICA, binaries.DRILL_LOADER)


def find_pg_bin():
    """The PostgreSQL 15 bin directory ($WALSHIP_PG_BIN first); raises
    StepError naming where it looked."""
    cands = ([os.environ["WALSHIP_PG_BIN"]] if os.environ.get("WALSHIP_PG_BIN") else []) + \
        PG_BIN_CANDIDATES
    for c in cands:
        if os.path.isfile(os.path.join(c, "postgres")):
            return c
    raise waits.StepError("PostgreSQL 15 binaries not found in %s (apt-get install postgresql-15)"
                          % cands)


def ensure_user(name, purpose="walship failover drill"):
    """The passwd entry of `name`, a system user (described as `purpose`)
    created if absent."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd", path=procs.SBIN_PATH)
    if not useradd:
        raise waits.StepError("useradd not found: cannot create the user %s" % name)
    home = "/var/lib/%s" % name
    r = subprocess.run([useradd, "--system", "--create-home", "--home-dir", home,
                        "--shell", "/usr/sbin/nologin", "--comment", purpose, name],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise waits.StepError("useradd %s failed (%d): %s" % (name, r.returncode,
                                                             r.stdout.strip()))
    log("created OS user %s (uid %d)", name, entry.pw_uid)
    return entry


class PgEnv(procs.Launcher):
    """A work directory (under `base_dir`: the user must reach it, and unix
    socket paths must stay short), the user PostgreSQL and the copied
    `walship_binaries` run as (`user`, created as `purpose` when we are
    root), and the processes and clusters started in it.

    Processes start in the work directory with a small fixed environment
    and die with this process (setpriv --pdeathsig). .binaries maps each
    copied binary's name to its path.
    """

    def __init__(self, user=DEFAULT_USER, base_dir="/tmp", keep=False,
                 purpose="walship failover drill", walship_binaries=WALSHIP_BINARIES,
                 prefix="wsdrill-"):
        self.keep = keep
        self.clusters = []
        self.pg_bin = find_pg_bin()
        self.is_root = os.geteuid() == 0
        pw = ensure_user(user, purpose) if self.is_root else pwd.getpwuid(os.getuid())
        self.user = pw.pw_name
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        work = tempfile.mkdtemp(prefix=prefix, dir=base_dir)
        procs.Launcher.__init__(self, work=work, user=pw)
        self.home = pw.pw_dir if os.path.isdir(pw.pw_dir) else self.work
        os.chmod(self.work, 0o755)
        self.chown(self.work)
        self.bin = self.mkdir("bin")
        self.binaries = {}
        try:
            for target in walship_binaries:
                dst = os.path.join(self.bin, target[1])
                shutil.copyfile(binaries.find(target), dst)
                os.chmod(dst, 0o755)
                self.binaries[target[1]] = dst
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        log("work dir %s, user %s (uid %d), PostgreSQL %s", self.work, self.user, self.uid,
            self.pg_bin)

    # -- files ------------------------------------------------------------
    def chown(self, path):
        """Gives `path` to the user (when we are root)."""
        if self.is_root:
            os.chown(path, self.uid, self.gid)

    def mkdir(self, *parts, mode=0o755):
        """work/parts..., created (owned by the user) if absent."""
        path = os.path.join(self.work, *parts)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        self.chown(path)
        return path

    def pg(self, tool):
        """Path of a PostgreSQL program, e.g. pg("psql")."""
        return os.path.join(self.pg_bin, tool)

    # -- processes ----------------------------------------------------------
    def child_env(self, as_user, extra=None):
        e = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
             "HOME": self.home if as_user else os.environ.get("HOME", "/root"),
             "TZ": "UTC"}
        if as_user and self.is_root:
            e["USER"] = e["LOGNAME"] = self.user
        e.update(extra or {})
        return e

    def run(self, argv, as_user=True, timeout=60, check=True, input_text=None):
        """Runs a command to completion (bounded); returns CompletedProcess
        (text). Raises StepError on a timeout, or (check) a non-zero exit."""
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               input=input_text, timeout=timeout, cwd=self.work,
                               env=self.child_env(as_user), start_new_session=True,
                               **self.user_kwargs(as_user))
        except subprocess.TimeoutExpired:
            raise waits.StepError("timed out after %ss: %s" % (timeout, " ".join(argv)))
        if check and r.returncode != 0:
            raise waits.StepError("%s exited %d: %s" % (" ".join(argv), r.returncode,
                                                       (r.stderr or r.stdout).strip()[-2000:]))
        return r

    def close(self):
        """Kills everything started; removes the work dir unless keep."""
        for c in list(self.clusters):
            c.teardown()
        self.kill_all()
        self._remove_orphan_shm()
        if self.keep:
            log("kept work dir %s", self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def _remove_orphan_shm(self):
        """SysV segments left by kill -9'd postmasters of the user: nothing
        attached and their creator gone (a postmaster creating one right now
        is alive, whichever test it belongs to). Read by uid from
        /proc/sysvipc/shm: `ipcs` cuts the owner's name to ten characters."""
        if not self.is_root or self.user == "root":
            return
        try:
            with open("/proc/sysvipc/shm") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            return
        for row in rows:
            # key shmid perms size cpid lpid nattch uid ...
            if (len(row) >= 8 and row[6] == "0" and int(row[7]) == self.uid
                    and not os.path.exists("/proc/%s" % row[4])):
                subprocess.run(["ipcrm", "-m", row[1]], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10)


# ---------------------------------------------------------------------------
# psql

class PsqlSession(object):
    """One long-lived psql (as the invoking user) for frequent queries.

    query() returns the text result (rows joined by newlines, stripped), or
    None on an error, a timeout or a lost connection, after which it
    reconnects, at most once a second; fetch() raises instead. Thread-safe
    (one query at a time).
    """

    MARK = "__walshiptest_end_of_result__"

    def __init__(self, env, conninfo):
        self.env = env
        self.conninfo = conninfo
        self.p = None
        self.q = None
        self.last_open = 0.0
        self.last_error = None
        self._lock = threading.Lock()

    def _open(self):
        self.last_open = time.time()
        self.p = subprocess.Popen(
            [self.env.pg("psql"), "-X", "-A", "-t", "-q", "-d", self.conninfo],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, start_new_session=True, env=self.env.child_env(False))
        q = queue.Queue()
        self.q = q
        p = self.p

        def reader():
            for line in p.stdout:
                q.put(line.rstrip("\n"))
            q.put(None)
            p.stdout.close()

        threading.Thread(target=reader, daemon=True).start()

    def close(self):
        if self.p is not None:
            try:
                self.p.kill()
                self.p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            try:
                self.p.stdin.close()  # the reader thread closes stdout at its end
            except OSError:
                pass
            self.p = None

    def _fail(self, why):
        self.last_error = why
        self.close()
        return None

    def _query(self, sql, timeout):
        self.last_error = None
        if self.p is None or self.p.poll() is not None:
            self.close()
            if time.time() - self.last_open < 1.0:
                self.last_error = "not connected (reconnects at most once a second)"
                return None
            self._open()
        try:
            self.p.stdin.write("%s;\n\\echo %s\n" % (sql.rstrip(";"), self.MARK))
            self.p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            return self._fail("psql's input: %r" % e)
        lines = []
        deadline = time.time() + timeout
        while True:
            try:
                line = self.q.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                return self._fail("no answer within %ss" % timeout)
            if line is None:
                return self._fail("psql exited: %s" % " | ".join(lines[-3:]))
            if line == self.MARK:
                break
            lines.append(line)
        bad = [l for l in lines if "ERROR:" in l or "FATAL:" in l or l.startswith("psql:")]
        if bad:
            self.last_error = " | ".join(bad)
            return None
        return "\n".join(lines).strip()

    def query(self, sql, timeout=2.0):
        with self._lock:
            return self._query(sql, timeout)

    def fetch(self, sql, timeout=60.0):
        """query(), but raises StepError (with psql's error) instead of None."""
        with self._lock:
            out = self._query(sql, timeout)
            if out is None:
                raise waits.StepError("query %r failed: %s" % (sql, self.last_error))
            return out


# ---------------------------------------------------------------------------
# PostgreSQL clusters

class PgCluster(object):
    """A PostgreSQL 15 cluster of `env` (a PgEnv) run as its user, data in
    `datadir`, unix sockets in `sockdir` named for `port` (PostgreSQL
    cannot take port 0: ports.free_port() gives clusters sharing a socket
    directory distinct names), log `logdir`/`name`.log.

    The server is started as `postgres -D DATA`, so its process group holds
    the postmaster and every backend: kill9() is a crash of the whole
    server, as when the postmaster is OOM-killed and its children die.
    """

    def __init__(self, env, name, datadir, sockdir, port, logdir):
        self.env = env
        self.name = name
        self.datadir = datadir
        self.sockdir = sockdir
        self.port = port
        self.log_path = os.path.join(logdir, "%s.log" % name)
        self.proc = None
        env.clusters.append(self)

    @property
    def pg_wal(self):
        return os.path.join(self.datadir, "pg_wal")

    def conninfo(self, dbname="postgres"):
        return "host=%s port=%d user=%s dbname=%s connect_timeout=5" % (
            self.sockdir, self.port, SUPERUSER, dbname)

    # -- lifecycle ----------------------------------------------------------
    def initdb(self, segsize_mb):
        self.env.run([self.env.pg("initdb"), "-D", self.datadir, "-U", SUPERUSER,
                      "--auth=trust", "--locale=C", "--encoding=UTF8", "--no-sync",
                      "--wal-segsize=%d" % segsize_mb], timeout=120)

    def configure(self, settings):
        """Appends settings to postgresql.conf (later lines win)."""
        path = os.path.join(self.datadir, "postgresql.conf")
        with open(path, "a") as f:
            f.write("\n# walship tests (%s)\n" % time.strftime("%H:%M:%S"))
            for k, v in settings.items():
                if isinstance(v, str) and not re.match(r"^-?[0-9]+[a-zA-Z]*$", v) \
                        and v not in ("on", "off", "replica"):
                    v = "'%s'" % v.replace("'", "''")
                f.write("%s = %s\n" % (k, v))

    def touch(self, fname, text=""):
        """Writes `text` to a file in the data directory, owned by the user."""
        path = os.path.join(self.datadir, fname)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        self.env.chown(path)

    def start(self, wait_for=("ready",), timeout=60):
        """Starts the postmaster; waits until postmaster.pid reports one of wait_for.

        "ready": accepting connections (a primary, or a standby once hot);
        "standby": a hot standby accepting read-only connections;
        "starting": the postmaster runs (a standby not yet consistent).
        """
        if self.running():
            raise waits.StepError("%s is already running" % self.name)
        self.proc = procs.Proc(self.env, self.name, [self.env.pg("postgres"), "-D", self.datadir],
                               self.log_path)

        def up():
            if not self.proc.alive():
                raise waits.StepError("%s exited %s at start (%s):\n%s" % (
                    self.name, self.proc.returncode(), self.log_path, self.proc.tail(20)))
            return self.pm_status() in wait_for
        waits.wait_until(up, timeout, "%s to be %s" % (self.name, "/".join(wait_for)),
                         interval=0.1)
        return self

    def pm_status(self):
        """Line 8 of postmaster.pid: starting, stopping, ready, standby (or None)."""
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        if len(lines) >= 8 and self.proc and lines[0].strip() == str(self.proc.pid):
            return lines[7].strip()
        return None

    def running(self):
        return self.proc is not None and self.proc.alive()

    def kill9(self):
        """kill -9 of the postmaster and every backend (its process group)."""
        if self.proc:
            self.proc.kill9()

    def kill9_postmaster(self, timeout=15):
        """kill -9 of the postmaster alone, as when it is OOM-killed.

        Its backends notice and exit by themselves (one may still finish the
        commit it was flushing); returns the seconds until the last one
        left, after which stragglers get SIGKILL.
        """
        t = time.time()
        self.proc.signal_process(signal.SIGKILL)
        self.proc.wait(10)
        while time.time() - t < timeout:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return time.time() - t
            time.sleep(0.02)
        log("%s: backends still alive %ss after the postmaster died: SIGKILL", self.name, timeout)
        self.proc.signal_group(signal.SIGKILL)
        return time.time() - t

    def stop(self, mode="fast", timeout=60):
        """Clean shutdown: fast = SIGINT (checkpoint, then exit), immediate =
        SIGQUIT, smart = SIGTERM. Returns the exit status (None if it was not
        running); kill -9 after `timeout`."""
        if not self.running():
            return None
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        self.proc.signal_process(sig)  # the postmaster alone: it shuts the rest down
        if self.proc.wait(timeout) is None:
            log("%s: no exit within %ss of a %s shutdown; kill -9", self.name, timeout, mode)
            self.proc.kill9()
        return self.proc.returncode()

    def teardown(self):
        if self.running():
            self.stop("immediate", timeout=10)
        if self.proc:
            self.proc.signal_group(signal.SIGKILL)

    def basebackup(self, target, wal="none", write_recovery_conf=False, timeout=300):
        """pg_basebackup of this running cluster into `target`'s (empty) data
        directory; `wal`: "none" (-X none: the target needs WAL from
        elsewhere) or "stream"; write_recovery_conf: -R (a streaming standby)."""
        t = time.time()
        argv = [self.env.pg("pg_basebackup"), "-h", self.sockdir, "-p", str(self.port),
                "-U", SUPERUSER, "-D", target.datadir, "-X", wal, "-c", "fast", "--no-sync"]
        if write_recovery_conf:
            argv.append("-R")
        self.env.run(argv, timeout=timeout)
        log("pg_basebackup -X %s of %s into %s in %.1fs", wal, self.name, target.name,
            time.time() - t)

    def promote(self, timeout=60, check=True):
        """pg_promote(wait => true): "t" once promoted within `timeout`
        seconds, "f" if not (None on error when not `check`)."""
        return self.psql("SELECT pg_promote(true, %d)" % timeout, timeout=timeout + 10,
                         check=check)

    # -- SQL ----------------------------------------------------------------
    def psql(self, sql, timeout=30, check=True):
        """Runs SQL (as the invoking user); stdout stripped. On an error
        raises StepError if `check`, else returns None."""
        argv = [self.env.pg("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                "-d", self.conninfo(), "-c", sql]
        try:
            r = self.env.run(argv, as_user=False, timeout=timeout, check=check)
        except waits.StepError:
            if check:
                raise
            return None
        if r.returncode != 0:
            return None
        return r.stdout.strip()

    def session(self):
        """A new PsqlSession on this cluster (the caller closes it)."""
        return PsqlSession(self.env, self.conninfo())

    def lsn(self, fn="pg_current_wal_flush_lsn()"):
        return lsn.parse_lsn(self.psql("SELECT %s" % fn))

    def controldata(self):
        r = self.env.run([self.env.pg("pg_controldata"), "-D", self.datadir], timeout=30)
        out = {}
        for line in r.stdout.splitlines():
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip()
        return out

    def timeline(self):
        return int(self.controldata()["Latest checkpoint's TimeLineID"])


# What every test primary gets; small_wal adds settings under which
# checkpoints soon remove and recycle old segments (retention tests).
TEST_PRIMARY_SETTINGS = {"listen_addresses": "", "wal_level": "replica",
                         "max_replication_slots": 4, "max_wal_senders": 4,
                         "checkpoint_timeout": "30min"}
SMALL_WAL_SETTINGS = {"min_wal_size": "2MB", "max_wal_size": "4MB", "wal_keep_size": 0}


def test_primary(env, area, settings=None, small_wal=False):
    """A started PostgreSQL 15 primary with 1 MiB segments for a test, in
    `area` of `env` (its data directory `area/primary`, sockets in
    `area/sock`, logs in `area/logs`). Returns (cluster, area dir, logs dir)."""
    d = env.mkdir(area)
    sock = env.mkdir(area, "sock")
    logs = env.mkdir(area, "logs")
    pg = PgCluster(env, "primary", os.path.join(d, "primary"), sock, ports.free_port(), logs)
    pg.initdb(1)
    conf = dict(TEST_PRIMARY_SETTINGS, port=pg.port, unix_socket_directories=sock)
    if small_wal:
        conf.update(SMALL_WAL_SETTINGS)
    conf.update(settings or {})
    pg.configure(conf)
    pg.start()
    return pg, d, logs


# rmgr: Heap len (rec/tot): 54/ 54, tx: 736, lsn: 0/0148A9D8, prev 0/0148A9A0, desc: ...
WALDUMP_RE = re.compile(
    r"^rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*\d+, lsn: ([0-9A-F]+/[0-9A-F]+),"
    r" prev [0-9A-F]+/[0-9A-F]+, desc: (\S*)")


def waldump_end(env, wal_dir, start_lsn, tli, segsize, timeout=120):
    """Where the valid WAL in wal_dir ends, read from start_lsn on timeline tli.

    Returns (end_lsn, records): end_lsn is the end of the last complete,
    valid record at or after start_lsn (start_lsn itself when there is none),
    the place PostgreSQL's crash recovery would stop; records counts them.
    """
    r = env.run([env.pg("pg_waldump"), "-p", wal_dir, "-t", str(tli), "-s",
                 lsn.fmt_lsn(start_lsn)], as_user=False, timeout=timeout, check=False)
    end, n = start_lsn, 0
    for line in r.stdout.splitlines():
        m = WALDUMP_RE.match(line)
        if not m:
            continue
        n += 1
        at = lsn.parse_lsn(m.group(4))
        if m.group(1) == "XLOG" and m.group(5) == "SWITCH":
            e = (at // segsize + 1) * segsize
        else:
            e = lsn.record_end(at, int(m.group(3)), segsize)
        end = max(end, e)
    if n == 0 and "could not find a valid record" not in r.stderr and \
            "error in WAL record" not in r.stderr:
        log("pg_waldump %s from %s: %s", wal_dir, lsn.fmt_lsn(start_lsn),
            r.stderr.strip()[-300:])
    return end, n
