"""The quick failover drill as a test: process-crash and host-loss.

Runs `walship_drill.py --quick` as a subprocess (its own process groups and
cleanup, as an operator would run it), then checks the exit status and that
report.md, results.json and the charts exist with the expected content.
Needs root or an unprivileged user able to run PostgreSQL 15 (see
README.md); the report lands in $TEST_UNDECLARED_OUTPUTS_DIR when Bazel
sets it. WALSHIP_DRILL_SEED replays a seed.
"""

import json
import os
import tempfile
import unittest

from integration.drill.drill_run import run_drill


class DrillQuickTest(unittest.TestCase):

    def test_quick_drill(self):
        out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(
            prefix="drill-quick-")
        out = os.path.join(out, "drill")
        rc, report = run_drill(["--quick"], out)
        self.assertIsNotNone(rc, "walship_drill.py --quick did not finish within 780 s")
        self.assertEqual(rc, 0, "walship_drill.py --quick failed; see the log above")
        report_path = os.path.join(out, "report.md")
        self.assertTrue(os.path.exists(report_path))
        for section in ["# walship failover drill report", "## Summary", "## process-crash",
                        "## host-loss", "### RPO and RTO", "### Lag during load",
                        "### Invariants", "### Replication lag over time", "seed:"]:
            self.assertIn(section, report)
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        self.assertTrue(results["ok"])
        names = [d["name"] for d in results["drills"]]
        self.assertEqual(names, ["process-crash", "host-loss"])
        for d in results["drills"]:
            self.assertTrue(d["invariants"], d["name"])
            self.assertTrue(all(i["ok"] for i in d["invariants"]), d["name"])
            self.assertIsNotNone(d["metrics"].get("rto_s"), d["name"])
            self.assertIsNotNone(d["metrics"].get("wal_bytes_lost"), d["name"])
            svg = os.path.join(out, d["files"]["svg"])
            with open(svg) as f:
                self.assertIn("<svg", f.read())
        pc = results["drills"][0]["metrics"]
        self.assertEqual(pc["acked_lost"], 0)
        self.assertEqual(pc["wal_bytes_lost"], 0)
        self.assertGreater(pc["acked_commits"], 0)


if __name__ == "__main__":
    unittest.main()
