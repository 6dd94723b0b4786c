"""End to end: a replica follows a growing WAL and ends byte-identical.

For each transport (zerocopy, copy, set on both daemons) a generator appends
random records at 5 MB/s for 6 s in 4 MiB segments while one replica
follows. The replica must be seen following live (its acknowledged flushed
position passes through several segments while the generator runs), then
acknowledge the source end, hold every segment byte for byte (walship.state
itself catching up with that end once the stream is idle), and the status
counters must show every byte moved by the chosen path and none by the other.
"""

import os
import time
import unittest

from integration import harness as h

RATE = 5e6
SECONDS = 6.0
SEGMENT = 4 << 20


class EndToEndTest(h.ClusterTestCase):

    def follow(self, transport):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, rate=RATE, segment_size=SEGMENT)
        agent = c.agent(wal, transport=transport).start()
        replica = c.replica(agent, "e2e", transport=transport).start()
        gen.start()

        # While the generator runs, the replica must follow live.
        seen = set()
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            f = h.flushed(h.try_status(agent), "e2e")
            if f and f.segment:
                seen.add(f.segment)
            time.sleep(0.25)
        gen.stop()
        self.assertGreaterEqual(gen.segments, 5, "the generator wrote too few segments")
        self.assertGreaterEqual(
            len(seen), 3, "the replica's flushed position was seen in only %s while "
            "%d segments were written: it does not follow live" % (sorted(seen), gen.segments))

        end = self.wait_caught_up(agent, wal, ["e2e"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        state = h.read_state(replica.dest)
        self.assertEqual(state["pos"], end, "the durable position is not at the source end")

        # Inside a segment the record itself is saved lazily, off the
        # acknowledgement path: once the stream is idle it catches up with
        # the last acknowledgement within --record-interval-ms (100).
        def recorded():
            st = h.statefile.parse(h.read_bytes(os.path.join(replica.dest, h.STATE_FILE)))
            return h.Pos(st["segment"], st["offset"])
        h.wait_until(lambda: recorded() == end, 5,
                     lambda: "walship.state to catch up with %s (at %s)" % (end, recorded()))

        st = h.status(agent)
        entry = h.replica_entry(st, "e2e")
        self.assertEqual(entry["transport"], transport)
        self.assertTrue(entry["connected"], entry)
        self.assertEqual(entry["last_error"], "")
        total = h.total_size(wal)
        self.assertEqual(total, gen.total_bytes)
        want = (total, 0) if transport == "zerocopy" else (0, total)
        self.assertEqual(h.counters(entry, "agent_counters"), want,
                         "agent counters (bytes_zerocopy, bytes_copy) for one session "
                         "that shipped %d bytes with --transport=%s" % (total, transport))
        self.assertEqual(h.counters(entry, "replica_counters"), want,
                         "replica counters (bytes_zerocopy, bytes_copy) for one session "
                         "that received %d bytes with --transport=%s" % (total, transport))
        self.assertEqual(h.counters(st, "agent_counters"), want, "agent-wide counters")
        self.assertEqual(replica.error_lines(), [], "the replica logged errors")
        self.assertEqual(agent.grep(r" (error|critical) "), [], "the agent logged errors")
        self.stop_all()

    def test_zerocopy(self):
        self.follow("zerocopy")

    def test_copy(self):
        self.follow("copy")


if __name__ == "__main__":
    unittest.main()
