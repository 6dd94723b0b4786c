"""Tests for commit_trace.py: parsing the daemons' --trace-commits files and
joining them into per-frame stage times."""

import os
import shutil
import tempfile
import unittest

from integration.bench import commit_trace as ct

SEG = "000000010000000000000003"
NEXT = "000000010000000000000004"


def agent_text(*lines):
    return "".join("%d %s %s %d\n" % l for l in lines)


class ParseTest(unittest.TestCase):

    def test_reads_every_field(self):
        self.assertEqual(ct.parse("10 feed %s 8192\n\n25 sent %s 8192\n" % (SEG, SEG)),
                         [(10, "feed", SEG, 8192), (25, "sent", SEG, 8192)])

    def test_refuses_a_stage_of_the_other_daemon(self):
        with self.assertRaisesRegex(ct.TraceError, "line 1"):
            ct.parse("10 header %s 8192\n" % SEG, ct.AGENT_STAGES)

    def test_refuses_malformed_lines(self):
        for bad in ("10 feed %s\n" % SEG, "x feed %s 1\n" % SEG, "10 feed %s 1 2\n" % SEG,
                    "10 fed %s 1\n" % SEG):
            with self.assertRaises(ct.TraceError, msg=bad):
                ct.parse(bad)


class JoinTest(unittest.TestCase):

    def test_one_commit_through_every_stage(self):
        agent = [(100, "feed", SEG, 8192), (150, "sent", SEG, 8192), (900, "ack", SEG, 8192),
                 (960, "status", SEG, 8192)]
        replica = [(140, "header", SEG, 8192), (200, "spliced", SEG, 8192),
                   (230, "verified", SEG, 8192), (700, "synced", SEG, 8192),
                   (800, "ack_sent", SEG, 8192)]
        frames = ct.join(agent, replica)
        self.assertEqual(len(frames), 1)
        f = frames[0]
        self.assertEqual((f["segment"], f["offset"]), (SEG, 8192))
        b = {r["from"] + ">" + r["to"]: r["p50_us"] for r in ct.breakdown(frames)}
        self.assertEqual(b["feed>sent"], 0.05)
        # The header may be read before sendfile returns: negative, as is.
        self.assertEqual(b["sent>header"], -0.01)
        self.assertEqual(b["verified>synced"], 0.47)
        self.assertEqual(b["ack>status"], 0.06)
        self.assertEqual(b["feed>status"], 0.86)

    def test_later_cycles_cover_earlier_frames(self):
        # Two frames made durable by one fdatasync and one acknowledgement
        # (covering both); a later cycle covers the third, in the next
        # segment.
        agent = [(10, "feed", SEG, 100), (11, "sent", SEG, 100),
                 (20, "feed", SEG, 200), (21, "sent", SEG, 200),
                 (30, "feed", NEXT, 50), (31, "sent", NEXT, 50),
                 (60, "ack", SEG, 200), (61, "status", SEG, 200),
                 (90, "ack", NEXT, 50), (91, "status", NEXT, 50)]
        replica = [(12, "header", SEG, 100), (13, "spliced", SEG, 100),
                   (14, "verified", SEG, 100),
                   (22, "header", SEG, 200), (23, "spliced", SEG, 200),
                   (24, "verified", SEG, 200),
                   (40, "synced", SEG, 200), (50, "ack_sent", SEG, 200),
                   (32, "header", NEXT, 50), (33, "spliced", NEXT, 50),
                   (34, "verified", NEXT, 50),
                   (70, "synced", NEXT, 50), (80, "ack_sent", NEXT, 50)]
        frames = ct.join(agent, replica)
        self.assertEqual([(f["segment"], f["offset"]) for f in frames],
                         [(SEG, 100), (SEG, 200), (NEXT, 50)])
        self.assertEqual([f["synced"] for f in frames], [40, 40, 70])
        self.assertEqual([f["status"] for f in frames], [61, 61, 91])
        totals = sorted(f["status"] - f["feed"] for f in frames)
        self.assertEqual(totals, [41, 51, 61])

    def test_frames_without_an_announcement_or_not_yet_acknowledged_are_left_out(self):
        agent = [(10, "sent", SEG, 100),  # split frame: no feed at 100
                 (20, "feed", SEG, 200), (21, "sent", SEG, 200),
                 (30, "feed", SEG, 300), (31, "sent", SEG, 300),  # never acknowledged
                 (60, "ack", SEG, 200), (61, "status", SEG, 200)]
        replica = []
        for ns, off in ((12, 100), (22, 200), (32, 300)):
            replica += [(ns, "header", SEG, off), (ns + 1, "spliced", SEG, off),
                        (ns + 2, "verified", SEG, off)]
        replica += [(40, "synced", SEG, 200), (50, "ack_sent", SEG, 200)]
        frames = ct.join(agent, replica)
        self.assertEqual([f["offset"] for f in frames], [200])

    def test_the_blocked_write_is_beside_the_path(self):
        agent = [(100, "feed", SEG, 8), (110, "sent", SEG, 8), (300, "ack", SEG, 8),
                 (320, "status", SEG, 8)]
        replica = [(112, "header", SEG, 8), (120, "spliced", SEG, 8), (122, "verified", SEG, 8),
                   (200, "synced", SEG, 8), (250, "ack_sent", SEG, 8),
                   (400, "ack_written", SEG, 8)]
        rows = {(r["from"], r["to"]): r for r in ct.breakdown(ct.join(agent, replica))}
        self.assertEqual(rows[("ack_sent", "ack_written")]["p50_us"], 0.15)
        self.assertEqual(rows[("ack_sent", "ack")]["p50_us"], 0.05)
        # Without ack_written records (an older build) the frame still
        # joins; only that interval is empty.
        replica = replica[:-1]
        rows = {(r["from"], r["to"]): r for r in ct.breakdown(ct.join(agent, replica))}
        self.assertEqual(rows[("feed", "status")]["n"], 1)
        self.assertEqual(rows[("ack_sent", "ack_written")]["n"], 0)
        self.assertIsNone(rows[("ack_sent", "ack_written")]["p50_us"])

    def test_percentiles_over_frames(self):
        frames = [{s: 0 for s in ct.STAGES} for _ in range(10)]
        for i, f in enumerate(frames):
            f["status"] = (i + 1) * 1000  # 1..10 us
        total = ct.total(ct.breakdown(frames))
        self.assertEqual((total["p50_us"], total["p90_us"], total["n"]), (6.0, 10.0, 10))
        self.assertIsNone(ct.breakdown([])[0]["p50_us"])

    def test_analyze_reads_both_files(self):
        d = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, d, True)
        a, r = os.path.join(d, "agent"), os.path.join(d, "replica")
        with open(a, "w") as f:
            f.write(agent_text((1, "feed", SEG, 8), (2, "sent", SEG, 8), (8, "ack", SEG, 8),
                               (9, "status", SEG, 8), (10, "sent", SEG, 16)))
        with open(r, "w") as f:
            f.write(agent_text((3, "header", SEG, 8), (4, "spliced", SEG, 8),
                               (5, "verified", SEG, 8), (6, "synced", SEG, 8),
                               (7, "ack_sent", SEG, 8)))
        out = ct.analyze(a, r)
        self.assertEqual((out["frames"], out["sent"]), (1, 2))
        self.assertEqual(ct.total(out["breakdown"])["p50_us"], 0.008)


if __name__ == "__main__":
    unittest.main()
