"""Production operations with the real daemons: --max-rate holds the rate,
--allow-replicas refuses strangers for good, /metrics is scraped over HTTP.

test_max_rate: a 160 MB backlog is waiting before the replica subscribes, so
the shipper always has more than --max-rate to send; the bytes shipped
(walship_agent_bytes_shipped_total, scraped over HTTP) must grow by
20 MB/s +-10 % over a 5 s window, and the copy must end byte-identical.
"""

import time
import unittest

from integration import harness as h
from integration.walshiptest import procs

RATE = 20_000_000
SEGMENT = 16 << 20
BACKLOG = 160_000_000
WINDOW = 5.0

total = h.metric_total


class OpsTest(h.ClusterTestCase):

    def test_max_rate(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, segment_size=SEGMENT)
        while gen.total_bytes < BACKLOG:
            gen.write(1 << 20)
        gen.close()
        agent = c.agent(wal, extra_args=["--max-rate=%d" % RATE,
                                         "--metrics-listen=127.0.0.1:0"]).start()
        addr = agent.metrics
        c.replica(agent, "slow").start()
        # Skip the initial burst (a quarter second of credit) and connection.
        h.wait_until(lambda: total(h.scrape(addr), "walship_agent_bytes_shipped_total",
                                   replica="slow") > 0, 20, "the first shipped bytes")
        time.sleep(1.0)
        t0, b0 = time.monotonic(), total(h.scrape(addr), "walship_agent_bytes_shipped_total")
        time.sleep(WINDOW)
        t1, b1 = time.monotonic(), total(h.scrape(addr), "walship_agent_bytes_shipped_total")
        rate = (b1 - b0) / (t1 - t0)
        procs.log("shipped %.0f bytes in %.2f s: %.2f MB/s (limit %.2f MB/s)",
                  b1 - b0, t1 - t0, rate / 1e6, RATE / 1e6)
        self.assertLess(b1, BACKLOG, "the backlog ran out inside the window")
        self.assertGreaterEqual(rate, RATE * 0.9, "shipping slower than --max-rate - 10%")
        self.assertLessEqual(rate, RATE * 1.1, "shipping faster than --max-rate + 10%")
        self.stop_all()

    def test_allow_list_refuses_strangers_and_metrics_are_scraped(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, segment_size=1 << 20)
        while gen.total_bytes < 3_500_000:
            gen.write()
        gen.close()
        agent = c.agent(wal, extra_args=["--allow-replicas=good, other",
                                         "--metrics-listen=127.0.0.1:0"]).start()
        addr = agent.metrics
        stranger = c.replica(agent, "stranger").start()
        good = c.replica(agent, "good").start()
        h.wait_until(lambda: not stranger.running(), 20, "the refused replica to exit")
        self.assertEqual(stranger.returncode(), 3,
                         "a replica refused by --allow-replicas must exit 3 (operator "
                         "must act)")
        self.assertTrue(agent.grep(r"stranger is not in this agent's --allow-replicas"),
                        "the agent did not log the refusal")
        self.assertTrue(stranger.grep(r"PERMISSION_DENIED|permission denied|"
                                      r"PermissionDenied|--allow-replicas"),
                        "the replica did not log why it stopped")
        self.wait_caught_up(agent, wal, ["good"], timeout=60)
        h.compare_dirs(wal, good.dest)

        m = h.scrape(addr)
        size = h.total_size(wal)
        self.assertEqual(total(m, "walship_agent_bytes_shipped_total", replica="good"), size)
        self.assertEqual(total(m, "walship_agent_bytes_shipped_total", transport="copy"), 0)
        self.assertGreater(total(m, "walship_agent_frames_shipped_total", replica="good"), 0)
        self.assertEqual(total(m, "walship_agent_segments_completed_total", replica="good"),
                         len(h.source_segments(wal)) - 1)
        self.assertEqual(total(m, "walship_agent_handshakes_refused_total",
                               reason="not_allowed"), 1)
        self.assertEqual(total(m, "walship_agent_replica_lag_bytes", replica="good"), 0)
        self.assertEqual(total(m, "walship_agent_replica_backlog_bytes", replica="good"), 0)
        self.assertEqual(total(m, "walship_agent_replica_connected", replica="good"), 1)
        self.assertEqual(total(m, "walship_agent_source_bytes"), size)
        self.exit_codes = self.cluster.close()
        self.assertEqual(self.exit_codes.get(agent.label), 0, self.exit_codes)
        self.assertEqual(self.exit_codes.get(good.label), 0, self.exit_codes)


if __name__ == "__main__":
    unittest.main()
