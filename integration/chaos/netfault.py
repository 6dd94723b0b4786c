"""Network faults for walship's chaos campaign: one host per replica.

Python 3 standard library only; needs root, network namespaces, veth pairs,
nftables (Debian `nftables`) and the tbf qdisc. netem is not assumed: added
latency comes from the userspace fault proxy (integration/fault_proxy.py).

A NetHost is a network namespace `wschaos-<pid>-<index>` (pid of the process
that made it, so parallel runs never collide) joined to the root namespace by
a veth pair with a /30 of its own out of 10.213.0.0/16, picked under a lock
file among the /30s no interface in the root namespace uses:

    root namespace                       namespace wschaos-<pid>-<index>
    wsc<pid>-<index>  10.213.a.b+1  <-->  eth0  10.213.a.b+2   (lo up too)

Inside, 10.213.0.0/16 is routed through the veth, so a replica in any NetHost
reaches an agent bound to any NetHost's `agent_address` (a local address of
the root namespace). Run the daemons like this:

    agent:    --listen=<agent_address>:0 --data-listen=<agent_address>:0
    replica:  host.wrap([walship-replica, --agent=<agent_address>:<control port>, ...])

The replica dials its data socket at the host of --agent and the data port
the agent announces in the handshake, so no --data-address is needed (it is
needed only to send the data socket through a proxy, see latency_proxy()).

Faults act on ONE agent port (control or data), so the gRPC channel and the
data socket can be faulted separately. Each returns a Fault whose clear()
undoes it; NetHost.clear() undoes all of them. Rules live in an nftables
table of our own inside the namespace (`inet walship_chaos`), so nothing in
the root namespace's firewall is touched.

  blackhole(port, direction)  drops packets to the agent's port ("to-agent",
                              output hook, tcp dport) or from it
                              ("from-agent", input hook, tcp sport), or both.
  cut(port)                   destroys the namespace's established sockets to
                              the port (`ss -K`, SOCK_DESTROY): the replica
                              gets ECONNABORTED, the agent an RST.
  half_open(port, hold)       drops both directions, destroys the replica's
                              sockets (their RST is dropped, so the agent's
                              side stays ESTABLISHED), lifts the drop after
                              `hold` seconds. The agent learns of it only
                              when it next sends on the stale connection
                              (the namespace answers with an RST) or by a
                              timeout of its own.
  limit_rate(bytes_per_sec)   tbf on both ends of the veth (each direction).
  latency_proxy(port, secs)   a FaultProxy on agent_address forwarding to the
                              port with FaultProxy.set_delay(secs).

Every command runs with a timeout and its exit status checked; a failure
raises NetFaultError carrying the command and its stderr.
"""

import fcntl
import ipaddress
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from integration import fault_proxy
from integration.walshiptest import procs

NS_PREFIX = "wschaos"
VETH_PREFIX = "wsc"
INNER_IF = "eth0"
NFT_TABLE = "walship_chaos"
SUPERNET = ipaddress.ip_network("10.213.0.0/16")
COMMAND_TIMEOUT = 15.0
DIRECTIONS = ("to-agent", "from-agent", "both")
_NS_RE = re.compile(r"^%s-(\d+)-(\w+)$" % NS_PREFIX)
_LOCK_PATH = os.path.join(tempfile.gettempdir(), "walship-netfault.lock")


class NetFaultError(RuntimeError):
    """A command failed: .argv, .returncode, .stderr."""

    def __init__(self, argv, returncode, stderr):
        RuntimeError.__init__(self, "%s failed (exit %s): %s" % (
            " ".join(argv), returncode, (stderr or "").strip() or "(no stderr)"))
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


