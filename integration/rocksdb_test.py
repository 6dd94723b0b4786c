"""--format=rocksdb with the real RocksDB tools (Debian's rocksdb-tools).

Two layouts, each a database created by db_bench with
--wal_ttl_seconds=3600: the default one (the logs beside the SST, MANIFEST,
CURRENT, IDENTITY, LOCK, LOG, LOG.old.* and OPTIONS files, followed without
--segment-pattern) and one with --wal_dir. Rounds of `ldb batchput` (each
one opens the database: RocksDB replays the last log, flushes it to an SST
file, moves it into archive/ and starts a new log) write 20 keys each; a
round is acknowledged when ldb exits 0 and prints OK. After round 5 `ldb
checkpoint` takes the base backup. walship-agent --format=rocksdb and
walship-replica ship the logs, following them into archive/; the agent is
killed (-9) after round 12 and restarted after round 15, the replica killed
after round 24 and restarted after round 27, so logs are archived while
each is down.

Without WAL_ttl_seconds RocksDB deletes a flushed log at once, and a log
deleted before the agent saw it complete (its successor's creation and its
deletion happen within one open) stops the replica with a gap, even while
both run: a race the tests do not run (see docs/formats.md).

A witness thread hard-links each log as it appears, so its bytes outlive
RocksDB's deletion. At the end:
  * every witnessed log is on the replica, and the replica's copy equals
    the log's valid records (integration/rocksdblog.py, a second reader of
    the framing, CRC included) byte for byte; `ldb dump_wal` prints the same
    for both;
  * a database restored from the checkpoint plus the replica's logs holds
    every acknowledged write, and the same keys and values as the source.
"""

import os
import shutil
import subprocess
import unittest

from integration import harness as h
from integration import rocksdblog
from integration.walshiptest import procs
from integration.walshiptest import waits
from integration.walshiptest.witness import Witness

LDB = "/usr/bin/ldb"
DB_BENCH = "/usr/bin/db_bench"
ROUNDS = 36
KEYS = 20
log = procs.log


def run(*argv):
    p = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError("%s failed (exit %d): %s" % (" ".join(argv), p.returncode,
                                                         p.stdout[-2000:]))
    return p.stdout


def logs_in(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".log") and n[:-4].isdigit())


def scan(db):
    """{key: value} of the database at `db` (ldb scan, hex)."""
    out = {}
    for line in run(LDB, "--db=" + db, "--hex", "scan").splitlines():
        k, sep, v = line.partition(" : ")
        if sep:
            out[k] = v
    return out


