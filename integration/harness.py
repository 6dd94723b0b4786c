"""Runs real walship processes for integration tests.

A small library, Python 3 standard library only:

  * binary(): finds walship-agent, walship-replica and walship-status
    (integration/walshiptest/binaries.py: the Bazel runfiles, bazel-bin/ of
    this checkout for manual runs (`python3 -m integration.e2e_test` from the
    repository root after `bazel build //agent:all //replica:all`), or
    $WALSHIP_BIN_DIR if that is set).
  * Cluster: the daemons (integration/walshiptest/daemons.py: Agent,
    Replica), WAL generators and directories of one test; it stops them
    all and prints the tails of every log when a test fails.
  * status(agent): walship-status --json, with uint64 strings turned into
    ints where it matters (see Pos and replica_entry()).
  * wait_until(pred, timeout, what): polls (integration/walshiptest/waits.py);
    every helper here is bounded in time.
  * compare_dirs(src, dest): the replica holds the source byte for byte.
  * WalGenerator: appends seeded random records to seg-%08d files at a rate,
    rolling at a segment size.

Every random choice is seeded and the seed is printed on stdout.
"""

import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

from integration import statefile
from integration.walshiptest import binaries
from integration.walshiptest import daemons
from integration.walshiptest import waits
from integration.walshiptest.daemons import Agent, Replica
from integration.walshiptest.procs import log

STATE_FILE = "walship.state"
# The replica's own files in its destination (walship.state, walship.sums,
# their temporaries): never segments.
METADATA_PREFIX = "walship."
PARTIAL = ".partial"
SEGMENT_RE = re.compile(r"^seg-\d{8}$")

# The daemons, for binary(); names the tests use.
AGENT = binaries.AGENT
REPLICA = binaries.REPLICA
STATUS = binaries.STATUS
binary = binaries.find
runfile = binaries.runfile
wait_until = waits.wait_until


def make_tmpdir(prefix):
    """A fresh directory under TEST_TMPDIR (or the system temp dir)."""
    return tempfile.mkdtemp(prefix=prefix + "-", dir=os.environ.get("TEST_TMPDIR"))


def seed_from_env(var, label):
    """Seed from env `var` if set, else random; printed either way."""
    text = os.environ.get(var)
    seed = int(text) if text else random.SystemRandom().randrange(1 << 32)
    log("%s seed=%d (replay with %s=%d)", label, seed, var, seed)
    return seed


# ---------------------------------------------------------------------------
# Positions and status


class Pos(collections.namedtuple("Pos", ["segment", "offset"])):
    """A WAL position; compares in WAL order (names sort in WAL order)."""

    def __str__(self):
        return "%s@%d" % (self.segment or "-", self.offset)


def pos_of(d):
    """Pos from a status JSON position ({"segment","offset"}), or Pos('', 0)."""
    if not d:
        return Pos("", 0)
    return Pos(d.get("segment", ""), int(d.get("offset", 0)))


def status(agent, timeout=10, tls_args=None):
    """The agent's Status as a dict (walship-status --json). Raises on error.

    `agent` is an Agent (whose status_tls_args are used unless `tls_args` is
    given) or a "HOST:PORT" string (plaintext unless `tls_args`).
    """
    addr = agent.control if isinstance(agent, Agent) else agent
    if tls_args is None:
        tls_args = agent.status_tls_args if isinstance(agent, Agent) else ["--insecure"]
    return daemons.agent_status(addr, timeout, tls_args)


def try_status(agent, timeout=5):
    """status(), or None if the agent does not answer."""
    try:
        return status(agent, timeout)
    except daemons.StatusError:
        return None


# ---------------------------------------------------------------------------
# Prometheus metrics

_METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_METRIC_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text format -> {(name, frozenset(labels)): value}; checks
    that every sample line parses and every family has a TYPE before it."""
    samples, typed = {}, set()
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        m = _METRIC_LINE.match(line)
        if not m:
            raise AssertionError("unparsable metrics line: %r" % line)
        labels = frozenset(_METRIC_LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
        base = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
        if m.group(1) not in typed and base not in typed:
            raise AssertionError("sample %s before its # TYPE line" % m.group(1))
    return samples


def scrape(addr):
    """GET http://addr/metrics, parsed by parse_metrics()."""
    with urllib.request.urlopen("http://%s/metrics" % addr, timeout=5) as r:
        assert r.status == 200, r.status
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), \
            r.headers["Content-Type"]
        return parse_metrics(r.read().decode())


