"""The append-format world: a writer, an agent over its directory, replicas.

The writer appends seeded random records to seg-%08d files, rotating at a
size drawn per segment and changing its rate every few seconds. It keeps a
golden copy of every byte it wrote (never removed), so a replica's files can
be checked after the source removed them. It removes old segments the way a
database with retention does: only segments every replica already holds,
oldest first; the "removed while a replica is down" fault removes more.
"""

import os
import random
import threading
import time

from integration import harness as h
from integration import statefile
from integration.chaos import world

SEGMENT_RE = r"seg-([0-9]{8})"


class Writer(threading.Thread):
    """Appends to src/ and golden/ at a varying rate; pause()/resume()."""

    def __init__(self, src, golden, rng, fast):
        super().__init__(daemon=True, name="append-writer")
        self.src, self.golden, self.rng = src, golden, rng
        self.rates = (100e3, 400e3, 1.2e6) if fast else (50e3, 200e3, 600e3)
        self.seq = 1
        self.size = self._segment_size()
        self.lock = threading.Lock()  # held while writing; pause() takes it
        self.halt = threading.Event()
        self.written = 0
        self.removable = lambda: None  # the driver's: newest name safe to remove
        self.keep = 4

    def _segment_size(self):
        return self.rng.choice((64 << 10, 128 << 10, 256 << 10, 512 << 10))

    def name(self, seq=None):
        return "seg-%08d" % (seq or self.seq)

    def _append(self, data):
        # golden/ first: the agent may ship a byte once it is in src/, and a
        # check must find every shipped byte in golden/.
        for d in (self.golden, self.src):
            with open(os.path.join(d, self.name()), "ab") as f:
                f.write(data)
        self.written += len(data)

    def step(self, nbytes):
        with self.lock:
            path = os.path.join(self.golden, self.name())
            have = os.path.getsize(path) if os.path.exists(path) else 0
            room = self.size - have
            chunk = min(nbytes, room)
            self._append(self.rng.randbytes(chunk))
            if chunk == room:
                self.seq += 1
                self.size = self._segment_size()
                self._append(b"")  # the next segment exists at once
                self._retain()
            return chunk

    def _retain(self):
        """Removes the oldest segments every replica already holds."""
        limit = self.removable()
        names = h.source_segments(self.src)
        for n in names[:-self.keep]:
            if limit is None or n >= limit:
                break
            os.unlink(os.path.join(self.src, n))

    def run(self):
        rate = self.rates[0]
        next_change = time.monotonic()
        while not self.halt.is_set():
            now = time.monotonic()
            if now >= next_change:
                rate = self.rng.choice(self.rates)
                self.keep = self.rng.choice((3, 6, 12))
                next_change = now + self.rng.uniform(2, 6)
            n = int(rate * 0.02)
            self.step(n)
            self.halt.wait(0.02)

    def stop(self):
        self.halt.set()
        self.join(5)


class AppendWorld(world.World):
    kind = "append"

    def __init__(self, root, rng, params):
        world.World.__init__(self, "append", root, rng, params)
        self.src = self.mkdir("src")
        self.golden = self.mkdir("golden")
        self.writer = Writer(self.src, self.golden, random.Random(rng.randrange(1 << 32)),
                             params.quick)

    def agent_args(self):
        return ["--segment-pattern=" + SEGMENT_RE]

    def start(self):
        self.writer.step(4096)
        self.writer.removable = self.removable_before
        self.start_daemons(self.src)
        self.writer.start()

    def stop(self):
        self.writer.stop()
        world.World.stop(self)

    def parse(self, name):
        if name.startswith("seg-") and name[4:].isdigit():
            return 1, int(name[4:])
        return None

    def golden_path(self, name):
        p = os.path.join(self.golden, name)
        return p if os.path.isfile(p) else None

    def golden_complete(self, name):
        """True once the writer rotated past `name`."""
        return name < self.writer.name()

    def removable_before(self):
        """Segments before this name are held by every replica (durably)."""
        held = []
        for r in self.replicas:
            try:
                st = statefile.read_durable(r.dest)
            except (OSError, ValueError):
                return None
            if st is None:
                return None
            held.append(st["segment"])
        return min(held) if held else None

    # -- source faults --------------------------------------------------------
    def remove_while_down(self, f, rep):
        """Kills `rep`, lets the writer rotate, removes segments; `needed`
        removes the first one rep still needs (and all before it)."""
        rep.kill()
        st = statefile.read_durable(rep.dest) or {}
        seg = st.get("segment") or self.writer.name(1)
        need = seg if not st.get("complete") else "seg-%08d" % (self.parse(seg)[1] + 1)
        h.wait_until(lambda: self.writer.name() > need, 30, "the writer to pass " + need)
        with self.writer.lock:
            names = h.source_segments(self.src)
            if f.params["needed"]:
                gone = [n for n in names if n <= need]
            else:  # only what every replica holds: no gap for anyone
                limit = min(seg, self.removable_before() or "")
                gone = [n for n in names[:-1] if n < limit][:2]
            for n in gone:
                os.unlink(os.path.join(self.src, n))
        time.sleep(f.params["down"])
        rep.start()
        return "removed %s while %s was down (it needs %s)" % (
            ",".join(gone) or "nothing", rep.name, need)

    def agent_over_other_dir(self, f):
        """The agent restarted over its directory emptied or partly filled
        (the same directory: its identity is the stream's), then over the
        whole of it again."""
        aside = self.mkdir("src-aside")
        self.writer.lock.acquire()
        try:
            self.agent.kill()
            names = h.source_segments(self.src)
            keep = {"empty": [], "newest": names[-2:], "oldest": names[:2]}[f.params["shape"]]
            moved = [n for n in names if n not in keep]
            for n in moved:
                os.rename(os.path.join(self.src, n), os.path.join(aside, n))
            self.agent.start()
            time.sleep(f.params["hold"])
            self.agent.kill()
            for n in moved:
                os.rename(os.path.join(aside, n), os.path.join(self.src, n))
            self.agent.start()
        finally:
            self.writer.lock.release()
        return "agent ran %.1fs over its directory holding %s" % (
            f.params["hold"], ",".join(keep) if keep else "no segment")
