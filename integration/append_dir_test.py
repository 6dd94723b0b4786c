"""What the append format follows in a WAL directory, with the real daemons.

test_a_preallocated_segment_is_refused_loudly: an etcd-style segment (made
under a temporary name, preallocated to 4 MiB with fallocate, a record
written in place at its start, renamed into place) appears after a complete
segment was shipped. The agent refuses it with an error naming the file and
where its data ends, and the replica holds no byte of it past the written
record; after the writer "cuts" to the next segment, a restarted agent
refuses to start rather than ship it as complete.
test_index_and_state_files_are_not_segments: a directory shaped like
MariaDB's (mysql-bin.000001, mysql-bin.000002, mysql-bin.index). Without
--segment-pattern the agent refuses to start and lists the name shapes;
with --segment-pattern='mysql-bin\\.[0-9]{6}' it ships only the binlogs,
also after the index grows and mysql-bin.state appears (MariaDB's shutdown).
test_symlinks_are_not_followed: symbolic links named like segments (one
present at start, one made later) point at a file outside the directory;
the agent logs each and skips it, and the replica never holds its bytes.
"""

import os
import random
import unittest

from integration import harness as h

MiB = 1 << 20


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


def append_file(path, data):
    with open(path, "ab") as f:
        f.write(data)


def record(rng, n):
    """n random bytes whose last byte is not zero (where data ends is exact)."""
    return rng.randbytes(n - 1) + bytes([rng.randrange(1, 256)])