def metric_total(samples, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, l), v in samples.items() if n == name and want <= set(l))


# ---------------------------------------------------------------------------
# Certificates


class Certs(object):
    """A CA and certificates made by integration/make_test_certs.sh in
    `directory`: agent.pem (server) and one client certificate per name."""

    def __init__(self, directory, *clients):
        self.dir = directory
        script = runfile(os.path.join("integration", "make_test_certs.sh"))
        subprocess.run(["bash", script, directory] + list(clients), check=True,
                       stdout=subprocess.DEVNULL)

    @property
    def ca(self):
        return os.path.join(self.dir, "ca.pem")

    def args(self, who, trust=None):
        """--tls-* flags presenting `who`'s certificate and trusting `trust`'s
        CA (a Certs; default this one)."""
        return ["--tls-cert=%s" % os.path.join(self.dir, who + ".pem"),
                "--tls-key=%s" % os.path.join(self.dir, who + ".key"),
                "--tls-ca=%s" % (trust or self).ca]

    def toml(self, who):
        """The same as config-file lines."""
        return "".join('%s = "%s"\n' % tuple(a[2:].split("=", 1)) for a in self.args(who))


def replica_entry(st, name):
    """The replicas[] entry named `name` in a Status dict, or None."""
    if not st:
        return None
    for r in st.get("replicas", []):
        if r.get("name") == name:
            return r
    return None


def flushed(st, name):
    """The position `name` acknowledged as durable, or None."""
    r = replica_entry(st, name)
    return pos_of(r.get("flushed")) if r else None


def counters(entry, which):
    """(bytes_zerocopy, bytes_copy) of entry[which] ('agent_counters'...)."""
    c = entry.get(which) or {}
    return int(c.get("bytes_zerocopy", 0)), int(c.get("bytes_copy", 0))


# ---------------------------------------------------------------------------
# Directories


def source_segments(wal_dir):
    """Sorted names of the segment files in a WAL directory."""
    return sorted(n for n in os.listdir(wal_dir)
                  if os.path.isfile(os.path.join(wal_dir, n)) and not n.startswith("."))


def wal_end(wal_dir):
    """Pos(last segment, its size) of a WAL directory, or Pos('', 0)."""
    names = source_segments(wal_dir)
    if not names:
        return Pos("", 0)
    return Pos(names[-1], os.path.getsize(os.path.join(wal_dir, names[-1])))


def read_bytes(path, start=0, length=None):
    with open(path, "rb") as f:
        f.seek(start)
        return f.read() if length is None else f.read(length)


def first_difference(a, b):
    """Index of the first differing byte of a and b, or None if a == b."""
    n = min(len(a), len(b))
    if a[:n] != b[:n]:
        lo, hi = 0, n
        while hi - lo > 1:  # binary search on prefix equality
            mid = (lo + hi) // 2
            if a[lo:mid] == b[lo:mid]:
                lo = mid
            else:
                hi = mid
        return lo
    return None if len(a) == len(b) else n


def dest_file(dest, name):
    """(path, is_partial) of segment `name` in a replica directory, or None."""
    full = os.path.join(dest, name)
    if os.path.isfile(full):
        return full, False
    partial = full + PARTIAL
    if os.path.isfile(partial):
        return partial, True
    return None


def diff_dirs(src, dest):
    """Problems (strings) keeping `dest` from equalling `src`; [] if equal.

    Every source segment must be byte-identical to dest/NAME, except the last
    one, which may be dest/NAME.partial. Nothing else but the replica's
    walship.* files may be in dest.
    """
    problems = []
    names = source_segments(src)
    expected = set([STATE_FILE])
    for i, name in enumerate(names):
        last = i == len(names) - 1
        found = dest_file(dest, name)
        if found is None or (found[1] and not last):
            problems.append("%s: %s in the replica" % (
                name, "missing" if found is None else "still only .partial"))
            continue
        path, partial = found
        expected.add(os.path.basename(path))
        a = read_bytes(os.path.join(src, name))
        b = read_bytes(path)
        at = first_difference(a, b)
        if at is not None:
            problems.append("%s: differs from the source at offset %d (source %d "
                            "bytes, replica %s %d bytes)" % (
                                name, at, len(a), os.path.basename(path), len(b)))
    extra = sorted(n for n in set(os.listdir(dest)) - expected
                   if not n.startswith(METADATA_PREFIX) or n.endswith(".tmp"))
    if extra:
        problems.append("unexpected files in the replica: %s" % extra)
    return problems


