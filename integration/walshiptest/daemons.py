"""walship-agent and walship-replica as restartable processes.

  * Daemon: one program started again and again (start, stop, kill -9,
    pause, resume), each run a procs.Proc on the daemon's Launcher; its log
    file survives restarts (a banner line marks each start) and is read
    with the procs.LogReader methods (grep, wait_log, tail...).
  * Agent: walship-agent listening on port 0 (by default) with --port-file;
    start() waits until the file names the control and data addresses (and
    metrics, with --metrics-listen) and sets .control, .data and .metrics.
    Nothing picks a port by binding and releasing it: a restart may reuse
    the ports the agent got (restart(same_port=True), pin_ports()).
  * Replica: walship-replica following an agent (an Agent or "HOST:PORT");
    with --metrics-listen=127.0.0.1:0, metrics_address() reads the port it
    got from its log (it has no --port-file).

The walship daemons are single processes, so stop() and kill() signal
their process group, which is the daemon alone.
"""

import json
import os
import re
import signal
import subprocess

from integration.walshiptest import binaries
from integration.walshiptest import ports
from integration.walshiptest import procs
from integration.walshiptest import waits

log = procs.log


class DaemonExited(waits.StepError, AssertionError):
    """A daemon exited while it was being started (an AssertionError too, so
    a test fails rather than errors)."""


class Daemon(procs.LogReader):
    """One restartable walship process; stdout and stderr go to
    `logdir`/`label`.log. `env` adds variables to its environment;
    `launcher` (a procs.Launcher, default one of our own) says as whom and
    where it runs. Subclasses give argv()."""

    def __init__(self, label, logdir, env=None, launcher=None):
        self.label = label
        self.log_path = os.path.join(logdir, label + ".log")
        self.proc = None  # the procs.Proc of the latest start
        self.starts = 0
        self.run_offset = 0
        self.env = dict(env or {})
        self.launcher = launcher or procs.Launcher()

    def argv(self):
        raise NotImplementedError

    def _spawn(self):
        if self.running():
            raise waits.StepError("%s is already running" % self.label)
        self.starts += 1
        self.run_offset = self.log_size()  # where this run's lines start
        self.proc = procs.Proc(self.launcher, self.label, self.argv(), self.log_path,
                               extra_env=self.env)
        log("%s started (pid %d, start #%d)", self.label, self.proc.pid, self.starts)

    def running(self):
        return self.proc is not None and self.proc.alive()

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def returncode(self):
        return self.proc.returncode() if self.proc else None

    def stop(self, timeout=15):
        """SIGTERM, wait; kill -9 after `timeout`. Returns the exit status
        (negative: the signal that ended it; "hung on SIGTERM" if it had to
        be killed); None if it never ran."""
        if self.proc is None:
            return None
        was_running = self.running()
        rc = self.proc.stop(signal.SIGTERM, timeout)
        if was_running:
            log("%s stopped with SIGTERM: exit %s", self.label, rc)
        return rc

    def kill(self):
        """kill -9 and reap. Returns the exit status (-9 if it was running)."""
        if self.proc is None:
            return None
        rc = self.proc.kill9()
        log("%s killed (-9): exit %s", self.label, rc)
        return rc

    def pause(self):
        """SIGSTOP; returns once every thread has stopped."""
        self.proc.pause()
        log("%s paused (SIGSTOP)", self.label)

    def resume(self):
        self.proc.resume()
        log("%s resumed (SIGCONT)", self.label)


class Agent(Daemon):
    """walship-agent over `wal_dir`. After start(): .control and .data are
    "127.0.0.1:PORT" (.metrics too with --metrics-listen in extra_args).

    gRPC is plaintext (--insecure) unless `tls_args` gives the agent's
    --tls-* flags (`status_tls_args`: what a status client then needs).
    `program` is the binary (default: the built walship-agent); the port
    file is `port_file` (default `workdir`/`label`.ports): the agent's user
    must be able to write there."""

    def __init__(self, wal_dir, workdir, label="agent", transport=None,
                 listen="127.0.0.1:0", data_listen="127.0.0.1:0", extra_args=(),
                 tls_args=None, status_tls_args=None, program=None, port_file=None,
                 launcher=None, env=None):
        Daemon.__init__(self, label, workdir, env=env, launcher=launcher)
        self.tls_args = ["--insecure"] if tls_args is None else list(tls_args)
        self.status_tls_args = (["--insecure"] if status_tls_args is None
                                else list(status_tls_args))
        self.wal_dir = wal_dir
        self.transport = transport
        self.listen = listen
        self.data_listen = data_listen
        self.extra_args = list(extra_args)
        self.program = program
        self.port_file = port_file or os.path.join(workdir, label + ".ports")
        self.control = None
        self.data = None
        self.metrics = None

    def argv(self):
        a = [self.program or binaries.find(binaries.AGENT), "--wal-dir=" + self.wal_dir,
             "--listen=" + self.listen, "--data-listen=" + self.data_listen,
             "--port-file=" + self.port_file]
        if self.transport:
            a.append("--transport=" + self.transport)
        return a + self.tls_args + self.extra_args

    @property
    def control_port(self):
        return ports.port_of(self.control)

    @property
    def data_port(self):
        return ports.port_of(self.data)

    def spawn_only(self):
        """Starts without waiting for the port file (e.g. to kill it during
        start-up)."""
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self._spawn()

    def start(self, timeout=20):
        self.spawn_only()

        def ready():
            if not self.running():
                raise DaemonExited("%s exited (status %s) before listening:\n%s"
                                   % (self.label, self.returncode(), self.tail()))
            kv = ports.read_port_file(self.port_file) or {}
            return kv if "control" in kv and "data" in kv else None

        kv = waits.wait_until(ready, timeout, "%s to write %s" % (self.label, self.port_file),
                              interval=0.02)
        self.control, self.data, self.metrics = kv["control"], kv["data"], kv.get("metrics")
        log("%s listening: control %s, data %s", self.label, self.control, self.data)
        return self

    def pin_ports(self):
        """Later starts listen on the control and data ports of this one
        (for peers, such as proxies, that keep the addresses)."""
        self.listen = "127.0.0.1:%d" % self.control_port
        self.data_listen = "127.0.0.1:%d" % self.data_port

    def restart(self, same_port=True, timeout=20):
        """Starts again after a stop or kill, on the same control port."""
        if same_port and self.control:
            self.listen = "127.0.0.1:%d" % self.control_port
        return self.start(timeout)


