"""The campaign's convergence rule on a fake world: the end of a complete
segment and offset 0 of the next are one byte position."""

import os
import tempfile
import unittest

from integration import harness as h
from integration.chaos import checks


class FakeWorld(object):
    def __init__(self, golden):
        self.golden = golden

    def parse(self, name):
        return (1, int(name[4:])) if name.startswith("seg-") else None

    def golden_path(self, name):
        p = os.path.join(self.golden, name)
        return p if os.path.isfile(p) else None

    def golden_complete(self, name):
        return name < "seg-00000003"


class Running(object):
    name = "r1"

    def running(self):
        return True


class CaughtUpTest(unittest.TestCase):

    def setUp(self):
        self.golden = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        with open(os.path.join(self.golden, "seg-00000002"), "wb") as f:
            f.write(b"x" * 100)
        open(os.path.join(self.golden, "seg-00000003"), "wb").close()
        self.world = FakeWorld(self.golden)

    def caught_up(self, flushed, target, connected=True):
        st = {"replicas": [{"name": "r1", "connected": connected,
                            "flushed": {"segment": flushed[0], "offset": flushed[1]}}]}
        return checks._caught_up(self.world, st, Running(), h.Pos(*target))

    def test_the_end_of_the_previous_complete_segment_is_offset_0_of_the_next(self):
        self.assertTrue(self.caught_up(("seg-00000002", 100), ("seg-00000003", 0)))

    def test_short_of_that_end_is_behind(self):
        self.assertFalse(self.caught_up(("seg-00000002", 99), ("seg-00000003", 0)))
        self.assertFalse(self.caught_up(("seg-00000001", 100), ("seg-00000003", 0)))
        self.assertFalse(self.caught_up(("seg-00000002", 100), ("seg-00000003", 5)))

    def test_past_the_target_and_disconnected(self):
        self.assertTrue(self.caught_up(("seg-00000003", 0), ("seg-00000002", 100)))
        self.assertFalse(self.caught_up(("seg-00000003", 0), ("seg-00000003", 0),
                                        connected=False))


if __name__ == "__main__":
    unittest.main()