def compare_dirs(src, dest):
    """Raises AssertionError unless diff_dirs(src, dest) is empty."""
    problems = diff_dirs(src, dest)
    if problems:
        raise AssertionError("replica %s differs from source %s:\n  %s"
                             % (dest, src, "\n  ".join(problems)))
    log("replica %s equals source %s (%d segments, %d bytes)", dest, src,
        len(source_segments(src)), total_size(src))


def total_size(wal_dir):
    return sum(os.path.getsize(os.path.join(wal_dir, n)) for n in source_segments(wal_dir))


def dest_consistency(src, dest):
    """Problems: any byte in dest that is not the source's byte there.

    Complete files must equal the source file; a .partial must be a prefix
    of it. Missing files are not problems here.
    """
    problems = []
    for entry in sorted(os.listdir(dest)):
        if entry.startswith(METADATA_PREFIX) or entry.endswith(".tmp"):
            continue
        name = entry[:-len(PARTIAL)] if entry.endswith(PARTIAL) else entry
        src_path = os.path.join(src, name)
        if not os.path.isfile(src_path):
            problems.append("%s: no such segment in the source" % entry)
            continue
        b = read_bytes(os.path.join(dest, entry))
        a = read_bytes(src_path, 0, len(b))
        at = first_difference(a, b)
        if at is not None and at < len(a):
            problems.append("%s: byte at offset %d differs from the source "
                            "(replica 0x%02x, source 0x%02x)" % (entry, at, b[at], a[at]))
        elif len(b) > len(a):
            problems.append("%s: %d bytes, longer than the source's %d"
                            % (entry, len(b), len(a)))
        elif not entry.endswith(PARTIAL) and len(b) != os.path.getsize(src_path):
            problems.append("%s: complete file of %d bytes but the source has %d"
                            % (entry, len(b), os.path.getsize(src_path)))
    return problems


def read_state(dest):
    """The replica's durable position as a dict (statefile.read_durable():
    walship.state, or walship.progress past it; plus pos, a Pos), or None if
    there is no walship.state. Raises AssertionError if it is damaged."""
    path = os.path.join(dest, STATE_FILE)
    try:
        st = statefile.read_durable(dest)
    except ValueError as e:
        raise AssertionError("%s: %s" % (path, e))
    if st is None:
        return None
    st["pos"] = Pos(st["segment"], st["offset"])
    return st


def acked_bytes_problems(src, dest, acked):
    """Problems: bytes before `acked` (a Pos) that dest does not hold.

    Segments before acked.segment must be complete files equal to the
    source; acked.segment must exist (complete or .partial) with at least
    acked.offset bytes equal to the source's; the durable position
    (walship.state, or walship.progress past it) must be at or after `acked`.
    """
    problems = []
    if not acked.segment:
        return problems
    for name in source_segments(src):
        if name > acked.segment:
            break
        found = dest_file(dest, name)
        if name < acked.segment:
            if found is None or found[1]:
                problems.append("%s: acknowledged as complete but %s" % (
                    name, "missing" if found is None else "only .partial"))
                continue
            a, b = read_bytes(os.path.join(src, name)), read_bytes(found[0])
        else:
            if found is None:
                problems.append("%s: acknowledged up to %d but missing" % (name, acked.offset))
                continue
            b = read_bytes(found[0], 0, acked.offset)
            a = read_bytes(os.path.join(src, name), 0, acked.offset)
            if len(b) < acked.offset:
                problems.append("%s: acknowledged up to %d but %s holds %d bytes" % (
                    name, acked.offset, os.path.basename(found[0]), len(b)))
                continue
        at = first_difference(a, b)
        if at is not None:
            problems.append("%s: differs from the source at offset %d" % (name, at))
    st = read_state(dest)
    if st is None:
        problems.append("%s missing although %s was acknowledged" % (STATE_FILE, acked))
    elif st["pos"] < acked:
        problems.append("%s says %s, before the acknowledged %s" % (st["file"], st["pos"], acked))
    return problems


