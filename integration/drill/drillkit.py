"""Processes, an OS user and PostgreSQL clusters for the failover drill.

Standard library only. What is here:

  * DrillEnv: the drill's temp directory (under /tmp: the drill user must
    reach it, and unix socket paths must stay short), the OS user that runs
    PostgreSQL and the walship daemons (created when running as root:
    PostgreSQL refuses to run as root), copies of the binaries that user runs,
    and the registry of every process started, killed on close() even after
    a failure (each process leads its own process group).
  * Proc: one process, its output appended to a log file.
  * PgCluster: initdb, configuration, start/stop/kill -9 of a PostgreSQL 15
    cluster started as `postgres -D` (not pg_ctl, so the drill owns its
    process group), psql one-shot queries, basebackup, promote, pg_rewind.
  * PsqlSession: one long-lived psql for frequent cheap queries (sampling).
  * pg_waldump's view of where valid WAL ends. LSNs and segment names are
    integration/walshiptest/lsn.py, waits walshiptest/waits.py, binaries
    walshiptest/binaries.py (their names are here too, for the callers).

Every wait is bounded: a helper that waits takes a timeout and raises
DrillError (or returns None, as documented) when it passes.
"""

import os
import pwd
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from integration.walshiptest import binaries
from integration.walshiptest import ports
from integration.walshiptest import waits
from integration.walshiptest.lsn import (  # noqa: F401 (the drill's names)
    XLOG_BLCKSZ, fmt_lsn, parse_lsn, parse_segment, position_lsn, record_end, segment_name)

PG_SUPERUSER = "drill"
DEFAULT_USER = "walship-drill"
_PG_BIN_CANDIDATES = ["/usr/lib/postgresql/15/bin"]
_SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _find_setpriv():
    """util-linux setpriv if it knows --pdeathsig (Debian 12 does)."""
    path = shutil.which("setpriv", path=_SBIN_PATH)
    if not path:
        return None
    try:
        r = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if "--pdeathsig" in r.stdout else None


_SETPRIV = _find_setpriv()


# A step of the drill could not be carried out (set-up, a bounded wait: a
# wait_until timing out raises waits.WaitTimeout, a DrillError).
DrillError = waits.StepError
wait_until = waits.wait_until
free_port = ports.free_port


_t_start = time.time()


def log(msg, *args):
    """A timestamped progress line on stdout."""
    if args:
        msg = msg % args
    now = time.time()
    sys.stdout.write("[drill %s.%03d +%6.1fs] %s\n" % (
        time.strftime("%H:%M:%S", time.localtime(now)), int(now * 1000) % 1000,
        now - _t_start, msg))
    sys.stdout.flush()


