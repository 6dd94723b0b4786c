"""Processes of the tests and tools: started so that they can be stopped by
their PID, their output in a log file, and the one progress-line format.

  * log(): a timestamped progress line on stdout.
  * Launcher: how processes start (as which user, with which environment,
    in which directory, whether they die with this process) and the
    registry of those started; kill_all() ends what still runs.
  * Proc: one process leading its own process group (start_new_session), so
    stop() and kill9() reach it and any children, never a wrapper: when
    the launcher's `die_with_parent` wraps the command in `setpriv
    --pdeathsig`, setpriv execs it and the PID stays the program's.
  * LogReader: what a test reads from a log file (lines, grep, a bounded wait
    for a line); Proc and the restartable daemons (daemons.py) share it.

Every wait is bounded; a wait that runs out raises waits.WaitTimeout.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from integration.walshiptest import waits

# Where system programs (setpriv, useradd, unshare) are, whatever our PATH.
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_T_START = time.time()


def log(msg, *args):
    """A progress line on stdout: wall time with milliseconds and the seconds
    since this module was loaded, e.g. "[08:01:02.345 +  12.3s] agent up"."""
    if args:
        msg = msg % args
    now = time.time()
    sys.stdout.write("[%s.%03d +%6.1fs] %s\n" % (
        time.strftime("%H:%M:%S", time.localtime(now)), int(now * 1000) % 1000,
        now - _T_START, msg))
    sys.stdout.flush()


def read_text(path, since=0):
    """A file's text from byte offset `since` ("" while it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def pid_alive(pid):
    """Whether process `pid` runs: it exists (signal 0 reaches it, or it is
    another user's) and is not a zombie (exited, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def group_members(pgid):
    """The pids of process group `pgid` that still run (zombies left out:
    they hold no memory, files or shared memory any more)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _per_thread(pid, read):
    """{thread name: [read(task dir), one per thread of that name]} of
    process `pid`; read returns (name, value) and may raise OSError for a
    thread that ended meanwhile, which is left out."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            name, value = read("/proc/%d/task/%s" % (pid, tid))
        except OSError:
            continue
        if value is not None:
            out.setdefault(name, []).append(value)
    return out


def _proc_text(path):
    """A /proc file's text; OSError when the thread ended."""
    with open(path) as f:
        return f.read()


def thread_slices(pid):
    """{thread name: [scheduler slice in ns, one per thread of that name]}
    of process `pid`, as the scheduler reports them (/proc/PID/task/TID/sched,
    "se.slice"); a thread that ended meanwhile is left out."""
    def read(task):
        name, sched = _proc_text(task + "/comm").strip(), _proc_text(task + "/sched")
        for line in sched.splitlines():
            if line.startswith("se.slice"):
                return name, int(line.split(":")[1])
        return name, None
    return _per_thread(pid, read)


def thread_policies(pid):
    """{thread name: [(scheduling policy, real-time priority), one per thread
    of that name]} of process `pid` (/proc/PID/task/TID/stat, fields 41 and
    40: 0 SCHED_OTHER, 1 SCHED_FIFO, ...); a thread that ended meanwhile is
    left out."""
    def read(task):
        stat = _proc_text(task + "/stat")
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3, the state
        return (stat[stat.index("(") + 1:stat.rindex(")")],
                (int(fields[41 - 3]), int(fields[40 - 3])))
    return _per_thread(pid, read)


def find_setpriv():
    """util-linux setpriv if it knows --pdeathsig (Debian 12's does), else None."""
    path = shutil.which("setpriv", path=SBIN_PATH)
    if not path:
        return None
    try:
        r = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if "--pdeathsig" in r.stdout else None


_SETPRIV = find_setpriv()


class LogReader(object):
    """Reading a log file that grows: needs self.log_path and self.label."""

    def log_text(self, since=0):
        return read_text(self.log_path, since)

    def log_size(self):
        """Bytes in the log now: an offset for log_lines(since=...)."""
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_lines(self, since=0):
        """Log lines from byte offset `since` (see log_size())."""
        return self.log_text(since).splitlines()

    def grep(self, pattern, since=0):
        """Log lines matching regex `pattern`, from byte offset `since`."""
        rx = re.compile(pattern)
        return [l for l in self.log_lines(since) if rx.search(l)]

    def wait_log(self, pattern, timeout, since=0):
        """Waits for a log line matching `pattern`; returns the first one."""
        lines = waits.wait_until(lambda: self.grep(pattern, since), timeout,
                                 "%s to log /%s/" % (self.label, pattern))
        return lines[0]

    def tail(self, n=60):
        return "\n".join(self.log_lines()[-n:])


