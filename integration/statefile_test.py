"""Checks integration/statefile.py against replica/disk_format.md.

The test vectors (records, what a reader returns for each, and whole
walship.state files built from them) are read from the document itself, so
the document and the Python reader cannot drift apart unnoticed.
"""

import json
import os
import re
import shutil
import tempfile
import unittest

from integration import statefile

SLOT = 4096
PROGRESS_BYTES = 512


def _doc_path():
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        workspace = os.environ.get("TEST_WORKSPACE", "walship")
        return os.path.join(srcdir, workspace, "replica", "disk_format.md")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "replica",
                        "disk_format.md")


def _load_doc():
    with open(_doc_path(), encoding="ascii") as f:
        text = f.read()
    records, expects = {}, {}
    for kind, name, body in re.findall(r"^```(record|expect) (\S+)\n(.*?)^```$", text,
                                       re.M | re.S):
        (records if kind == "record" else expects)[name] = body
    table = re.search(r"<!-- state-files:begin -->\n(.*?)<!-- state-files:end -->", text,
                      re.S).group(1)
    rows = []
    for line in table.splitlines():
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("slot 0", "---"):
            rows.append(cells)
    return records, {k: json.loads(v) for k, v in expects.items()}, rows


RECORDS, EXPECTS, STATE_FILES = _load_doc()


def _slot(spec):
    """One 4096-byte slot as section 7.1 of the document defines it."""
    if spec == "empty":
        return b"\0" * SLOT
    if spec.endswith("~flip"):
        data = bytearray(_slot(spec[:-len("~flip")]))
        data[30] ^= 0x01
        return bytes(data)
    if ">" in spec:
        new, old = spec.split(">")
        return _slot(new)[:64] + _slot(old)[64:]
    return RECORDS[spec].encode("ascii").ljust(SLOT, b"\0")


def _flips(record):
    """Every single-bit flip of `record`, with the byte index flipped."""
    for i in range(len(record)):
        for bit in range(8):
            data = bytearray(record)
            data[i] ^= 1 << bit
            yield i, bytes(data)


def _crc_value_span(record):
    at = record.rindex(b"crc=") + 4
    return at, len(record)


class DocumentTest(unittest.TestCase):

    def test_document_has_the_vectors(self):
        self.assertGreaterEqual(len(RECORDS), 6)
        self.assertEqual(set(RECORDS), set(EXPECTS))
        self.assertGreaterEqual(len(STATE_FILES), 10)
        for name, record in RECORDS.items():
            self.assertTrue(record.endswith("\n"), name)


class RecordTest(unittest.TestCase):

    def test_each_record_in_a_state_file(self):
        for name, record in RECORDS.items():
            with self.subTest(record=name):
                data = _slot(name) + _slot("empty")
                self.assertEqual(len(data), 8192)
                self.assertEqual(statefile.parse(data), EXPECTS[name])

    def test_each_record_in_a_progress_file(self):
        for name, record in RECORDS.items():
            with self.subTest(record=name):
                data = record.encode("ascii").ljust(PROGRESS_BYTES, b"\0")
                self.assertEqual(statefile.parse_progress(data), EXPECTS[name])

    def test_version_2_file_is_the_bare_record(self):
        data = RECORDS["state-v2"].encode("ascii")
        self.assertNotEqual(len(data), 8192)
        self.assertEqual(statefile.parse(data), EXPECTS["state-v2"])

    def test_encoder_writes_the_documented_bytes(self):
        for name, want in EXPECTS.items():
            if want["seq"] == 0:
                continue  # version 2 is read, never written
            record = RECORDS[name]
            prefix_crc = int(re.search(r"^prefix_crc=(\w{8})$", record, re.M).group(1), 16)
            with self.subTest(record=name):
                data = statefile.encode(want["stream"], want["segment"], want["offset"],
                                        want["complete"], prefix_crc, want["seq"])
                self.assertEqual(data, _slot(name) + _slot("empty"))

    def test_every_flipped_bit_is_rejected(self):
        for name, record in RECORDS.items():
            raw = record.encode("ascii")
            crc_from, crc_to = _crc_value_span(raw)
            for i, bad in _flips(raw):
                # Section 3.1's one exception: inside the crc value, a flip
                # that reads as the same number (hex letter case, the final
                # newline turned into other white space) says the same.
                harmless = crc_from <= i < crc_to
                for where, data, reader in (
                        ("state", bad.ljust(SLOT, b"\0") + _slot("empty"), statefile.parse),
                        ("progress", bad.ljust(PROGRESS_BYTES, b"\0"), statefile.parse_progress)):
                    with self.subTest(record=name, byte=i, file=where, flipped=bad[i]):
                        try:
                            got = reader(data)
                        except ValueError:
                            continue
                        self.assertTrue(harmless, "accepted a flipped bit: %r" % bad)
                        self.assertEqual(got, EXPECTS[name])

    def test_bytes_after_the_first_nul_are_ignored(self):
        data = bytearray(_slot("state-41") + _slot("empty"))
        first_nul = len(RECORDS["state-41"])
        data[first_nul + 1] = ord("x")
        data[SLOT - 1] = 0xFF
        self.assertEqual(statefile.parse(bytes(data)), EXPECTS["state-41"])
        data[first_nul] = ord("x")  # the NUL that ends the record, flipped
        with self.assertRaises(ValueError):
            statefile.parse(bytes(data))

    def test_unknown_version_is_rejected(self):
        body = RECORDS["state-41"].replace("walship-replica-state 3",
                                           "walship-replica-state 4")
        body = body[:body.rindex("crc=")]
        crc = statefile.wirelib.crc32c(body.encode("ascii"))
        data = (body + "crc=%08x\n" % crc).encode("ascii")
        with self.assertRaises(ValueError):
            statefile.parse(data.ljust(SLOT, b"\0") + _slot("empty"))


