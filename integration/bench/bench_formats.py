"""The formats section: catch-up of a backlog of a database's own log, by
walship with the database's format and with the append format on the same
bytes. One row for now: MariaDB binlogs (--format=mysql-binlog against
--format=append with a segment pattern); etcd and RocksDB rows belong here
too."""

import os

from integration import mariadb
from integration.bench.bench_catchup import (
    WARM_UP_NOTE, cpu_per_gib, round_name, rounds_after_warm_up, run_walship_catchup, settle,
    summarize)
from integration.bench.bench_procs import MIB, log, rm

# The variants and the agent's arguments for each.
BINLOG_VARIANTS = {
    "mysql-binlog": ["--format=mysql-binlog", "--binlog-basename=mysql-bin"],
    "append-binlog": ["--format=append", "--segment-pattern=mysql-bin\\.([0-9]{6})"],
}


def make_binlog_backlog(ctx):
    """A private MariaDB writes rows of 1 MB into binlogs of 16 MiB (quick:
    8 rows, binlogs of 1 MiB) and stops cleanly; its index file is removed,
    so the directory holds exactly the binlogs. Returns (dir, bytes, end)."""
    quick = ctx.cfg.quick
    d = ctx.fresh_dir("binlog-backlog")
    db = mariadb.MariaDb(ctx.procs, ctx.fresh_dir("binlog-db"), binlog_dir=d, name="mariadb")
    base_argv = db.argv
    size = (1 if quick else 16) << 20
    db.argv = lambda: [a for a in base_argv() if not a.startswith("--max-binlog-size")] + [
        "--max-binlog-size=%d" % size, "--max-allowed-packet=64M"]
    try:
        db.install().start()
        db.sql("CREATE DATABASE t; CREATE TABLE t.b (id INT PRIMARY KEY AUTO_INCREMENT, "
               "v LONGBLOB) ENGINE=InnoDB;")
        for i in range(8 if quick else 1024):
            db.sql("INSERT INTO t.b (v) VALUES (REPEAT(SHA2('%d', 256), 15625));" % i)
        db.stop()
    finally:
        db.close()
    os.unlink(os.path.join(d, "mysql-bin.index"))
    names = mariadb.binlogs(d)
    nbytes = sum(os.path.getsize(os.path.join(d, n)) for n in names)
    end = (names[-1], os.path.getsize(os.path.join(d, names[-1])))
    log("binlog backlog: %d binlogs, %.1f MiB", len(names), nbytes / MIB)
    return d, nbytes, end


def section_formats(ctx):
    src, nbytes, end = make_binlog_backlog(ctx)
    variants = list(BINLOG_VARIANTS)
    runs = {v: [] for v in variants}
    for rnd, v in rounds_after_warm_up(variants, ctx.cfg.rounds):
        settle(ctx, nbytes)
        r, dest = run_walship_catchup(ctx, src, "zerocopy", end, agent_args=BINLOG_VARIANTS[v])
        if r["shipped_bytes"] != nbytes:
            raise RuntimeError("%s: replica holds %d bytes, source %d" % (
                v, r["shipped_bytes"], nbytes))
        rm(dest)
        r["bytes"] = nbytes
        r["mb_s"] = nbytes / 1e6 / r["seconds"]
        cpu_per_gib(r, nbytes)
        log("formats %s %-16s %7.1f MB/s  cpu/GiB agent %.2fs replica %.2fs", round_name(rnd),
            v, r["mb_s"], r["agent_cpu_s_per_gib"], r["replica_cpu_s_per_gib"])
        if rnd >= 0:
            runs[v].append(r)
    return {"binlog_backlog_bytes": nbytes, "runs": runs, "warm_up": WARM_UP_NOTE,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib",
                                        "replica_cpu_s_per_gib"])}