class Launcher(object):
    """How Procs start, and the registry of those started.

    `work`: the children's working directory (None: ours). `user`: a pwd
    entry the children run as when started with as_user=True (None: as we
    are). `env`: their whole environment (None: ours). `die_with_parent`:
    SIGKILL them when this process dies, even by kill -9 or a test timeout
    (setpriv --pdeathsig, where setpriv knows it). The kernel ties that
    signal to the thread that started the child, so it is asked for only
    from the main thread: a child started by a worker thread would die
    with the thread. `logdir`: where start() puts a log file when none is
    named.
    Thread-safe: processes may be started and killed from several threads.
    """

    def __init__(self, work=None, user=None, env=None, die_with_parent=True, logdir=None):
        self.work = work
        self.run_as = user
        self.env = env
        self.die_with_parent = die_with_parent
        self.logdir = logdir
        self.procs = []
        self._lock = threading.Lock()
        self._counter = 0

    def user_kwargs(self, as_user):
        """Popen's user/group arguments for a child (as_user: as self.run_as)."""
        if as_user and self.run_as is not None and self.run_as.pw_uid != os.geteuid():
            return {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid,
                    "extra_groups": []}
        return {}

    def child_env(self, as_user, extra=None):
        """A child's environment: self.env (or ours) plus `extra`."""
        e = dict(self.env if self.env is not None else os.environ)
        e.update(extra or {})
        return e

    def register(self, proc):
        with self._lock:
            self.procs.append(proc)

    def start(self, name, argv, log_path=None, **kw):
        """A Proc of `argv` (see Proc for `kw`); its log is `log_path`, or
        NNN-name.log in self.logdir, numbered in start order."""
        if log_path is None:
            with self._lock:
                self._counter += 1
                n = self._counter
            log_path = os.path.join(self.logdir, "%03d-%s.log" % (n, name))
        return Proc(self, name, argv, log_path, **kw)

    def kill_all(self, timeout=5):
        """SIGKILL to every registered process group still running; reaps them."""
        with self._lock:
            procs = list(self.procs)
        for p in procs:
            if p.alive():
                p.signal_group(signal.SIGKILL)
        for p in procs:
            p.wait(timeout)
            p.signal_group(signal.SIGKILL)  # stray children of a dead leader


class Proc(LogReader):
    """A process leading its own process group, its output (stdout and
    stderr) appended to `log_path` after a banner line naming the command.

    `launcher` (a Launcher) says as whom and where it runs and registers it;
    `as_user` False runs it as we are even if the launcher has a user.
    `extra_env` adds variables; `stdin` is a file or pipe (default
    /dev/null); `cwd` overrides the launcher's directory.

    stop() and kill9() signal the whole group; signal_process() and pause() the
    process alone. Exit statuses are Popen's (negative: the signal that
    ended it).
    """

    def __init__(self, launcher, name, argv, log_path, as_user=True, stdin=None, cwd=None,
                 extra_env=None):
        self.launcher = launcher
        self.name = self.label = name
        self.argv = list(argv)
        self.log_path = log_path
        if launcher.die_with_parent and _SETPRIV and \
                threading.current_thread() is threading.main_thread():
            argv = [_SETPRIV, "--pdeathsig", "KILL", "--"] + self.argv
        with open(log_path, "ab") as f:
            f.write(("\n==== %s start %s: %s\n" % (
                name, time.strftime("%H:%M:%S"), " ".join(self.argv))).encode())
            f.flush()
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                      stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                      close_fds=True, start_new_session=True,
                                      cwd=cwd or launcher.work,
                                      env=launcher.child_env(as_user, extra_env),
                                      **launcher.user_kwargs(as_user))
        self.pid = self.p.pid
        launcher.register(self)

    def alive(self):
        return self.p.poll() is None

    def returncode(self):
        """The exit status, or None while it runs."""
        return self.p.poll()

    @property
    def reaped(self):
        """True once its exit status was collected (does not wait or poll)."""
        return self.p.returncode is not None

    def signal_process(self, sig):
        """`sig` to the process alone (not its group); nothing if it is gone."""
        if self.alive():
            self.p.send_signal(sig)

    def signal_group(self, sig):
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            self.p.send_signal(sig)

    def wait(self, timeout):
        """Exit status, or None if still running after `timeout` seconds."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill9(self, timeout=10):
        """SIGKILL to the group; reaps the process and returns its exit
        status once no member of the group runs (a member with much memory
        takes a while to exit; one still attached to a server's shared
        memory would stop the server from starting again)."""
        self.signal_group(signal.SIGKILL)
        rc = self.wait(timeout)
        try:
            waits.wait_until(lambda: not group_members(self.pid), timeout,
                             "the members of %s's group to exit" % self.name, interval=0.01)
        except waits.StepError:
            log("%s: members of its group still run %ss after SIGKILL: %s", self.name,
                timeout, group_members(self.pid))
        return rc

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """SIGCONT (a stopped process cannot exit) and `sig` to the group;
        waits `timeout` seconds, then SIGKILL. Returns the exit status, or
        "hung on SIG..." if it had to be killed (never equal to a status)."""
        result = None
        if self.alive():
            self.signal_group(signal.SIGCONT)
            self.signal_group(sig)
            if self.wait(timeout) is None:
                log("%s did not exit within %ss of %s: SIGKILL", self.name, timeout,
                    signal.Signals(sig).name)
                self.kill9()
                result = "hung on %s" % signal.Signals(sig).name
        self.signal_group(signal.SIGKILL)  # stray members of the group (children)
        return result if result is not None else self.p.poll()

    def wait_rusage(self, timeout):
        """Reaps the process; returns (exit status, its resource usage).
        SIGKILL to the group after `timeout` seconds, then waits 10 more."""
        deadline = time.monotonic() + timeout
        killed = False
        while True:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                return self.p.returncode, ru
            if time.monotonic() > deadline:
                if killed:
                    raise waits.StepError("%s (pid %d) survived SIGKILL" % (self.name, self.pid))
                log("%s (pid %d) still running after %.0fs: SIGKILL", self.name, self.pid,
                    timeout)
                self.signal_group(signal.SIGKILL)
                deadline, killed = time.monotonic() + 10, True
            time.sleep(0.005)

    def pause(self):
        """SIGSTOP to the process; waits until every thread has stopped
        (kill(2) returns before they all have)."""
        self.p.send_signal(signal.SIGSTOP)

        def all_stopped():
            task_dir = "/proc/%d/task" % self.pid
            try:
                for tid in os.listdir(task_dir):
                    with open(os.path.join(task_dir, tid, "stat")) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                            return False
            except FileNotFoundError:
                return True  # exited meanwhile
            return True

        waits.wait_until(all_stopped, 10, "%s to stop" % self.name, interval=0.005)

    def resume(self):
        self.signal_process(signal.SIGCONT)