class Replica(Daemon):
    """walship-replica following `agent` (an Agent, whose control address
    is read at each start, or "HOST:PORT") into `dest`, as replica `name`;
    its label is "replica-NAME" unless `label` is given. gRPC is plaintext
    (--insecure) unless `tls_args` gives the replica's --tls-* flags.
    `target` is the binary's (package, name), e.g.
    binaries.REPLICA_FAULTY, or `program` its path; `env` adds variables
    to its environment."""

    def __init__(self, agent, dest, name, workdir, transport=None,
                 data_address=None, extra_args=(), tls_args=None, target=binaries.REPLICA,
                 env=None, label=None, program=None, launcher=None):
        Daemon.__init__(self, label or "replica-" + name, workdir, env=env, launcher=launcher)
        self.target = target
        self.program = program
        self.tls_args = ["--insecure"] if tls_args is None else list(tls_args)
        self.agent = agent
        self.dest = dest
        self.name = name
        self.transport = transport
        self.data_address = data_address
        self.extra_args = list(extra_args)

    def argv(self):
        addr = self.agent.control if isinstance(self.agent, Agent) else self.agent
        a = [self.program or binaries.find(self.target), "--agent=" + addr,
             "--dest=" + self.dest, "--name=" + self.name]
        if self.transport:
            a.append("--transport=" + self.transport)
        if self.data_address:
            a.append("--data-address=" + self.data_address)
        return a + self.tls_args + self.extra_args

    def start(self):
        self._spawn()
        return self

    def metrics_address(self, timeout=20):
        """HOST:PORT of this run's /metrics (with --metrics-listen in
        extra_args; port 0 is fine). The replica has no port file: it logs
        "metrics on http://HOST:PORT/metrics" once listening."""
        line = self.wait_log(r"metrics on http://\S+/metrics", timeout, since=self.run_offset)
        return re.search(r"http://(\S+)/metrics", line).group(1)

    def error_lines(self, since=0):
        return self.grep(r" (error|critical) ", since)


class StatusError(waits.StepError):
    """walship-status could not ask the agent, or printed no JSON."""


def _run_status(args, timeout, tls_args, program=None, wait=None):
    """walship-status with `args`, each call's deadline within `timeout`
    seconds; the finished process (TimeoutExpired after `wait` seconds,
    2 × timeout by default)."""
    cmd = [program or binaries.find(binaries.STATUS),
           "--timeout-ms=%d" % int(timeout * 1000 * 0.8)] + list(tls_args) + list(args)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=wait or timeout * 2)


def agent_status(addr, timeout=10, tls_args=("--insecure",), program=None):
    """The Status of the agent at `addr` ("HOST:PORT") as a dict
    (walship-status --json, run as the invoking user). Raises StatusError."""
    try:
        p = _run_status(["--agent=" + addr, "--json"], timeout, tls_args, program, wait=timeout)
    except subprocess.TimeoutExpired:
        raise StatusError("walship-status --agent=%s: no answer within %ss" % (addr, timeout))
    if p.returncode != 0:
        raise StatusError("walship-status --agent=%s failed (exit %d): %s"
                          % (addr, p.returncode, p.stderr.strip()))
    try:
        return json.loads(p.stdout)
    except ValueError:
        raise StatusError("walship-status --agent=%s printed no JSON: %r" % (addr, p.stdout[:200]))


def agents_status(entries, as_json, timeout=10, tls_args=("--insecure",), extra=()):
    """walship-status given several agents (`entries`: "[NAME=]HOST:PORT"
    each; none with --agent-tag in `extra`): (exit status, stdout); with
    `as_json` stdout parsed (None when it is no JSON)."""
    args = list(extra) + (["--agent=" + ",".join(entries)] if entries else []) + \
        (["--json"] if as_json else [])
    p = _run_status(args, timeout, tls_args)
    if not as_json:
        return p.returncode, p.stdout
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        return p.returncode, None


def try_agent_status(addr, timeout=5, **kw):
    """agent_status(), or None if the agent does not answer."""
    try:
        return agent_status(addr, timeout, **kw)
    except StatusError:
        return None
