"""Checks fault_proxy against a local server: each fault does exactly what
it says and nothing else (the integration tests and drills rely on it)."""

import os
import random
import socket
import subprocess
import sys
import threading
import time
import unittest

from integration import fault_proxy
from integration import wirelib


class Server(object):
    """Accepts connections; sends each `payload`, then half-closes, and
    records everything the client sends until it closes."""

    def __init__(self, payload=b"", hold=False, piece=None):
        self.payload = payload
        self.piece = piece  # send in pieces of this size, 1 ms apart
        self.hold = hold  # keep the connection open after sending
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.received = []  # one bytearray per connection
        self.arrivals = []  # (monotonic time, byte count) per recv
        self.accepted = 0
        self.done = []  # one Event per connection: set when it was served
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            buf = bytearray()
            done = threading.Event()
            self.received.append(buf)
            self.done.append(done)
            threading.Thread(target=self._serve, args=(c, buf, done), daemon=True).start()

    def _serve(self, c, buf, done):
        try:
            if self.piece:
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for i in range(0, len(self.payload), self.piece):
                    c.sendall(self.payload[i:i + self.piece])
                    if i < 400:
                        time.sleep(0.001)
            else:
                c.sendall(self.payload)
            if not self.hold:
                c.shutdown(socket.SHUT_WR)
            while True:
                d = c.recv(65536)
                if not d:
                    break
                self.arrivals.append((time.monotonic(), len(d)))
                buf += d
        except OSError:
            pass
        finally:
            c.close()
            done.set()

    def close(self):
        self.sock.close()


def connect(address):
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


def read_all(sock, timeout=10):
    sock.settimeout(timeout)
    out = bytearray()
    while True:
        try:
            d = sock.recv(1 << 20)
        except ConnectionResetError:
            return bytes(out), "reset"
        if not d:
            return bytes(out), "eof"
        out += d


def read_until_quiet(sock, quiet=0.5):
    """What arrives until the peer closes or sends nothing for `quiet` s."""
    sock.settimeout(quiet)
    out = bytearray()
    try:
        while True:
            d = sock.recv(1 << 20)
            if not d:
                break
            out += d
    except socket.timeout:
        pass
    return out


