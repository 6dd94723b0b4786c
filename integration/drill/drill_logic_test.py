"""Unit tests of the drill's decisions, without PostgreSQL or walship.

The promotion gate (refuse when the standby is behind), the RPO checks
(nothing lost; a suffix, never a hole), commit ages, LSN and segment
arithmetic, and the pg_waldump line format.
"""

import os
import shutil
import tempfile
import unittest

from integration.drill import drill_measure
from integration.drill import drill_setup
from integration.drill import drill_steps
from integration.walshiptest.lsn import (
    fmt_lsn, parse_lsn, parse_segment, position_lsn, record_end, segment_name)
from integration.walshiptest.pg import WALDUMP_RE

MB = 1024 * 1024


class LsnTest(unittest.TestCase):

    def test_parse_and_format(self):
        self.assertEqual(parse_lsn("1/A2B3C4"), (1 << 32) | 0xA2B3C4)
        self.assertEqual(fmt_lsn((1 << 32) | 0xA2B3C4), "1/A2B3C4")
        self.assertIsNone(parse_lsn(""))
        self.assertEqual(fmt_lsn(None), "-")

    def test_segments(self):
        # 16 MiB segments: 256 per 4 GiB "xlogid".
        self.assertEqual(parse_segment("000000020000000100000003", 16 * MB), (2, 259))
        self.assertEqual(segment_name(2, 259, 16 * MB), "000000020000000100000003")
        self.assertEqual(parse_segment("00000001000000000000001F", MB), (1, 31))
        self.assertIsNone(parse_segment("00000002.history", MB))
        self.assertIsNone(parse_segment("", MB))
        pos = {"segment": "00000001000000000000001F", "offset": "1042568"}
        self.assertEqual(position_lsn(pos, MB), 0x1FFE888)
        self.assertIsNone(position_lsn({"segment": "", "offset": "0"}, MB))

    def test_record_end(self):
        seg = MB
        # Within a page: start + length, MAXALIGNed.
        self.assertEqual(record_end(0x1000040, 54, seg), 0x1000078)
        # Crossing into the next page skips its 24-byte short header.
        self.assertEqual(record_end(0x1001FF0, 32, seg), 0x1002000 + 24 + 16)
        # Crossing into a new segment skips the 40-byte long header.
        self.assertEqual(record_end(seg - 16, 32, seg), seg + 40 + 16)
        # Ending exactly at a page end: no header added.
        self.assertEqual(record_end(0x1001FE0, 32, seg), 0x1002000)

    def test_waldump_line(self):
        line = ("rmgr: Heap        len (rec/tot):     54/    54, tx:        736, "
                "lsn: 0/0148A9D8, prev 0/0148A9A0, desc: INSERT off 3 flags 0x00, blkref #0: "
                "rel 1663/5/16384 blk 0")
        m = WALDUMP_RE.match(line)
        self.assertIsNotNone(m)
        self.assertEqual((m.group(1), m.group(3), m.group(4)), ("Heap", "54", "0/0148A9D8"))
        sw = ("rmgr: XLOG        len (rec/tot):     24/    24, tx:          0, "
              "lsn: 0/01FFE888, prev 0/01FFE810, desc: SWITCH ")
        self.assertEqual(WALDUMP_RE.match(sw).group(5), "SWITCH")


class FakeLoad(object):

    def __init__(self, seqs, start_seq=1, times=None, lsns=None):
        self.seqs, self.start_seq = seqs, start_seq
        self.times = times or [float(s) for s in seqs]
        self.lsns = lsns or [None] * len(seqs)

    def acks(self):
        return self.seqs, self.times, self.lsns


class FakeCluster(object):
    name = "standby"

    def __init__(self, rows):
        self.rows = rows

    def psql(self, sql, timeout=30, check=True):
        return "\n".join(str(r) for r in self.rows)


