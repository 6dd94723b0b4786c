"""The formats section: a backlog of each database's real log, written by the
database itself, caught up by walship with the database's format
(--format=etcd, --format=rocksdb, --format=mysql-binlog), against --format=append on the same
bytes: a copy of the same files cut at the valid end the format ships (so
both ship exactly the same bytes, and the difference is what reading the
format costs: record framing and checksums, the preallocated tail).

MB/s count the bytes shipped (the logs' valid records); CPU per GiB the same
bytes. Rounds interleaved and rotated after an unrecorded warm-up of every
variant, as in the catch-up section."""

import os
import shutil
import subprocess

from integration import etcdwal
from integration import rocksdblog
from integration.bench import bench_binlog
from integration.bench.bench_catchup import (
    cpu_per_gib, round_name, rounds_after_warm_up, run_walship_catchup, settle, summarize)
from integration.bench.bench_procs import MIB, log, rm
from integration.walshiptest.etcd import Etcd, Loader, wal_files
from integration.walshiptest import waits

DB_BENCH = "/usr/bin/db_bench"


def etcd_backlog(ctx, files):
    """member/wal of a private etcd after a put load that filled `files`
    WAL files (the last one preallocated, partly written); etcd stopped."""
    data = ctx.fresh_dir("etcd")
    wal_dir = os.path.join(data, "member", "wal")
    etcd = Etcd(ctx.logdir, data, "etcd-backlog").start()
    loader = Loader(etcd).start()
    try:
        def enough():
            if loader.error:
                raise RuntimeError("etcd put failed: %r" % loader.error)
            return len(wal_files(wal_dir)) > files
        waits.wait_until(enough, 600, "etcd's WAL to have %d files" % (files + 1),
                         interval=0.2)
    finally:
        loader.stop()
        etcd.stop()
    log("etcd backlog: %d WAL files, %d puts of %d KiB", len(wal_files(wal_dir)),
        len(loader.acked), loader.value_bytes >> 10)
    ends = {n: etcdwal.valid_end(os.path.join(wal_dir, n)) for n in wal_files(wal_dir)}
    return wal_dir, ends


def rocksdb_logs(wal_dir):
    """{name: path} of every log of a RocksDB WAL directory, archive/ too."""
    out = {}
    for d in (wal_dir, os.path.join(wal_dir, "archive")):
        if os.path.isdir(d):
            for n in os.listdir(d):
                if n.endswith(".log") and n[:-4].isdigit():
                    out[n] = os.path.join(d, n)
    return out


