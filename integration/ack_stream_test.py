"""Acknowledgements travel on a control stream of their own.

While the primary may wait for them, a replica acknowledges every flush at
once: one gRPC message per flush, each answered by the agent's HTTP/2 flow
control. Neither the acknowledgement nor the answer may wake the replica's
thread that reads the agent's events (heartbeats, checkpoints, pacing):
on one shared stream each acknowledgement woke it once or twice, the CPU
of a synchronous commit (docs/benchmarks.md, "Synchronous commit cost").

A generator appends small records (about 400 flushes a second) for four
seconds while one replica follows with acknowledgements at once. The test
counts the acknowledgements the agent received (walship_agent_acks_total)
and the context switches of the replica's event thread (its main thread,
/proc/PID/task/PID/status) over the same seconds: the thread may wake for
events (a heartbeat a second, a checkpoint a segment), not for each
acknowledgement. The replica must then hold every byte.
"""

import time
import unittest

from integration import harness as h
from integration.walshiptest.procs import log

SECONDS = 4.0


def context_switches(pid):
    """Voluntary plus involuntary context switches of thread `pid` (the
    main thread of process `pid`)."""
    total = 0
    with open("/proc/%d/task/%d/status" % (pid, pid)) as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


class AckStreamTest(h.ClusterTestCase):

    def test_acknowledgements_do_not_wake_the_event_thread(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, rate=400e3, min_record=200, max_record=1800,
                          segment_size=1 << 20)
        gen.write()
        agent = c.agent(wal, extra_args=["--metrics-listen=127.0.0.1:0",
                                         "--ack-interval-ms=0"]).start()
        replica = c.replica(agent, "acks").start()
        self.wait_caught_up(agent, wal, ["acks"], timeout=30)

        def acks():
            return h.metric_total(h.scrape(agent.metrics), "walship_agent_acks_total",
                                  replica="acks")

        acks_before, switches_before = acks(), context_switches(replica.pid)
        gen.start()
        time.sleep(SECONDS)
        gen.stop()
        acks_during = acks() - acks_before
        switches_during = context_switches(replica.pid) - switches_before
        log("%d acknowledgements in %.0f s; the replica's event thread switched %d times",
            acks_during, SECONDS, switches_during)

        self.assertGreaterEqual(
            acks_during, 200, "too few acknowledgements to judge (%d in %.0f s, %d records)"
            % (acks_during, SECONDS, gen.records))
        self.assertLessEqual(
            switches_during, acks_during / 10,
            "the replica's event thread switched %d times while %d acknowledgements were "
            "sent: acknowledgements wake it" % (switches_during, acks_during))

        self.wait_caught_up(agent, wal, ["acks"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        self.assertEqual(replica.error_lines(), [], "the replica logged errors")
        self.stop_all()


if __name__ == "__main__":
    unittest.main()
