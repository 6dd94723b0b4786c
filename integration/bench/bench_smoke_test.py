"""Runs the benchmark in --quick mode and checks its outputs exist and parse.

Never asserts timings (2 cores, noisy): only that every section ran and
results.json, results.md and chart.svg are well-formed.
"""
import json
import os
import tempfile
import unittest
import xml.etree.ElementTree as ET

from integration.bench import bench
from integration.walshiptest.pg import find_pg_bin
from integration.walshiptest.waits import StepError


class BenchSmokeTest(unittest.TestCase):

    def test_quick_run_writes_parseable_outputs(self):
        out = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(),
                           "bench")
        sections = list(bench.SECTIONS)
        try:
            find_pg_bin()
        except StepError:  # no PostgreSQL 15 here
            sections = [s for s in sections if s not in bench.PG_SECTIONS]
        rc = bench.main(["--quick", "--out", out, "--sections", ",".join(sections)])

        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        with open(os.path.join(out, "results.md")) as f:
            md = f.read()
        self.assertEqual(results["errors"], {}, "sections failed")
        self.assertEqual(rc, 0)
        self.assertTrue(results["quick"])
        self.assertEqual(sorted(results["sections"]), sorted(sections))
        for key in ("nproc", "kernel", "cpu_model", "mem_total_mib", "fs_type"):
            self.assertIn(key, results["machine"])
        ids = [t["id"] for t in results["targets"]]
        self.assertIn("catchup-vs-raw", ids)
        self.assertIn("fanout-reads-once", ids)
        for t in results["targets"]:
            self.assertIn(t["pass"], (True, False, None))
        fm = results["sections"]["formats"]["summary"]
        for v in ("etcd", "append-etcd", "rocksdb", "append-rocksdb", "mysql-binlog",
                  "append-mysql-binlog"):
            self.assertGreater(fm[v]["mb_s"]["median"], 0, v)
        self.assertIn("### Database logs: catch-up with each format", md)
        catchup = results["sections"]["catchup"]["summary"]
        for v in ("raw-zerocopy", "walship-zerocopy", "walship-copy"):
            self.assertGreater(catchup[v]["mb_s"]["median"], 0)
        datatls = results["sections"]["datatls"]
        for v in ("plain-zerocopy", "plain-copy", "tls-userspace"):
            self.assertGreater(datatls["summary"][v]["mb_s"]["median"], 0, v)
        self.assertEqual([r["data_path"] for r in datatls["runs"]["tls-userspace"]],
                         ["ktls" if datatls["kernel_tls_ulp"] else "userspace"])
        self.assertEqual([r["data_path"] for r in datatls["runs"]["plain-copy"]], ["off"])
        self.assertIn("datatls-cpu-agent", ids)
        if "pgbench" in sections:
            # Every receiver, the raw relay too, kept up with a real load.
            pgb = results["sections"]["pgbench"]["summary"]
            for v in ("walship", "walship-paced", "pg_receivewal", "pg_receivewal-busy",
                      "raw-relay"):
                self.assertGreater(pgb[v]["tps"]["median"], 0, v)
                self.assertIsNotNone(pgb[v]["lag_p50_ms"], v)
            # Without a feed there is no pg_stat_replication row: the
            # replica-side lag is the measure.
            q = pgb["walship-query-paced"]
            self.assertGreater(q["tps"]["median"], 0)
            self.assertIsNone(q["lag_p50_ms"])
            self.assertIsNotNone(q["state_lag_p50_ms"])
            # walship's byte lag comes from its observer's log, and only
            # walship's first phase has that observer beside the load.
            for v in ("walship", "walship-query-paced"):
                self.assertIsNotNone(pgb[v]["byte_lag_p50"], v)
                self.assertIsNotNone(pgb[v]["observer_cores"], v)
            for v in ("pg_receivewal", "raw-relay", "raw-relay-query"):
                self.assertIsNone(pgb[v]["observer_cores"], v)
            # Its reference, the relay following by query (which held the
            # load's WAL at the end, or the run would have failed).
            self.assertGreater(pgb["raw-relay-query"]["tps"]["median"], 0)
            self.assertIsNone(pgb["raw-relay-query"]["lag_p50_ms"])
            # The busy loop ran beside pg_receivewal.
            self.assertGreater(pgb["pg_receivewal-busy"]["busy_cores"]["median"], 0)
        if "synccost" in sections:
            # Each receiver was synchronous in its rounds, and the traced
            # walship round joined both daemons' traces.
            sc = results["sections"]["synccost"]
            # The quick run has the raw relay as a third synchronous standby.
            for v in ("walship", "raw-relay", "pg_receivewal", "none"):
                self.assertGreater(sc["summary"][v]["tps"]["median"], 0, v)
                self.assertGreater(sc["summary"][v]["latency_ms"]["median"], 0, v)
            for r in ("walship", "raw-relay", "pg_receivewal"):
                self.assertIsNotNone(sc["summary"][r]["%s_lag_p50_ms" % r], r)
            for part in ("relay_send", "relay_recv", "walsender"):
                self.assertGreater(
                    sc["summary"]["raw-relay"]["raw-relay_cpu_%s_us_per_xact" % part]["median"],
                    0, part)
            self.assertGreater(sc["traced"]["frames"], 0)
            total = [b for b in sc["traced"]["breakdown"] if b["from"] == "feed" and
                     b["to"] == "status"][0]
            self.assertEqual((total["from"], total["to"]), ("feed", "status"))
            self.assertGreater(total["p50_us"], 0)
            self.assertIn("### Synchronous commit cost", md)
            # Each synchronous round's receiver was reconnected first (the
            # run checks its walsender held the first slot, or fails).
            self.assertEqual(sc["order"], "sync-first")
            self.assertIn("every receiver reconnected, that round's standby first", md)
            self.assertIn("Round by round, walship's TPS over pg_receivewal's", md)
            self.assertIn("Round by round, raw-relay's TPS over pg_receivewal's", md)
            self.assertIn("Flush lag p50, round against round at the same instants: walship's "
                          "above pg_receivewal's in", md)

        if "compress" in sections:
            # Every variant shipped the pgbench WAL; the codecs shrank it.
            zs = results["sections"]["compress"]["summary"]
            for v in ("walship-zerocopy", "walship-copy", "walship-zstd", "walship-lz4",
                      "link-none", "link-zstd", "link-lz4"):
                self.assertGreater(zs[v]["mb_s"]["median"], 0, v)
            for v in ("walship-zstd", "walship-lz4", "link-zstd", "link-lz4"):
                self.assertGreater(zs[v]["ratio"]["median"], 1.0, v)
            self.assertIn("compress-link-zstd", ids)
            self.assertIn("### Compression on the wire", md)

        self.assertIn("### Targets", md)
        self.assertIn("| walship `--transport=zerocopy` |", md)
        root = ET.parse(os.path.join(out, "chart.svg")).getroot()
        self.assertTrue(root.tag.endswith("svg"))
        self.assertGreater(len(list(root.iter("{http://www.w3.org/2000/svg}rect"))), 3)


if __name__ == "__main__":
    unittest.main()
