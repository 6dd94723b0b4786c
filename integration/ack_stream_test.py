"""Acknowledgements travel on a control stream of their own.

While the primary may wait for them, a replica acknowledges every flush at
once: one gRPC message per flush, each answered by the agent's HTTP/2 flow
control. Neither the acknowledgement nor the answer may wake the replica's
thread that reads the agent's events (heartbeats, checkpoints, pacing):
on one shared stream each acknowledgement woke it once or twice, the CPU
of a synchronous commit (docs/benchmarks.md, "Synchronous commit cost").

On the agent's side, the thread that reads an acknowledgement off the
connection must be the one that handles it: the control server runs one
completion queue on one thread ("ws-control", agent/control_server.h). With
gRPC's callback or synchronous API a second polling thread woke for every
acknowledgement (gRPC's own threads: "nexting_thread", "grpcpp_sync_ser").

A generator appends small records (about 400 flushes a second) for four
seconds while one replica follows with acknowledgements at once. The test
counts the acknowledgements the agent received (walship_agent_acks_total)
and, over the same seconds, the context switches (/proc/PID/task/TID/status)
of the replica's event thread (its main thread) and of every agent thread
that is not one of walship's own ("ws-..."): each may wake for events (a
heartbeat a second, a checkpoint a segment, gRPC's timers), not for each
acknowledgement. The replica must then hold every byte.
"""

import os

import time
import unittest

from integration import harness as h
from integration.walshiptest.procs import log

SECONDS = 4.0


def context_switches(pid, tid=None):
    """Voluntary plus involuntary context switches of thread `tid` of
    process `pid` (by default its main thread)."""
    total = 0
    with open("/proc/%d/task/%d/status" % (pid, pid if tid is None else tid)) as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def foreign_threads(pid):
    """{tid: name} of the threads of process `pid` that walship did not name
    ("ws-..."): gRPC's, and the main thread."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            name = f.read().strip()
        if not name.startswith("ws-"):
            out[int(tid)] = name
    return out


def switches_of(pid, threads):
    return {tid: context_switches(pid, tid) for tid in threads}


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

        foreign = foreign_threads(agent.pid)
        acks_before, switches_before = acks(), context_switches(replica.pid)
        foreign_before = switches_of(agent.pid, foreign)
        gen.start()
        time.sleep(SECONDS)
        gen.stop()
        acks_during = acks() - acks_before
        switches_during = context_switches(replica.pid) - switches_before
        foreign_during = {tid: n - foreign_before[tid]
                          for tid, n in switches_of(agent.pid, foreign).items()}
        log("%d acknowledgements in %.0f s; the replica's event thread switched %d times; "
            "the agent's threads other than walship's: %s", acks_during, SECONDS,
            switches_during, ", ".join("%s %d" % (foreign[tid], n)
                                       for tid, n in sorted(foreign_during.items())))

        self.assertGreaterEqual(
            acks_during, 200, "too few acknowledgements to judge (%d in %.0f s, %d records)"
            % (acks_during, SECONDS, gen.records))
        self.assertLessEqual(
            switches_during, acks_during / 10,
            "the replica's event thread switched %d times while %d acknowledgements were "
            "sent: acknowledgements wake it" % (switches_during, acks_during))
        pollers = sorted(set(foreign.values()) & {"nexting_thread", "grpcpp_sync_ser"})
        self.assertEqual(pollers, [], "the agent runs gRPC threads that poll its connections")
        self.assertLessEqual(
            sum(foreign_during.values()), acks_during / 10,
            "the agent's threads other than walship's switched %d times while %d "
            "acknowledgements arrived: a second thread wakes for each"
            % (sum(foreign_during.values()), acks_during))

        self.wait_caught_up(agent, wal, ["acks"], timeout=60)
        h.compare_dirs(wal, replica.dest)
        self.assertEqual(replica.error_lines(), [], "the replica logged errors")
        self.stop_all()


if __name__ == "__main__":
    unittest.main()
