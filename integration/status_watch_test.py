"""walship-status --watch against real daemons: a replica catching up a
backlog under --max-rate shows a throughput, a progress bar and an ETA; the
--json form prints one object per refresh and line; --count bounds the run.
"""

import json
import subprocess
import unittest

from integration import harness as h
from integration.walshiptest import procs

RATE = 4_000_000
BACKLOG = 40_000_000


class StatusWatchTest(h.ClusterTestCase):

    def test_watch_shows_progress_of_a_catching_up_replica(self):
        c = self.cluster
        wal = c.dir("wal")
        gen = c.generator(wal, segment_size=4 << 20)
        while gen.total_bytes < BACKLOG:
            gen.write(1 << 20)
        gen.close()
        agent = c.agent(wal, extra_args=["--max-rate=%d" % RATE]).start()
        c.replica(agent, "behind").start()
        h.wait_until(lambda: (h.replica_entry(h.try_status(agent) or {}, "behind") or {})
                     .get("flushed"), 20, "the replica's first flushed bytes")
        status = h.binary(h.STATUS)

        p = subprocess.run([status, "--agent=" + agent.control, "--watch", "--count=3", "--insecure",
                            "--interval-ms=700"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        out = p.stdout.decode()
        procs.log("walship-status --watch:\n%s%s", out, p.stderr.decode())
        self.assertEqual(p.returncode, 0)
        self.assertEqual(out.count("\nstream "), 3, "--count=3 must print three tables")
        self.assertIn("THROUGHPUT", out)
        last = out[out.rindex("\nstream "):]
        self.assertRegex(last, r"behind .* [0-9.]+ [kM]B/s", "no throughput in the last table")
        self.assertRegex(last, r"\[#*\.*\] +\d+%  lag .* catching up at .* ETA \d",
                         "no progress bar with rate and ETA")

        p = subprocess.run([status, "--agent=" + agent.control, "--watch", "--json", "--insecure",
                            "--count=2", "--interval-ms=700"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        lines = p.stdout.decode().splitlines()
        self.assertEqual(len(lines), 2, "one JSON object per line and refresh")
        objs = [json.loads(l) for l in lines]
        self.assertFalse(objs[0]["replicas_progress"][0]["have_rate"])
        second = objs[1]["replicas_progress"][0]
        procs.log("second --json --watch sample: %s", second)
        self.assertEqual(second["name"], "behind")
        self.assertTrue(second["have_rate"])
        self.assertGreater(second["bytes_per_sec"], RATE * 0.5)
        self.assertLess(second["bytes_per_sec"], RATE * 1.5)
        self.assertIsNotNone(second["eta_seconds"])
        self.assertIn("replicas", objs[1]["status"])

    def test_watch_without_agent_exits_2(self):
        status = h.binary(h.STATUS)
        p = subprocess.run([status, "--agent=127.0.0.1:1", "--watch", "--count=2", "--insecure",
                            "--interval-ms=10", "--timeout-ms=200"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.decode().count("walship-status: 127.0.0.1:1"), 2)


if __name__ == "__main__":
    unittest.main()