def rocksdb_backlog(ctx, keys):
    """The logs of a db_bench fillseq of `keys` 1000-byte values into a
    database with its WAL in a directory of its own; flushed logs kept in
    archive/ (--wal_ttl_seconds), as a WAL shipper needs them."""
    db, wal = ctx.fresh_dir("rocksdb-db"), ctx.fresh_dir("rocksdb-wal")
    p = subprocess.run([DB_BENCH, "--benchmarks=fillseq", "--db=" + db, "--wal_dir=" + wal,
                        "--wal_ttl_seconds=3600", "--num=%d" % keys, "--value_size=1000",
                        "--compression_type=none", "--write_buffer_size=%d" % (32 * MIB)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    if p.returncode != 0:
        raise RuntimeError("db_bench failed: %s" % p.stdout[-2000:])
    logs = rocksdb_logs(wal)
    ends = {}
    for n, path in logs.items():
        with open(path, "rb") as f:
            ends[n] = rocksdblog.valid_end(f.read(), rocksdblog.log_number(n))
    log("rocksdb backlog: %d logs, %d MiB of records", len(logs), sum(ends.values()) // MIB)
    return wal, ends, logs


def cut_copy(ctx, label, paths, ends):
    """A flat directory of each file cut at its valid end: the same bytes
    the format ships, for --format=append."""
    d = ctx.fresh_dir(label)
    for n, path in paths.items():
        with open(path, "rb") as src, open(os.path.join(d, n), "wb") as dst:
            shutil.copyfileobj(src, dst)
            dst.truncate(ends[n])
    subprocess.run(["sync"], timeout=300)
    return d


def newest(ends):
    """Where a caught-up replica's durable position has come: the valid end
    of the newest file that holds any record (benchtool watch-state compares
    names as strings; each database's names sort that way)."""
    name = max(n for n, end in ends.items() if end > 0)
    return name, ends[name]


def section_formats(ctx):
    cfg = ctx.cfg
    etcd_wal, etcd_ends = etcd_backlog(ctx, cfg.formats_etcd_files)
    rdb_wal, rdb_ends, rdb_paths = rocksdb_backlog(ctx, cfg.formats_rocksdb_keys)
    # Closed binlogs end whole: both formats ship every byte of the same files.
    bin_dir, bin_ends = bench_binlog.binlog_backlog(ctx, cfg.formats_binlog_rows)
    sources = {
        "etcd": (etcd_wal, ["--format=etcd"], etcd_ends),
        "append-etcd": (cut_copy(ctx, "etcd-cut", {n: os.path.join(etcd_wal, n)
                                                   for n in etcd_ends}, etcd_ends),
                        ["--format=append",
                         "--segment-pattern=[0-9a-f]{16}-[0-9a-f]{16}\\.wal"], etcd_ends),
        "rocksdb": (rdb_wal, ["--format=rocksdb"], rdb_ends),
        "append-rocksdb": (cut_copy(ctx, "rocksdb-cut", rdb_paths, rdb_ends),
                           ["--format=append", "--segment-pattern=[0-9]{6}\\.log"],
                           rdb_ends),
        "mysql-binlog": (bin_dir, bench_binlog.MYSQL_BINLOG_ARGS, bin_ends),
        "append-mysql-binlog": (bin_dir, bench_binlog.APPEND_ARGS, bin_ends),
    }
    runs = {v: [] for v in sources}
    for rnd, v in rounds_after_warm_up(list(sources), cfg.rounds):
        src, args, ends = sources[v]
        nbytes = sum(ends.values())
        settle(ctx, nbytes)
        r, dest = run_walship_catchup(ctx, src, "zerocopy", newest(ends), agent_args=args)
        if r["shipped_bytes"] != nbytes:
            raise RuntimeError("%s: the replica holds %d bytes, the logs' valid records %d" % (
                v, r["shipped_bytes"], nbytes))
        rm(dest)
        r["bytes"] = nbytes
        r["mb_s"] = nbytes / 1e6 / r["seconds"]
        cpu_per_gib(r, nbytes)
        log("formats %s %-19s %7.1f MB/s  cpu/GiB agent %.2fs replica %.2fs", round_name(rnd),
            v, r["mb_s"], r["agent_cpu_s_per_gib"], r["replica_cpu_s_per_gib"])
        if rnd >= 0:
            runs[v].append(r)
    files = {"etcd": len(etcd_ends), "rocksdb": len(rdb_ends), "mysql-binlog": len(bin_ends)}
    return {"bytes": {"etcd": sum(etcd_ends.values()), "rocksdb": sum(rdb_ends.values()),
                      "mysql-binlog": sum(bin_ends.values())},
            "files": files, "runs": runs,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib", "replica_cpu_s_per_gib"]),
            "method": "each database's own log (etcd: puts of 400 KiB values through its v3 "
                      "gateway, %d WAL files of 64 MB preallocated; RocksDB: db_bench fillseq "
                      "of %d 1000-byte values, --wal_dir, flushed logs kept in archive/; "
                      "MariaDB: %d rows of 1 MB inserted, binlogs of 16 MiB, closed by a clean "
                      "shutdown), shipped with its format and with --format=append over a copy "
                      "of the same files cut at their valid end (the binlogs: the same files)"
                      % (files["etcd"], cfg.formats_rocksdb_keys, cfg.formats_binlog_rows)}
