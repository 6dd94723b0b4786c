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
import subprocess
import sys
import tempfile
import unittest

# The repository root (in the runfiles tree under Bazel): the drill runs as
# `python3 -m integration.drill.walship_drill` from there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DrillQuickTest(unittest.TestCase):

    def test_quick_drill(self):
        out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(
            prefix="drill-quick-")
        out = os.path.join(out, "drill")
        argv = [sys.executable, "-m", "integration.drill.walship_drill", "--quick", "--out", out]
        if os.environ.get("WALSHIP_DRILL_SEED"):
            argv += ["--seed", os.environ["WALSHIP_DRILL_SEED"]]
        print("running: %s" % " ".join(argv), flush=True)
        # The drill bounds every wait itself; this is a last resort below
        # Bazel's "long" timeout (900 s). SIGTERM first: the drill then stops
        # every process it started and still writes nothing half-done.
        p = subprocess.Popen(argv, cwd=ROOT)
        try:
            rc = p.wait(timeout=780)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            self.fail("walship_drill.py --quick did not finish within 780 s")
        report_path = os.path.join(out, "report.md")
        if os.path.exists(report_path):
            with open(report_path) as f:
                report = f.read()
            print(report, flush=True)
        self.assertEqual(rc, 0, "walship_drill.py --quick failed; see the log above")
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