class FaultProxyTest(unittest.TestCase):

    def setUp(self):
        self.rng = random.Random(1234)

    def proxy(self, server, **kw):
        p = fault_proxy.FaultProxy(server.address, seed=99, **kw).start()
        self.addCleanup(p.close)
        self.addCleanup(server.close)
        return p

    def test_passes_bytes_both_ways(self):
        payload = self.rng.randbytes(3 << 20)
        server = Server(payload)
        p = self.proxy(server)
        s = connect(p.address)
        sent = self.rng.randbytes(500000)
        s.sendall(sent)
        s.shutdown(socket.SHUT_WR)
        got, how = read_all(s)
        s.close()
        self.assertEqual(how, "eof")
        self.assertEqual(got, payload)
        conn = p.wait_connections(1, 5)[0]
        self.assertTrue(conn.closed.wait(5))
        self.assertTrue(server.done[0].wait(5))
        self.assertEqual(bytes(server.received[0]), sent)
        self.assertEqual(conn.bytes, {"c2s": len(sent), "s2c": len(payload)})
        self.assertEqual(bytes(conn.head["c2s"]), sent[:p.capture_bytes])
        self.assertEqual(p.faults, [])

    def test_corrupt_at_offset(self):
        payload = self.rng.randbytes(1 << 20)
        server = Server(payload)
        p = self.proxy(server)
        p.corrupt_at(777777)
        s = connect(p.address)
        got, _ = read_all(s)
        s.close()
        diff = [i for i in range(len(payload)) if got[i] != payload[i]]
        self.assertEqual(diff, [777777])
        rec = p.wait_fault(1)
        self.assertEqual((rec["stream_offset"], rec["original"], rec["corrupted"]),
                         (777777, payload[777777], got[777777]))
        # One-shot: the next connection passes through untouched.
        s = connect(p.address)
        self.assertEqual(read_all(s)[0], payload)
        s.close()

    def frames(self):
        """A SEGMENT and DATA frames as an agent sends them; payloads."""
        datas = [self.rng.randbytes(n) for n in (0, 5000, 70000, 3)]
        out = [wirelib.encode_frame(wirelib.SEGMENT, 7, 100, "seg-00000009")]
        off = 100
        for d in datas:
            out.append(wirelib.encode_frame(wirelib.DATA, 7, off, d))
            off += len(d)
        return b"".join(out), datas

    def test_corrupt_data_payload_and_header(self):
        stream, datas = self.frames()
        server = Server(stream)
        p = self.proxy(server, walship_frames=True)
        p.corrupt_next_data_payload()
        s = connect(p.address)
        got, _ = read_all(s)
        s.close()
        diff = [i for i in range(len(stream)) if got[i] != stream[i]]
        self.assertEqual(len(diff), 1)
        rec = p.wait_fault(1)
        # The empty DATA frame is skipped: the 5000-byte one is hit.
        self.assertEqual(rec["segment"], "seg-00000009")
        self.assertEqual(rec["frame_offset"], 100)
        self.assertEqual(rec["frame_length"], 5000)
        self.assertEqual(rec["stream_offset"], diff[0])
        self.assertEqual(rec["file_offset"], 100 + rec["payload_index"])
        self.assertEqual(datas[1][rec["payload_index"]], rec["original"])

        p.corrupt_next_data_header(16)
        s = connect(p.address)
        got, _ = read_all(s)
        s.close()
        seg_len = wirelib.HEADER_SIZE + len("seg-00000009")
        diff = [i for i in range(len(stream)) if got[i] != stream[i]]
        self.assertEqual(diff, [seg_len + 16])  # the first DATA frame's header
        with self.assertRaises(wirelib.FrameError):
            wirelib.decode_header(got[seg_len:seg_len + 40])

    def test_header_split_across_reads_is_held_back_then_corrupted(self):
        stream, _ = self.frames()
        server = Server(stream, piece=7)
        p = self.proxy(server, walship_frames=True)
        p.corrupt_next_data_header(0)
        p.corrupt_next_data_payload(index=2)
        s = connect(p.address)
        got, _ = read_all(s)
        s.close()
        self.assertEqual(len(got), len(stream))
        seg_len = wirelib.HEADER_SIZE + len("seg-00000009")
        # Header fault on the first DATA frame (empty); payload fault on the
        # next one with a payload (5000 bytes), payload byte 2.
        second = seg_len + wirelib.HEADER_SIZE + wirelib.HEADER_SIZE + 2
        diff = [i for i in range(len(stream)) if got[i] != stream[i]]
        self.assertEqual(diff, [seg_len, second])
        self.assertEqual([f["kind"] for f in p.faults], ["header", "payload"])

    def test_stall_and_release(self):
        payload = self.rng.randbytes(1 << 20)
        server = Server(payload)
        p = self.proxy(server)
        p.stall_at(500000)
        s = connect(p.address)
        buf = read_until_quiet(s)
        self.assertEqual(bytes(buf), payload[:500000], "bytes forwarded before the stall")
        self.assertEqual(p.wait_fault(1)["kind"], "stall")
        p.release()
        rest, how = read_all(s)
        s.close()
        self.assertEqual(how, "eof")
        self.assertEqual(bytes(buf) + rest, payload)

        stream, datas = self.frames()
        server = Server(stream)
        p = self.proxy(server, walship_frames=True)
        p.stall_next_data_payload()
        s = connect(p.address)
        buf = read_until_quiet(s)
        seg_len = wirelib.HEADER_SIZE + len("seg-00000009")
        mid = seg_len + wirelib.HEADER_SIZE + wirelib.HEADER_SIZE + 2500
        self.assertEqual(bytes(buf), stream[:mid])
        rec = p.wait_fault(1)
        self.assertEqual((rec["kind"], rec["file_offset"]), ("stall", 100 + 2500))
        p.clear()
        rest, _ = read_all(s)
        s.close()
        self.assertEqual(bytes(buf) + rest, stream)

    def test_cut_and_refuse(self):
        server = Server(b"x" * 1000, hold=True)
        p = self.proxy(server)
        s = connect(p.address)
        self.assertEqual(s.recv(1000, socket.MSG_WAITALL), b"x" * 1000)
        t0 = time.monotonic()
        self.assertEqual(p.cut(reset=True), 1)
        _, how = read_all(s, timeout=5)
        self.assertLess(time.monotonic() - t0, 2)
        s.close()
        accepted = server.accepted
        p.refuse_for(1.0)
        try:
            s = connect(p.address)
            got, how = read_all(s, timeout=5)
            s.close()
        except ConnectionResetError:
            got = b""  # the reset can beat connect() returning on a busy machine
        self.assertEqual(got, b"")
        self.assertEqual(p.refused, 1)
        self.assertEqual(server.accepted, accepted, "a refused connection reached the server")
        time.sleep(1.1)  # the refusal window is a duration: let it pass
        try:
            s = connect(p.address)
        except ConnectionResetError:
            self.fail("reset after the refusal window: refused=%d accepted=%d"
                      % (p.refused, server.accepted))
        self.assertEqual(s.recv(1000, socket.MSG_WAITALL), b"x" * 1000)
        s.close()

    def test_delay_is_latency_not_bandwidth(self):
        server = Server(b"")
        p = self.proxy(server)
        p.set_delay(0.5, fault_proxy.C2S)
        s = connect(p.address)
        data = self.rng.randbytes(4 << 20)
        t0 = time.monotonic()
        s.sendall(data[:10])
        t_first = time.monotonic()
        s.sendall(data[10:])
        s.shutdown(socket.SHUT_WR)
        read_all(s)
        s.close()
        conn = p.wait_connections(1, 5)[0]
        self.assertTrue(conn.closed.wait(10))
        self.assertTrue(server.done[0].wait(5))
        self.assertEqual(bytes(server.received[0]), data)
        first_arrival = server.arrivals[0][0]
        self.assertGreaterEqual(first_arrival - t_first, 0.45)
        self.assertLess(server.arrivals[-1][0] - t0, 3.0, "delay throttled bandwidth")

    def test_rate_limits_bandwidth_and_keeps_bytes(self):
        payload = self.rng.randbytes(2 << 20)
        server = Server(payload)
        p = self.proxy(server)
        p.set_rate(4e6, fault_proxy.S2C)
        s = connect(p.address)
        t0 = time.monotonic()
        s.shutdown(socket.SHUT_WR)
        got, how = read_all(s)
        elapsed = time.monotonic() - t0
        s.close()
        self.assertEqual(how, "eof")
        self.assertEqual(got, payload)
        # A limit, so a lower bound: 2 MiB at 4 MB/s cannot arrive in less
        # than ~0.52 s (the first 64 KiB piece goes at once).
        self.assertGreaterEqual(elapsed, 0.45)

    def test_command_line(self):
        stream, _ = self.frames()
        server = Server(stream)
        self.addCleanup(server.close)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_proxy.py")
        proc = subprocess.Popen([sys.executable, script, "--listen", "127.0.0.1:0",
                                 "--target", server.address, "--frames", "--seed", "5"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                universal_newlines=True, bufsize=1)
        self.addCleanup(proc.kill)

        def answer(cmd):
            proc.stdin.write(cmd + "\n")
            proc.stdin.flush()
            while True:
                line = proc.stdout.readline()
                self.assertTrue(line, "fault_proxy exited")
                if line.startswith(("ok", "error")):
                    return line.strip()

        while True:
            line = proc.stdout.readline()
            self.assertTrue(line, "fault_proxy exited before listening")
            if line.startswith("listening "):
                address = line.split()[1]
                break
        self.assertEqual(answer("corrupt-data"), "ok")
        s = connect(address)
        got, _ = read_all(s)
        s.close()
        self.assertEqual(sum(a != b for a, b in zip(got, stream)), 1)
        self.assertIn('"kind": "payload"', answer("faults"))
        self.assertEqual(answer("pass"), "ok")
        self.assertTrue(answer("bogus").startswith("error"))
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        self.assertEqual(proc.wait(10), 0)


if __name__ == "__main__":
    unittest.main()
