"""The append world's writer: the golden copy is never behind the source.

The campaign checks a replica's acknowledged bytes against golden/ while
the writer runs. The agent may ship a byte the moment it is in src/, so
every byte in src/ must already be in golden/; otherwise a check that
lands between the two writes reports the replica as differing at the end
of the golden file although it holds the right bytes."""

import builtins
import os
import random
import tempfile
import unittest
from unittest import mock

from integration.chaos import append_world


class GoldenFirstTest(unittest.TestCase):

    def setUp(self):
        root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.src, self.golden = os.path.join(root, "src"), os.path.join(root, "golden")
        os.mkdir(self.src)
        os.mkdir(self.golden)
        self.writer = append_world.Writer(self.src, self.golden, random.Random(7), True)
        self.opens = 0

    def size(self, d, name):
        p = os.path.join(d, name)
        return os.path.getsize(p) if os.path.exists(p) else 0

    def check_then_open(self, path, *args, **kwargs):
        """At every open (between any two of the writer's writes), each
        source file is no longer than its golden copy."""
        for name in os.listdir(self.src):
            self.assertLessEqual(self.size(self.src, name), self.size(self.golden, name),
                                 "%s: the source holds bytes golden/ does not" % name)
        self.opens += 1
        return builtins.open(path, *args, **kwargs)

    def test_every_source_byte_is_in_golden_first(self):
        with mock.patch.object(append_world, "open", self.check_then_open, create=True):
            self.writer.step(4096)
            while self.writer.seq < 3:  # two rotations: new segments too
                self.writer.step(64 << 10)
        self.assertGreater(self.opens, 4)
        for name in os.listdir(self.src):
            with open(os.path.join(self.src, name), "rb") as a, \
                    open(os.path.join(self.golden, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)


if __name__ == "__main__":
    unittest.main()
