"""A witness of a database's log directory: it hard-links every log file
into a directory of its own as soon as it sees it, so that a test can
compare walship's copies with every file the database wrote, including
those the database later removed (purged binlogs, recycled logs)."""

import os
import threading


class Witness(object):
    """Hard-links each file `names(d)` lists in `d` into `keep` as soon as
    it is seen (every 5 ms on a thread of its own, from start() to stop()).
    A hard link keeps the inode: the copy follows the file's later writes,
    and outlives its removal."""

    def __init__(self, d, keep, names):
        self.d, self.keep, self._names = d, keep, names
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.look()
            self._stop.wait(0.005)

    def look(self):
        """One pass: links every listed file not linked yet."""
        for n in self._names(self.d):
            dst = os.path.join(self.keep, n)
            if not os.path.exists(dst):
                try:
                    os.link(os.path.join(self.d, n), dst)
                except FileNotFoundError:
                    pass  # removed since listed

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(10)
