"""report.py on fake results: target verdicts, Markdown tables, SVG."""
import unittest
import xml.etree.ElementTree as ET

from integration.bench import bench, bench_live, commit_trace, report

MIB = 1 << 20


def s(*values):
    vals = sorted(values)
    return {"median": vals[len(vals) // 2], "min": vals[0], "max": vals[-1], "n": len(vals),
            "values": list(values)}


def fake(**over):
    cu = {
        "raw-zerocopy": {"mb_s": s(500.0), "agent_cpu_s_per_gib": s(0.2),
                         "replica_cpu_s_per_gib": s(0.5), "agent_hwm": s(3 * MIB),
                         "replica_hwm": s(3 * MIB)},
        "walship-zerocopy": {"mb_s": s(460.0, 470.0, 480.0), "agent_cpu_s_per_gib": s(0.5),
                             "replica_cpu_s_per_gib": s(0.5), "agent_hwm": s(30 * MIB),
                             "replica_hwm": s(20 * MIB)},
        "walship-copy": {"mb_s": s(400.0), "agent_cpu_s_per_gib": s(0.6),
                         "replica_cpu_s_per_gib": s(1.0), "agent_hwm": s(30 * MIB),
                         "replica_hwm": s(20 * MIB)},
        "raw-zerocopy-verify": {"mb_s": s(480.0), "agent_cpu_s_per_gib": s(0.35),
                                "replica_cpu_s_per_gib": s(0.7)},
        "raw-copy-verify": {"mb_s": s(450.0), "agent_cpu_s_per_gib": s(0.5),
                            "replica_cpu_s_per_gib": s(0.7)},
        "walship-zerocopy-small": {"mb_s": s(300.0), "agent_hwm": s(29 * MIB),
                                   "replica_hwm": s(20 * MIB)},
        "walship-copy-small": {"mb_s": s(300.0), "agent_hwm": s(29 * MIB),
                               "replica_hwm": s(20 * MIB)},
    }
    r = {"quick": False, "config": {"rounds": 3}, "started": "now", "elapsed_s": 1.0,
         "machine": {"nproc": 2, "cpu_model": "X", "mem_total_mib": 1024, "kernel": "6",
                     "fs_type": "ext4", "disk_device": "/dev/vda", "disk_model": "v",
                     "mount_options": "rw", "loadavg_start": ["0.1", "0.1", "0.1"],
                     "loadavg_end": ["0.2", "0.2", "0.2"]},
         "errors": {},
         "sections": {
             "catchup": {"backlog_bytes": 1024 * MIB, "small_backlog_bytes": 208 * MIB,
                         "segment_bytes": 16 * MIB, "summary": cu},
             "pg": {"backlog_bytes": 1088 * MIB, "wal_segment_bytes": 16 * MIB, "summary": {
                 "walship-pg": {"mb_s": s(300.0), "agent_cpu_s_per_gib": s(1.0),
                                "replica_cpu_s_per_gib": s(1.0), "replica_hwm": s(20 * MIB)},
                 "pg_receivewal": {"mb_s": s(100.0), "agent_cpu_s_per_gib": s(1.0),
                                   "replica_cpu_s_per_gib": s(1.0),
                                   "replica_hwm": s(5 * MIB)}}},
             "live": {"writer": "w", "seconds": 8, "rates": {"100": {"summary": {
                 "walship-zerocopy": {"lag_p50_ms": s(2.0), "lag_p99_ms": s(5.0),
                                      "lag_max_ms": s(9.0), "own_fdatasync_p50_ms": s(2.5),
                                      "own_fdatasync_p99_ms": s(4.5)},
                 "raw": {"lag_p50_ms": s(1.0), "lag_p99_ms": s(4.0), "lag_max_ms": s(8.0),
                         "own_fdatasync_p99_ms": s(2.5)},
                 "probe": {"fdatasync_p50_ms": s(1.0), "fdatasync_p99_ms": s(3.0),
                           "fdatasync_max_ms": s(7.0)}}}}},
             "pgbench": {"scale": 10, "clients": 4, "seconds": 15,
                         "lag_method": {"both": "a", "walship_state": "b", "bytes": "c"},
                         "summary": {
                             "none": {"tps": s(1000.0)},
                             "walship": {"tps": s(900.0), "lag_p50_ms": s(1.0),
                                         "lag_p99_ms": s(4.0), "byte_lag_p50": s(1000.0),
                                         "byte_lag_p99": s(9000.0),
                                         "cpu_us_per_txn": s(400.0),
                                         "flush_cycles_per_s": s(800.0),
                                         "sender_us_per_cycle": s(300.0),
                                         "receiver_us_per_cycle": s(350.0)},
                             "pg_receivewal": {"tps": s(950.0), "lag_p50_ms": s(2.0),
                                               "lag_p99_ms": s(5.0), "byte_lag_p50": s(2000.0),
                                               "byte_lag_p99": s(8000.0)},
                             "raw-relay": {"tps": s(920.0), "lag_p50_ms": s(2.5),
                                           "lag_p99_ms": s(4.5), "cpu_us_per_txn": s(150.0)},
                             "raw-relay-zero": {"tps": s(960.0), "lag_p50_ms": s(1.5),
                                                "lag_p99_ms": s(4.0)}},
                         "threads": {"walship": {
                             "replica/ws-flush": {"cores": s(0.12), "us_per_cycle": s(150.0),
                                                  "switches_per_cycle": s(3.0)},
                             "agent/ws-idle": {"cores": s(0.001), "us_per_cycle": s(1.0),
                                               "switches_per_cycle": s(0.1)}}}},
             "fanout": {"backlog_bytes": 512 * MIB, "summary": {
                 "1": {"aggregate_mb_s": s(400.0), "read_bytes_per_source_byte": s(1.0),
                       "rchar_per_source_byte": s(1.0)},
                 "4": {"aggregate_mb_s": s(300.0), "read_bytes_per_source_byte": s(1.0),
                       "rchar_per_source_byte": s(4.0)}}},
         }}
    r.update(over)
    return r


class HistogramQuantileTest(unittest.TestCase):

    def test_interpolates_inside_the_bucket(self):
        name = "h_seconds"

        def b(le, v):
            return ((name + "_bucket", frozenset({("le", le)})), v)
        samples = dict([b("0.001", 10), b("0.002", 90), b("0.004", 100), b("+Inf", 100)])
        self.assertAlmostEqual(bench_live.histogram_quantile(samples, name, 0.5), 0.0015)
        self.assertAlmostEqual(bench_live.histogram_quantile(samples, name, 0.99), 0.0038)
        self.assertAlmostEqual(bench_live.histogram_quantile(samples, name, 0.05), 0.0005)
        empty = dict([b("0.001", 0), b("+Inf", 0)])
        self.assertIsNone(bench_live.histogram_quantile(empty, name, 0.5))
        self.assertIsNone(bench_live.histogram_quantile({}, name, 0.5))


class ReportTest(unittest.TestCase):

    def verdicts(self, results):
        return {t["id"]: t["pass"] for t in report.evaluate(results)}

    def test_targets(self):
        v = self.verdicts(fake())
        self.assertEqual(v["catchup-vs-raw"], True)         # 470 / 500 = 94 %
        self.assertEqual(v["catchup-vs-pg_receivewal"], True)  # 3x
        self.assertEqual(v["replica-cpu"], True)            # 0.5 / 1.0
        self.assertEqual(v["agent-cpu"], True)              # 0.5 <= 0.6
        self.assertEqual(v["live-lag-100"], True)           # 5 <= 4.5 + 1 (its own)
        self.assertEqual(v["live-lag-100-probe"], False)    # 5 > 3 + 1 (the probe)
        self.assertEqual(v["pgbench-lag"], True)
        self.assertEqual(v["pgbench-byte-lag"], False)      # p99 9000 > 8000
        self.assertEqual(v["pgbench-tps"], False)           # 900 < 950
        self.assertEqual(v["rss-agent"], True)
        self.assertEqual(v["fanout-reads-once"], True)
        self.assertEqual(v["fanout-throughput"], False)     # 75 %

    def test_missing_sections_are_not_measured(self):
        r = fake()
        del r["sections"]["pg"]
        del r["sections"]["live"]
        v = self.verdicts(r)
        self.assertIsNone(v["catchup-vs-pg_receivewal"])
        self.assertIsNone(v["live-lag-100"])
        self.assertIsNone(v["live-lag-100-probe"])
        report.markdown(r)
        ET.fromstring(report.svg(r))

    def test_live_target_needs_the_replicas_own_fdatasync(self):
        r = fake()
        del r["sections"]["live"]["rates"]["100"]["summary"]["walship-zerocopy"][
            "own_fdatasync_p99_ms"]
        v = self.verdicts(r)
        self.assertIsNone(v["live-lag-100"])
        self.assertEqual(v["live-lag-100-probe"], False)
        r = fake()
        r["sections"]["live"]["rates"]["100"]["summary"]["walship-zerocopy"][
            "own_fdatasync_p99_ms"] = {"median": 3.9, "min": 3.9, "max": 3.9, "n": 1,
                                       "values": [3.9]}
        self.assertEqual(self.verdicts(r)["live-lag-100"], False)  # 5 > 3.9 + 1

    def test_rss_growth_fails(self):
        r = fake()
        r["sections"]["catchup"]["summary"]["walship-zerocopy"]["agent_hwm"] = s(40 * MIB)
        self.assertEqual(self.verdicts(r)["rss-agent"], False)

    def test_markdown_and_svg(self):
        r = fake()
        r["targets"] = report.evaluate(r)
        md = report.markdown(r)
        self.assertIn("| walship `--transport=zerocopy` | 470 (460–480) |", md)
        self.assertIn("### Targets", md)
        self.assertIn("**FAIL**", md)
        # Where walship's CPU goes: busy threads listed, idle ones left out.
        self.assertIn("800 flush cycles a second", md)
        self.assertIn("| replica/ws-flush | 0.120 | 150 | 3.0 |", md)
        self.assertNotIn("ws-idle", md)
        # The live target quotes the raw pipeline against the same bound.
        self.assertIn("lag p99 4.00 ms, over its own fdatasync p99 2.50 ms + 1", md)
        # The CPU targets quote the raw pipeline with the same checksum passes.
        self.assertIn("the raw pipeline with the same checksum passes: 0.35 vs 0.50 s/GiB = 70%",
                      md)
        self.assertIn("the raw pipeline with the same checksum passes: 0.70 vs 0.70 s/GiB = 100%",
                      md)
        # The pgbench targets quote the raw relay against the same bounds.
        self.assertIn("the raw relay: p50 2.50, p99 4.50 ms (not both below); the raw relay "
                      "with zero-filled segments: p50 1.50, p99 4.00 ms (both below)", md)
        self.assertIn("the raw relay: 920 TPS (lower); the raw relay with zero-filled "
                      "segments: 960 TPS (not lower)", md)
        self.assertIn("| raw relay (reference) | 920 | 2.50 | 4.50 |", md)
        root = ET.fromstring(report.svg(r))
        self.assertTrue(root.tag.endswith("svg"))

    def test_query_interval_variants_get_rows(self):
        r = fake()
        pb = r["sections"]["pgbench"]
        pb["lag_seconds"] = 6
        pb["summary"]["walship-query-paced-4ms"] = {"tps": s(990.0), "observer_cores": s(0.02)}
        pb["summary"]["raw-relay-query-4ms"] = {"tps": s(995.0)}
        md = report.markdown(r)
        self.assertIn("| walship, `--pg-feed=false --ack-interval-ms=100 "
                      "--pg-query-interval-ms=4` | 990 |", md)
        self.assertIn("| raw relay following by query, one per 4 ms at most | 995 |", md)
        self.assertIn("6 s measuring lag, then 15 s measuring TPS", md)
        self.assertIn("walship-query-paced-4ms 0.020", md)
        self.assertTrue(bench.known_pgbench_variant("walship-query-paced-4ms"))
        # The TPS target quotes each variant's median ratio round by round.
        pb["runs"] = {"walship-query-paced": [{"tps": 100.0}, {"tps": 330.0}, {"tps": 90.0}],
                      "pg_receivewal": [{"tps": 100.0}, {"tps": 300.0}, {"tps": 100.0}]}
        pb["summary"]["walship-query-paced"] = {"tps": s(100.0)}
        md = report.markdown(dict(r, targets=report.evaluate(r)))
        self.assertIn("walship with --pg-feed=false --ack-interval-ms=100: 100 TPS (lower; "
                      "round by round 1.00 of pg_receivewal's)", md)
        self.assertTrue(bench.known_pgbench_variant("raw-relay-query-12ms"))
        self.assertFalse(bench.known_pgbench_variant("pg_receivewal-4ms"))


def fake_synccost(walship_tps=1544.0, walship_latency=2.59):
    breakdown = [{"label": label, "from": a, "to": b, "p50_us": 100.0, "p90_us": 180.0,
                  "n": 900} for label, a, b in commit_trace.INTERVALS]
    commit_trace.total(breakdown).update(p50_us=380.0, p90_us=720.0)
    return {"scale": 10, "clients": 4, "seconds": 15, "rounds": 3, "method": "m",
            "summary": {
                "walship": {"tps": s(walship_tps, walship_tps - 20, walship_tps + 30),
                            "latency_ms": s(walship_latency),
                            "walship_lag_p50_ms": s(0.41), "walship_lag_p90_ms": s(0.9),
                            "walship_cpu_us_per_xact": s(300.0),
                            "walship_cpu_agent_us_per_xact": s(120.0),
                            "walship_cpu_replica_us_per_xact": s(150.0),
                            "walship_cpu_walsender_us_per_xact": s(30.0)},
                "pg_receivewal": {"tps": s(1637.0), "latency_ms": s(2.44),
                                  "pg_receivewal_lag_p50_ms": s(0.25),
                                  "pg_receivewal_lag_p90_ms": s(0.6),
                                  "pg_receivewal_cpu_us_per_xact": s(100.0)},
                "none": {"tps": s(1814.0), "latency_ms": s(2.21),
                         "walship_cpu_us_per_xact": s(250.0, 240.0, 260.0),
                         "pg_receivewal_cpu_us_per_xact": s(90.0)}},
            "added_latency_ms": {"walship": walship_latency - 2.21,
                                 "pg_receivewal": 2.44 - 2.21},
            "added_ratio": (walship_latency - 2.21) / (2.44 - 2.21),
            "lag_all_rounds": {"walship": {"p50": s(0.5, 0.4, 0.6), "p90": s(1.0)},
                               "pg_receivewal": {"p50": s(0.3), "p90": s(0.7)}},
            "traced": {"tps": 1500.0, "frames": 900, "sent": 950, "breakdown": breakdown}}


class SyncCostReportTest(unittest.TestCase):

    def test_target_needs_tps_and_added_latency(self):
        r = fake()
        self.assertNotIn("synccost", [t["id"] for t in report.evaluate(r)])
        r["sections"]["synccost"] = fake_synccost()
        t = {x["id"]: x for x in report.evaluate(r)}["synccost"]
        self.assertEqual(t["pass"], False)
        self.assertEqual(t["measured"], "1544 vs 1637 TPS; +0.380 vs +0.230 ms per commit "
                                        "(1.65x)")
        r["sections"]["synccost"] = fake_synccost(1700.0, 2.40)
        self.assertEqual({x["id"]: x for x in report.evaluate(r)}["synccost"]["pass"], True)
        # More TPS but more added latency is still a miss.
        r["sections"]["synccost"] = fake_synccost(1700.0, 2.50)
        self.assertEqual({x["id"]: x for x in report.evaluate(r)}["synccost"]["pass"], False)

    def test_tables(self):
        r = fake()
        r["sections"]["synccost"] = fake_synccost()
        md = report.markdown(r)
        self.assertIn("### Synchronous commit cost (pgbench TPC-B scale 10, 4 clients, 15 s "
                      "rounds;", md)
        self.assertIn("| walship (agent's flush feed) | 1544 (1524–1574) | 2.590 | +0.380 | "
                      "0.41 / 0.90 | 300 (agent 120, replica 150, walsender 30) |", md)
        self.assertIn("| pg_receivewal --synchronous | 1637 | 2.440 | +0.230 | 0.25 / 0.60 | "
                      "100 |", md)
        self.assertIn("| nobody (both connected, asynchronous) | 1814 | 2.210 | – | – | – |",
                      md)
        self.assertIn("in the rounds where nobody waited for anyone, so every receiver saw the "
                      "same load: walship (agent's flush feed) 250 (240–260) µs; "
                      "pg_receivewal --synchronous 90 µs.", md)
        self.assertIn("walship adds 0.380 ms to each commit where pg_receivewal adds 0.230 "
                      "(1.65x)", md)
        self.assertIn("over every round, synchronous or not (all connected, sampled at the "
                      "same instants: a pairwise comparison): walship 0.50 (0.40–0.60) / 1.00 "
                      "ms; pg_receivewal 0.30 / 0.70 ms.", md)
        self.assertIn("900 of the 950 frames sent", md)
        self.assertIn("| frame sent -> replica read its header | 100 | 180 |", md)
        self.assertIn("| total: feed announced -> status update written | 380 | 720 |", md)
        self.assertIn("synchronous rounds) | 250 | 600 |", md)
        # Before the fan-out table, like the sections run.
        self.assertLess(md.index("### Synchronous commit cost"), md.index("### Fan-out"))

    def test_round_by_round(self):
        r = fake()
        sc = fake_synccost()
        sc["runs"] = {"walship": [{"tps": 1000.0}, {"tps": 1100.0}, {"tps": 900.0}],
                      "pg_receivewal": [{"tps": 1000.0}, {"tps": 1000.0}, {"tps": 1000.0}],
                      "walship-b": [{"tps": 950.0}, {"tps": 1100.0}]}
        r["sections"]["synccost"] = sc
        t = {x["id"]: x for x in report.evaluate(r)}["synccost"]
        self.assertEqual(t["measured"], "1544 vs 1637 TPS (round by round 1.00); +0.380 vs "
                                        "+0.230 ms per commit (1.65x)")
        md = report.markdown(r)
        self.assertIn("Round by round, walship's TPS over pg_receivewal's in the same round: "
                      "1.00, 1.10, 0.90 (median 1.00; walship ahead in 1 of 3; sign test p = 1.00: "
                      "these rounds cannot tell them apart).", md)
        # Only the rounds both ran.
        self.assertIn("Round by round, walship-b's TPS over walship's in the same round: "
                      "0.95, 1.00 (median 0.97; walship-b ahead in 0 of 2; sign test p = 1.00: "
                      "these rounds cannot tell them apart).", md)
        self.assertIn("Round by round, walship-b's TPS over pg_receivewal's in the same round: "
                      "0.95, 1.10 (median", md)
        self.assertNotIn("SCHED_FIFO", md)
        sc["walship_fifo_priority"] = 1
        sc["summary"]["walship-b"] = sc["summary"]["walship"]
        self.assertIn("walship's commit-path threads ran under SCHED_FIFO at priority 1 "
                      "(--sched-fifo-priority), walship-b's under the normal policy.",
                      report.markdown(r))
        sc["runs"] = {"walship": [{"tps": 1000.0}]}
        self.assertNotIn("Round by round", report.markdown(r))

    def test_sign_test(self):
        from integration.bench.report_synccost import sign_test_p
        # 5 ahead of 15: 2 * (C(15,0) + ... + C(15,5)) / 2**15.
        self.assertAlmostEqual(sign_test_p([1.1] * 5 + [0.9] * 10), 2 * 4944 / 32768)
        self.assertAlmostEqual(sign_test_p([0.9] * 10), 2 / 1024)
        self.assertAlmostEqual(sign_test_p([1.1] * 10 + [1.0]), 2 / 1024)  # the tie left out
        self.assertEqual(sign_test_p([1.1, 0.9]), 1.0)
        self.assertIsNone(sign_test_p([1.0, 1.0]))
        r = fake()
        sc = fake_synccost()
        sc["runs"] = {"walship": [{"tps": 900.0}] * 6,
                      "pg_receivewal": [{"tps": 1000.0}] * 6}
        r["sections"]["synccost"] = sc
        self.assertIn("(median 0.90; walship ahead in 0 of 6; sign test p = 0.03: a difference "
                      "these rounds show).", report.markdown(r))

    def test_flush_lag_round_against_round(self):
        r = fake()
        sc = fake_synccost()
        # Every round samples every receiver connected, whoever is waited for.
        rd = {"tps": 1000.0, "walship_lag_p50_ms": 0.9, "pg_receivewal_lag_p50_ms": 0.6,
              "raw-relay_lag_p50_ms": 0.6}
        sc["runs"] = {"walship": [dict(rd)] * 5, "pg_receivewal": [dict(rd)] * 5,
                      "none": [dict(rd, **{"walship_lag_p50_ms": 0.5})]}
        r["sections"]["synccost"] = sc
        md = report.markdown(r)
        self.assertIn("Flush lag p50, round against round at the same instants: walship's above "
                      "pg_receivewal's in 10 of 11 (sign test p = 0.01: a difference these "
                      "rounds show); walship's above raw-relay's in 10 of 11 (sign test "
                      "p = 0.01: a difference these rounds show).", md)
        # The relay and pg_receivewal tie in every round: nothing to test.
        self.assertNotIn("raw-relay's above", md)
        sc["runs"] = {"walship": [{"tps": 1000.0}]}
        self.assertNotIn("round against round", report.markdown(r))

    def test_raw_relay(self):
        r = fake()
        sc = fake_synccost()
        sc["summary"]["raw-relay"] = {
            "tps": s(1600.0), "latency_ms": s(2.50), "raw-relay_lag_p50_ms": s(0.30),
            "raw-relay_lag_p90_ms": s(0.65), "raw-relay_cpu_us_per_xact": s(140.0),
            "raw-relay_cpu_relay_send_us_per_xact": s(50.0),
            "raw-relay_cpu_relay_recv_us_per_xact": s(60.0),
            "raw-relay_cpu_walsender_us_per_xact": s(30.0)}
        sc["added_latency_ms"]["raw-relay"] = 2.50 - 2.21
        sc["runs"] = {"walship": [{"tps": 900.0}, {"tps": 950.0}],
                      "raw-relay": [{"tps": 1000.0}, {"tps": 1000.0}],
                      "pg_receivewal": [{"tps": 1100.0}, {"tps": 900.0}]}
        r["sections"]["synccost"] = sc
        md = report.markdown(r)
        self.assertIn("| raw relay: agent beside the primary, separate receiver, nothing else "
                      "(`--synccost-relay`) | 1600 | 2.500 | +0.290 | 0.30 / 0.65 | 140 "
                      "(relay_send 50, relay_recv 60, walsender 30) |", md)
        # Between walship's row and pg_receivewal's.
        at = md.index("### Synchronous commit cost")
        self.assertLess(md.index("| walship (agent's", at), md.index("| raw relay:", at))
        self.assertLess(md.index("| raw relay:", at), md.index("| pg_receivewal --sync", at))
        self.assertIn("Round by round, raw-relay's TPS over pg_receivewal's in the same round: "
                      "0.91, 1.11 (median 1.01; raw-relay ahead in 1 of 2; sign test p = 1.00: "
                      "these rounds cannot tell them apart).", md)
        self.assertIn("Round by round, walship's TPS over raw-relay's in the same round: "
                      "0.90, 0.95 (median 0.93; walship ahead in 0 of 2; sign test p = 0.50: "
                      "these rounds cannot tell them apart).", md)
        # The target stays walship against pg_receivewal.
        t = {x["id"]: x for x in report.evaluate(r)}["synccost"]
        self.assertIn("(round by round 0.94)", t["measured"])

    def test_without_a_traced_round(self):
        r = fake()
        sc = fake_synccost()
        sc["traced"] = None
        r["sections"]["synccost"] = sc
        md = report.markdown(r)
        self.assertIn("### Synchronous commit cost", md)
        self.assertNotIn("Where a synchronous commit's time goes", md)


class FormatsReportTest(unittest.TestCase):

    def test_table(self):
        r = fake()
        self.assertNotIn("### Database logs", report.markdown(r))
        run = {"mb_s": s(200.0), "agent_cpu_s_per_gib": s(0.6), "replica_cpu_s_per_gib": s(1.1)}
        twin = {"mb_s": s(160.0, 150.0, 170.0), "agent_cpu_s_per_gib": s(0.8),
                "replica_cpu_s_per_gib": s(1.4)}
        r["sections"]["formats"] = {
            "bytes": {"etcd": 192 << 20, "rocksdb": 200 << 20}, "files": {"etcd": 4, "rocksdb": 7},
            "summary": {"etcd": run, "append-etcd": twin}, "method": "m"}
        md = report.markdown(r)
        self.assertIn("| etcd 3.4 WAL (`--format=etcd`) | 192 (4) | 200 | 160 (150–170) | 1.25 | "
                      "0.60 / 0.80 | 1.10 / 1.40 |", md)
        self.assertNotIn("RocksDB 7.8 logs", md)  # not run: no row


if __name__ == "__main__":
    unittest.main()