class AckedPresentTest(unittest.TestCase):

    def run_check(self, acked, rows, suffix):
        res = drill_steps.Result("t")
        drill_steps.check_acked_present(res, FakeCluster(rows), [FakeLoad(acked)], suffix)
        return res

    def test_all_present(self):
        res = self.run_check([1, 2, 3], [1, 2, 3], False)
        self.assertTrue(res.ok)
        self.assertEqual(res.metrics["acked_lost"], 0)

    def test_loss_fails_when_none_allowed(self):
        res = self.run_check([1, 2, 3], [1, 2], False)
        self.assertFalse(res.ok)
        self.assertEqual(res.metrics["acked_lost"], 1)

    def test_suffix_loss_allowed(self):
        res = self.run_check([1, 2, 3, 4], [1, 2], True)
        self.assertTrue(res.ok)
        self.assertEqual(res.metrics["acked_lost"], 2)

    def test_hole_fails(self):
        res = self.run_check([1, 2, 3, 4], [1, 2, 4], True)
        self.assertFalse(res.ok)
        self.assertIn("hole", " ".join(i["name"] for i in res.invariants if not i["ok"]))

    def test_in_flight_row_is_allowed_unknown_is_not(self):
        # seq 4 was sent but its COMMIT never acknowledged: may be present.
        self.assertTrue(self.run_check([1, 2, 3], [1, 2, 3, 4], False).ok)
        res = self.run_check([1, 2, 3], [1, 2, 3, 9], False)
        self.assertFalse(res.ok)


class CommitAgeTest(unittest.TestCase):

    def test_oldest_unreplicated_commit(self):
        times = [10.0, 11.0, 12.0]
        lsns = [100, 200, 300]
        self.assertEqual(drill_measure.commit_age(12.5, 300, times, lsns), 0.0)
        self.assertEqual(drill_measure.commit_age(12.5, 200, times, lsns), 500.0)
        self.assertEqual(drill_measure.commit_age(12.5, 150, times, lsns), 1500.0)
        # A commit acknowledged after the sample does not count.
        self.assertEqual(drill_measure.commit_age(11.5, 200, times, lsns), 0.0)
        self.assertIsNone(drill_measure.commit_age(12.5, None, times, lsns))


class FakeStandby(object):
    name = "standby"

    def __init__(self, lsns):
        self.lsns = list(lsns)

    def running(self):
        return True

    def lsn(self, fn):
        return self.lsns.pop(0) if len(self.lsns) > 1 else self.lsns[0]


class FakeReplica(object):

    def __init__(self, durable):
        self.durable = durable

    def timeline(self):
        return 1

    def durable_lsn(self):
        return self.durable


class PromotionGateTest(unittest.TestCase):

    def setUp(self):
        work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, work, True)
        self.ctx = drill_setup.Ctx(None, work, 1, drill_setup.Params(True))
        self.ctx.p.replay_timeout = 1.0
        self.ctx.p.replay_stall = 0.3
        self.beyond = []
        self.saved = drill_steps.records_beyond
        drill_steps.records_beyond = lambda ctx, s, rep, start, tli: self.beyond.pop(0)

    def tearDown(self):
        drill_steps.records_beyond = self.saved

    def test_caught_up(self):
        ok, r, _ = drill_steps.wait_standby_replayed(self.ctx, None, FakeStandby([50, 100]),
                                                     FakeReplica(100), 100)
        self.assertTrue(ok)
        self.assertEqual(r, 100)

    def test_incomplete_record_tail_is_caught_up(self):
        # Replay stops 40 bytes short; those bytes hold no complete record.
        self.beyond = [(0, 100)]
        ok, r, detail = drill_steps.wait_standby_replayed(self.ctx, None, FakeStandby([60]),
                                                          FakeReplica(100), 100)
        self.assertTrue(ok, detail)
        self.assertIn("no complete record", detail)

    def test_behind_refuses(self):
        # Replay stuck while complete records remain: refuse to promote.
        self.beyond = [(3, 100), (3, 100)]
        ok, r, detail = drill_steps.wait_standby_replayed(self.ctx, None, FakeStandby([60]),
                                                          FakeReplica(100), 100)
        self.assertFalse(ok)
        self.assertEqual(r, 60)
        self.assertIn("behind", detail)


if __name__ == "__main__":
    unittest.main()
