"""The Patroni drills, quick, as a test.

Runs `walship_drill.py --quick --drills patroni` as a subprocess (as an
operator would) and checks its report: with walship synchronous and the
promotion gate no acknowledged commit is lost through two seeded host
losses, through a host loss while the streaming standbys are held back
(the gate then replays WAL from the walship replicas), and through a
switchover and back; the replicas follow every new leader; the rejoined old
leader's agent ships nothing. The host loss without walship synchronous
runs beside them for the comparison (its losses are reported, not
asserted: they depend on timing). WALSHIP_DRILL_SEED replays a seed.
"""

import json
import os
import tempfile
import unittest

from integration.drill.drill_run import run_drill

DRILLS = ["patroni-host-loss", "patroni-lagging", "patroni-switchover", "patroni-async"]


class PatroniDrillQuickTest(unittest.TestCase):

    def test_quick_patroni_drills(self):
        out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(
            prefix="patroni-drill-")
        out = os.path.join(out, "patroni-drill")
        rc, report = run_drill(["--quick", "--drills", "patroni"], out)
        self.assertIsNotNone(rc, "walship_drill.py --drills patroni did not finish within 780 s")
        self.assertEqual(rc, 0, "the Patroni drills failed; see the report above")
        self.assertIn("## Host loss under Patroni: what walship adds", report)
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        self.assertTrue(results["ok"])
        by = {d["name"]: d for d in results["drills"]}
        self.assertEqual(sorted(by), sorted(DRILLS))
        for name in ["patroni-host-loss", "patroni-lagging", "patroni-switchover"]:
            d = by[name]
            self.assertTrue(d["invariants"], name)
            self.assertTrue(all(i["ok"] for i in d["invariants"]), name)
            self.assertGreater(d["metrics"]["acked_commits"], 0, name)
            # After every failover and switchover, walship-status given all
            # the agents named the new leader's alone as serving.
            self.assertTrue(any(i["name"].startswith("walship-status names the agent beside")
                                for i in d["invariants"]), name)
        self.assertEqual(by["patroni-host-loss"]["metrics"]["failovers"], 2)
        self.assertEqual(by["patroni-host-loss"]["metrics"]["acked_lost"], 0)
        self.assertGreater(by["patroni-host-loss"]["metrics"]["rto_s"], 0)
        lag = by["patroni-lagging"]["metrics"]
        self.assertEqual(lag["acked_lost"], 0)
        # The standbys lacked WAL, and the gate is what supplied it.
        self.assertGreater(lag.get("standby_lag_bytes_max", 0), 0)
        self.assertGreater(lag.get("gate_replayed_bytes_max", 0), 0)
        self.assertIsNotNone(by["patroni-async"]["metrics"].get("acked_lost"))


if __name__ == "__main__":
    unittest.main()