# ---------------------------------------------------------------------------
# WAL generator


class WalGenerator(object):
    """Appends random records to seg-%08d files in `wal_dir`.

    Records are `min_record`..`max_record` random bytes (seeded), written at
    about `rate` bytes per second. A segment holds exactly `segment_size`
    bytes: a record that does not fit continues in the next segment, which
    is created when its first byte is written, so no segment is ever left
    empty and a segment is complete exactly when a later one exists. Runs on
    a thread between start() and stop(); write() appends synchronously. The
    seed defaults to $WALSHIP_GEN_SEED, else a random one; it is printed.
    """

    def __init__(self, wal_dir, seed=None, rate=5e6, segment_size=4 << 20,
                 min_record=100, max_record=64 << 10, first_index=1, compressible=0.0):
        if seed is None:
            text = os.environ.get("WALSHIP_GEN_SEED")
            seed = int(text) if text else random.SystemRandom().randrange(1 << 32)
        self.seed = seed
        log("WalGenerator seed=%d (%s, %.1f MB/s, segments of %d bytes)",
            seed, wal_dir, rate / 1e6, segment_size)
        self.wal_dir = wal_dir
        self.rate = float(rate)
        self.segment_size = segment_size
        self.min_record = min_record
        self.max_record = max_record
        # The fraction of records that look like WAL (row images: text,
        # counters, zero padding) and compress several times; the others
        # are random bytes, which do not compress at all.
        self.compressible = compressible
        self._rng = random.Random(seed)
        self._index = first_index - 1
        self._fd = None
        self._size = 0
        self.total_bytes = 0
        self.records = 0
        self._stop = threading.Event()
        self._thread = None
        self._error = None
        self._lock = threading.Lock()

    @property
    def segments(self):
        return self._index

    def _roll(self):
        if self._fd is not None:
            os.close(self._fd)
        self._index += 1
        path = os.path.join(self.wal_dir, "seg-%08d" % self._index)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._size = 0

    def write(self, nbytes=None):
        """Appends one record (random length unless `nbytes`); returns its size."""
        with self._lock:
            n = nbytes or self._rng.randint(self.min_record, self.max_record)
            data = memoryview(self._record(n))
            while data:
                if self._fd is None or self._size >= self.segment_size:
                    self._roll()
                chunk = data[:self.segment_size - self._size]
                done = 0
                while done < len(chunk):
                    done += os.write(self._fd, chunk[done:])
                self._size += len(chunk)
                data = data[len(chunk):]
            self.total_bytes += n
            self.records += 1
            return n

    def _record(self, n):
        if self.compressible <= 0 or self._rng.random() >= self.compressible:
            return self._rng.randbytes(n)
        rows = []
        size = 0
        while size < n:
            row = b"%s|aid=%08d|bid=%04d|abalance=%+09d|%s" % (
                self._rng.randbytes(8).hex().encode(), self._rng.randrange(10 ** 8),
                self._rng.randrange(100), self._rng.randrange(-10 ** 6, 10 ** 6),
                bytes(self._rng.choice((0, 16, 48, 84))))
            rows.append(row)
            size += len(row)
        return b"".join(rows)[:n]

    def _run(self):
        try:
            t0 = time.monotonic()
            written = 0
            while not self._stop.is_set():
                written += self.write()
                ahead = t0 + written / self.rate - time.monotonic()
                if ahead > 0 and self._stop.wait(ahead):
                    break
        except BaseException as e:  # reported by stop()
            self._error = e

    def start(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="wal-generator", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stops the thread; raises what it raised, if anything."""
        self._stop.set()
        if self._thread:
            self._thread.join(30)
            if self._thread.is_alive():
                raise AssertionError("WAL generator did not stop within 30s")
            self._thread = None
        log("WalGenerator stopped: %d records, %d bytes, %d segments",
            self.records, self.total_bytes, self.segments)
        if self._error:
            raise self._error

    def run_for(self, seconds):
        self.start()
        time.sleep(seconds)
        self.stop()

    def close(self):
        if self._thread:
            self.stop()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# ---------------------------------------------------------------------------
# Test scaffolding


class Cluster(object):
    """Owns the processes, generators and directories of one test.

    close() stops everything (SIGTERM, then kill -9) and returns the exit
    status of each daemon; dump_logs() prints every log's tail.
    """

    def __init__(self, name):
        self.root = make_tmpdir(name)
        self.logdir = os.path.join(self.root, "logs")
        os.makedirs(self.logdir)
        self.daemons = []
        self.closers = []
        log("cluster %s in %s", name, self.root)

    def dir(self, name):
        path = os.path.join(self.root, name)
        os.makedirs(path, exist_ok=True)
        return path

    def agent(self, wal_dir, **kw):
        a = Agent(wal_dir, self.logdir, **kw)
        self.daemons.append(a)
        return a

    def replica(self, agent, name, dest=None, **kw):
        r = Replica(agent, dest or self.dir("dest-" + name), name, self.logdir, **kw)
        self.daemons.append(r)
        return r

    def generator(self, wal_dir, **kw):
        g = WalGenerator(wal_dir, **kw)
        self.closers.append(g.close)
        return g

    def on_close(self, fn):
        self.closers.append(fn)

    def close(self):
        """Stops generators first, then replicas, then agents."""
        codes = {}
        for fn in reversed(self.closers):
            try:
                fn()
            except Exception as e:  # keep closing the rest
                log("cleanup %r failed: %r", fn, e)
        self.closers = []
        for d in sorted(self.daemons, key=lambda d: isinstance(d, Agent)):
            if d.proc is not None:
                codes[d.label] = d.stop()
        return codes

    def dump_logs(self, lines=80):
        for d in self.daemons:
            sys.stdout.write("\n---- last %d lines of %s ----\n%s\n"
                             % (lines, d.log_path, d.tail(lines)))
        sys.stdout.flush()
        out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if out:
            for d in self.daemons:
                if os.path.exists(d.log_path):
                    shutil.copy(d.log_path, out)


class ClusterTestCase(unittest.TestCase):
    """A TestCase whose self.cluster is closed after each test; daemon logs
    are printed if the test failed (and kept in TEST_UNDECLARED_OUTPUTS_DIR)."""

    def setUp(self):
        self.cluster = Cluster(self.id().split(".")[-1])
        self.exit_codes = None
        self.addCleanup(self._close_cluster)

    def _failed(self):
        outcome = getattr(self, "_outcome", None)
        if outcome is None:
            return False
        if not getattr(outcome, "success", True):
            return True
        result = getattr(outcome, "result", None)
        if result is None:
            return False
        return any(t is self for t, _ in list(result.errors) + list(result.failures))

    def _close_cluster(self):
        if self.exit_codes is None:
            self.exit_codes = self.cluster.close()
        if self._failed():
            self.cluster.dump_logs()
        else:
            shutil.rmtree(self.cluster.root, ignore_errors=True)

    def stop_all(self):
        """Closes the cluster now; asserts every daemon exited 0 on SIGTERM."""
        self.exit_codes = self.cluster.close()
        bad = {k: v for k, v in self.exit_codes.items() if v != 0}
        self.assertEqual(bad, {}, "daemons that did not exit 0 on SIGTERM")

    def wait_caught_up(self, agent, wal_dir, names, timeout=60):
        """Waits until every replica in `names` acknowledged the source end
        (as found on disk and as reported by the agent) as flushed."""
        end = wal_end(wal_dir)
        last = {}

        def caught_up():
            st = try_status(agent)
            if st is None:
                return False
            last["status"] = st
            if pos_of(st.get("source_end")) != end:
                return False
            return all(flushed(st, n) == end for n in names)

        def describe():
            st = last.get("status")
            if st is None:
                return "an answer from walship-status"
            return "replicas %s to flush up to %s; agent source_end %s, flushed %s" % (
                names, end, pos_of(st.get("source_end")),
                {n: str(flushed(st, n)) for n in names})

        wait_until(caught_up, timeout, describe, interval=0.2)
        log("replicas %s flushed up to the source end %s", names, end)
        return end
