"""The fault campaign's quick variant, in the default suite.

About 100 faults of every kind against real daemons and a real PostgreSQL
15, with a seed that changes every run and is printed (replay a failure
with WALSHIP_CHAOS_SEED=N, or run_chaos.sh --seed N --quick). The report
lands in the test's undeclared outputs (bazel-testlogs/.../test.outputs).
"""

import json
import os
import unittest

from integration import harness as h
from integration.chaos import campaign
from integration.chaos import faults
from integration.chaos import nodes
from integration.walshiptest import procs


class ChaosQuickTest(unittest.TestCase):

    def test_quick_campaign_holds_every_invariant(self):
        seed = h.seed_from_env("WALSHIP_CHAOS_SEED", "chaos campaign")
        out = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or
                           h.make_tmpdir("chaos"), "chaos-%d" % seed)
        rc = campaign.main(["--quick", "--seed", str(seed), "--out", out])
        with open(os.path.join(out, "report.json")) as f:
            rep = json.load(f)
        with open(os.path.join(out, "report.md")) as f:
            procs.log("report.md:\n%s", f.read())
        self.assertEqual(rep["invariant_failures"], [], "seed %d" % seed)
        self.assertEqual(rc, 0)
        self.assertGreaterEqual(rep["faults_injected"], 100)
        # Every family of faults ran (the schedule draws them evenly).
        self.assertEqual(sorted(rep["faults_by_kind"]), sorted(faults.FAMILIES))
        self.assertGreater(rep["invariant_checks"], rep["faults_injected"])
        # Nothing of the campaign stays mounted (replica r1's tmpfs).
        self.assertEqual(nodes.mounts_under(out), [], "seed %d" % seed)


if __name__ == "__main__":
    unittest.main()
