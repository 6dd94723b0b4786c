"""agent_shutdown_test: the agent stops cleanly on SIGTERM right after its
replicas went away.

When a replica leaves, its Session call is cancelled, and the call's event
thread still has to send the session's last event and finish the call. A
SIGTERM at that moment shut the control server's completion queue down
while those threads could still start operations on it: gRPC aborted
(`assertion failed: grpc_cq_begin_op`) or the thread touched the freed
queue (SIGSEGV). Each round here starts an agent and several replicas,
kills the replicas with SIGKILL (their connections close at once, as a
crashed host's do) and sends the agent SIGTERM straight after; the agent
must exit 0 every time.
"""

import os
import signal
import unittest

from integration import harness as h

ROUNDS = 20
REPLICAS = 10


class AgentShutdownTest(h.ClusterTestCase):

    def test_sigterm_right_after_the_replicas_left(self):
        c = self.cluster
        wal = c.dir("wal")
        with open(os.path.join(wal, "seg-00000001"), "wb") as f:
            f.write(b"\x01" * 4096)
        for rnd in range(ROUNDS):
            agent = c.agent(wal, label="agent-%d" % rnd).start()
            replicas = [c.replica(agent, "r%d-%d" % (rnd, i)).start() for i in range(REPLICAS)]

            def all_connected():
                st = h.try_status(agent)
                return st is not None and len(
                    [r for r in st.get("replicas", []) if r.get("connected")]) == REPLICAS
            h.wait_until(all_connected, 30, "%d replicas connected" % REPLICAS)
            # All at once, reaped only after the agent's SIGTERM.
            for r in replicas:
                r.proc.signal_process(signal.SIGKILL)
            rc = agent.stop()
            for r in replicas:
                r.kill()
            self.assertEqual(rc, 0, "round %d: the agent exited %s on SIGTERM:\n%s"
                             % (rnd, rc, agent.tail()))
            for d in replicas + [agent]:
                c.daemons.remove(d)


if __name__ == "__main__":
    unittest.main()
