"""The campaign's processes: an agent, replicas on their own "hosts".

A replica host is a network namespace joined to the root namespace by a
veth pair (integration/chaos/netfault.py) when the kernel offers it; the
replica reaches the agent's control and data ports through two fault
proxies (integration/fault_proxy.py) listening on the host's root-side
address, so latency and stalls come from the proxies and blackholes, cuts,
half-open connections and bandwidth limits from nftables and tbf inside the
namespace. Without namespaces the proxies listen on loopback and do all of
it (the report says which).

Every process is started so that its own PID is known (kill -9 and SIGSTOP
reach the daemon itself, never a wrapper).
"""

import os
import signal
import subprocess
import time

from integration import fault_proxy
from integration.chaos import faultctl
from integration.chaos import netfault
from integration.walshiptest import binaries
from integration.walshiptest import daemons
from integration.walshiptest import ports

FAULTY_REPLICA = binaries.REPLICA_FAULTY
POWER_LOSS_EXIT = faultctl.POWER_LOSS_EXIT


class AgentNode(daemons.Agent):
    """walship-agent with its extra flags; the first start() listens on
    ports the kernel picks (port 0), later starts on the same ones, so that
    the proxies keep pointing at it across restarts."""

    def __init__(self, wal_dir, workdir, extra_args=(), label="agent"):
        daemons.Agent.__init__(self, wal_dir, workdir, label=label,
                               extra_args=list(extra_args) + ["--stall-timeout-ms=3000",
                                                              "--log-level=debug"])

    def start(self, timeout=20):
        daemons.Agent.start(self, timeout)
        self.pin_ports()
        return self

    def ensure_running(self, timeout=30):
        if not self.running():
            self.start(timeout)
        return self


class ReplicaNode(daemons.Replica):
    """walship-replica (the fault-injecting test build) on its own host."""

    def __init__(self, agent, dest, name, workdir, host_index, use_netns, role):
        self.role = role  # "r1" or "r2": what a fault names
        self.base_name = name
        self.faults = faultctl.FaultControl(os.path.join(workdir, name + "-faults"))
        daemons.Replica.__init__(self, agent, dest, name, workdir, target=FAULTY_REPLICA,
                                 env=self.faults.env())
        self.workdir = workdir
        self.host = None
        if use_netns:
            self.host = netfault.NetHost(name, host_index)
            self.host.create()
        listen_ip = self.host.agent_address if self.host else "127.0.0.1"
        self.proxies = {
            "control": fault_proxy.FaultProxy(("127.0.0.1", agent.control_port),
                                              listen=(listen_ip, 0)).start(),
            "data": fault_proxy.FaultProxy(("127.0.0.1", agent.data_port),
                                           listen=(listen_ip, 0), walship_frames=True).start(),
        }
        self.agent = self.proxies["control"].address
        self.data_address = self.proxies["data"].address
        self.expected_exit = None  # set when a fault ends the process on purpose
        self.epoch = 0  # bumped when the destination is rebuilt

    def new_epoch(self):
        """A rebuilt destination is a new replica to the agent: a new name,
        so nothing the agent remembers of the old one is taken for it."""
        self.epoch += 1
        self.name = "%s-e%d" % (self.base_name, self.epoch)

    def port(self, channel):
        """The proxy port the replica dials for `channel` (control or data)."""
        return ports.port_of(self.proxies[channel].address)

    def argv(self):
        a = daemons.Replica.argv(self)
        return self.host.wrap(a) if self.host else a

    def ensure_running(self):
        if not self.running():
            self.start()
        return self

    def close(self):
        if self.running():
            self.stop(timeout=10)
        for p in self.proxies.values():
            p.close()
        if self.host:
            self.host.close()


def rss_and_fds(pid):
    """(resident KiB, open descriptors) of a live process, or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration, ValueError):
        return None


def pause_for(daemon, seconds):
    """SIGSTOP, a pause, SIGCONT (the daemon's own PID)."""
    os.kill(daemon.pid, signal.SIGSTOP)
    time.sleep(seconds)
    if daemon.running():
        os.kill(daemon.pid, signal.SIGCONT)


def run(argv, timeout=30):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def mounts_under(root):
    """Mount points at or below `root` (/proc/mounts), deepest first."""
    root = os.path.realpath(root)
    with open("/proc/mounts") as f:
        points = [l.split()[1].replace("\\040", " ") for l in f]
    return sorted((p for p in points if p == root or p.startswith(root + "/")),
                  key=len, reverse=True)


def unmount(path):
    """Detaches the mount at `path` (lazily: a process still inside it
    keeps it alive, not the mount table); logs a failure."""
    out = run(["umount", "-l", path])
    if out.returncode != 0:
        procs.log("umount %s failed: %s", path, out.stderr.strip())
