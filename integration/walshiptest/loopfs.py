"""A small file system of its own for a test: ext4 on a loop device over a
file, so that the device's counters show that file system's I/O alone
(needs root, losetup and mkfs.ext4: util-linux and e2fsprogs). Where the
machine has no loop devices at all, LoopFs() raises NoLoopDevices, a
unittest.SkipTest.

    fs = LoopFs(journal=False, options="noatime")  # options: mount -o
    try:
        ... files under fs.mountpoint ...
        fs.writes()      # write requests the device completed so far
    finally:
        fs.close()

The inode tables are written at mkfs time (no lazy initialisation), so no
background thread writes to the device while a test counts.
"""

import os
import shutil
import subprocess
import tempfile
import unittest


class NoLoopDevices(unittest.SkipTest):
    """This machine has no loop devices (no /dev/loop-control: a container
    without them); a test that needs one is skipped, saying why."""


def _run(argv):
    subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   timeout=60)


class LoopFs(object):
    def __init__(self, size_mb=256, journal=False, base_dir="/tmp", options=None):
        if not os.path.exists("/dev/loop-control"):
            raise NoLoopDevices("no loop devices here (/dev/loop-control is missing)")
        self.dir = tempfile.mkdtemp(prefix="wsloopfs-", dir=base_dir)
        self.image = os.path.join(self.dir, "fs.img")
        self.mountpoint = os.path.join(self.dir, "mnt")
        self.device = None
        self.mounted = False
        try:
            os.chmod(self.dir, 0o755)  # others (a database's user) reach the mount point
            os.mkdir(self.mountpoint)
            with open(self.image, "wb") as f:
                f.truncate(size_mb << 20)
            features = [] if journal else ["-O", "^has_journal"]
            _run(["mkfs.ext4", "-q", "-F"] + features +
                 ["-E", "lazy_itable_init=0,lazy_journal_init=0", self.image])
            self.device = subprocess.run(
                ["losetup", "--find", "--show", self.image], check=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                timeout=60).stdout.strip()
            _run(["mount"] + (["-o", options] if options else []) +
                 [self.device, self.mountpoint])
            self.mounted = True
            os.chmod(self.mountpoint, 0o755)
        except BaseException:
            self.close()
            raise

    def _stat(self):
        name = os.path.basename(self.device)
        with open("/sys/block/%s/stat" % name) as f:
            return [int(x) for x in f.read().split()]

    def writes(self):
        """Write requests the device has completed (flushes included)."""
        return self._stat()[4]

    def close(self):
        if self.mounted:
            r = subprocess.run(["umount", self.mountpoint], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60)
            if r.returncode != 0:  # still in use: detached now, freed when idle
                subprocess.run(["umount", "-l", self.mountpoint], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60)
            self.mounted = False
        if self.device:
            subprocess.run(["losetup", "-d", self.device], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
            self.device = None
        shutil.rmtree(self.dir, ignore_errors=True)