def run(argv, timeout=COMMAND_TIMEOUT, input=None):
    """Runs argv; returns its stdout. Raises NetFaultError on a non-zero exit,
    a missing program or `timeout` seconds passing."""
    try:
        p = subprocess.run(argv, input=input, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise NetFaultError(argv, "timeout after %.0fs" % timeout, e.stderr or "")
    except OSError as e:
        raise NetFaultError(argv, "not run", str(e))
    if p.returncode != 0:
        raise NetFaultError(argv, p.returncode, p.stderr)
    return p.stdout


def _log(msg, *args):
    procs.log("netfault: " + msg, *args)


def _check_port(port):
    port = int(port)
    if not 0 < port < 65536:
        raise ValueError("not a TCP port: %r" % port)
    return port


def _dport_filter(port):
    """ss filter words for destination port `port` (an int or a list)."""
    ports = port if isinstance(port, (list, tuple)) else [port]
    words = []
    for p in ports:
        words += (["or"] if words else []) + ["dport", "= :%d" % _check_port(p)]
    return ["("] + words + [")"]


def namespaces():
    """Names of all network namespaces (`ip netns list`)."""
    return [l.split()[0] for l in run(["ip", "netns", "list"]).splitlines() if l.strip()]


def cleanup_stale():
    """Deletes the wschaos-<pid>-* namespaces (and their veths) of processes
    that no longer run; returns their names. Safe while other runs go on."""
    gone = []
    for ns in namespaces():
        m = _NS_RE.match(ns)
        if m and not procs.pid_alive(int(m.group(1))):
            _delete_ns(ns, "%s%s-%s" % (VETH_PREFIX, m.group(1), m.group(2)))
            gone.append(ns)
    if gone:
        _log("deleted namespaces of dead runs: %s", gone)
    return gone


def _delete_ns(ns, veth):
    if ns in namespaces():
        run(["ip", "netns", "delete", ns])
    # Deleting the namespace destroys the veth pair, asynchronously: wait
    # (bounded) for it to go, then delete what is left (a create() that
    # failed before the peer moved into the namespace leaves the pair here).
    deadline = time.monotonic() + 5
    while _link_exists(veth) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _link_exists(veth):
        try:
            run(["ip", "link", "delete", veth])
        except NetFaultError as e:
            if "Cannot find device" not in (e.stderr or ""):
                raise


def _link_exists(name):
    return subprocess.run(["ip", "link", "show", name], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT).returncode == 0


def _used_slots():
    """/30s of SUPERNET that some root-namespace address is in."""
    used = set()
    for line in run(["ip", "-4", "-o", "addr", "show"]).splitlines():
        m = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/", line)
        if m and ipaddress.ip_address(m.group(1)) in SUPERNET:
            used.add((int(ipaddress.ip_address(m.group(1))) - int(SUPERNET[0])) // 4)
    return used


class Fault(object):
    """One applied fault; clear() undoes it (idempotent)."""

    def __init__(self, host, kind, detail, undo):
        self.host = host
        self.kind = kind
        self.detail = detail
        self._undo = undo
        self._lock = threading.Lock()
        self.cleared = False

    def clear(self):
        with self._lock:
            if self.cleared:
                return
            self.cleared = True
            self._undo()
        _log("%s: cleared %s %s", self.host.ns, self.kind, self.detail)

    def __repr__(self):
        return "Fault(%s, %s, %s%s)" % (self.host.ns, self.kind, self.detail,
                                        ", cleared" if self.cleared else "")


class HalfOpen(Fault):
    """A half_open() fault: .destroyed lists the replica-side connections
    destroyed as (local "IP:PORT", peer "IP:PORT"); the drop is lifted by
    itself after `hold` seconds (or by clear()); wait_lifted() waits for it."""

    def __init__(self, host, detail, undo, destroyed, hold):
        Fault.__init__(self, host, "half_open", detail, undo)
        self.destroyed = destroyed
        self.lifted = threading.Event()
        self._timer = threading.Timer(hold, self.clear)
        self._timer.daemon = True

    def clear(self):
        self._timer.cancel()
        try:
            Fault.clear(self)
        finally:
            self.lifted.set()

    def wait_lifted(self, timeout):
        if not self.lifted.wait(timeout):
            raise AssertionError("half-open drop not lifted within %.1fs" % timeout)


class NetHost(object):
    """A replica host in its own network namespace; see the module docstring.

    Not thread-safe except Fault.clear() (a half_open timer calls it)."""

    def __init__(self, name, index):
        self.name = name
        self.index = int(index)
        self.ns = "%s-%d-%d" % (NS_PREFIX, os.getpid(), self.index)
        self.veth = "%s%d-%d" % (VETH_PREFIX, os.getpid(), self.index)
        if len(self.veth) > 15:
            raise ValueError("interface name %s too long" % self.veth)
        self.agent_address = None  # root side of the veth
        self.address = None        # inside the namespace
        self.faults = []
        self.proxies = []
        self._rate = None
        self._created = False

    # -- lifecycle

    def create(self):
        """Makes the namespace, veth pair, addresses, routes, nftables table."""
        if self._created:
            raise RuntimeError("%s already created" % self.ns)
        self._created = True  # from here on close() has something to undo
        try:
            run(["ip", "netns", "add", self.ns])
            self._add_veth()
            self.nsrun(["ip", "link", "set", "lo", "up"])
            self.nsrun(["ip", "route", "add", str(SUPERNET), "via", self.agent_address])
            self.nsrun(["nft", "-f", "-"], input=(
                "table inet %s {\n"
                "  chain input { type filter hook input priority 0; policy accept; }\n"
                "  chain output { type filter hook output priority 0; policy accept; }\n"
                "}\n" % NFT_TABLE))
        except BaseException:
            self.close()
            raise
        _log("%s (%s): namespace %s, %s %s <-> %s %s", self.name, self.index, self.ns,
             self.veth, self.agent_address, INNER_IF, self.address)
        return self

    def _add_veth(self):
        # The lock keeps two runs from picking the same /30 at once.
        with open(_LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used_slots()
            slot = next((s for s in range(SUPERNET.num_addresses // 4) if s not in used),
                        None)
            if slot is None:
                raise NetFaultError(["allocate /30"], "none", "no free /30 in %s" % SUPERNET)
            base = int(SUPERNET[0]) + 4 * slot
            self.agent_address = str(ipaddress.ip_address(base + 1))
            self.address = str(ipaddress.ip_address(base + 2))
            run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", INNER_IF,
                 "netns", self.ns])
            run(["ip", "addr", "add", self.agent_address + "/30", "dev", self.veth])
        run(["ip", "link", "set", self.veth, "up"])
        self.nsrun(["ip", "addr", "add", self.address + "/30", "dev", INNER_IF])
        self.nsrun(["ip", "link", "set", INNER_IF, "up"])

    def close(self):
        """Stops the latency proxies and deletes the namespace and veth (which
        ends every fault). Idempotent. Processes still running inside keep
        running, without a network: stop them first."""
        for p in self.proxies:
            try:
                p.close()
            except Exception as e:  # keep closing
                _log("%s: closing proxy %s failed: %r", self.ns, p.address, e)
        self.proxies = []
        for f in self.faults:
            if isinstance(f, HalfOpen):
                f._timer.cancel()
        self.faults = []
        self._rate = None
        if self._created:
            _delete_ns(self.ns, self.veth)
            self._created = False
            _log("%s: deleted", self.ns)

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc):
        self.close()

    # -- running things inside

    def wrap(self, argv):
        """argv run inside the namespace. `ip netns exec` execs the program
        (no fork), so a Popen of this has the program's own PID: SIGKILL and
        SIGSTOP reach the daemon itself."""
        return ["ip", "netns", "exec", self.ns] + list(argv)

    def nsrun(self, argv, timeout=COMMAND_TIMEOUT, input=None):
        """Runs argv inside the namespace (checked, bounded); its stdout."""
        return run(self.wrap(argv), timeout, input)

    def connections(self, port):
        """Established TCP connections in the namespace to the agent port
        (an int or a list): [(local "IP:PORT", peer "IP:PORT")]."""
        out = self.nsrun(["ss", "-Htn", "state", "established"] + _dport_filter(port))
        conns = []
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 4:
                conns.append((f[-2], f[-1]))
        return conns

    # -- faults

    def _add_rules(self, port, direction):
        port = _check_port(port)
        if direction not in DIRECTIONS:
            raise ValueError("direction must be one of %s, not %r" % (DIRECTIONS, direction))
        handles = []
        if direction in ("to-agent", "both"):
            handles.append(("output", self._add_rule("output", "tcp dport %d drop" % port)))
        if direction in ("from-agent", "both"):
            handles.append(("input", self._add_rule("input", "tcp sport %d drop" % port)))
        return handles

    def _add_rule(self, chain, rule):
        out = self.nsrun(["nft", "--echo", "--handle", "add", "rule", "inet", NFT_TABLE,
                          chain] + rule.split())
        m = re.search(r"# handle (\d+)", out)
        if not m:
            raise NetFaultError(["nft add rule", chain, rule], "no handle", out)
        return int(m.group(1))

    def _delete_rules(self, handles):
        for chain, handle in handles:
            self.nsrun(["nft", "delete", "rule", "inet", NFT_TABLE, chain,
                        "handle", str(handle)])

    def _track(self, fault):
        self.faults.append(fault)
        _log("%s: %s %s", self.ns, fault.kind, fault.detail)
        return fault

    def blackhole(self, port, direction):
        """Drops TCP packets to ("to-agent") or from ("from-agent") the agent's
        `port`, or both, until clear(). Sockets are not told: the sender
        retransmits, the receiver waits."""
        handles = self._add_rules(port, direction)
        return self._track(Fault(self, "blackhole", "port %d %s" % (port, direction),
                                 lambda: self._delete_rules(handles)))

    def _destroy(self, port):
        """ss -K on the namespace's connections to `port` (an int or a list,
        destroyed by one command, so a daemon reacting to the loss of one
        cannot close another first); verifies they are gone (a kernel
        without SOCK_DESTROY leaves them). Returns them."""
        before = self.connections(port)
        self.nsrun(["ss", "-K", "-Htn", "state", "established"] + _dport_filter(port))
        left = set(before) & set(self.connections(port))
        if left:
            raise NetFaultError(["ss", "-K"], "no effect",
                                "connections %s survived: does this kernel lack "
                                "CONFIG_INET_DIAG_DESTROY?" % sorted(left))
        return before

    def cut(self, port):
        """Destroys the established connections to the agent's `port` now:
        the replica's socket fails with ECONNABORTED, the agent's gets an
        RST. One-shot: new connections work. Returns the destroyed
        (local, peer) pairs."""
        destroyed = self._destroy(_check_port(port))
        _log("%s: cut port %d: destroyed %s", self.ns, port, destroyed)
        return destroyed

    def _destroy_agent_side(self, port):
        """ss -K in the root namespace on the agent's connections from
        `port` to this host; verifies they are gone. Returns them as
        (local, peer) pairs seen from the replica (like connections())."""
        filt = ["state", "established", "src", self.agent_address, "sport", "= :%d" % port,
                "dst", self.address]

        def agent_side():
            out = run(["ss", "-Htn"] + filt)
            return [(f[-1], f[-2]) for f in (l.split() for l in out.splitlines())
                    if len(f) >= 4]

        before = agent_side()
        run(["ss", "-K", "-Htn"] + filt)
        left = set(before) & set(agent_side())
        if left:
            raise NetFaultError(["ss", "-K"], "no effect",
                                "agent-side connections %s survived" % sorted(left))
        return before

    def half_open(self, port, hold=5.0, side="replica", only_current=False):
        """Drops both directions on `port` (an int, or a list of ports all
        dropped before any socket is destroyed, e.g. the control and data
        ports to strand a whole session), destroys one side's connections
        (the RST the kernel sends is dropped, so the other side keeps its
        socket), and lifts the drop after `hold` seconds. side="replica"
        (the default) destroys the replica's sockets, leaving the agent's
        half-open; side="agent" destroys the agent's sockets (in the root
        namespace, only those to this host), leaving the replica's. While
        the drop holds, reconnections to the ports time out too, unless
        `only_current`: then only the current connections (by the replica's
        local port) are dropped and the replica reconnects at once, while
        the agent's stale ends see nothing, as after a lost NAT or firewall
        state. Returns a HalfOpen."""
        ports = [_check_port(p) for p in (port if isinstance(port, (list, tuple)) else [port])]
        if side not in ("replica", "agent"):
            raise ValueError("side must be replica or agent, not %r" % side)
        handles = []
        try:
            if only_current:
                for local, _ in self.connections(ports):
                    lport = int(local.rsplit(":", 1)[1])
                    handles.append(("output", self._add_rule(
                        "output", "tcp sport %d drop" % lport)))
                    handles.append(("input", self._add_rule(
                        "input", "tcp dport %d drop" % lport)))
            else:
                for p in ports:
                    handles += self._add_rules(p, "both")
            if side == "replica":
                destroyed = self._destroy(ports)
            else:
                destroyed = []
                for p in ports:
                    destroyed += self._destroy_agent_side(p)
        except BaseException:
            self._delete_rules(handles)
            raise
        fault = HalfOpen(self, "ports %s, %s side destroyed, hold %.1fs: %s"
                         % (ports, side, hold, destroyed),
                         lambda: self._delete_rules(handles), destroyed, hold)
        fault._timer.start()
        return self._track(fault)

    def limit_rate(self, bytes_per_sec):
        """tbf at `bytes_per_sec` on both ends of the veth (each direction
        limited separately) until clear(). Replaces an earlier limit."""
        bps = int(bytes_per_sec)
        if bps <= 0:
            raise ValueError("rate must be positive: %r" % bytes_per_sec)
        # The bucket must hold a whole GSO packet (64 KiB) or tbf drops it.
        burst = max(bps // 10, 65536)
        if self._rate is not None:
            self._rate.clear()
        args = ["qdisc", "replace", "dev", None, "root", "tbf", "rate", "%dbit" % (bps * 8),
                "burst", str(burst), "latency", "200ms"]
        run(["tc"] + [self.veth if a is None else a for a in args])
        self.nsrun(["tc"] + [INNER_IF if a is None else a for a in args])

        def undo():
            if self._created:
                run(["tc", "qdisc", "del", "dev", self.veth, "root"])
                self.nsrun(["tc", "qdisc", "del", "dev", INNER_IF, "root"])
            self._rate = None

        self._rate = self._track(Fault(self, "limit_rate",
                                       "%d bytes/s, burst %d" % (bps, burst), undo))
        return self._rate

    def latency_proxy(self, port, seconds, direction="both"):
        """A started FaultProxy listening on agent_address (a free port) that
        forwards to agent_address:`port` holding each byte `seconds`
        (FaultProxy.set_delay; direction "both", "c2s" or "s2c"). Point the
        replica at proxy.address: --agent= for the control port,
        --data-address= for the data port. Closed by close(); set_delay(0)
        on it ends the delay."""
        proxy = fault_proxy.FaultProxy((self.agent_address, _check_port(port)),
                                       listen=(self.agent_address, 0))
        proxy.set_delay(seconds, direction)
        proxy.start()
        self.proxies.append(proxy)
        _log("%s: latency proxy %s -> port %d, %.3fs %s", self.ns, proxy.address, port,
             seconds, direction)
        return proxy

    def clear(self):
        """Undoes every fault (blackholes, half-open drops, the rate limit);
        latency proxies stay until close()."""
        errors = []
        for f in self.faults:
            try:
                f.clear()
            except NetFaultError as e:
                errors.append(e)
        self.faults = []
        if errors:
            raise errors[0]

    def describe(self):
        return describe()


def describe():
    """One line per mechanism, for the campaign's report."""
    def version(argv):
        try:
            return run(argv, 5).strip().splitlines()[0]
        except (NetFaultError, IndexError) as e:
            return "unavailable (%s)" % e
    return [
        "hosts: network namespace per replica (%s-<pid>-<index>), veth pair with a /30 "
        "from %s; %s" % (NS_PREFIX, SUPERNET, version(["ip", "-V"])),
        "blackhole/half-open drops: nftables table inet %s inside the namespace; %s"
        % (NFT_TABLE, version(["nft", "--version"])),
        "connection cuts: ss -K (SOCK_DESTROY) inside the namespace; %s" % version(["ss", "-V"]),
        "bandwidth: tc tbf on both ends of the veth",
        "latency: userspace fault proxy (integration/fault_proxy.py set_delay); the kernel "
        "here has no netem",
    ]


def available():
    """(ok, reason): whether netns, veth, nftables, tbf and ss -K work here.
    Builds a throwaway host (and a connection inside it) and deletes it."""
    if os.geteuid() != 0:
        return False, "needs root (network namespaces)"
    host = NetHost("probe", 999)
    try:
        host.create()
        probe = host.limit_rate(1 << 20)
        probe.clear()
        f = host.blackhole(9, "both")
        f.clear()
        # A connection inside the namespace to check that ss -K destroys it.
        script = ("import socket,time\n"
                  "s=socket.socket();s.bind(('127.0.0.1',0));s.listen()\n"
                  "c=socket.create_connection(s.getsockname());a,_=s.accept()\n"
                  "print(s.getsockname()[1],flush=True);time.sleep(10)\n")
        p = subprocess.Popen(host.wrap([sys.executable, "-c", script]),
                             stdout=subprocess.PIPE, universal_newlines=True)
        try:
            port = int(p.stdout.readline())
            host.cut(port)
        finally:
            p.kill()
            p.wait(10)
            p.stdout.close()
        return True, "netns, veth, nftables, tbf and ss -K work"
    except (NetFaultError, ValueError) as e:
        return False, str(e)
    finally:
        host.close()
