"""The few process and file helpers the benchmark needs from a walship run.

A subset of integration/harness.py's (whose py_library is private to
//integration), standard library plus integration/wirelib.py:

  * binary(): a walship or bench binary from $WALSHIP_BIN_DIR, the Bazel
    runfiles, or bazel-bin/ of this checkout.
  * Agent, Replica: daemons whose output goes to a log file; start() of an
    Agent waits (bounded) for its --port-file; stop() is SIGTERM, then
    SIGKILL after a timeout.
  * read_state(): the replica's walship.state, CRC-checked.
"""

import collections
import filecmp
import os
import re
import signal
import subprocess
import sys
import time

try:
    from integration import wirelib
except ImportError:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    from integration import wirelib

WORKSPACE = "walship"
STATE_FILE = "walship.state"
AGENT = ("agent", "walship-agent")
REPLICA = ("replica", "walship-replica")
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg, *args):
    """A timestamped progress line on stdout."""
    if args:
        msg = msg % args
    sys.stdout.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stdout.flush()


def binary(target):
    """Path of a binary, e.g. binary(("agent", "walship-agent")). Raises if missing."""
    pkg, name = target
    cands = []
    if os.environ.get("WALSHIP_BIN_DIR"):
        cands.append(os.path.join(os.environ["WALSHIP_BIN_DIR"], name))
    for var in ("TEST_SRCDIR", "RUNFILES_DIR"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], os.environ.get("TEST_WORKSPACE", WORKSPACE),
                                      pkg, name))
    cands.append(os.path.join(_REPO, "bazel-bin", pkg, name))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("%s not found in %s; build it with bazel build //%s:%s"
                            % (name, cands, pkg, name))


def wait_until(pred, timeout, what="condition", interval=0.05):
    """Polls pred() until truthy (returned); AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (
                timeout, what() if callable(what) else what))
        time.sleep(interval)


def source_segments(wal_dir):
    """Sorted names of the segment files of a WAL directory."""
    return sorted(n for n in os.listdir(wal_dir)
                  if os.path.isfile(os.path.join(wal_dir, n)) and not n.startswith("."))


def total_size(wal_dir):
    return sum(os.path.getsize(os.path.join(wal_dir, n)) for n in source_segments(wal_dir))


def same_contents(src, dest):
    """Problems keeping the replica `dest` from holding `src` byte for byte."""
    problems = []
    names = source_segments(src)
    for i, n in enumerate(names):
        d = os.path.join(dest, n)
        if not os.path.isfile(d) and i == len(names) - 1:
            d += ".partial"
        if not os.path.isfile(d):
            problems.append("%s missing" % n)
        elif not filecmp.cmp(os.path.join(src, n), d, shallow=False):
            problems.append("%s differs" % n)
    return problems


Pos = collections.namedtuple("Pos", ["segment", "offset"])


def read_state(dest):
    """walship.state of a replica as {stream, segment, offset, complete}, or None.

    AssertionError if it is damaged (or caught mid-replacement)."""
    path = os.path.join(dest, STATE_FILE)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii")
    except FileNotFoundError:
        return None
    at = text.rfind("crc=")
    if at < 0:
        raise AssertionError("%s has no crc line" % path)
    body, crc = text[:at], int(text[at + 4:].strip(), 16)
    if wirelib.crc32c(body.encode()) != crc:
        raise AssertionError("%s: CRC32C mismatch" % path)
    kv = dict(l.split("=", 1) for l in body.strip("\n").split("\n")[1:] if "=" in l)
    return {"stream": kv.get("stream", ""), "segment": kv.get("segment", ""),
            "offset": int(kv.get("offset", "0")), "complete": kv.get("complete") == "1"}


class Daemon(object):
    """One walship process; its output is appended to LOGDIR/LABEL.log."""

    def __init__(self, label, logdir):
        self.label = label
        self.log_path = os.path.join(logdir, label + ".log")
        self.proc = None

    def argv(self):
        raise NotImplementedError

    def _spawn(self):
        argv = self.argv()
        with open(self.log_path, "ab") as f:
            f.write(("==== %s: %s\n" % (time.strftime("%H:%M:%S"), " ".join(argv))).encode())
            f.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                         stderr=subprocess.STDOUT, close_fds=True)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=15):
        """SIGTERM; SIGKILL after `timeout`. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log("%s did not exit within %ds of SIGTERM: killing it", self.label, timeout)
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "\n".join(f.read().splitlines()[-n:])
        except FileNotFoundError:
            return ""


class Agent(Daemon):
    """walship-agent over `wal_dir`; after start(), .control is HOST:PORT."""

    def __init__(self, wal_dir, logdir, label="agent", transport=None, extra_args=()):
        Daemon.__init__(self, label, logdir)
        self.wal_dir = wal_dir
        self.transport = transport
        self.extra_args = list(extra_args)
        self.port_file = os.path.join(logdir, label + ".ports")
        self.control = None

    def argv(self):
        a = [binary(AGENT), "--wal-dir=" + self.wal_dir, "--listen=127.0.0.1:0",
             "--data-listen=127.0.0.1:0", "--port-file=" + self.port_file]
        if self.transport:
            a.append("--transport=" + self.transport)
        return a + self.extra_args

    def start(self, timeout=30):
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self._spawn()

        def ready():
            if not self.running():
                raise AssertionError("%s exited (%s) before listening:\n%s" % (
                    self.label, self.proc.returncode, self.tail()))
            try:
                with open(self.port_file) as f:
                    m = re.search(r"^control=(\S+)$", f.read(), re.M)
            except FileNotFoundError:
                return None
            return m and m.group(1)
        self.control = wait_until(ready, timeout, "%s to listen" % self.label, interval=0.01)
        return self


class Replica(Daemon):
    """walship-replica of `agent` into `dest`."""

    def __init__(self, agent, dest, name, logdir, transport=None):
        Daemon.__init__(self, "replica-" + name, logdir)
        self.agent = agent
        self.dest = dest
        self.name = name
        self.transport = transport

    def argv(self):
        a = [binary(REPLICA), "--agent=" + self.agent.control, "--dest=" + self.dest,
             "--name=" + self.name]
        if self.transport:
            a.append("--transport=" + self.transport)
        return a

    def start(self):
        self._spawn()
        return self
