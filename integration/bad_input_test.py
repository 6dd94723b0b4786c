"""Bad input on the data socket, in both directions.

Towards the agent (its data port), while a healthy replica follows a
generator: garbage, HELLOs with an unknown session, a wrong token, a
replayed token, an oversized payload_length, a corrupt payload or header
checksum, a first frame that is not a HELLO, a truncated header, an
immediate close, and a connection that says nothing. Each must be closed by
the agent without a byte sent back, with a "data port: rejected connection
from <our address>: <reason>" line naming the reason, and the healthy
replica must keep acknowledging new bytes throughout and end byte-identical.
Then the port under attack, beside real replicas: a forger's HELLO for a
live session consumes nothing, clients sending a HELLO a byte at a time do
not keep a replica out, and a spray of bad connections is counted one by one
but logged as summaries. Every probe and attacker connects from a loopback
address of its own (127.0.0.2 and up; Linux routes all of 127/8 to lo), so
the agent's per-address limits and log summaries never involve the replicas
on 127.0.0.1.

Towards a replica (its data socket routed through fault_proxy): one flipped
DATA payload byte, a flipped header magic byte, a flipped header offset
byte (header checksum), and a cut connection with new connections refused
for a while. The replica must log the reason, keep no wrong byte (checked
when the error is logged and at the end), reconnect, and end identical.
"""

import itertools
import random
import re
import socket
import threading
import time
import unittest

from integration import fault_proxy
from integration import harness as h
from integration import wirelib
from integration.walshiptest import procs

RATE = 1e6
SEGMENT = 1 << 20
HELLO_TIMEOUT = 5.0  # DataServerOptions::hello_timeout, for the whole HELLO
HEALTHY = "healthy"
REJECTED = "walship_agent_data_connections_rejected_total"
FORGER = "127.0.0.2"
SPRAYER = "127.0.0.3"
_probe_sources = ("127.0.2.%d" % i for i in itertools.count(1))


