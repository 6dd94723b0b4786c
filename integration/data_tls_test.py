"""TLS on the data socket (--data-tls) with the real daemons and
certificates made by integration/make_test_certs.sh.

test_tls_hides_the_wal / test_plaintext_shows_the_wal: WAL whose segments
repeat a known marker string goes through a recording relay on the data
socket (the replica's --data-address). With --data-tls=on (the default with
TLS certificates) the relay never sees the marker; with --data-tls=off it
does (so the first test can fail), and the agent warns that WAL travels in
plaintext. Both copies are byte-identical; status and metrics name the path
(userspace here: this kernel has no tls ULP; ktls where it has).
test_mismatch_is_refused: an agent and a replica that disagree are refused
at handshake with a clear reason (data_tls_mismatch), never a hang.
test_refusals_on_the_data_port: clients with no certificate, another CA's
certificate, or plaintext are refused before any byte of WAL, logged and
counted. (A valid token over another replica's certificate:
tests/agent/data_port_tls_test.cc, which can obtain a token.)
test_resume_after_kill9_over_tls: kill -9 of the replica mid-segment; it
resumes over TLS and ends byte-identical.
test_altered_record_is_a_checksum_failure: one byte of the TLS stream
flipped by the fault proxy: the record holding it fails authentication in
walship's record layer, the replica counts a checksum failure, keeps none
of it, reconnects and ends byte-identical.
test_thin_link_and_cuts_over_tls: records arriving in small pieces through
a link limited by the fault proxy, and connections reset mid-stream three
times while WAL is written: the replica resumes each time and ends
byte-identical.
"""

import os
import random
import socket
import ssl
import threading
import time
import unittest

from integration import fault_proxy
from integration import harness as h
from integration import wirelib

MARKER = b"WALSHIP-PLAINTEXT-MARKER-5b9e1c"
SEGMENT = 1 << 20


