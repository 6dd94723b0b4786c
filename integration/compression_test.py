"""Compression on the data socket (wire_format.md section 9), end to end.

A replica started with --compress=zstd or lz4 follows a growing WAL whose
records are mostly compressible (row-like text with zero padding) and partly
random (which does not compress, so the same session carries ZDATA and plain
DATA frames). It must end byte-identical, with plain segments on disk, the
codec shown in walship-status, and the compressed bytes counted on both
sides (fewer on the wire than written). Also:

  * an agent run with --allow-compression=false declines: the replica warns,
    keeps shipping (plain frames, zero copy), and ends byte-identical;
  * a byte flipped in a ZDATA frame's compressed payload (by the fault
    proxy) is a checksum error: logged, nothing of it on disk, the replica
    reconnects and ends byte-identical;
  * kill -9 of the replica in the middle of a segment received compressed:
    nothing acknowledged is lost, and after a restart it ends byte-identical.
"""

import os
import random
import time
import unittest

from integration import fault_proxy
from integration import harness as h
from integration.walshiptest import procs

RATE = 4e6
SEGMENT = 4 << 20


class CompressionTest(h.ClusterTestCase):

    def start(self, codec, compressible=0.8, agent_args=(), data_address=None, rate=RATE):
        c = self.cluster
        self.wal = c.dir("wal")
        self.gen = c.generator(self.wal, rate=rate, segment_size=SEGMENT,
                               compressible=compressible)
        self.agent = c.agent(self.wal, extra_args=list(agent_args)).start()
        return self.gen

    def replica(self, codec, name="z", data_address=None):
        return self.cluster.replica(self.agent, name, data_address=data_address,
                                    extra_args=["--compress=%s" % codec,
                                                "--metrics-listen=127.0.0.1:0"]).start()

    def follow_and_check(self, codec):
        gen = self.start(codec)
        replica = self.replica(codec)
        gen.start()
        h.wait_until(lambda: gen.segments >= 4, 30, "the generator to write 4 segments")
        gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["z"], timeout=60)
        h.compare_dirs(self.wal, replica.dest)

        st = h.status(self.agent)
        entry = h.replica_entry(st, "z")
        self.assertEqual(entry["compression"], "%s:1" % codec)
        total = h.total_size(self.wal)
        for side in ("agent_counters", "replica_counters"):
            counters = entry[side]
            raw = int(counters.get("bytes_compressed_raw", 0))
            wire = int(counters.get("bytes_compressed_wire", 0))
            # The agent sends every frame of a compressing session on the
            # copy path; the replica writes ZDATA frames by copy and still
            # splices the plain DATA frames (bytes that did not shrink).
            want = (0, total) if side == "agent_counters" else (total - raw, raw)
            self.assertEqual(h.counters(entry, side), want,
                             "%s (bytes_zerocopy, bytes_copy) with %d of %d bytes compressed"
                             % (side, raw, total))
            procs.log("%s %s: %d of %d bytes compressed to %d (ratio %.2f)", codec, side, raw,
                      total, wire, raw / max(wire, 1))
            self.assertGreater(raw, total // 2, "%s: most bytes travel compressed" % side)
            self.assertLess(raw, total, "%s: the random records travel as plain DATA" % side)
            self.assertLess(wire * 2, raw, "%s: compressed bytes on the wire" % side)
        samples = h.scrape(replica.metrics_address())
        self.assertEqual(h.metric_total(samples, "walship_replica_compression_bytes_total",
                                        bytes="uncompressed"),
                         int(entry["replica_counters"]["bytes_compressed_raw"]))
        self.assertEqual(h.metric_total(samples, "walship_replica_compression",
                                        asked=codec, agreed=codec), 1)
        self.assertEqual(replica.error_lines(), [], "the replica logged errors")
        self.assertEqual(self.agent.grep(r" (error|critical) "), [], "the agent logged errors")
        self.assertEqual(replica.grep(r"declined"), [])
        self.stop_all()

    def test_zstd(self):
        self.follow_and_check("zstd")

    def test_lz4(self):
        self.follow_and_check("lz4")

    def test_agent_that_declines_keeps_shipping(self):
        gen = self.start("zstd", agent_args=["--allow-compression=false"])
        replica = self.replica("zstd")
        gen.start()
        h.wait_until(lambda: gen.segments >= 2, 30, "the generator to write 2 segments")
        gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["z"], timeout=60)
        h.compare_dirs(self.wal, replica.dest)
        line = replica.wait_log(r"warn.*--compress=zstd: the agent declined \(this agent runs "
                                r"with --allow-compression=false", 5)
        procs.log("replica: %s", line)
        self.agent.wait_log(r"warn.*replica z: compression declined, shipping uncompressed", 5)
        entry = h.replica_entry(h.status(self.agent), "z")
        self.assertEqual(entry["compression"], "none")
        total = h.total_size(self.wal)
        self.assertEqual(h.counters(entry, "agent_counters"), (total, 0))
        self.assertEqual(h.counters(entry, "replica_counters"), (total, 0))
        self.assertEqual(replica.error_lines(), [], "the replica logged errors")
        self.stop_all()

    def test_corrupt_compressed_frame_is_a_checksum_error(self):
        rng = random.Random(h.seed_from_env("WALSHIP_COMPRESSION_SEED", "corruption"))
        gen = self.start("zstd", compressible=1.0, rate=2e6)
        proxy = fault_proxy.FaultProxy(self.agent.data, walship_frames=True,
                                       seed=rng.randrange(1 << 32))
        self.cluster.on_close(proxy.close)
        proxy.start()
        replica = self.replica("zstd", data_address=proxy.address)
        gen.start()
        first = h.wait_until(lambda: self.entry_following(), 15, "the replica to follow")

        since = replica.log_size()
        proxy.corrupt_next_data_payload()
        rec = proxy.wait_fault(10, 1)
        self.assertEqual(rec["type"], "ZDATA", rec)
        line = replica.wait_log(r"error .*DATA_LOSS: corrupt ZDATA frame", 10, since)
        procs.log("payload fault %s -> %s", rec, line)
        # Right when the error is logged: nothing of the frame is on disk.
        found = h.dest_file(replica.dest, rec["segment"])
        if found is not None:
            self.assertLessEqual(os.path.getsize(found[0]), rec["frame_offset"],
                                 "bytes of the corrupt frame reached %s" % found[0])
        self.assertEqual(h.dest_consistency(self.wal, replica.dest), [])
        h.wait_until(lambda: self.entry_following(first["session_id"]), 20,
                     "the replica to reconnect after the corrupt frame")
        gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["z"], timeout=60)
        h.compare_dirs(self.wal, replica.dest)
        self.stop_all()

    def entry_following(self, not_session=None):
        e = h.replica_entry(h.try_status(self.agent), "z")
        if not e or not e["connected"] or not h.pos_of(e["flushed"]).segment:
            return None
        return e if e["session_id"] != not_session else None

    def test_kill9_mid_compressed_segment_then_resume(self):
        gen = self.start("lz4", compressible=0.9)
        replica = self.replica("lz4")
        gen.start()
        # Kill when the acknowledged position is well inside a segment.
        def mid_segment():
            f = h.flushed(h.try_status(self.agent), "z")
            return f if f and f.segment and SEGMENT // 4 < f.offset < SEGMENT * 3 // 4 else None
        acked = h.wait_until(mid_segment, 30, "the replica to acknowledge inside a segment",
                             interval=0.05)
        self.assertEqual(replica.kill(), -9)
        procs.log("kill -9 of the replica at acknowledged %s", acked)
        self.assertEqual(h.acked_bytes_problems(self.wal, replica.dest, acked), [])
        time.sleep(0.5)  # the generator writes on while the replica is down
        replica.start()
        h.wait_until(lambda: gen.segments >= 4, 30, "the generator to write 4 segments")
        gen.stop()
        self.wait_caught_up(self.agent, self.wal, ["z"], timeout=60)
        h.compare_dirs(self.wal, replica.dest)
        self.assertEqual(h.dest_consistency(self.wal, replica.dest), [])
        self.assertEqual(h.replica_entry(h.status(self.agent), "z")["compression"], "lz4:1")
        self.stop_all()


if __name__ == "__main__":
    unittest.main()
