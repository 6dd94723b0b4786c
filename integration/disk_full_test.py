"""Disk full on the replica, made for real with a small tmpfs.

The replica's --dest is a 16 MiB tmpfs the test mounts. While a generator
writes, a filler file takes the remaining space. The replica must not crash,
must say "disk full" in its log, must never acknowledge a byte it does not
hold (checked repeatedly while the disk is full), and must resume by itself
once the filler is removed, ending byte-identical.
"""

import errno
import os
import re
import subprocess
import time
import unittest
import urllib.request

from integration import harness as h

TMPFS_BYTES = 16 << 20
SEGMENT = 1 << 20


def mount_tmpfs(path):
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % TMPFS_BYTES, "tmpfs", path],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stderr.strip()


def scrape(replica):
    """The replica's /metrics as {series: value} (port read from its log)."""
    m = re.search(r"metrics on http://([0-9.]+:[0-9]+)/metrics", replica.log_text())
    assert m, "the replica did not log its metrics address"
    text = urllib.request.urlopen("http://%s/metrics" % m.group(1), timeout=5).read().decode()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            series[key] = float(value)
    return series


def fill(path, chunk=1 << 16):
    """Writes zeros into `path` until the filesystem is full.

    Unbuffered: a buffered file that hits ENOSPC keeps the unwritten tail
    and raises again when closed, whenever the last write came up short.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        block = b"\0" * chunk
        while True:
            try:
                os.write(fd, block)  # a short write is fine: the next one fails
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)


class DiskFullTest(h.ClusterTestCase):

    def test_full_disk_stops_acknowledging_and_resumes(self):
        c = self.cluster
        wal = c.dir("wal")
        dest = c.dir("dest")
        ok, err = mount_tmpfs(dest)
        if not ok:
            self.skipTest("cannot mount a tmpfs here (%s)" % err)
        self.addCleanup(lambda: subprocess.run(["umount", "-l", dest]))

        gen = c.generator(wal, rate=2e6, segment_size=SEGMENT)
        agent = c.agent(wal).start()
        replica = c.replica(agent, "full", dest=dest,
                            extra_args=["--metrics-listen=127.0.0.1:0"]).start()
        gen.start()
        h.wait_until(lambda: (h.flushed(h.try_status(agent), "full") or h.Pos("", 0)).segment
                     >= "seg-00000002", 30, "the replica to start following")

        filler = os.path.join(dest, "filler.tmp")
        fill(filler)
        h.wait_until(lambda: replica.grep(r"disk full in "), 30,
                     "the replica to report the full disk")
        # While full: nothing acknowledged that is not on disk, repeatedly.
        stalled_at = None
        for _ in range(10):
            acked = h.flushed(h.try_status(agent), "full")
            if acked is not None:
                self.assertEqual(h.acked_bytes_problems(wal, dest, acked), [])
                stalled_at = acked
            self.assertEqual(h.dest_consistency(wal, dest), [])
            time.sleep(0.3)
        self.assertIsNotNone(stalled_at, "no acknowledged position seen while full")
        self.assertTrue(replica.running(), "the replica exited on a full disk")
        m = scrape(replica)
        self.assertGreaterEqual(m.get("walship_replica_disk_full_total", 0), 1, m)
        self.assertGreater(m.get('walship_replica_bytes_received_total{path="zerocopy"}', 0), 0)
        self.assertGreater(m.get("walship_replica_flush_seconds_count", 0), 0)
        self.assertGreater(m.get("walship_replica_data_fdatasync_seconds_count", 0), 0)

        # Space returns: the replica resumes by itself.
        os.unlink(filler)
        gen.stop()
        end = self.wait_caught_up(agent, wal, ["full"], timeout=90)
        h.compare_dirs(wal, dest)
        self.assertGreater(end, stalled_at)
        self.assertTrue(replica.running())


if __name__ == "__main__":
    unittest.main()