def _hostport(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def connect_from(agent, source, timeout=5):
    """A connection to the agent's data port from loopback address `source`."""
    return socket.create_connection(_hostport(agent.data), timeout=timeout,
                                    source_address=(source, 0))


def rejected(agent, **labels):
    """walship_agent_data_connections_rejected_total (by reason if given)."""
    return h.metric_total(h.scrape(agent.metrics), REJECTED, **labels)


def wait_closed_quietly(sock, timeout=5):
    """Reads until the peer closes (or resets); False if still open at `timeout`."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return False
    except OSError:
        pass  # reset: closed with our bytes unread
    return True


class Probe(object):
    """One client connection to the agent's data port, from a loopback
    address no other probe uses unless `source` is given."""

    def __init__(self, agent, source=None):
        self.agent = agent
        self.log_from = agent.log_size()
        self.sock = connect_from(agent, source or next(_probe_sources))
        self.local = "%s:%d" % self.sock.getsockname()[:2]
        self.opened = time.monotonic()

    def send(self, data, close_write=False):
        try:
            self.sock.sendall(data)
            if close_write:
                self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the agent may already have closed: checked below

    def wait_closed(self, timeout):
        """Reads until the agent closes; returns (bytes received, seconds
        since connect). Raises AssertionError if still open at `timeout`."""
        got = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("the agent did not close the connection from %s "
                                     "within %.1fs" % (self.local, timeout))
            self.sock.settimeout(min(left, 0.5))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                return bytes(got), time.monotonic() - self.opened
            got += data

    def rejection(self, timeout=5):
        """The agent's rejection log line for this connection."""
        return self.agent.wait_log(r"data port: rejected connection from %s: "
                                   % re.escape(self.local), timeout, self.log_from)

    def close(self):
        self.sock.close()


def hello(session_id, token, **header_fields):
    """A HELLO frame; header fields (e.g. header_crc) may be overridden."""
    crc = header_fields.pop("payload_crc", wirelib.crc32c(token))
    length = header_fields.pop("payload_length", len(token))
    return wirelib.encode_header(wirelib.HELLO, session_id, 0, length, crc,
                                 **header_fields) + token


class SlowClients(object):
    """`count` connections to an agent's data port from `addresses` (round
    robin), each sending the next byte of a HELLO every `every` seconds and
    reconnecting within 0.1 s when the agent closes it; on one thread
    between start() and stop()."""

    def __init__(self, agent, addresses, count, every):
        self.agent = agent
        self.sources = [addresses[i % len(addresses)] for i in range(count)]
        self.every = every
        self.frame = hello(0x5EED, b"s" * 32)
        self.opened = 0
        self.closed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def start(self):
        self.started = time.monotonic()
        self._thread.start()
        return self

    def running(self):
        return self._thread.is_alive()

    def running_for(self):
        return time.monotonic() - self.started

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    @staticmethod
    def _is_closed(sock):
        try:
            return sock.recv(1, socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _run(self):
        conns = [None] * len(self.sources)  # [socket, bytes sent, next send time]
        try:
            while not self._stop.wait(0.1):
                now = time.monotonic()
                for i, source in enumerate(self.sources):
                    c = conns[i]
                    if c is not None and self._is_closed(c[0]):
                        c[0].close()
                        conns[i] = c = None
                        self.closed += 1
                    if c is None:
                        try:
                            sock = connect_from(self.agent, source, timeout=2)
                        except OSError:
                            continue
                        conns[i] = c = [sock, 0, now]
                        self.opened += 1
                    if now >= c[2]:
                        try:
                            c[0].send(self.frame[c[1] % len(self.frame):][:1])
                        except OSError:
                            continue  # closed: found on the next round
                        c[1] += 1
                        c[2] = now + self.every
        finally:
            for c in conns:
                if c is not None:
                    c[0].close()


class DataPortTest(h.ClusterTestCase):
    """Bad connections to the agent's data port."""

    def setUp(self):
        h.ClusterTestCase.setUp(self)
        self.rng = random.Random(h.seed_from_env("WALSHIP_BAD_INPUT_SEED", "bad input"))
        c = self.cluster
        self.wal = c.dir("wal")
        self.gen = c.generator(self.wal, seed=self.rng.randrange(1 << 32), rate=RATE,
                               segment_size=SEGMENT).start()
        self.agent = c.agent(self.wal, extra_args=["--metrics-listen=127.0.0.1:0"]).start()
        self.healthy = c.replica(self.agent, HEALTHY).start()
        entry = h.wait_until(lambda: self._connected_entry(HEALTHY), 15,
                             "the healthy replica to connect")
        self.healthy_session = entry["session_id"]

    def _connected_entry(self, name):
        e = h.replica_entry(h.try_status(self.agent), name)
        return e if e and e["connected"] and h.pos_of(e["flushed"]).segment else None

    def assert_healthy_advances(self, why):
        """The healthy replica acknowledges new bytes, in its first session."""
        before = h.flushed(h.status(self.agent), HEALTHY)

        def advanced():
            e = h.replica_entry(h.try_status(self.agent), HEALTHY)
            return e and h.pos_of(e["flushed"]) > before and e
        e = h.wait_until(advanced, 10, "the healthy replica to advance past %s after %s"
                         % (before, why))
        self.assertEqual(e["session_id"], self.healthy_session,
                         "the healthy replica's session was disturbed by %s" % why)
        self.assertTrue(e["connected"], e)

    def reject(self, what, data, reason, close_write=False, within=3.0, source=None):
        """Sends `data` on a new connection (from `source`, else an address
        of its own); asserts the agent closes it within `within` seconds,
        sends nothing, and logs `reason`."""
        p = Probe(self.agent, source)
        try:
            p.send(data, close_write)
            got, took = p.wait_closed(within)
            self.assertEqual(got, b"", "%s: the agent sent bytes before accepting a HELLO"
                             % what)
            line = p.rejection()
            self.assertRegex(line, reason, "%s: rejection reason" % what)
            procs.log("%s: closed after %.2fs: %s", what, took, line.split(": ", 1)[1])
        finally:
            p.close()
        self.assert_healthy_advances(what)
        return line

    def finish(self):
        self.assert_healthy_advances("the whole barrage")
        self.assertTrue(self.agent.running())
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, [HEALTHY], timeout=30)
        h.compare_dirs(self.wal, self.healthy.dest)
        self.assertEqual(self.healthy.error_lines(), [], "the healthy replica logged errors")
        self.stop_all()

    def test_bad_hellos(self):
        sid = int(self.healthy_session)
        token = self.rng.randbytes(32)
        garbage = self.rng.randbytes(100)
        if garbage.startswith(wirelib.MAGIC):
            garbage = b"X" + garbage[1:]
        self.reject("garbage", garbage, r"bad magic")
        self.reject("unknown session", hello(999999, token),
                    r"UNAUTHENTICATED.*unknown session 999999")
        self.reject("used session token", hello(sid, token),
                    r"UNAUTHENTICATED.*session %d .*token already used" % sid)
        self.reject("oversized payload_length (no payload follows)",
                    hello(sid, b"", payload_length=0xFFFFFFFF, payload_crc=0),
                    r"DATA_LOSS.*payload length 4294967295 exceeds limit")
        self.reject("payload_length just over the HELLO limit",
                    hello(sid, token + token + b"!"),
                    r"DATA_LOSS.*payload length 65 exceeds limit 64")
        self.reject("short HELLO payload", hello(sid, token[:8]),
                    r"DATA_LOSS.*HELLO payload length 8")
        self.reject("corrupt payload checksum",
                    hello(sid, token, payload_crc=wirelib.crc32c(token) ^ 1),
                    r"DATA_LOSS.*payload checksum mismatch")
        self.reject("corrupt header checksum", hello(sid, token, header_crc=0x12345678),
                    r"DATA_LOSS.*checksum mismatch")
        self.reject("version 2 HELLO", hello(sid, token, version=2),
                    r"FAILED_PRECONDITION.*unsupported protocol version 2")
        self.reject("first frame is a SEGMENT",
                    wirelib.encode_frame(wirelib.SEGMENT, 1, 0, "seg-00000001"),
                    r"first frame is SEGMENT, expected HELLO")
        self.reject("truncated header, then close", hello(sid, token)[:20],
                    r"closed mid-read after 20 of 40 bytes", close_write=True)
        self.reject("header, then close inside the payload", hello(sid, token)[:50],
                    r"closed|end of stream", close_write=True)
        self.reject("close at once", b"", r"closed before sending a frame", close_write=True)
        self.finish()

    def test_forged_hello_consumes_nothing(self):
        """A second replica's data socket goes through a proxy that holds its
        HELLO back 3 s (within the agent's 5 s HELLO deadline). Meanwhile a
        forger on another address sends a HELLO with its session id and a
        wrong token: refused, and it consumes nothing, so the real HELLO is
        then accepted and the replica follows in its first session. The
        forger then sprays HELLOs with random ids and with the real one: all
        refused and counted, and once it has failed often enough its
        connections are refused at accept (rate_limited), while both
        replicas keep shipping. The real HELLO replayed later is refused: a
        token is used once. Session ids are random, not the next number."""
        proxy = fault_proxy.FaultProxy(self.agent.data, seed=self.rng.randrange(1 << 32))
        self.cluster.on_close(proxy.close)
        proxy.start()
        proxy.set_delay(3.0, fault_proxy.C2S)
        probe = self.cluster.replica(self.agent, "probe", data_address=proxy.address).start()

        def pending_session():
            e = h.replica_entry(h.try_status(self.agent), "probe")
            return e if e and not e["connected"] else None
        first = h.wait_until(pending_session, 10, "the probe's handshake")
        proxy.wait_connections(1, 10)
        sid = int(first["session_id"])
        self.reject("forged HELLO: a live session's id, a wrong token",
                    hello(sid, self.rng.randbytes(32)),
                    r"UNAUTHENTICATED.*session %d \(replica probe\): wrong token" % sid,
                    source=FORGER)
        proxy.clear()  # the next attempt passes straight through

        held = proxy.connections[0]

        def outcome():
            refused = self.agent.grep(r"data port: rejected connection from %s: "
                                      % re.escape(held.server_local))
            if refused:
                return "refused", refused[0]
            e = self._connected_entry("probe")
            return ("connected", e) if e else None
        kind, what = h.wait_until(outcome, 20, "the probe's held HELLO to be decided")
        self.assertEqual(kind, "connected", "the real HELLO, arriving after a forged one, "
                         "was refused: %s" % what)
        self.assertEqual(what["session_id"], first["session_id"],
                         "the probe had to start over: the forged HELLO consumed its token")
        procs.log("held HELLO accepted after a forged one: session %s", sid)

        # The spray: random ids and the real one, wrong tokens, one address.
        bad_token, limited = rejected(self.agent, reason="bad_token"), \
            rejected(self.agent, reason="rate_limited")
        since = self.agent.log_size()
        sprayed = 0
        while rejected(self.agent, reason="rate_limited") == limited:
            self.assertLess(sprayed, 500, "500 forged HELLOs from %s and it is still not "
                            "rate-limited" % FORGER)
            for _ in range(20):
                sock = connect_from(self.agent, FORGER)
                sid_or_random = sid if sprayed % 2 else self.rng.randrange(1, 1 << 64)
                try:
                    sock.sendall(hello(sid_or_random, self.rng.randbytes(32)))
                except OSError:
                    pass  # already refused at accept
                self.assertTrue(wait_closed_quietly(sock), "a forged HELLO was left open")
                sock.close()
                sprayed += 1
        self.assertGreater(rejected(self.agent, reason="bad_token"), bad_token)
        line = self.agent.wait_log(r"data port: rejected connection from %s:\d+: .*"
                                   r"failed attempts" % re.escape(FORGER), 5, since)
        procs.log("forger rate-limited after %d HELLOs: %s", sprayed, line)
        e = h.replica_entry(h.status(self.agent), "probe")
        self.assertEqual(e["session_id"], first["session_id"],
                         "forged HELLOs disturbed the session they named")
        self.assertTrue(e["connected"], e)
        self.assert_healthy_advances("%d forged HELLOs" % sprayed)

        captured = bytes(held.head[fault_proxy.C2S])
        self.assertEqual(len(captured), wirelib.HEADER_SIZE + 32, captured)
        self.assertEqual(wirelib.decode_header(captured)["segment_id"], sid)
        self.reject("replayed HELLO of a connected replica", captured,
                    r"UNAUTHENTICATED.*token already used \(replayed\)")
        self.assertGreater(abs(sid - int(self.healthy_session)), 1 << 32,
                           "session ids %s and %s: the next id is guessable"
                           % (self.healthy_session, sid))
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, [HEALTHY, "probe"], timeout=30)
        h.compare_dirs(self.wal, probe.dest)
        self.gen.start()
        self.finish()

    def test_silent_connection_is_closed(self):
        """A client that connects and says nothing is closed after the hello
        timeout (~5 s), and meanwhile disturbs nobody."""
        silent = Probe(self.agent)
        try:
            # Another client is served while the silent one waits.
            self.reject("garbage beside a silent connection", b"\x00" * 40, r"bad magic")
            got, took = silent.wait_closed(HELLO_TIMEOUT + 5)
            self.assertEqual(got, b"")
            line = silent.rejection()
            procs.log("silent connection closed after %.1fs: %s", took, line)
            self.assertGreaterEqual(took, HELLO_TIMEOUT - 1.5, "closed too early")
            self.assertRegex(line, r"(?i)timed out|deadline")
        finally:
            silent.close()
        self.finish()

    def test_slow_clients_do_not_keep_a_replica_out(self):
        """96 clients from 24 addresses (4 each, under the per-address cap:
        only the total bound and eviction stand between them and the port)
        send a HELLO one byte every 3 s -- each byte well within any
        per-read timeout -- and reconnect whenever closed. Once they have
        held the port for longer than a HELLO deadline, a new replica must
        get in and follow, and the healthy one, restarted, must get back in;
        the slow clients are closed and counted."""
        slow = SlowClients(self.agent, ["127.0.1.%d" % i for i in range(1, 25)], 96, 3.0)
        self.cluster.on_close(slow.stop)
        before = rejected(self.agent)
        slow.start()
        try:
            h.wait_until(lambda: (slow.running_for() > HELLO_TIMEOUT + 1 and
                                  rejected(self.agent) > before),
                         HELLO_TIMEOUT + 15,
                         lambda: "96 slow clients to fill the pending table (%d opened)"
                         % slow.opened, interval=0.2)
            late = self.cluster.replica(self.agent, "late").start()
            h.wait_until(lambda: self._connected_entry("late"), 20,
                         "a replica to connect while 96 slow clients sit on the data port")
            self.healthy.stop()
            self.healthy.start()
            e = h.wait_until(lambda: (self._connected_entry(HEALTHY) or {}).get("session_id")
                             not in (None, self.healthy_session) and
                             self._connected_entry(HEALTHY), 20,
                             "the restarted healthy replica to get back in")
            self.healthy_session = e["session_id"]
            self.assert_healthy_advances("96 slow clients")
            self.assertTrue(slow.running(), "the slow clients stopped early")
        finally:
            slow.stop()
        procs.log("slow clients: %d connections opened, %d closed by the agent in %.1fs",
                  slow.opened, slow.closed, slow.running_for())
        self.assertGreater(rejected(self.agent, reason="timeout") +
                           rejected(self.agent, reason="evicted"), 0)
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, [HEALTHY, "late"], timeout=30)
        h.compare_dirs(self.wal, late.dest)
        self.gen.start()
        self.finish()

    def test_rejections_are_counted_not_logged_one_by_one(self):
        """2000 bad connections from one address (garbage, HELLOs for
        unknown sessions, immediate closes), each waited out until the agent
        closes it: every one is counted in the rejection metric, but the
        agent logs only a few lines about them -- the first of each reason
        and a summary per interval ("rejected N connections from ADDRESS in
        10s (...)") -- not one each."""
        n, threads = 2000, 4
        before = rejected(self.agent)
        since = self.agent.log_size()
        errors = []

        def spray(seed):
            rng = random.Random(seed)
            try:
                for i in range(n // threads):
                    sock = connect_from(self.agent, SPRAYER)
                    kind = i % 3
                    try:
                        if kind == 0:
                            sock.sendall(b"\x00" * 40)
                        elif kind == 1:
                            sock.sendall(hello(rng.randrange(1, 1 << 64), rng.randbytes(32)))
                        else:
                            sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass  # already refused at accept
                    if not wait_closed_quietly(sock):
                        errors.append("connection %d was left open" % i)
                    sock.close()
            except Exception as e:  # pylint: disable=broad-except
                errors.append(repr(e))
        workers = [threading.Thread(target=spray, args=(self.rng.randrange(1 << 32),))
                   for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        self.assertEqual(errors, [])
        counted = h.wait_until(lambda: rejected(self.agent) - before >= n and
                               rejected(self.agent) - before, 10,
                               "every rejected connection to be counted")
        self.assertEqual(counted, n, "rejections counted")
        lines = [l for l in self.agent.log_lines(since) if SPRAYER + ":" in l
                 or " from %s " % SPRAYER in l]
        self.assertLessEqual(len(lines), 12, "%d log lines about %d rejected connections "
                             "from one address, e.g. %s" % (len(lines), n, lines[:3]))
        summary = self.agent.wait_log(r"data port: rejected \d+ connections from %s in "
                                      % re.escape(SPRAYER), 15, since)
        procs.log("%d rejections, %d log lines; summary: %s", n, len(lines), summary)
        self.assert_healthy_advances("a spray of %d bad connections" % n)
        self.finish()



class ReplicaSideTest(h.ClusterTestCase):
    """Faults on the way to a replica, through fault_proxy."""

    NAME = "victim"

    def start_victim(self, transport=None, extra_args=()):
        """Agent, generator, proxy and a replica whose data socket goes
        through the proxy; returns (wal, agent, proxy, victim, entry)."""
        rng = random.Random(h.seed_from_env("WALSHIP_BAD_INPUT_SEED", "replica side"))
        c = self.cluster
        self.wal = c.dir("wal")
        self.gen = c.generator(self.wal, seed=rng.randrange(1 << 32), rate=RATE,
                               segment_size=SEGMENT).start()
        self.agent = c.agent(self.wal).start()
        self.proxy = fault_proxy.FaultProxy(self.agent.data, walship_frames=True,
                                            seed=rng.randrange(1 << 32))
        c.on_close(self.proxy.close)
        self.proxy.start()
        self.victim = c.replica(self.agent, self.NAME, transport=transport,
                                data_address=self.proxy.address,
                                extra_args=extra_args).start()
        return h.wait_until(self.entry, 15, "the replica to follow")

    def entry(self):
        """The victim's status entry if it is connected and following."""
        e = h.replica_entry(h.try_status(self.agent), self.NAME)
        return e if e and e["connected"] and h.pos_of(e["flushed"]).segment else None

    def reconnected_past(self, session, pos, why, timeout=20):
        """Waits for a new session, connected, acknowledged past `pos`."""
        def ok():
            e = self.entry()
            return e if e and e["session_id"] != session and h.pos_of(e["flushed"]) > pos else None
        return h.wait_until(ok, timeout, "the replica to reconnect after %s and pass %s"
                            % (why, pos))

    def finish(self):
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, [self.NAME], timeout=30)
        h.compare_dirs(self.wal, self.victim.dest)
        self.assertEqual(h.dest_consistency(self.wal, self.victim.dest), [])
        self.assertTrue(self.victim.running())
        self.stop_all()

    def run_faults(self, transport):
        cur = self.start_victim(transport)
        wal, proxy, victim = self.wal, self.proxy, self.victim
        reconnected_past = self.reconnected_past

        # 1. One flipped payload byte.
        since = victim.log_size()
        nfaults = len(proxy.faults)
        proxy.corrupt_next_data_payload()
        rec = proxy.wait_fault(10, nfaults + 1)
        line = victim.wait_log(r"payload checksum mismatch", 10, since)
        # Right when the error is logged: the byte is absent or correct.
        found = h.dest_file(victim.dest, rec["segment"])
        self.assertIsNotNone(found, rec)
        data = h.read_bytes(found[0], rec["file_offset"], 1)
        good = h.read_bytes(f"{wal}/{rec['segment']}", rec["file_offset"], 1)
        self.assertIn(data, (b"", good), "%s holds the corrupted byte 0x%02x at offset %d "
                      "when the checksum error is logged" % (found[0], rec["corrupted"],
                                                              rec["file_offset"]))
        self.assertEqual(h.dest_consistency(wal, victim.dest), [])
        procs.log("payload fault %s -> %s", rec, line)
        self.assertEqual(victim.grep(r"error .*payload checksum mismatch", since)[:1], [line])
        cur = reconnected_past(cur["session_id"], h.Pos(rec["segment"], rec["file_offset"]),
                               "a corrupt payload")

        # 2. and 3. Header faults: the magic, then the offset field (which
        # only the header checksum can catch).
        for byte_index, reason in ((0, r"bad magic"), (16, r"header checksum mismatch")):
            since = victim.log_size()
            nfaults = len(proxy.faults)
            proxy.corrupt_next_data_header(byte_index)
            rec = proxy.wait_fault(10, nfaults + 1)
            line = victim.wait_log(r"error .*rejected frame: DATA_LOSS.*" + reason, 10, since)
            procs.log("header fault %s -> %s", rec, line)
            self.assertEqual(h.dest_consistency(wal, victim.dest), [])
            cur = reconnected_past(cur["session_id"], h.Pos(rec["segment"], rec["frame_offset"]),
                                   "a corrupt header byte %d" % byte_index)

        # 4. The connection is cut and new ones are refused for 2 s.
        proxy.refuse_for(2.0)
        self.assertEqual(proxy.cut(reset=True), 1, "open proxied connections")
        before = h.pos_of(cur["flushed"])
        cur = reconnected_past(cur["session_id"], before, "a cut connection")
        self.assertGreaterEqual(proxy.refused, 1, "the replica never retried while refused")

        self.finish()

    def test_zerocopy_replica(self):
        self.run_faults("zerocopy")

    def test_copy_replica(self):
        self.run_faults("copy")

    def test_data_stalled_inside_a_frame(self):
        """The data stream stops in the middle of a DATA frame while the
        control stream stays healthy (a black-holed path): the replica must
        give up on the connection after --io-timeout-ms (2 s here; "Longest
        wait inside a frame for the agent's bytes before reconnecting") and
        start over, not wait forever."""
        cur = self.start_victim(extra_args=["--io-timeout-ms=2000"])
        since = self.victim.log_size()
        self.proxy.stall_next_data_payload()
        rec = self.proxy.wait_fault(10)
        procs.log("stalled inside a DATA frame: %s", rec)
        try:
            line = self.victim.wait_log(r"timed out", 2 + 8, since)
            procs.log("replica gave up: %s", line)
            self.reconnected_past(cur["session_id"], h.Pos(rec["segment"], rec["file_offset"]),
                                  "a stalled data socket")
        finally:
            self.proxy.release()
        self.finish()


if __name__ == "__main__":
    unittest.main()
