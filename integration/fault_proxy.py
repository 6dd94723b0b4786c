#!/usr/bin/env python3
"""A TCP proxy that injects faults between a client and a server.

Standard library only; threads. Each accepted connection is paired with a
new connection to the target; bytes are passed through in both directions
until a fault is injected:

    proxy = FaultProxy(("127.0.0.1", 5432), walship_frames=True).start()
    proxy.address                      # "127.0.0.1:PORT": connect here
    proxy.corrupt_at(1000)             # flip byte 1000 of the next
                                       # server->client stream to reach it
    proxy.corrupt_next_data_payload()  # flip one payload byte of the next
                                       # walship DATA or ZDATA frame (needs
                                       # walship_frames=True)
    proxy.corrupt_next_data_header(0)  # flip header byte 0 (magic)
    proxy.cut()                        # close every open connection
    proxy.refuse_for(2.0)              # close new connections at once, 2 s
    proxy.set_delay(0.3, "c2s")        # hold bytes 0.3 s in one direction
    proxy.set_rate(20e6, "s2c")        # a link of 20 MB/s, per connection
    proxy.stall_next_data_payload()    # stop forwarding s2c mid-frame ...
    proxy.release()                    # ... until released
    proxy.clear()                      # pass everything through again
    proxy.wait_fault(10)               # the record of an applied fault
    proxy.close()

A flipped byte is XORed with a non-zero mask, so it always differs.
Byte positions count from the start of each connection's stream, per
direction. With walship_frames=True the server->client stream is parsed as
walship data-socket frames (common/wire/wire_format.md); a frame header is
held back until all 40 bytes arrived so a header fault can be applied to it,
and the segment name of each DATA frame is known for the fault record.
Bytes are never dropped, added or reordered except by the faults above.

As a program, for drills that drive it from a shell:

    python3 fault_proxy.py --listen 127.0.0.1:0 --target HOST:PORT [--frames]

prints "listening HOST:PORT", then reads commands on stdin, one per line,
and answers each with one line starting "ok" or "error":

    pass | cut [reset] | refuse SECONDS | delay SECONDS [c2s|s2c|both]
    rate BYTES_PER_SEC [c2s|s2c|both]
    corrupt-offset N [s2c|c2s] | corrupt-data | corrupt-header BYTE
    stall-offset N [s2c|c2s] | stall-data | release
    faults | connections | quit
"""

import argparse
import json
import os
import queue
import random
import socket
import struct
import sys
import threading
import time

from integration import wirelib

C2S = "c2s"  # client -> server
S2C = "s2c"  # server -> client
_CHUNK = 256 * 1024
_QUEUE_CHUNKS = 16  # per direction: keeps back-pressure end to end