def read_text(path, since=0):
    """A log file's text from byte offset `since` ("" while it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# rmgr: Heap len (rec/tot): 54/ 54, tx: 736, lsn: 0/0148A9D8, prev 0/0148A9A0, desc: ...
_WALDUMP_RE = re.compile(
    r"^rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*\d+, lsn: ([0-9A-F]+/[0-9A-F]+),"
    r" prev [0-9A-F]+/[0-9A-F]+, desc: (\S*)")


# ---------------------------------------------------------------------------
# The environment: user, temp dir, binaries, processes

def find_pg_bin():
    cands = ([os.environ["WALSHIP_PG_BIN"]] if os.environ.get("WALSHIP_PG_BIN") else []) + \
        _PG_BIN_CANDIDATES
    for c in cands:
        if os.path.isfile(os.path.join(c, "postgres")):
            return c
    raise DrillError("PostgreSQL 15 binaries not found in %s (apt-get install postgresql-15)"
                     % cands)


def ensure_user(name, purpose="walship failover drill"):
    """Returns the passwd entry of `name`, creating a system user (described
    as `purpose`) if absent."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd", path=_SBIN_PATH)
    if not useradd:
        raise DrillError("useradd not found: cannot create the user %s" % name)
    home = "/var/lib/%s" % name
    r = subprocess.run([useradd, "--system", "--create-home", "--home-dir", home,
                        "--shell", "/usr/sbin/nologin", "--comment",
                        purpose, name],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise DrillError("useradd %s failed (%d): %s" % (name, r.returncode, r.stdout.strip()))
    log("created OS user %s (uid %d)", name, entry.pw_uid)
    return entry


class Proc(object):
    """A process leading its own process group; output appended to a log file.

    kill9() kills the whole group (the daemon and any children) with SIGKILL;
    stop() sends SIGTERM (or `sig`) to the group and waits, then SIGKILL.
    """

    def __init__(self, env, name, argv, log_path, as_user=True, stdin=None, cwd=None,
                 extra_env=None):
        self.env = env
        self.name = name
        self.argv = list(argv)
        if _SETPRIV:  # dies with the drill even if the drill is SIGKILLed
            argv = [_SETPRIV, "--pdeathsig", "KILL", "--"] + self.argv
        self.log_path = log_path
        with open(log_path, "ab") as f:
            f.write(("\n==== %s start %s: %s\n" % (
                name, time.strftime("%H:%M:%S"), " ".join(self.argv))).encode())
            f.flush()
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                      stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                      start_new_session=True, cwd=cwd or env.work,
                                      env=env.child_env(as_user, extra_env),
                                      **env.user_kwargs(as_user))
        self.pid = self.p.pid
        env.register(self)

    def alive(self):
        return self.p.poll() is None

    def returncode(self):
        return self.p.poll()

    def signal_group(self, sig):
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            self.p.send_signal(sig)

    def kill9(self):
        self.signal_group(signal.SIGKILL)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Signals the group and waits; SIGKILL after `timeout`. Returns the exit status."""
        if self.alive():
            self.signal_group(sig)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log("%s did not exit within %ss after signal %d: SIGKILL", self.name, timeout, sig)
                self.kill9()
        # Stray members of the group (children) too.
        self.signal_group(signal.SIGKILL)
        return self.p.poll()

    def wait(self, timeout):
        """Exit status, or None if still running after `timeout`."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class DrillEnv(object):
    """The drill's user, temp directory, binaries and process registry."""

    def __init__(self, user=DEFAULT_USER, base_dir="/tmp", keep=False):
        self.keep = keep
        self.procs = []
        self.clusters = []
        self._lock = threading.Lock()
        self.pg_bin = find_pg_bin()
        self.is_root = os.geteuid() == 0
        if self.is_root:
            pw = ensure_user(user)
        else:
            pw = pwd.getpwuid(os.getuid())
        self.user = pw.pw_name
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.home = pw.pw_dir if os.path.isdir(pw.pw_dir) else None
        self.work = tempfile.mkdtemp(prefix="wsdrill-", dir=base_dir)
        os.chmod(self.work, 0o755)
        self.chown(self.work)
        self.home = self.home or self.work
        self.bin = self.mkdir("bin")
        self.binaries = {}
        try:
            for target in [binaries.AGENT, binaries.STATUS, binaries.REPLICA,
                           binaries.DRILL_LOADER]:
                name = target[1]
                dst = os.path.join(self.bin, name)
                shutil.copyfile(binaries.find(target), dst)
                os.chmod(dst, 0o755)
                self.binaries[name] = dst
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        log("work dir %s, user %s (uid %d), PostgreSQL %s", self.work, self.user, self.uid,
            self.pg_bin)

    # -- files ------------------------------------------------------------
    def chown(self, path):
        if self.is_root:
            os.chown(path, self.uid, self.gid)

    def mkdir(self, *parts, mode=0o755):
        path = os.path.join(self.work, *parts)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        self.chown(path)
        return path

    def pg(self, tool):
        return os.path.join(self.pg_bin, tool)

    # -- processes ----------------------------------------------------------
    def user_kwargs(self, as_user):
        if as_user and self.is_root:
            return {"user": self.uid, "group": self.gid, "extra_groups": []}
        return {}

    def child_env(self, as_user, extra=None):
        e = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
             "HOME": self.home if as_user else os.environ.get("HOME", "/root"),
             "TZ": "UTC"}
        if as_user and self.is_root:
            e["USER"] = e["LOGNAME"] = self.user
        if extra:
            e.update(extra)
        return e

    def register(self, proc):
        with self._lock:
            self.procs.append(proc)

    def run(self, argv, as_user=True, timeout=60, check=True, input_text=None):
        """Runs a command to completion (bounded); returns CompletedProcess (text)."""
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               input=input_text, timeout=timeout, cwd=self.work,
                               env=self.child_env(as_user), start_new_session=True,
                               **self.user_kwargs(as_user))
        except subprocess.TimeoutExpired:
            raise DrillError("timed out after %ss: %s" % (timeout, " ".join(argv)))
        if check and r.returncode != 0:
            raise DrillError("%s exited %d: %s" % (" ".join(argv), r.returncode,
                                                  (r.stderr or r.stdout).strip()[-2000:]))
        return r

    def close(self):
        """Kills everything started; removes the work dir unless keep."""
        for c in list(self.clusters):
            c.teardown()
        with self._lock:
            procs = list(self.procs)
        for p in procs:
            if p.alive():
                p.signal_group(signal.SIGKILL)
        for p in procs:
            p.wait(5)
            p.signal_group(signal.SIGKILL)  # stray children of a dead leader
        self._remove_orphan_shm()
        if self.keep:
            log("kept work dir %s", self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def _remove_orphan_shm(self):
        """SysV segments left by kill -9'd postmasters of the drill user (none attached)."""
        if not self.is_root or self.user == "root":
            return
        try:
            out = subprocess.run(["ipcs", "-m"], stdout=subprocess.PIPE, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        for line in out.splitlines():
            f = line.split()
            # key shmid owner perms bytes nattch status
            if len(f) >= 6 and f[2] == self.user and f[5] == "0":
                subprocess.run(["ipcrm", "-m", f[1]], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10)


# ---------------------------------------------------------------------------
# psql

class PsqlSession(object):
    """One long-lived psql (as the invoking user) for frequent queries.

    query() returns the text result (stripped), or None on any error, a
    timeout or a lost connection; it reconnects at most once a second. Not
    thread-safe: one session per thread.
    """

    MARK = "__drill_end_of_result__"

    def __init__(self, env, conninfo):
        self.env = env
        self.conninfo = conninfo
        self.p = None
        self.q = None
        self.last_open = 0.0

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

        threading.Thread(target=reader, daemon=True).start()

    def close(self):
        if self.p is not None:
            try:
                self.p.kill()
                self.p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.p = None

    def query(self, sql, timeout=2.0):
        if self.p is None or self.p.poll() is not None:
            self.close()
            if time.time() - self.last_open < 1.0:
                return None
            self._open()
        try:
            self.p.stdin.write("%s;\n\\echo %s\n" % (sql.rstrip(";"), self.MARK))
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None
        lines = []
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                self.close()
                return None
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                self.close()
                return None
            if line is None:
                self.close()
                return None
            if line == self.MARK:
                break
            lines.append(line)
        if any(("ERROR:" in l or "FATAL:" in l or l.startswith("psql:")) for l in lines):
            return None
        return "\n".join(lines).strip()


# ---------------------------------------------------------------------------
# PostgreSQL clusters

class PgCluster(object):
    """A PostgreSQL 15 cluster run as the drill user.

    The server is started as `postgres -D DATA` by the drill, so its process
    group holds the postmaster and every backend: kill9() is a crash of the
    whole server, as when the postmaster is OOM-killed and its children die.
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
            self.sockdir, self.port, PG_SUPERUSER, dbname)

    # -- lifecycle ----------------------------------------------------------
    def initdb(self, segsize_mb):
        self.env.run([self.env.pg("initdb"), "-D", self.datadir, "-U", PG_SUPERUSER,
                      "--auth=trust", "--locale=C", "--encoding=UTF8", "--no-sync",
                      "--wal-segsize=%d" % segsize_mb], timeout=120)

    def configure(self, settings):
        """Appends settings to postgresql.conf (later lines win)."""
        path = os.path.join(self.datadir, "postgresql.conf")
        with open(path, "a") as f:
            f.write("\n# walship drill (%s)\n" % time.strftime("%H:%M:%S"))
            for k, v in settings.items():
                if isinstance(v, str) and not re.match(r"^-?[0-9]+[a-zA-Z]*$", v) \
                        and v not in ("on", "off", "replica"):
                    v = "'%s'" % v.replace("'", "''")
                f.write("%s = %s\n" % (k, v))

    def touch(self, fname, text=""):
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
            raise DrillError("%s is already running" % self.name)
        self.proc = Proc(self.env, self.name, [self.env.pg("postgres"), "-D", self.datadir],
                         self.log_path)

        def up():
            if not self.proc.alive():
                raise DrillError("%s exited %s at start; see %s" % (
                    self.name, self.proc.returncode(), self.log_path))
            st = self.pm_status()
            return st in wait_for
        wait_until(up, timeout, "%s to be %s" % (self.name, "/".join(wait_for)), interval=0.1)
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
        os.kill(self.proc.pid, signal.SIGKILL)
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
        """Clean shutdown: fast = SIGINT (checkpoint, then exit), immediate = SIGQUIT."""
        if not self.running():
            return None
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        os.kill(self.proc.pid, sig)  # the postmaster alone: it shuts the rest down
        rc = self.proc.wait(timeout)
        if rc is None:
            log("%s: no exit within %ss of a %s shutdown; kill -9", self.name, timeout, mode)
            self.proc.kill9()
        return self.proc.returncode()

    def teardown(self):
        if self.running():
            self.stop("immediate", timeout=10)
        if self.proc:
            self.proc.signal_group(signal.SIGKILL)

    # -- SQL ----------------------------------------------------------------
    def psql(self, sql, timeout=30, check=True):
        """Runs SQL (as the invoking user); returns stdout stripped, or None on error if not check."""
        argv = [self.env.pg("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                "-d", self.conninfo(), "-c", sql]
        try:
            r = self.env.run(argv, as_user=False, timeout=timeout, check=check)
        except DrillError:
            if check:
                raise
            return None
        if r.returncode != 0:
            return None
        return r.stdout.strip()

    def session(self):
        return PsqlSession(self.env, self.conninfo())

    def lsn(self, fn="pg_current_wal_flush_lsn()"):
        return parse_lsn(self.psql("SELECT %s" % fn))

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
    `area` of the drill env (its data directory `area/primary`, sockets in
    `area/sock`, logs in `area/logs`). Returns (cluster, area dir, logs dir)."""
    d = env.mkdir(area)
    sock = env.mkdir(area, "sock")
    logs = env.mkdir(area, "logs")
    pg = PgCluster(env, "primary", os.path.join(d, "primary"), sock, free_port(), logs)
    pg.initdb(1)
    conf = dict(TEST_PRIMARY_SETTINGS, port=pg.port, unix_socket_directories=sock)
    if small_wal:
        conf.update(SMALL_WAL_SETTINGS)
    conf.update(settings or {})
    pg.configure(conf)
    pg.start()
    return pg, d, logs


def waldump_end(env, wal_dir, start_lsn, tli, segsize, timeout=120):
    """Where the valid WAL in wal_dir ends, read from start_lsn on timeline tli.

    Returns (end_lsn, records): end_lsn is the end of the last complete,
    valid record at or after start_lsn (start_lsn itself when there is none),
    the place PostgreSQL's crash recovery would stop; records counts them.
    """
    r = env.run([env.pg("pg_waldump"), "-p", wal_dir, "-t", str(tli), "-s", fmt_lsn(start_lsn)],
                as_user=False, timeout=timeout, check=False)
    end, n = start_lsn, 0
    for line in r.stdout.splitlines():
        m = _WALDUMP_RE.match(line)
        if not m:
            continue
        n += 1
        lsn = parse_lsn(m.group(4))
        if m.group(1) == "XLOG" and m.group(5) == "SWITCH":
            e = (lsn // segsize + 1) * segsize
        else:
            e = record_end(lsn, int(m.group(3)), segsize)
        end = max(end, e)
    if n == 0 and "could not find a valid record" not in r.stderr and \
            "error in WAL record" not in r.stderr:
        log("pg_waldump %s from %s: %s", wal_dir, fmt_lsn(start_lsn), r.stderr.strip()[-300:])
    return end, n
