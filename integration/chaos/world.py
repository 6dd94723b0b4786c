"""What both worlds share: the agent, two replicas, sampling, convergence.

Replica r1 writes to a small tmpfs of its own (the disk-full fault fills
it), r2 to the ordinary disk. Both are the fault-injecting test build of
walship-replica. The agent runs at debug level, so its log has one line per
new durable position a replica acknowledged; the world reads that log (and,
every 0.2 s, walship-status) and keeps, per replica and per epoch (a rebuilt
destination starts a new one), the furthest position ever acknowledged as
flushed: the invariants check that every byte before it is on the replica,
equal to the source.
"""

import os
import re
import threading
import time

from integration import harness as h
from integration.chaos import nodes


ACK_LINE = re.compile(r"ack: replica (\S+) flushed (\S+)@(\d+)")


class Tracker(object):
    """Acknowledged positions of one replica's current epoch."""

    def __init__(self):
        self.acked = h.Pos("", 0)
        self.first = None  # first acknowledged segment seen in this epoch
        self.entry = None  # the last status entry
        self.session = None
        self.shipped_before = 0  # bytes the agent sent in earlier sessions
        self.shipped_now = 0  # ... and in the current one

    def shipped(self):
        return self.shipped_before + self.shipped_now

    def note_ack(self, pos):
        """A new durable position from the agent's acknowledgement log."""
        if pos > self.acked:
            self.acked = pos
            if self.first is None:
                self.first = pos.segment

    def update(self, entry):
        self.entry = entry
        sid = entry.get("session_id")
        sent = sum(h.counters(entry, "agent_counters"))
        if sid != self.session:
            self.shipped_before += self.shipped_now
            self.session, self.shipped_now = sid, 0
        self.shipped_now = max(self.shipped_now, sent)
        pos = h.pos_of(entry.get("flushed"))
        if pos.segment and pos > self.acked:
            self.acked = pos
            if self.first is None:
                self.first = pos.segment


class World(object):
    kind = None

    def __init__(self, name, root, rng, params):
        self.name, self.root, self.rng, self.p = name, root, rng, params
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.logs = self.mkdir("logs")
        self.agent = None
        self.replicas = []
        self.trackers = {}
        self.retired = []  # trackers of rebuilt replicas' earlier epochs
        self.ack_log_offset = 0
        self.source_end = h.Pos("", 0)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.sampler = None
        self.tmpfs = None
        self.resources = {}  # label -> [(t, rss_kib, fds)]
        self.on_rest = None  # the campaign's check of a replica just killed
        self.final_detail = None

    def check_at_rest(self, rep):
        """Called by faults right after a replica died, before its restart."""
        if self.on_rest:
            self.on_rest(self, rep)

    def mkdir(self, *parts):
        p = os.path.join(self.dir, *parts)
        os.makedirs(p, exist_ok=True)
        return p

    # -- set-up -----------------------------------------------------------------
    def agent_args(self):
        return []

    def start_daemons(self, wal_dir):
        self.agent = nodes.AgentNode(wal_dir, self.logs, self.agent_args(),
                                     label="agent")
        self.agent.start()
        use_netns = self.p.netns
        for i, name in enumerate(("r1", "r2")):
            dest = self.mkdir(name + "-dest")
            if i == 0:
                self.tmpfs = dest
                out = nodes.run(["mount", "-t", "tmpfs", "-o", "size=%d" % self.p.tmpfs_bytes,
                                 "tmpfs", dest])
                if out.returncode != 0:
                    raise RuntimeError("mount tmpfs: " + out.stderr.strip())
            rep = nodes.ReplicaNode(self.agent, dest, "%s-%s" % (self.name, name), self.logs,
                                    self.p.host_index(self.name, i), use_netns, name)
            self.replicas.append(rep)
            self.trackers[rep.name] = Tracker()
            rep.start()
        self.sampler = threading.Thread(target=self._sample_loop, daemon=True,
                                        name="sampler-" + self.name)
        self.sampler.start()
        self.wait_connected()

    def wait_connected(self, timeout=60):
        def all_connected():
            st = h.try_status(self.agent, timeout=3)
            return st and all((h.replica_entry(st, r.name) or {}).get("connected")
                              for r in self.replicas)
        h.wait_until(all_connected, timeout, "%s replicas to connect" % self.name, 0.1)

    def stop(self):
        self.halt.set()
        try:
            if self.sampler:
                self.sampler.join(10)
            for r in self.replicas:
                r.close()
            if self.agent and self.agent.running():
                self.agent.stop(timeout=10)
        finally:  # a failed stop must not leave the tmpfs mounted
            if self.tmpfs:
                nodes.unmount(self.tmpfs)

    # -- sampling ---------------------------------------------------------------
    def _sample_loop(self):
        while not self.halt.is_set():
            self.sample()
            self.sample_source()
            self.halt.wait(0.2)

    def sample_source(self):
        """The sampler thread's look at the source itself (PostgreSQL)."""

    def read_ack_log(self):
        """Every acknowledgement the agent logged since the last call (its
        log at debug level has one line per new durable position)."""
        with self.lock:
            try:
                with open(self.agent.log_path, "rb") as f:
                    f.seek(self.ack_log_offset)
                    data = f.read()
            except OSError:
                return
            end = data.rfind(b"\n") + 1
            self.ack_log_offset += end
            for m in ACK_LINE.finditer(data[:end].decode("utf-8", "replace")):
                t = self.trackers.get(m.group(1))
                if t:
                    t.note_ack(h.Pos(m.group(2), int(m.group(3))))

    def sample(self):
        self.read_ack_log()
        st = h.try_status(self.agent, timeout=2) if self.agent.running() else None
        if not st:
            return None
        with self.lock:
            self.source_end = h.pos_of(st.get("source_end"))
            for r in self.replicas:
                e = h.replica_entry(st, r.name)
                if e:
                    self.trackers[r.name].update(e)
        return st

    def tracker(self, rep):
        self.read_ack_log()
        with self.lock:
            return self.trackers[rep.name]

    def rebuild(self, rep):
        """A new, empty destination for `rep` (after a gap it could not
        survive): what an operator does; a new epoch of acknowledgements."""
        if rep.running():
            rep.kill()
        for n in os.listdir(rep.dest):
            p = os.path.join(rep.dest, n)
            if os.path.isfile(p):
                os.unlink(p)
        with self.lock:
            self.retired.append(self.trackers.pop(rep.name))
            rep.new_epoch()
            self.trackers[rep.name] = Tracker()
        rep.start()

    def bytes_shipped(self):
        with self.lock:
            return sum(t.shipped() for t in list(self.trackers.values()) + self.retired)

    def sample_resources(self):
        now = time.time()
        for d in [self.agent] + self.replicas:
            if d.running():
                v = nodes.rss_and_fds(d.pid)
                if v:
                    self.resources.setdefault(d.label, []).append((now, v[0], v[1]))

    # -- what the checks need from each world ----------------------------------
    def parse(self, name):
        """(timeline, segment number) of a segment name, or None."""
        raise NotImplementedError

    def golden_path(self, name):
        """A file holding the source's bytes of segment `name`, or None."""
        raise NotImplementedError

    def golden_complete(self, name):
        """True if the golden file of `name` is the whole segment."""
        raise NotImplementedError

    def ensure_up(self):
        """Restarts whatever a fault left stopped (the campaign's heal)."""
        if not self.agent.running():
            self.agent.start()
        for r in self.replicas:
            if not r.running():
                r.start()