def _parse_hostport(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _set_rst(sock):
    """Makes close() send a RST instead of a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


class _FrameParser(object):
    """Follows walship frames in one direction and applies frame faults.

    feed(data) returns the bytes to forward: the same bytes, possibly with
    a fault applied, except that an incomplete header is held until its
    40th byte arrives (flush() releases it at end of stream).
    """

    def __init__(self, proxy, conn):
        self.proxy = proxy
        self.conn = conn
        self.pos = 0  # stream offset of the next input byte
        self.hdr = bytearray()
        self.hdr_pos = 0
        self.frame = None  # decoded header of the frame whose payload flows
        self.left = 0
        self.payload_done = 0
        self.name_buf = bytearray()
        self.names = {}  # segment handle -> name
        self.fault = None  # (payload index, xor, record) for this frame
        self.broken = None  # why parsing stopped; bytes then pass through

    def feed(self, data):
        out = bytearray()
        i, n = 0, len(data)
        while i < n:
            if self.broken:
                out += data[i:]
                self.pos += n - i
                break
            if self.frame is None:
                if not self.hdr:
                    self.hdr_pos = self.pos
                take = min(wirelib.HEADER_SIZE - len(self.hdr), n - i)
                self.hdr += data[i:i + take]
                i += take
                self.pos += take
                if len(self.hdr) == wirelib.HEADER_SIZE:
                    out += self._header()
                continue
            take = min(self.left, n - i)
            chunk = bytearray(data[i:i + take])
            if self.frame["type"] == wirelib.SEGMENT:
                self.name_buf += chunk
            if self.fault is not None:
                idx, xor, record = self.fault
                if self.payload_done <= idx < self.payload_done + take:
                    k = idx - self.payload_done
                    record["original"] = chunk[k]
                    chunk[k] ^= xor
                    record["corrupted"] = chunk[k]
                    record["stream_offset"] = self.pos + k
                    self.fault = None
                    self.proxy._applied(record)
            out += chunk
            i += take
            self.pos += take
            self.payload_done += take
            self.left -= take
            if self.left == 0:
                self._end_frame()
        return bytes(out)

    def _header(self):
        raw = bytes(self.hdr)
        self.hdr = bytearray()
        try:
            h = wirelib.decode_header(raw)
        except wirelib.FrameError as e:
            self.broken = "frame at stream offset %d: %s" % (self.hdr_pos, e)
            return raw
        out = bytearray(raw)
        if h["type"] in (wirelib.DATA, wirelib.ZDATA):
            segment = self.names.get(h["segment_id"])
            spec = self.proxy._take_frame_fault(h)
            if spec is not None:
                kind, index, xor = spec
                record = {"kind": kind, "conn": self.conn.id, "segment": segment,
                          "type": wirelib.TYPE_NAMES[h["type"]],
                          "frame_offset": h["offset"], "frame_length": h["payload_length"],
                          "time": time.time()}
                if kind == "stall":
                    record.update(payload_index=index, file_offset=h["offset"] + index)
                    self.proxy._add_stall(self.conn, S2C,
                                          self.hdr_pos + wirelib.HEADER_SIZE + index, record)
                elif kind == "header":
                    record.update(byte_index=index, original=out[index],
                                  stream_offset=self.hdr_pos + index)
                    out[index] ^= xor
                    record["corrupted"] = out[index]
                    self.proxy._applied(record)
                else:
                    record.update(payload_index=index, file_offset=h["offset"] + index)
                    self.fault = (index, xor, record)
        self.frame = h
        self.left = h["payload_length"]
        self.payload_done = 0
        self.name_buf = bytearray()
        if self.left == 0:
            self._end_frame()
        return bytes(out)

    def _end_frame(self):
        if self.frame["type"] == wirelib.SEGMENT:
            self.names[self.frame["segment_id"]] = self.name_buf.decode("ascii", "replace")
        self.frame = None

    def flush(self):
        raw, self.hdr = bytes(self.hdr), bytearray()
        return raw


class Connection(object):
    """One proxied connection. bytes[C2S], bytes[S2C] count what was read;
    head[C2S] holds the first bytes the client sent (up to capture_bytes)."""

    def __init__(self, proxy, cid, client, client_addr, server):
        self.proxy = proxy
        self.id = cid
        self.client = client
        self.client_addr = client_addr
        self.server = server
        # The proxy's own end of the server connection, as the server sees
        # it (e.g. in an agent's "rejected connection from ..." log line).
        self.server_local = "%s:%d" % server.getsockname()[:2]
        self.opened = time.time()
        self.bytes = {C2S: 0, S2C: 0}
        self.head = {C2S: bytearray(), S2C: bytearray()}
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._threads_left = 4
        self._aborted = False
        self._release_seen = 0
        self.parser = _FrameParser(proxy, self) if proxy.walship_frames else None

    def start(self):
        for direction, src, dst in ((C2S, self.client, self.server),
                                    (S2C, self.server, self.client)):
            q = queue.Queue(_QUEUE_CHUNKS)
            for target, args in ((self._reader, (direction, src, q)),
                                 (self._writer, (direction, dst, q))):
                t = threading.Thread(target=target, args=args, daemon=True,
                                     name="proxy-%d-%s" % (self.id, direction))
                t.start()

    def _reader(self, direction, src, q):
        try:
            while True:
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = None
                if not data:
                    if direction == S2C and self.parser is not None:
                        rest = self.parser.flush()
                        if rest:
                            self._put(q, (time.monotonic(), rest))
                    self._put(q, None if data is not None else "abort")
                    return
                due = time.monotonic() + self.proxy._delay(direction)
                cap = self.proxy.capture_bytes - len(self.head[direction])
                if cap > 0:
                    self.head[direction] += data[:cap]
                start = self.bytes[direction]
                self.bytes[direction] += len(data)
                if direction == S2C and self.parser is not None:
                    data = self.parser.feed(data)
                    start = self.parser.pos - len(data) - len(self.parser.hdr)
                data = self.proxy._apply_offset_faults(self, direction, start, data)
                stall = self.proxy._take_stall(self, direction, start, len(data))
                if stall is not None:
                    k = stall - start
                    if k and not self._put(q, (due, data[:k])):
                        return
                    if not self.proxy._wait_release(self):
                        return
                    data, due = data[k:], time.monotonic()
                if data and not self._put(q, (due, data)):
                    return
        finally:
            self._thread_done()

    def _put(self, q, item):
        """Queues `item` for the writer; False if the connection was aborted."""
        while True:
            try:
                q.put(item, timeout=0.5)
                return True
            except queue.Full:
                if self._aborted:
                    return False

    def _writer(self, direction, dst, q):
        try:
            while True:
                try:
                    item = q.get(timeout=0.5)
                except queue.Empty:
                    if self._aborted:
                        return
                    continue
                if item is None:  # orderly end of stream: pass it on
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                if item == "abort":
                    self.abort(reset=True)
                    return
                due, data = item
                while not self._aborted:
                    wait = due - time.monotonic()
                    if wait <= 0:
                        break
                    time.sleep(min(wait, 0.1))
                if self._aborted:
                    return
                if not self._send_paced(direction, dst, data):
                    self.abort(reset=True)
                    return
        finally:
            self._thread_done()

    def _send_paced(self, direction, dst, data):
        """sendall, at most at the proxy's rate for `direction`: each piece
        occupies the link for len/rate seconds. False on a socket error."""
        try:
            rate = self.proxy._rate(direction)
            if not rate:
                dst.sendall(data)
                return True
            view = memoryview(data)
            for i in range(0, len(view), 64 << 10):
                piece = view[i:i + (64 << 10)]
                dst.sendall(piece)
                now = time.monotonic()
                free = self.__dict__.setdefault("_link_free", {})  # per direction
                free[direction] = max(free.get(direction, now), now) + len(piece) / rate
                if free[direction] > now:
                    time.sleep(free[direction] - now)
            return True
        except OSError:
            return False

    def _thread_done(self):
        with self._lock:
            self._threads_left -= 1
            last = self._threads_left == 0
        if last:
            for s in (self.client, self.server):
                try:
                    s.close()
                except OSError:
                    pass
            self.closed.set()

    def abort(self, reset=False):
        """Closes both sides now (RST if `reset`)."""
        with self._lock:
            if self._aborted:
                return
            self._aborted = True
        for s in (self.client, self.server):
            if reset:
                _set_rst(s)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def info(self):
        return {"id": self.id, "client": "%s:%d" % self.client_addr[:2],
                "server_local": self.server_local,
                "c2s": self.bytes[C2S], "s2c": self.bytes[S2C],
                "closed": self.closed.is_set()}


class FaultProxy(object):
    """Listens on `listen`, forwards to `target` ((host, port) or "HOST:PORT")."""

    def __init__(self, target, listen=("127.0.0.1", 0), walship_frames=False,
                 seed=None, capture_bytes=4096, connect_timeout=5.0):
        if isinstance(target, str):
            target = _parse_hostport(target)
        if isinstance(listen, str):
            listen = _parse_hostport(listen)
        self.target = target
        self.walship_frames = walship_frames
        self.capture_bytes = capture_bytes
        self.connect_timeout = connect_timeout
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 32)
        self.seed = seed
        self._rng = random.Random(seed)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(listen)
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.address = "%s:%d" % (listen[0], self.port)
        self._lock = threading.Condition()
        self._stopping = False
        self._thread = None
        self.connections = []
        self.refused = 0
        self._refuse_until = 0.0
        self._delays = {C2S: 0.0, S2C: 0.0}
        self._rates = {C2S: 0.0, S2C: 0.0}  # bytes/s per connection; 0: unlimited
        self._offset_faults = []  # [direction, offset, xor]
        self._frame_faults = []   # (kind, index or None, xor)
        self._stalls = []         # [conn or None, direction, offset, record]
        self._released = 0        # bumped by release()
        self.faults = []          # records of applied faults
        sys.stdout.write("fault_proxy %s -> %s:%d seed=%d\n" % (
            self.address, target[0], target[1], seed))
        sys.stdout.flush()

    # -- lifecycle

    def start(self):
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name="proxy-accept")
        self._thread.start()
        return self

    def close(self):
        with self._lock:
            self._stopping = True
        if self._thread:
            self._thread.join(5)
        self._sock.close()
        self.cut()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept_loop(self):
        while True:
            with self._lock:
                if self._stopping:
                    return
            try:
                client, addr = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            if time.monotonic() < self._refuse_until:
                with self._lock:
                    self.refused += 1
                _set_rst(client)
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, self.connect_timeout)
                server.settimeout(None)
            except OSError:
                _set_rst(client)
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                conn = Connection(self, len(self.connections) + 1, client, addr, server)
                self.connections.append(conn)
                self._lock.notify_all()
            conn.start()

    # -- controls

    def clear(self):
        """Pass everything through: drops armed faults, delays and refusal."""
        with self._lock:
            self._offset_faults = []
            self._frame_faults = []
            self._stalls = []
            self._delays = {C2S: 0.0, S2C: 0.0}
            self._refuse_until = 0.0
        self.release()

    def cut(self, reset=False):
        """Closes every open connection (both sides; RST if `reset`); returns
        how many were open."""
        with self._lock:
            conns = [c for c in self.connections if not c.closed.is_set()]
        for c in conns:
            c.abort(reset)
        return len(conns)

    def refuse_for(self, seconds):
        """New connections are accepted and reset at once for `seconds`."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds

    def set_delay(self, seconds, direction="both"):
        """Holds each byte `seconds` before forwarding it (latency, not a
        throughput limit). Applies to bytes read from now on."""
        with self._lock:
            for d in ((C2S, S2C) if direction == "both" else (direction,)):
                self._delays[d] = float(seconds)

    def set_rate(self, bytes_per_sec, direction="both"):
        """Forwards at most `bytes_per_sec` per connection in `direction`
        (a thin link; 0: unlimited), in pieces of 64 KiB."""
        with self._lock:
            for d in ((C2S, S2C) if direction == "both" else (direction,)):
                self._rates[d] = float(bytes_per_sec)

    def corrupt_at(self, offset, direction=S2C, xor=None):
        """Flips the byte at stream `offset` (counted from the start of a
        connection's stream in `direction`) of the first connection whose
        stream reaches it after this call; one-shot."""
        with self._lock:
            self._offset_faults.append([direction, offset, xor or self._xor()])

    def corrupt_next_data_payload(self, index=None, xor=None):
        """Flips one payload byte (random index unless given) of the next
        DATA frame with a payload; needs walship_frames."""
        self._need_frames()
        with self._lock:
            self._frame_faults.append(("payload", index, xor or self._xor()))

    def corrupt_next_data_header(self, byte_index, xor=None):
        """Flips header byte `byte_index` (0..39) of the next DATA frame."""
        self._need_frames()
        if not 0 <= byte_index < wirelib.HEADER_SIZE:
            raise ValueError("header byte index %d outside [0, 40)" % byte_index)
        with self._lock:
            self._frame_faults.append(("header", byte_index, xor or self._xor()))

    def stall_at(self, offset, direction=S2C):
        """Stops forwarding `direction` of the first connection whose stream
        reaches `offset`, just before that byte, until release(); the proxy
        then reads nothing more from that side (back-pressure). One-shot."""
        with self._lock:
            self._stalls.append([None, direction, offset,
                                 {"kind": "stall", "direction": direction,
                                  "stream_offset": offset}])

    def stall_next_data_payload(self):
        """Like stall_at, in the middle of the next DATA payload (of at
        least 2 bytes): the client is left waiting inside a frame."""
        self._need_frames()
        with self._lock:
            self._frame_faults.append(("stall", None, 0))

    def release(self):
        """Resumes every stalled connection."""
        with self._lock:
            self._released += 1
            self._lock.notify_all()

    def wait_fault(self, timeout, count=1):
        """Waits until `count` faults were applied; returns the last record."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.faults) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no fault applied within %.1fs (%d of %d)"
                                         % (timeout, len(self.faults), count))
                self._lock.wait(left)
            return self.faults[count - 1]

    def wait_connections(self, count, timeout):
        """Waits until `count` connections were accepted; returns the list."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.connections) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("only %d of %d connections within %.1fs"
                                         % (len(self.connections), count, timeout))
                self._lock.wait(left)
            return list(self.connections)

    def open_connections(self):
        with self._lock:
            return [c for c in self.connections if not c.closed.is_set()]

    # -- internals, called by connections

    def _need_frames(self):
        if not self.walship_frames:
            raise ValueError("frame faults need FaultProxy(..., walship_frames=True)")

    def _xor(self):
        return self._rng.randrange(1, 256)

    def _delay(self, direction):
        with self._lock:
            return self._delays[direction]

    def _rate(self, direction):
        with self._lock:
            return self._rates[direction]

    def _take_frame_fault(self, header):
        with self._lock:
            for i, (kind, index, xor) in enumerate(self._frame_faults):
                if kind == "payload":
                    if header["payload_length"] == 0:
                        continue
                    if index is None:
                        index = self._rng.randrange(header["payload_length"])
                    elif index >= header["payload_length"]:
                        continue
                elif kind == "stall":
                    if header["payload_length"] < 2:
                        continue
                    index = header["payload_length"] // 2
                del self._frame_faults[i]
                return kind, index, xor
        return None

    def _add_stall(self, conn, direction, offset, record):
        with self._lock:
            self._stalls.append([conn, direction, offset, record])

    def _take_stall(self, conn, direction, start, length):
        """The stream offset of a stall within [start, start + length]."""
        with self._lock:
            for st in self._stalls:
                c, d, offset, record = st
                if (c is None or c is conn) and d == direction and \
                        start <= offset <= start + length:
                    self._stalls.remove(st)
                    break
            else:
                return None
            conn._release_seen = self._released
        record = dict(record, conn=conn.id, time=time.time())
        self._applied(record)
        return offset

    def _wait_release(self, conn):
        """Blocks a stalled reader until release(); False if aborted."""
        with self._lock:
            while self._released == conn._release_seen:
                if conn._aborted or self._stopping:
                    return False
                self._lock.wait(0.2)
        return not conn._aborted

    def _apply_offset_faults(self, conn, direction, start, data):
        with self._lock:
            hits = [f for f in self._offset_faults
                    if f[0] == direction and start <= f[1] < start + len(data)]
            for f in hits:
                self._offset_faults.remove(f)
        if not hits:
            return data
        out = bytearray(data)
        for _, offset, xor in hits:
            k = offset - start
            record = {"kind": "offset", "conn": conn.id, "direction": direction,
                      "stream_offset": offset, "original": out[k],
                      "corrupted": out[k] ^ xor, "time": time.time()}
            out[k] ^= xor
            self._applied(record)
        return bytes(out)

    def _applied(self, record):
        with self._lock:
            self.faults.append(record)
            self._lock.notify_all()
        sys.stdout.write("fault_proxy %s: applied %s\n" % (self.address, json.dumps(record)))
        sys.stdout.flush()


