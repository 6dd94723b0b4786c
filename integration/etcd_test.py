"""--format=etcd with a real etcd 3.4 member (Debian's etcd-server).

A private member (loopback ports, --snapshot-count=100 so that snapshots
happen) takes a put load of 400 KiB values through its v3 API (the JSON
gateway, POST /v3/kv/put: each put is acknowledged once etcd has fsynced its
WAL) until its WAL has rolled over to a third 64 MB file (etcd 3.4's segment
size is fixed). Before the load the member is stopped cleanly once and its
member/snap directory copied: the base backup. walship-agent --format=etcd
follows member/wal and walship-replica ships it; the agent is killed (-9)
and restarted after the first rollover, the replica after the second. Then
etcd is killed (-9): the primary is lost.

At the end:
  * every source .wal file's valid records (integration/etcdwal.py, a
    second reader of the framing) equal the replica's copy byte for byte,
    and the replica's copy holds nothing more: complete files end at their
    valid end, and the preallocated zeros of the last one are not shipped;
  * an etcd started from the base backup's member/snap plus the replica's
    WAL files as member/wal (NAME, and NAME.partial renamed to NAME) serves
    every key whose put etcd acknowledged, with its value.

WALSHIP_ETCD_TEST_FORMAT=append runs the same test with the generic format,
which refuses etcd's preallocated files at start-up.
"""

import os
import shutil
import subprocess
import unittest

from integration import etcdwal
from integration import harness as h
from integration.walshiptest import binaries
from integration.walshiptest import procs
from integration.walshiptest import waits
from integration.walshiptest.etcd import SEGMENT_BYTES, Etcd, Loader, value_of, wal_files

FORMAT = os.environ.get("WALSHIP_ETCD_TEST_FORMAT", "etcd")
ROLLOVERS = 2
log = procs.log


