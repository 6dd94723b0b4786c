"""The PostgreSQL world's golden bytes: an archived copy counts only whole.

archive_command copies a completed segment into the archive while the
campaign's checks run; a check that read the copy half-written would find
the replica "differing" at the copy's end, and would take the segment as
complete at the source. The copy lands under its name only once whole, and
a file there of any other size than a segment's is not taken."""

import os
import tempfile
import unittest

from integration.chaos import pg_world
from integration.walshiptest.lsn import segment_name


class Cluster(object):
    def __init__(self, pg_wal):
        self.pg_wal = pg_wal


class GoldenTest(unittest.TestCase):

    def setUp(self):
        root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.w = object.__new__(pg_world.PgWorld)
        self.w.segsize = 1 << 16
        self.w.archive = os.path.join(root, "archive")
        os.mkdir(self.w.archive)
        self.w.pg = Cluster(os.path.join(root, "pg_wal"))
        os.mkdir(self.w.pg.pg_wal)
        self.name = segment_name(1, 5, self.w.segsize)
        self.w.current = (1, 6)  # the flush position is in the next segment
        with open(os.path.join(self.w.pg.pg_wal, self.name), "wb") as f:
            f.write(b"w" * self.w.segsize)

    def archive(self, nbytes):
        with open(os.path.join(self.w.archive, self.name), "wb") as f:
            f.write(b"w" * nbytes)

    def test_a_half_copied_archive_file_is_not_golden(self):
        self.archive(self.w.segsize // 2)
        self.assertEqual(self.w.golden_path(self.name), os.path.join(self.w.pg.pg_wal, self.name))
        self.w.current = (2, 6)  # another timeline now: pg_wal's copy is not this one's
        self.assertIsNone(self.w.golden_path(self.name))
        self.assertFalse(self.w.golden_complete(self.name))

    def test_a_whole_archive_file_is_golden(self):
        self.archive(self.w.segsize)
        self.w.current = (2, 6)
        self.assertEqual(self.w.golden_path(self.name), os.path.join(self.w.archive, self.name))
        self.assertTrue(self.w.golden_complete(self.name))

    def test_archive_command_names_the_copy_once_whole(self):
        cmd = pg_world.archive_command(self.w.archive)
        src = os.path.join(self.w.pg.pg_wal, self.name)
        rc = os.system(cmd.replace("%p", src).replace("%f", self.name))
        self.assertEqual(rc, 0)
        self.assertEqual(sorted(os.listdir(self.w.archive)), [self.name])
        self.assertEqual(os.path.getsize(os.path.join(self.w.archive, self.name)),
                         self.w.segsize)


if __name__ == "__main__":
    unittest.main()
