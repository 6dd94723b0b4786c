"""Bad input on the data socket, in both directions.

Towards the agent (its data port), while a healthy replica follows a
generator: garbage, HELLOs with an unknown session, a wrong token, a
replayed token, an oversized payload_length, a corrupt payload or header
checksum, a first frame that is not a HELLO, a truncated header, an
immediate close, and a connection that says nothing. Each must be closed by
the agent without a byte sent back, with a "data port: rejected connection
from <our address>: <reason>" line naming the reason, and the healthy
replica must keep acknowledging new bytes throughout and end byte-identical.

Towards a replica (its data socket routed through fault_proxy): one flipped
DATA payload byte, a flipped header magic byte, a flipped header offset
byte (header checksum), and a cut connection with new connections refused
for a while. The replica must log the reason, keep no wrong byte (checked
when the error is logged and at the end), reconnect, and end identical.
"""

import random
import re
import socket
import time
import unittest

from integration import fault_proxy
from integration import harness as h
from integration import wirelib

RATE = 1e6
SEGMENT = 1 << 20
HELLO_TIMEOUT = 5.0  # DataServerOptions::hello_timeout
HEALTHY = "healthy"


def _hostport(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


class Probe(object):
    """One client connection to the agent's data port."""

    def __init__(self, agent):
        self.agent = agent
        self.log_from = agent.log_size()
        self.sock = socket.create_connection(_hostport(agent.data), timeout=5)
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


class DataPortTest(h.ClusterTestCase):
    """Bad connections to the agent's data port."""

    def setUp(self):
        h.ClusterTestCase.setUp(self)
        self.rng = random.Random(h.seed_from_env("WALSHIP_BAD_INPUT_SEED", "bad input"))
        c = self.cluster
        self.wal = c.dir("wal")
        self.gen = c.generator(self.wal, seed=self.rng.randrange(1 << 32), rate=RATE,
                               segment_size=SEGMENT).start()
        self.agent = c.agent(self.wal).start()
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

    def reject(self, what, data, reason, close_write=False, within=3.0):
        """Sends `data` on a new connection; asserts the agent closes it
        within `within` seconds, sends nothing, and logs `reason`."""
        p = Probe(self.agent)
        try:
            p.send(data, close_write)
            got, took = p.wait_closed(within)
            self.assertEqual(got, b"", "%s: the agent sent bytes before accepting a HELLO"
                             % what)
            line = p.rejection()
            self.assertRegex(line, reason, "%s: rejection reason" % what)
            h.log("%s: closed after %.2fs: %s", what, took, line.split(": ", 1)[1])
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

    def test_wrong_and_replayed_tokens(self):
        """A second replica's data socket goes through a proxy that holds its
        HELLO back 3 s (within the agent's 5 s hello timeout): meanwhile a
        HELLO with its session id and a wrong token consumes the token, so
        its real HELLO is refused as replayed and it starts over; once it
        follows, its captured HELLO is replayed on a new connection and
        refused, without disturbing it."""
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
        self.reject("wrong token for a live session", hello(sid, self.rng.randbytes(32)),
                    r"UNAUTHENTICATED.*session %d \(replica probe\): wrong token" % sid)
        proxy.clear()  # the next attempt passes straight through

        held = proxy.connections[0]
        line = self.agent.wait_log(r"data port: rejected connection from %s: "
                                   % re.escape(held.server_local), 10)
        self.assertRegex(line, r"session %d .*token already used" % sid,
                         "the real HELLO after a wrong one: the token is consumed by the "
                         "first HELLO, accepted or not")
        h.log("held HELLO refused: %s", line)

        def following():
            e = self._connected_entry("probe")
            return e if e and e["session_id"] != first["session_id"] else None
        second = h.wait_until(following, 20, "the probe to start over and follow")
        conns = proxy.wait_connections(2, 5)
        captured = bytes(conns[-1].head[fault_proxy.C2S])
        self.assertEqual(len(captured), wirelib.HEADER_SIZE + 32, captured)
        self.assertEqual(wirelib.decode_header(captured)["segment_id"],
                         int(second["session_id"]))
        self.reject("replayed HELLO of a connected replica", captured,
                    r"UNAUTHENTICATED.*token already used \(replayed\)")
        self.reject("replayed HELLO of an ended session",
                    bytes(held.head[fault_proxy.C2S]), r"UNAUTHENTICATED.*unknown session %d" % sid)
        e = h.replica_entry(h.status(self.agent), "probe")
        self.assertEqual(e["session_id"], second["session_id"],
                         "a replayed HELLO disturbed the session it was copied from")
        self.assertTrue(e["connected"], e)
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
            h.log("silent connection closed after %.1fs: %s", took, line)
            self.assertGreaterEqual(took, HELLO_TIMEOUT - 1.5, "closed too early")
            self.assertRegex(line, r"(?i)timed out|deadline")
        finally:
            silent.close()
        self.finish()

    def test_many_silent_connections_do_not_lock_out_replicas(self):
        """More silent clients than the agent's pending-handshake limit (64)
        may hold the port only until their hello timeout: a replica that
        starts meanwhile must be following within the timeout plus a margin."""
        probes = [Probe(self.agent) for _ in range(70)]
        try:
            late = self.cluster.replica(self.agent, "late").start()
            h.wait_until(lambda: self._connected_entry("late"), HELLO_TIMEOUT + 15,
                         "a replica to connect while 70 silent clients sit on the data port")
        finally:
            for p in probes:
                p.close()
        self.assert_healthy_advances("70 silent connections")
        self.gen.stop()
        self.wait_caught_up(self.agent, self.wal, [HEALTHY, "late"], timeout=30)
        h.compare_dirs(self.wal, late.dest)
        self.gen.start()
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
        h.log("payload fault %s -> %s", rec, line)
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
            h.log("header fault %s -> %s", rec, line)
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
        h.log("stalled inside a DATA frame: %s", rec)
        try:
            line = self.victim.wait_log(r"timed out", 2 + 8, since)
            h.log("replica gave up: %s", line)
            self.reconnected_past(cur["session_id"], h.Pos(rec["segment"], rec["file_offset"]),
                                  "a stalled data socket")
        finally:
            self.proxy.release()
        self.finish()


if __name__ == "__main__":
    unittest.main()
