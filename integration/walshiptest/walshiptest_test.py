"""The shared helpers on their own: waits, LSNs, segment names, port files,
binary lookup."""

import os
import tempfile
import unittest

from integration.walshiptest import binaries
from integration.walshiptest import lsn
from integration.walshiptest import ports
from integration.walshiptest import stats
from integration.walshiptest import waits

SEG16 = 16 << 20


class WaitUntilTest(unittest.TestCase):

    def test_returns_the_first_true_value(self):
        seen = []

        def pred():
            seen.append(1)
            return len(seen) >= 3 and "ready"
        self.assertEqual(waits.wait_until(pred, 10, "three calls", interval=0), "ready")
        self.assertEqual(len(seen), 3)

    def test_timeout_names_what_and_is_an_assertion_and_a_step_error(self):
        with self.assertRaises(waits.WaitTimeout) as cm:
            waits.wait_until(lambda: None, 0, "the moon", interval=0)
        self.assertIn("waiting for the moon", str(cm.exception))
        self.assertIsInstance(cm.exception, AssertionError)
        self.assertIsInstance(cm.exception, waits.StepError)

    def test_what_may_be_a_callable_showing_the_last_state(self):
        state = {"n": 0}

        def pred():
            state["n"] += 1
            return False
        with self.assertRaises(AssertionError) as cm:
            waits.wait_until(pred, 0, lambda: "n=%d" % state["n"], interval=0)
        self.assertIn("n=1", str(cm.exception))

    def test_argument_order_is_pred_timeout_what_interval(self):
        with self.assertRaises(waits.WaitTimeout) as cm:
            waits.wait_until(lambda: 0, 0, "named third", 0)
        self.assertIn("named third", str(cm.exception))


class LsnTest(unittest.TestCase):

    def test_parse_and_format_round_trip(self):
        self.assertEqual(lsn.parse_lsn("1/A2B3C4"), (1 << 32) | 0xA2B3C4)
        self.assertEqual(lsn.fmt_lsn((1 << 32) | 0xA2B3C4), "1/A2B3C4")
        self.assertEqual(lsn.parse_lsn(" 0/0 "), 0)
        self.assertIsNone(lsn.parse_lsn(""))
        self.assertIsNone(lsn.parse_lsn(None))
        self.assertEqual(lsn.fmt_lsn(None), "-")
        for v in (0, 1, 0xFFFFFFFF, 0x100000000, 0x1234567890AB):
            self.assertEqual(lsn.parse_lsn(lsn.fmt_lsn(v)), v)

    def test_segment_names(self):
        self.assertEqual(lsn.segment_name(1, 3, SEG16), "000000010000000000000003")
        # 256 segments of 16 MiB per 4 GiB "xlogid".
        self.assertEqual(lsn.segment_name(2, 256 + 5, SEG16), "000000020000000100000005")
        self.assertEqual(lsn.parse_segment("000000020000000100000005", SEG16), (2, 261))
        self.assertIsNone(lsn.parse_segment("00000002.history", SEG16))
        self.assertIsNone(lsn.parse_segment("", SEG16))
        self.assertIsNone(lsn.parse_segment(None, SEG16))

    def test_position_lsn(self):
        pos = {"segment": "000000010000000000000003", "offset": "100"}
        self.assertEqual(lsn.position_lsn(pos, SEG16), 3 * SEG16 + 100)
        self.assertIsNone(lsn.position_lsn({}, SEG16))
        self.assertIsNone(lsn.position_lsn({"segment": "seg-00000001"}, SEG16))

    def test_record_end_crosses_page_headers(self):
        # Within a page: MAXALIGNed.
        self.assertEqual(lsn.record_end(SEG16 + 100, 54, SEG16), SEG16 + 160)
        # At a segment start the long header (40) comes first.
        self.assertEqual(lsn.record_end(SEG16, 8, SEG16), SEG16 + 48)
        # Over a page boundary: a short header (24) inside the record.
        start = SEG16 + lsn.XLOG_BLCKSZ - 16
        self.assertEqual(lsn.record_end(start, 32, SEG16), SEG16 + lsn.XLOG_BLCKSZ + 24 + 16)


class PercentilesTest(unittest.TestCase):

    def test_nearest_rank(self):
        p = stats.percentiles(list(range(1, 101)))
        self.assertEqual(p, {"n": 100, "p50": 50, "p90": 90, "p99": 99, "max": 100})

    def test_ignores_none_and_handles_empty(self):
        self.assertEqual(stats.percentiles([None, 5, None])["p99"], 5)
        p = stats.percentiles([None])
        self.assertEqual(p["n"], 0)
        self.assertIsNone(p["p50"])
        self.assertIsNone(p["max"])

    def test_single_value(self):
        self.assertEqual(stats.percentiles([7]), {"n": 1, "p50": 7, "p90": 7, "p99": 7, "max": 7})


class PortsTest(unittest.TestCase):

    def test_parse_port_file(self):
        self.assertEqual(ports.parse_port_file("control=127.0.0.1:5\ndata=127.0.0.1:6\n"),
                         {"control": "127.0.0.1:5", "data": "127.0.0.1:6"})
        self.assertEqual(ports.parse_port_file(" metrics=[::1]:9=x \nno equals\n\n"),
                         {"metrics": "[::1]:9=x"})
        self.assertEqual(ports.parse_port_file(""), {})

    def test_read_port_file(self):
        d = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        path = os.path.join(d, "ports")
        self.assertIsNone(ports.read_port_file(path))
        with open(path, "w") as f:
            f.write("control=127.0.0.1:7\n")
        self.assertEqual(ports.read_port_file(path), {"control": "127.0.0.1:7"})
        self.assertEqual(ports.port_of("127.0.0.1:7"), 7)

    def test_free_port_is_a_port(self):
        self.assertTrue(0 < ports.free_port() < 65536)

    def test_free_port_never_gives_a_port_twice(self):
        # The kernel's random pick repeats within a few hundred binds (2000
        # gave 132 repeats here); a cluster's ports must not.
        given = [ports.free_port() for _ in range(2000)]
        self.assertEqual(len(set(given)), len(given))


class BinariesTest(unittest.TestCase):

    def test_bin_dir_comes_first_and_a_missing_binary_says_how_to_build_it(self):
        d = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        old = os.environ.get("WALSHIP_BIN_DIR")
        os.environ["WALSHIP_BIN_DIR"] = d
        try:
            self.assertEqual(binaries.candidates(("nowhere", "no-such-tool"))[0],
                             os.path.join(d, "no-such-tool"))
            with self.assertRaises(binaries.BinaryNotFound) as cm:
                binaries.find(("nowhere", "no-such-tool"))
            self.assertIn("bazel build //nowhere:no-such-tool", str(cm.exception))
            self.assertIsInstance(cm.exception, FileNotFoundError)
            tool = os.path.join(d, "no-such-tool")
            with open(tool, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(tool, 0o755)
            self.assertEqual(binaries.find(("nowhere", "no-such-tool")), tool)
        finally:
            if old is None:
                del os.environ["WALSHIP_BIN_DIR"]
            else:
                os.environ["WALSHIP_BIN_DIR"] = old


if __name__ == "__main__":
    unittest.main()