class AppendDirTest(h.ClusterTestCase):

    def setUp(self):
        h.ClusterTestCase.setUp(self)
        self.rng = random.Random(h.seed_from_env("WALSHIP_APPEND_DIR_SEED", "append dir"))

    def wait_flushed(self, agent, replica, pos, timeout=30):
        last = {}

        def reached():
            last["st"] = h.try_status(agent)
            return h.flushed(last["st"], replica) == pos

        h.wait_until(reached, timeout, lambda: "%s to flush %s; status: %s"
                     % (replica, pos, h.flushed(last.get("st"), replica)))

    def refused_start(self, agent, status=1):
        """Starts `agent`, which must exit with `status` before listening;
        returns what it logged."""
        since = agent.log_size()
        with self.assertRaises(AssertionError, msg="%s started" % agent.label):
            agent.start()
        self.assertEqual(agent.returncode(), status, agent.tail())
        return "\n".join(agent.log_lines(since))

    def forget(self, agent):
        """Leaves a refused agent out of stop_all()'s exit statuses."""
        self.cluster.daemons.remove(agent)

    def test_a_preallocated_segment_is_refused_loudly(self):
        c = self.cluster
        wal = c.dir("wal")
        first = os.path.join(wal, "seg-00000001")
        write_file(first, record(self.rng, 200_000))
        agent = c.agent(wal).start()
        replica = c.replica(agent, "r1").start()
        self.wait_flushed(agent, "r1", h.Pos("seg-00000001", 200_000))

        # As etcd does: preallocate the next file under a temporary name,
        # write a record in place at its start, rename it into place.
        rec1 = record(self.rng, 3000)
        tmp = os.path.join(wal, ".seg-00000002.tmp")
        seg2 = os.path.join(wal, "seg-00000002")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, 4 * MiB)
            os.pwrite(fd, rec1, 0)
            os.rename(tmp, seg2)

            def refused_or_shipped():
                if agent.grep(r"seg-00000002.*preallocated"):
                    return True
                entry = h.replica_entry(h.try_status(agent), "r1")
                return entry and h.pos_of(entry["sent"]).segment == "seg-00000002" and \
                    h.pos_of(entry["sent"]).offset > 0
            h.wait_until(refused_or_shipped, 20, "the agent to refuse or ship seg-00000002")
            # Whatever the agent did, it has had time to ship: give the
            # replica as long to write what it was sent.
            def settled():
                entry = h.replica_entry(h.try_status(agent), "r1")
                return entry is None or h.pos_of(entry.get("sent")) == \
                    h.pos_of(entry.get("flushed"))
            h.wait_until(settled, 10, "the replica to flush what it was sent")
            for entry in ("seg-00000002", "seg-00000002" + h.PARTIAL):
                path = os.path.join(replica.dest, entry)
                if os.path.exists(path):
                    held = h.read_bytes(path)
                    self.assertLessEqual(
                        len(held), len(rec1),
                        "the replica holds %d bytes of %s but only %d were written: "
                        "zeros past the written data were shipped" % (len(held), entry, len(rec1)))
                    self.assertEqual(held, rec1[:len(held)])
            line = agent.wait_log(r"seg-00000002.*looks preallocated", 5)
            self.assertRegex(line, r" error ")
            self.assertRegex(line, r"FAILED_PRECONDITION")
            self.assertRegex(line, r"data ends at offset %d" % len(rec1))

            # The writer goes on in place and cuts to the next file.
            os.pwrite(fd, record(self.rng, 5000), len(rec1))
        finally:
            os.close(fd)
        write_file(os.path.join(wal, "seg-00000003"), record(self.rng, 1000))
        agent.stop()
        text = self.refused_start(agent)
        self.assertRegex(text, r"cannot start: .*seg-00000002.*looks preallocated")
        self.assertEqual(h.dest_consistency(wal, replica.dest), [])
        self.assertFalse(os.path.exists(os.path.join(replica.dest, "seg-00000002")),
                         "seg-00000002 was published as complete on the replica")

    def test_index_and_state_files_are_not_segments(self):
        c = self.cluster
        wal = c.dir("wal")
        binlogs = [os.path.join(wal, "mysql-bin.%06d" % i) for i in (1, 2, 3)]
        index = os.path.join(wal, "mysql-bin.index")
        write_file(binlogs[0], b"\xfebin" + record(self.rng, 100_000))
        write_file(binlogs[1], b"\xfebin" + record(self.rng, 50_000))
        write_file(index, b"./mysql-bin.000001\n./mysql-bin.000002\n")

        plain = c.agent(wal, label="agent-no-pattern")
        text = self.refused_start(plain)
        self.assertRegex(text, r"mysql-bin\.NNNNNN \(2 files")
        self.assertRegex(text, r"mysql-bin\.index \(1 file")
        self.assertRegex(text, r"--segment-pattern")
        self.forget(plain)

        bad = c.agent(wal, label="agent-bad-pattern",
                      extra_args=[r"--segment-pattern=mysql-bin\.[0-9{6}"])
        text = self.refused_start(bad, status=2)
        self.assertRegex(text, r"--segment-pattern: .*not a valid regular expression")
        self.forget(bad)

        agent = c.agent(wal, extra_args=[r"--segment-pattern=mysql-bin\.[0-9]{6}"]).start()
        replica = c.replica(agent, "r1").start()
        self.wait_flushed(agent, "r1", h.Pos("mysql-bin.000002", 50_004))
        append_file(binlogs[1], record(self.rng, 20_000))
        write_file(binlogs[2], b"\xfebin" + record(self.rng, 30_000))
        append_file(index, b"./mysql-bin.000003\n")
        write_file(os.path.join(wal, "mysql-bin.state"), b"\x01" * 40)  # MariaDB shutdown
        self.wait_flushed(agent, "r1", h.Pos("mysql-bin.000003", 30_004))

        kept = sorted(os.listdir(replica.dest))
        self.assertEqual([n for n in kept if not n.startswith(h.METADATA_PREFIX)],
                         ["mysql-bin.000001", "mysql-bin.000002",
                          "mysql-bin.000003" + h.PARTIAL])
        for path in binlogs:
            name = os.path.basename(path)
            found = h.dest_file(replica.dest, name)
            self.assertEqual(h.read_bytes(found[0]), h.read_bytes(path), name)
        self.assertEqual(agent.grep(r"WAL source failed"), [])
        self.assertTrue(agent.grep(r"mysql-bin\.index"), "the ignored index is not logged")
        self.stop_all()

    def test_symlinks_are_not_followed(self):
        c = self.cluster
        wal = c.dir("wal")
        secret = os.path.join(c.dir("outside"), "hostname")
        secret_bytes = b"secret-host.example.org\n"
        write_file(secret, secret_bytes)
        write_file(os.path.join(wal, "seg-00000001"), record(self.rng, 10_000))
        os.symlink(secret, os.path.join(wal, "seg-00000002"))
        write_file(os.path.join(wal, "seg-00000003"), record(self.rng, 10_000))
        agent = c.agent(wal).start()
        replica = c.replica(agent, "r1").start()
        self.wait_flushed(agent, "r1", h.Pos("seg-00000003", 10_000))
        os.symlink(secret, os.path.join(wal, "seg-00000004"))
        write_file(os.path.join(wal, "seg-00000005"), record(self.rng, 7_000))
        self.wait_flushed(agent, "r1", h.Pos("seg-00000005", 7_000))

        for entry in sorted(os.listdir(replica.dest)):
            data = h.read_bytes(os.path.join(replica.dest, entry))
            self.assertNotIn(secret_bytes, data, "%s holds the linked file's bytes" % entry)
        names = [n for n in os.listdir(replica.dest) if not n.startswith(h.METADATA_PREFIX)]
        self.assertEqual(sorted(names), ["seg-00000001", "seg-00000003", "seg-00000005.partial"])
        for link in ("seg-00000002", "seg-00000004"):
            self.assertTrue(agent.grep(r"%s.*symbolic link" % link), "%s not logged" % link)
        self.stop_all()


if __name__ == "__main__":
    unittest.main()