class RocksdbTest(h.ClusterTestCase):

    def ship(self, separate_wal_dir):
        c = self.cluster
        db = os.path.join(c.root, "db")
        wal = os.path.join(c.root, "wal") if separate_wal_dir else db
        # WAL_ttl_seconds: RocksDB moves a flushed log into archive/ rather
        # than delete it at once (see the module comment).
        run(DB_BENCH, "--benchmarks=fillseq", "--db=" + db, "--wal_ttl_seconds=3600",
            "--num=200", "--value_size=100", "--compression_type=none",
            *(["--wal_dir=" + wal] if separate_wal_dir else []))
        witness = Witness(wal, c.dir("witness"), logs_in).start()
        c.on_close(witness.stop)
        agent = c.agent(wal, extra_args=["--format=rocksdb"]).start()
        dest = c.dir("dest")
        replica = c.replica(agent, "r1", dest=dest).start()
        self.wait_shipped(agent, wal)
        ckpt = os.path.join(c.root, "checkpoint")
        acked = {}
        for r in range(1, ROUNDS + 1):
            batch = {}
            for k in range(KEYS):
                batch[b"round%02d-key%02d" % (r, k)] = b"value-%d-%d-" % (r, k) + b"v" * 400
            args = [a.decode() for kv in sorted(batch.items()) for a in kv]
            if "OK" in run(LDB, "--db=" + db, "batchput", *args):
                acked.update(batch)
            if r == 5:
                run(LDB, "--db=" + db, "checkpoint", "--checkpoint_dir=" + ckpt)
            elif r == 12:
                agent.kill()  # rounds 13-15 run while it is down
            elif r == 15:
                agent.restart()
            elif r == 24:
                replica.kill()  # rounds 25-27 run while it is down
            elif r == 27:
                replica.start()
        witness.stop()
        witness.look()
        log("%d rounds acknowledged (%d keys); logs now %s", ROUNDS, len(acked), logs_in(wal))
        last = self.wait_shipped(agent, wal).segment
        st = h.status(agent)
        self.assertEqual(st.get("source_format"), "rocksdb")
        self.assertEqual(st.get("held_back_reason"), "none")  # the newest log ends whole
        self.check_copies(witness.keep, dest, last)
        self.check_restore(ckpt, dest, db, acked, separate_wal_dir)
        self.assertEqual(replica.error_lines(), [])

    def wait_shipped(self, agent, wal):
        """Waits until replica r1 flushed the valid end of the newest log."""
        last = logs_in(wal)[-1]
        with open(os.path.join(wal, last), "rb") as f:
            end = h.Pos(last, rocksdblog.valid_end(f.read(), rocksdblog.log_number(last)))
        waits.wait_until(lambda: h.flushed(h.try_status(agent), "r1") == end, 60,
                         "the replica to flush the valid end %s" % (end,), interval=0.1)
        return end

    def check_copies(self, witnessed, dest, last):
        names = logs_in(witnessed)
        self.assertGreaterEqual(len(names), ROUNDS)
        for n in names:
            with open(os.path.join(witnessed, n), "rb") as f:
                data = f.read()
            valid = rocksdblog.valid_end(data, rocksdblog.log_number(n))
            found = h.dest_file(dest, n)
            self.assertIsNotNone(found, "log %s is not on the replica" % n)
            path, partial = found
            self.assertEqual(partial, n == last, n)
            copy = h.read_bytes(path)
            self.assertEqual(len(copy), valid, "%s: replica %d bytes, valid end %d (size %d)"
                             % (n, len(copy), valid, len(data)))
            self.assertIsNone(h.first_difference(copy, data[:valid]), n)
            if not partial:
                self.assertEqual(run(LDB, "dump_wal", "--walfile=" + path, "--print_value"),
                                 run(LDB, "dump_wal", "--walfile=" + os.path.join(witnessed, n),
                                     "--print_value"), n)
        log("the replica's %d logs equal the valid records of the source's", len(names))

    def check_restore(self, ckpt, dest, db, acked, separate_wal_dir):
        restored = os.path.join(self.cluster.root, "restored")
        shutil.copytree(ckpt, restored)
        for n in sorted(os.listdir(dest)):
            if n.endswith(".log") or n.endswith(".log" + h.PARTIAL):
                shutil.copy(os.path.join(dest, n), os.path.join(restored, n.replace(h.PARTIAL, "")))
        if separate_wal_dir:
            # The checkpoint's OPTIONS file names the source's wal_dir.
            for n in os.listdir(restored):
                if n.startswith("OPTIONS-"):
                    run("sed", "-i", "s|^  wal_dir=.*|  wal_dir=%s|" % restored,
                        os.path.join(restored, n))
        got = scan(restored)
        missing = [k for k, v in sorted(acked.items()) if got.get("0x" + k.hex().upper())
                   != "0x" + v.hex().upper()]
        self.assertEqual(missing, [], "acknowledged writes the restored database lacks")
        self.assertEqual(got, scan(db))
        log("the restored database holds all %d acknowledged writes and equals the source",
            len(acked))

    def test_default_layout(self):
        self.ship(separate_wal_dir=False)

    def test_wal_dir(self):
        self.ship(separate_wal_dir=True)


if __name__ == "__main__":
    unittest.main()