def _command(proxy, line):
    words = line.split()
    if not words:
        return "error empty command"
    cmd, args = words[0], words[1:]
    if cmd == "pass":
        proxy.clear()
    elif cmd == "cut":
        return "ok %d" % proxy.cut(reset=args[:1] == ["reset"])
    elif cmd == "refuse":
        proxy.refuse_for(float(args[0]))
    elif cmd == "delay":
        proxy.set_delay(float(args[0]), args[1] if len(args) > 1 else "both")
    elif cmd == "rate":
        proxy.set_rate(float(args[0]), args[1] if len(args) > 1 else "both")
    elif cmd == "corrupt-offset":
        proxy.corrupt_at(int(args[0]), args[1] if len(args) > 1 else S2C)
    elif cmd == "corrupt-data":
        proxy.corrupt_next_data_payload()
    elif cmd == "corrupt-header":
        proxy.corrupt_next_data_header(int(args[0]))
    elif cmd == "stall-offset":
        proxy.stall_at(int(args[0]), args[1] if len(args) > 1 else S2C)
    elif cmd == "stall-data":
        proxy.stall_next_data_payload()
    elif cmd == "release":
        proxy.release()
    elif cmd == "faults":
        return "ok " + json.dumps(proxy.faults)
    elif cmd == "connections":
        return "ok " + json.dumps([c.info() for c in proxy.connections])
    elif cmd == "quit":
        return None
    else:
        return "error unknown command %r" % cmd
    return "ok"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on")
    p.add_argument("--target", required=True, help="HOST:PORT to forward to")
    p.add_argument("--frames", action="store_true",
                   help="parse walship data-socket frames server->client")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--port-file", help="write the listening HOST:PORT here")
    a = p.parse_args(argv)
    proxy = FaultProxy(a.target, a.listen, walship_frames=a.frames, seed=a.seed).start()
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(proxy.address + "\n")
        os.rename(tmp, a.port_file)
    print("listening %s" % proxy.address, flush=True)
    try:
        for line in sys.stdin:
            try:
                answer = _command(proxy, line)
            except (ValueError, IndexError) as e:
                answer = "error %s" % e
            if answer is None:
                break
            print(answer, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
