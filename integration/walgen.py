#!/usr/bin/env python3
"""Appends random records to an append-only WAL directory at a set rate.

Segment files are named seg-00000001, seg-00000002, ... and roll over at
--segment-bytes, so a follower sees both growth and new segments. Records are
random bytes of random length; the seed is printed so a run can be replayed.
"""
import argparse
import os
import random
import sys
import time


def generate(directory, seconds, rate, segment_bytes, seed, min_record=100,
             max_record=64 * 1024, start_index=1):
    """Writes for `seconds` at about `rate` bytes/s; returns bytes written."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    index = start_index
    path = os.path.join(directory, "seg-%08d" % index)
    f = open(path, "ab")
    size = f.tell()
    written = 0
    start = time.monotonic()
    deadline = start + seconds
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        due = rate * (now - start) - written
        if due <= 0:
            time.sleep(min(0.005, deadline - now))
            continue
        n = min(rng.randint(min_record, max_record), int(due) + min_record)
        if size + n > segment_bytes:
            n = segment_bytes - size
        if n > 0:
            f.write(rng.randbytes(n))
            f.flush()
            size += n
            written += n
        if size >= segment_bytes:
            f.close()
            index += 1
            path = os.path.join(directory, "seg-%08d" % index)
            f = open(path, "ab")
            size = 0
    f.close()
    return written


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rate", type=int, default=10_000_000, help="bytes per second")
    p.add_argument("--segment-bytes", type=int, default=4 << 20)
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    print("walgen: seed %d" % seed, flush=True)
    n = generate(a.dir, a.seconds, a.rate, a.segment_bytes, seed)
    print("walgen: wrote %d bytes" % n, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