class StateFileTest(unittest.TestCase):

    def test_documented_files(self):
        for slot0, slot1, result in STATE_FILES:
            with self.subTest(slot0=slot0, slot1=slot1):
                data = _slot(slot0) + _slot(slot1)
                if result == "reject":
                    with self.assertRaises(ValueError):
                        statefile.parse(data)
                else:
                    self.assertEqual(statefile.parse(data), EXPECTS[result])

    def test_a_torn_save_leaves_the_other_slot(self):
        # Every length of the new record written over the older slot.
        new, old, other = (_slot(n) for n in ("state-43", "state-41", "state-42"))
        whole = len(RECORDS["state-43"])
        for cut in range(whole + 1):
            torn = new[:cut] + old[cut:]
            # Only the final newline missing: the record is whole (section 3.1).
            want = "state-43" if cut >= whole - 1 else "state-42"
            with self.subTest(cut=cut):
                self.assertEqual(statefile.parse(torn + other), EXPECTS[want])


class ProgressTest(unittest.TestCase):
    """Section 5.1: when walship.progress names the durable position."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def _write(self, state, progress):
        with open(os.path.join(self.dir, statefile.STATE), "wb") as f:
            f.write(_slot(state) + _slot("empty"))
        path = os.path.join(self.dir, statefile.PROGRESS)
        if progress is None:
            if os.path.exists(path):
                os.unlink(path)
            return
        with open(path, "wb") as f:
            f.write(progress.ljust(PROGRESS_BYTES, b"\0"))

    def _durable(self):
        got = statefile.read_durable(self.dir)
        del got["file"]
        return got

    def test_progress_past_the_state(self):
        progress = RECORDS["progress-917"].encode("ascii")
        for state, want in (("state-41", "progress-917"), ("state-42", "progress-917"),
                            ("state-43", "state-43"), ("state-new", "state-new")):
            with self.subTest(state=state):
                self._write(state, progress)
                self.assertEqual(self._durable(), EXPECTS[want])
        self._write("state-42", None)
        self.assertEqual(self._durable(), EXPECTS["state-42"])
        torn = bytearray(progress)
        torn[30] ^= 0x01
        self._write("state-42", bytes(torn))
        self.assertEqual(self._durable(), EXPECTS["state-42"])

    def test_no_state_file(self):
        self.assertIsNone(statefile.read_durable(self.dir))


class SegmentFileTest(unittest.TestCase):
    """Section 8: a NAME.partial's length is not what the replica holds."""

    NAME = "000000010000000000000003"
    SEG = 1 << 20

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.path = os.path.join(self.dir, self.NAME + ".partial")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def _partial(self, data, length):
        with open(self.path, "wb") as f:
            f.write(data.ljust(length, b"\0"))

    def _first_page(self, seg_size=SEG):
        head = bytearray(40)
        head[0:2] = (0xD110).to_bytes(2, "little")
        head[2:4] = (0x0002).to_bytes(2, "little")  # XLP_LONG_HEADER
        head[32:36] = seg_size.to_bytes(4, "little")
        return bytes(head)

    def test_pre_sized_and_grown(self):
        data = self._first_page() + b"w" * 960 + b"\0\0" + b"x" * 8
        self._partial(data, self.SEG)
        self.assertEqual(statefile.partial_kind(self.path), "pre-sized")
        # The tail a restart offers ends at the last non-zero byte.
        self.assertEqual(statefile.tail_end(self.path, 100), len(data))
        self.assertEqual(statefile.tail_end(self.path, len(data)), len(data))
        self._partial(self._first_page() + b"w" * 960, 1000 + 24)
        self.assertEqual(statefile.partial_kind(self.path), "grown")
        self.assertEqual(statefile.tail_end(self.path, 100), 1024)
        # No long page header: grown, unless the caller knows the size.
        self._partial(b"w" * 1000, self.SEG)
        self.assertEqual(statefile.partial_kind(self.path), "grown")
        self.assertEqual(statefile.partial_kind(self.path, self.SEG), "pre-sized")
        self._partial(self._first_page(3 << 20), self.SEG)
        self.assertEqual(statefile.partial_kind(self.path), "grown")

    def test_held_bytes_come_from_the_records(self):
        data = self._first_page() + b"w" * 4000
        self._partial(data, self.SEG)
        with open(os.path.join(self.dir, statefile.STATE), "wb") as f:
            f.write(statefile.encode("pg-1", self.NAME, 1000, seq=3))
        self.assertEqual(statefile.held_partial(self.dir), (self.NAME, 1000))
        with open(os.path.join(self.dir, statefile.STATE), "wb") as f:
            f.write(statefile.encode("pg-1", self.NAME, self.SEG, complete=True, seq=4))
        self.assertIsNone(statefile.held_partial(self.dir))


if __name__ == "__main__":
    unittest.main()
