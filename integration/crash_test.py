"""kill -9 drill: nothing the replica acknowledged as flushed is ever lost.

While a generator appends (1 MB/s, 256 KiB segments, so kills land on
segment boundaries too), the replica, the agent or both are killed with
SIGKILL at random moments, 20 times (26 kills), and restarted after a short
random pause; the agent comes back on the same control port. Before each
kill the test records the replica's acknowledged flushed position from
walship-status (the running maximum over every answer: an acknowledgement
never expires). Right after each kill -9 of the replica, before it
restarts, its directory must hold every acknowledged byte, equal to the
source, with the durable position at or after that position (walship.state,
or walship.progress past it: the state is saved lazily inside a segment),
and no byte that
differs from the source. At the end the replica equals the source.

The schedule and the pauses come from one seed, printed at the start;
replay a run with WALSHIP_CRASH_SEED=<seed>.
"""

import os
import random
import time
import unittest

from integration import harness as h
from integration.walshiptest import procs

RATE = 1e6
SEGMENT = 256 << 10
SCHEDULE = ["replica"] * 8 + ["agent"] * 6 + ["both"] * 6
NAME = "crash"


class CrashTest(h.ClusterTestCase):

    def test_kill9_replica_and_agent(self):
        seed = h.seed_from_env("WALSHIP_CRASH_SEED", "crash test")
        rng = random.Random(seed)
        schedule = list(SCHEDULE)
        rng.shuffle(schedule)
        procs.log("kill schedule: %s", " ".join(schedule))

        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, seed=rng.randrange(1 << 32), rate=RATE, segment_size=SEGMENT)
        agent = c.agent(wal).start()
        replica = c.replica(agent, NAME).start()
        gen.start()
        stream_id = h.status(agent)["stream_id"]

        acked = h.Pos("", 0)  # the furthest position ever acknowledged
        kills = {"replica": 0, "agent": 0}
        checked = 0
        t0 = time.monotonic()
        for step, victim in enumerate(schedule, 1):
            # Replication must be live again: a new acknowledgement past
            # everything acknowledged before.
            floor = acked

            def progressed():
                st = h.try_status(agent)
                f = h.flushed(st, NAME)
                # A new session starts at the replica's durable position,
                # which is at or after everything it ever acknowledged.
                self.assertFalse(f is not None and f < floor,
                                 "step %d: the replica reports flushed %s, before the "
                                 "acknowledged %s (seed %d)" % (step, f, floor, seed))
                return (st, f) if f is not None and f > floor else None

            st, f = h.wait_until(
                progressed, 30, lambda: "%s to acknowledge past %s (step %d)"
                % (NAME, floor, step), interval=0.1)
            self.assertEqual(st["stream_id"], stream_id, "the agent's stream id changed")
            acked = max(acked, f)

            time.sleep(rng.uniform(0.05, 1.0))  # a random moment
            f = h.flushed(h.try_status(agent), NAME)
            if f is not None:
                acked = max(acked, f)

            for d in (replica, agent):
                self.assertTrue(d.running(), "%s died on its own before step %d: exit %s"
                                % (d.label, step, d.returncode()))
            procs.log("step %d/%d: kill -9 %s; acknowledged %s", step, len(schedule), victim, acked)
            if victim in ("replica", "both"):
                self.assertEqual(replica.kill(), -9)
                kills["replica"] += 1
                problems = (h.acked_bytes_problems(wal, replica.dest, acked) +
                            h.dest_consistency(wal, replica.dest))
                self.assertEqual(problems, [], "after kill -9 of the replica at step %d, "
                                 "with %s acknowledged (seed %d)" % (step, acked, seed))
                checked += 1
            if victim in ("agent", "both"):
                self.assertEqual(agent.kill(), -9)
                kills["agent"] += 1

            time.sleep(rng.uniform(0.05, 0.8))  # a short random pause
            restart = []
            if victim in ("agent", "both"):
                restart.append(agent.restart)
            if victim in ("replica", "both"):
                restart.append(replica.start)
            rng.shuffle(restart)
            for fn in restart:
                fn()

        procs.log("%d kills of the replica, %d of the agent, %d disk checks in %.1fs",
                  kills["replica"], kills["agent"], checked, time.monotonic() - t0)
        self.assertGreaterEqual(kills["replica"] + kills["agent"], 20)
        gen.stop()
        self.wait_caught_up(agent, wal, [NAME], timeout=60)
        h.compare_dirs(wal, replica.dest)
        self.assertEqual(h.dest_consistency(wal, replica.dest), [])
        self.stop_all()

    def test_bytes_past_the_record_count_only_once_the_agent_confirms_them(self):
        """After a kill -9 the replica's NAME.partial may hold bytes past
        walship.state: received, never recorded. The next session presents
        them to the agent; they are kept when the agent's prefix checksum
        confirms them, and cut off (then fetched again) when it does not."""
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, seed=11, segment_size=SEGMENT)
        for _ in range(40):
            gen.write(2000)
        agent = c.agent(wal).start()
        replica = c.replica(agent, "tail").start()
        self.wait_caught_up(agent, wal, ["tail"], timeout=30)
        replica.kill()
        st = h.read_state(replica.dest)
        part = os.path.join(replica.dest, st["segment"] + ".partial")
        self.assertEqual(os.path.getsize(part), st["offset"])

        # The source grows; the replica "had received" 3000 of the new bytes.
        for _ in range(5):
            gen.write(2000)
        src = os.path.join(wal, st["segment"])
        with open(part, "ab") as f:
            f.write(h.read_bytes(src, st["offset"], 3000))
        since = replica.log_size()
        replica.start()
        replica.wait_log(r"kept 3000 bytes of %s received before the last stop"
                         % st["segment"], 20, since)
        self.wait_caught_up(agent, wal, ["tail"], timeout=30)
        h.compare_dirs(wal, replica.dest)

        # Bytes the source never had (a torn write): discarded, then the
        # right ones fetched.
        replica.kill()
        st = h.read_state(replica.dest)
        part = os.path.join(replica.dest, st["segment"] + ".partial")
        with open(part, "ab") as f:
            f.write(b"x" * 2000)
        for _ in range(5):
            gen.write(2000)
        since = replica.log_size()
        replica.start()
        replica.wait_log(r"discarding the 2000 bytes of %s past the recorded position"
                         % st["segment"], 20, since)
        # Expected, so the agent says it without an error line.
        agent.wait_log(r"not confirming the bytes it received before its last stop", 10)
        self.assertEqual(agent.grep(r" (error|critical) .*divergent"), [])
        self.wait_caught_up(agent, wal, ["tail"], timeout=30)
        h.compare_dirs(wal, replica.dest)
        self.assertEqual(h.dest_consistency(wal, replica.dest), [])
        self.stop_all()


if __name__ == "__main__":
    unittest.main()