class EtcdTest(h.ClusterTestCase):

    def wait_files(self, loader, wal_dir, n):
        def enough():
            if loader.error:
                raise AssertionError("put failed: %r" % loader.error)
            return len(wal_files(wal_dir)) >= n
        waits.wait_until(enough, 120, "etcd's WAL to have %d files" % n, interval=0.2)
        log("%d WAL files, %d puts acknowledged", n, len(loader.acked))

    def wait_replica_end(self, agent, wal_dir, name):
        """Waits until replica `name` flushed the source's valid end."""
        last = wal_files(wal_dir)[-1]
        end = h.Pos(last, etcdwal.valid_end(os.path.join(wal_dir, last)))

        def caught_up():
            st = h.try_status(agent)
            return st is not None and h.flushed(st, name) == end
        waits.wait_until(caught_up, 60, "replica %s to flush the valid end %s" % (name, end),
                         interval=0.2)
        return end

    def test_wal_shipped_and_restored(self):
        c = self.cluster
        data = c.dir("etcd")
        wal_dir = os.path.join(data, "member", "wal")
        etcd = Etcd(c.logdir, data, "etcd", c.on_close).start()
        for i in range(1, 21):
            etcd.put(b"base-%02d" % i, b"before the backup")
        # The base backup: member/snap of a cleanly stopped member.
        etcd.stop()
        base = os.path.join(c.root, "base-snap")
        shutil.copytree(os.path.join(data, "member", "snap"), base)
        etcd.start()

        agent = c.agent(wal_dir, extra_args=["--format=" + FORMAT,
                                             "--metrics-listen=127.0.0.1:0"]).start()
        dest = c.dir("dest")
        replica = c.replica(agent, "r1", dest=dest).start()
        loader = Loader(etcd).start()
        try:
            self.wait_files(loader, wal_dir, 2)
            agent.kill()
            agent.restart()
            self.wait_files(loader, wal_dir, 1 + ROLLOVERS)
            replica.kill()
            replica.start()
            more = len(loader.acked) + 30
            waits.wait_until(lambda: len(loader.acked) >= more or loader.error, 60,
                             "30 more puts after the replica's restart", interval=0.1)
        finally:
            loader.stop()
        self.assertIsNone(loader.error)
        etcd.kill()
        acked = list(loader.acked)
        log("etcd killed; %d puts acknowledged, WAL files %s", len(acked), wal_files(wal_dir))
        end = self.wait_replica_end(agent, wal_dir, "r1")
        self.check_held_back(agent, end)

        self.check_copies(wal_dir, dest, end)
        self.check_restore(base, dest, acked)
        self.assertEqual(replica.error_lines(), [])

    def check_held_back(self, agent, end):
        """Status and metrics show the valid end and the preallocated rest."""
        st = h.status(agent)
        self.assertEqual(st.get("source_format"), FORMAT)
        self.assertEqual(h.pos_of(st.get("source_end")), end)
        self.assertEqual(int(st.get("source_file_size", 0)), SEGMENT_BYTES)
        self.assertEqual(st.get("held_back_reason"), "preallocated")
        table = subprocess.run([binaries.find(binaries.STATUS), "--agent=" + agent.control,
                                "--insecure"], stdout=subprocess.PIPE, universal_newlines=True,
                               timeout=30, check=True).stdout
        self.assertIn("source holds back %d bytes of %s past its valid end %d: preallocated"
                      % (SEGMENT_BYTES - end.offset, end.segment, end.offset), table)
        m = h.scrape(agent.metrics)
        self.assertEqual(h.metric_total(m, "walship_agent_source_valid_end_bytes",
                                        segment=end.segment), end.offset)
        self.assertEqual(h.metric_total(m, "walship_agent_source_held_back_bytes",
                                        reason="preallocated"), SEGMENT_BYTES - end.offset)
        self.assertEqual(h.metric_total(m, "walship_agent_source_held_back_bytes",
                                        reason="partial_record"), 0)

    def check_copies(self, wal_dir, dest, end):
        names = wal_files(wal_dir)
        self.assertGreaterEqual(len(names), 1 + ROLLOVERS)
        for n in names:
            src = os.path.join(wal_dir, n)
            valid = etcdwal.valid_end(src)
            found = h.dest_file(dest, n)
            self.assertIsNotNone(found, "%s is not on the replica" % n)
            path, partial = found
            self.assertEqual(partial, n == end.segment, n)
            copy = h.read_bytes(path)
            want = h.read_bytes(src, 0, valid)
            self.assertEqual(len(copy), valid,
                             "%s: the replica holds %d bytes, the source's valid end is %d "
                             "(file size %d)" % (n, len(copy), valid, os.path.getsize(src)))
            self.assertIsNone(h.first_difference(copy, want), n)
        last = os.path.join(wal_dir, names[-1])
        self.assertEqual(os.path.getsize(last), SEGMENT_BYTES)  # preallocated
        log("replica copies equal the valid records of %s", names)

    def check_restore(self, base, dest, acked):
        c = self.cluster
        data = c.dir("restored")
        os.makedirs(os.path.join(data, "member"))
        shutil.copytree(base, os.path.join(data, "member", "snap"))
        wal = os.path.join(data, "member", "wal")
        os.makedirs(wal)
        for n in sorted(os.listdir(dest)):
            if n.endswith(".wal") or n.endswith(".wal" + h.PARTIAL):
                shutil.copy(os.path.join(dest, n), os.path.join(wal, n.replace(h.PARTIAL, "")))
        log("restoring from the base member/snap and %s", sorted(os.listdir(wal)))
        restored = Etcd(c.logdir, data, "etcd-restored", c.on_close).start()
        missing = []
        for i in acked:
            if restored.get(b"key-%06d" % i) != value_of(i):
                missing.append(i)
        for i in range(1, 21):
            self.assertEqual(restored.get(b"base-%02d" % i), b"before the backup")
        restored.stop()
        self.assertEqual(missing, [], "acknowledged puts the restored member lacks (of %d)"
                         % len(acked))
        log("the restored member serves all %d acknowledged puts", len(acked))


if __name__ == "__main__":
    unittest.main()