class Relay(object):
    """A TCP relay that records every byte the server sends to the client."""

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.address = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.s2c = bytearray()
        self.socks = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            with self.lock:
                self.socks += [c, s]
            threading.Thread(target=self._pump, args=(s, c, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(c, s, False), daemon=True).start()

    def _pump(self, src, dst, record):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if record:
                    with self.lock:
                        self.s2c += data
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def recorded(self):
        with self.lock:
            return bytes(self.s2c)

    def close(self):
        self.lsock.close()
        with self.lock:
            for s in self.socks:
                s.close()


def write_marked_wal(wal, segments=3, tail=300_000, seed=1):
    """`segments` complete segments and a partial one, each a repetition of
    random bytes and MARKER."""
    rng = random.Random(seed)
    for i in range(1, segments + 2):
        size = SEGMENT if i <= segments else tail
        out = bytearray()
        while len(out) < size:
            out += rng.randbytes(3000) + MARKER
        with open(os.path.join(wal, "seg-%08d" % i), "wb") as f:
            f.write(out[:size])


def write_compressible_wal(wal, segments=2, tail=200_000):
    """Like write_marked_wal, but rows of text that compress several times."""
    for i in range(1, segments + 2):
        size = SEGMENT if i <= segments else tail
        out = bytearray()
        n = 0
        while len(out) < size:
            n += 1
            out += b"segment %d row %08d balance %d " % (i, n, n * 7 % 1000) + MARKER + b"\n"
        with open(os.path.join(wal, "seg-%08d" % i), "wb") as f:
            f.write(out[:size])


def kernel_offers_tls():
    try:
        with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
            return "tls" in f.read().split()
    except OSError:
        return False


class DataTlsTest(h.ClusterTestCase):

    def setUp(self):
        h.ClusterTestCase.setUp(self)
        self.certs = h.Certs(self.cluster.dir("certs"), "r1", "operator")

    def start_agent(self, wal, data_tls=None):
        extra = ["--metrics-listen=127.0.0.1:0"]
        if data_tls:
            extra.append("--data-tls=" + data_tls)
        return self.cluster.agent(wal, tls_args=self.certs.args("agent"),
                                  status_tls_args=self.certs.args("operator"),
                                  extra_args=extra).start()

    def start_replica(self, agent, data_tls=None, data_address=None, name="r1"):
        extra = ["--metrics-listen=127.0.0.1:0"]
        if data_tls:
            extra.append("--data-tls=" + data_tls)
        return self.cluster.replica(agent, name, tls_args=self.certs.args("r1"),
                                    data_address=data_address, extra_args=extra).start()

    def ship_through_relay(self, data_tls):
        c = self.cluster
        wal = c.dir("wal")
        write_marked_wal(wal)
        agent = self.start_agent(wal, data_tls)
        relay = Relay(agent.data)
        c.on_close(relay.close)
        replica = self.start_replica(agent, data_tls, data_address=relay.address)
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        seen = relay.recorded()
        self.assertGreater(len(seen), h.total_size(wal), "the relay saw the whole stream")
        return agent, replica, seen

    def test_tls_hides_the_wal(self):
        agent, replica, seen = self.ship_through_relay(None)  # on: the default with TLS
        self.assertFalse(MARKER in seen, "the marker crossed the data socket readable (%d bytes "
                         "recorded) with --data-tls=on" % len(seen))
        path = "ktls" if kernel_offers_tls() else "userspace"
        entry = h.replica_entry(h.status(agent), "r1")
        self.assertEqual(entry.get("data_path"), path, entry)
        self.assertEqual(entry.get("replica_data_path"), path, entry)
        self.assertTrue(agent.grep(r"agent: data socket TLS on .*, path " + path))
        self.assertTrue(replica.grep(r"replica: data socket TLS on .*, path " + path))
        self.assertTrue(agent.grep(r"connected its data socket from .*data path " + path))
        self.assertTrue(replica.grep(r"data socket to 127\.0\.0\.1: TLSv1\.3 .*data path " + path))
        if path == "userspace":
            # TLS 1.3 with AES-GCM: walship runs the WAL direction's record
            # layer on both ends (common/net/tls_records.h).
            self.assertTrue(agent.grep(r"connected its data socket from .*records encrypted by "
                                       r"walship"))
            self.assertTrue(replica.grep(r"data socket to .*records decrypted by walship"))
        m = h.scrape(agent.metrics)
        self.assertEqual(h.metric_total(m, "walship_agent_data_sessions_total", path=path), 1)

    def test_compressed_frames_inside_tls(self):
        # Compression takes the copy path, and under TLS that path goes
        # through the TLS session too: the relay sees neither the marker
        # nor more bytes than the compressed stream.
        c = self.cluster
        wal = c.dir("wal")
        write_compressible_wal(wal)
        agent = self.start_agent(wal)
        relay = Relay(agent.data)
        c.on_close(relay.close)
        replica = self.cluster.replica(agent, "r1", tls_args=self.certs.args("r1"),
                                       data_address=relay.address,
                                       extra_args=["--compress=zstd"]).start()
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        seen = relay.recorded()
        self.assertFalse(MARKER in seen, "the marker crossed the data socket readable")
        self.assertLess(len(seen), h.total_size(wal) // 3, "frames not compressed")
        entry = h.replica_entry(h.status(agent), "r1")
        path = "ktls" if kernel_offers_tls() else "userspace"
        self.assertEqual(entry.get("data_path"), path, entry)
        self.assertTrue(entry.get("compression", "").startswith("zstd"), entry)
        self.assertEqual(replica.error_lines(), [])

    def test_plaintext_shows_the_wal(self):
        agent, replica, seen = self.ship_through_relay("off")
        self.assertTrue(MARKER in seen, "the marker never crossed the data socket readable "
                        "with --data-tls=off (%d bytes recorded)" % len(seen))
        self.assertTrue(agent.grep(r"--data-tls=off: the control channel uses TLS but the data "
                                   r"socket is plaintext"))
        self.assertTrue(replica.grep(r"--data-tls=off: .*plaintext"))
        entry = h.replica_entry(h.status(agent), "r1")
        self.assertEqual(entry.get("data_path"), "off", entry)

    def test_mismatch_is_refused(self):
        c = self.cluster
        wal = c.dir("wal")
        write_marked_wal(wal)
        for agent_tls, replica_tls, says in (
                ("on", "off", r"this agent runs TLS on the data socket \(--data-tls=on\) but "
                              r"the replica asked for plaintext \(--data-tls=off\)"),
                ("off", "on", r"the replica asked for TLS on the data socket")):
            agent = self.start_agent(wal, agent_tls)
            replica = self.start_replica(agent, replica_tls)
            h.wait_until(lambda: not replica.running(), 30, "the refused replica to exit")
            self.assertEqual(replica.returncode(), 3)
            self.assertTrue(replica.grep(r"FAILED_PRECONDITION: .*" + says), says)
            self.assertTrue(agent.grep(says))
            m = h.scrape(agent.metrics)
            self.assertEqual(h.metric_total(m, "walship_agent_handshakes_refused_total",
                                            reason="data_tls_mismatch"), 1)
            self.assertEqual(os.listdir(replica.dest) and
                             [n for n in os.listdir(replica.dest) if n.startswith("seg-")], [])
            agent.stop()

    def refused_client(self, agent, context, hello):
        """Connects to the data port with `context` (None: plaintext), sends
        `hello`; returns the bytes received before the agent closed."""
        raw = socket.create_connection(("127.0.0.1", agent.data_port), timeout=10)
        got = b""
        try:
            s = context.wrap_socket(raw) if context else raw
            s.sendall(hello)
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                got += data
        except (OSError, ssl.SSLError):
            pass
        finally:
            raw.close()
        return got

    def test_refusals_on_the_data_port(self):
        c = self.cluster
        wal = c.dir("wal")
        write_marked_wal(wal)
        agent = self.start_agent(wal)
        replica = self.start_replica(agent)
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        hello = wirelib.encode_frame(wirelib.HELLO, 1, 0, b"x" * 32)
        stranger = h.Certs(c.dir("stranger"), "r1")

        def client(cert_dir=None):
            ctx = ssl.create_default_context(cafile=self.certs.ca)
            ctx.check_hostname = False
            if cert_dir:
                ctx.load_cert_chain(os.path.join(cert_dir, "r1.pem"),
                                    os.path.join(cert_dir, "r1.key"))
            return ctx

        for ctx, reason, says in (
                (client(), "no_client_certificate", r"the client presented no certificate"),
                (client(stranger.dir), "untrusted_certificate",
                 r"the client's certificate /CN=r1 is not accepted"),
                (None, "tls_handshake", r"TLS handshake on the data socket failed")):
            got = self.refused_client(agent, ctx, hello)
            self.assertEqual(got, b"", reason)
            agent.wait_log(r"data port: rejected connection from 127\.0\.0\.1:\d+: .*" + says, 10)
            m = h.scrape(agent.metrics)
            self.assertEqual(h.metric_total(
                m, "walship_agent_data_connections_rejected_total", reason=reason), 1, reason)
        # The replica was never disturbed.
        self.assertTrue(replica.running())

    def test_resume_after_kill9_over_tls(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, rate=4e6, segment_size=8 << 20)
        agent = self.start_agent(wal)
        replica = self.start_replica(agent)
        gen.start()
        h.wait_until(lambda: (h.flushed(h.try_status(agent), "r1") or h.Pos("", 0)).offset
                     > 2 << 20, 30, "r1 to flush 2 MiB of the first segment")
        replica.kill()
        at = h.flushed(h.status(agent), "r1")
        self.assertGreater(at.offset, 0, "killed mid-segment")
        replica.start()
        h.wait_until(lambda: (h.flushed(h.try_status(agent), "r1") or at) > at, 30,
                     "r1 to flush past %s again" % (at,))
        gen.stop()
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        self.assertTrue(replica.grep(r"data path (userspace|ktls)"))

    def test_altered_record_is_a_checksum_failure(self):
        c = self.cluster
        wal = c.dir("wal")
        write_marked_wal(wal)
        agent = self.start_agent(wal)
        rng = random.Random(h.seed_from_env("WALSHIP_DATA_TLS_SEED", "altered-record"))
        proxy = fault_proxy.FaultProxy(agent.data, seed=rng.randrange(1 << 32))
        c.on_close(proxy.close)
        proxy.start()
        # 1 MiB into the agent's stream: past the handshake, inside WAL.
        proxy.corrupt_at(1 << 20)
        replica = self.start_replica(agent, data_address=proxy.address)
        line = replica.wait_log(r"error .*DATA_LOSS: .*failed authentication", 20)
        self.assertEqual(h.dest_consistency(wal, replica.dest), [], line)
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        m = h.scrape(replica.metrics_address())
        self.assertEqual(h.metric_total(m, "walship_replica_checksum_failures_total"), 1)

    def test_thin_link_and_cuts_over_tls(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, rate=2e6, segment_size=4 << 20)
        agent = self.start_agent(wal)
        rng = random.Random(h.seed_from_env("WALSHIP_DATA_TLS_SEED", "thin-link-cuts"))
        proxy = fault_proxy.FaultProxy(agent.data, seed=rng.randrange(1 << 32))
        c.on_close(proxy.close)
        proxy.start()
        proxy.set_rate(300_000, "s2c")  # 64 KiB pieces: records split across reads
        replica = self.start_replica(agent, data_address=proxy.address)
        gen.start()
        h.wait_until(lambda: (h.flushed(h.try_status(agent), "r1") or h.Pos("", 0)).offset
                     > 512 << 10, 30, "r1 to flush 512 KiB through the thin link")
        proxy.set_rate(0, "s2c")
        for i in range(3):
            before = h.flushed(h.status(agent), "r1")
            time.sleep(rng.uniform(0.2, 0.8))
            self.assertGreaterEqual(proxy.cut(reset=True), 1, "cut %d found no connection" % i)
            h.wait_until(lambda: (h.flushed(h.try_status(agent), "r1") or before) > before, 30,
                         "r1 to flush past %s after cut %d" % (before, i))
        gen.stop()
        self.wait_caught_up(agent, wal, ["r1"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        self.assertGreaterEqual(len(replica.grep(r"data path userspace|data path ktls")), 4,
                                "a data socket per cut")


if __name__ == "__main__":
    unittest.main()
