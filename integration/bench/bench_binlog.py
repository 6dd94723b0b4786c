"""A MariaDB binlog backlog for the formats section (bench_formats.py):
binlogs a private MariaDB writes, to catch up with --format=mysql-binlog
and with --format=append on the same files.

The section ships the same directory with both formats: closed binlogs
end whole, so both ship every byte of the same files."""

import os

from integration import mariadb
from integration.bench.bench_procs import MIB, log

MYSQL_BINLOG_ARGS = ["--format=mysql-binlog", "--binlog-basename=mysql-bin"]
APPEND_ARGS = ["--format=append", "--segment-pattern=mysql-bin\\.([0-9]{6})"]


def binlog_backlog(ctx, rows, binlog_bytes=16 << 20):
    """`rows` rows of 1 MB (row-based events) written by a private MariaDB
    into binlogs of `binlog_bytes`, then a clean shutdown (every binlog
    closed). Returns (binlog directory, {binlog: size})."""
    d = ctx.fresh_dir("binlog-backlog")
    db = mariadb.MariaDb(ctx.procs, ctx.fresh_dir("binlog-db"), binlog_dir=d, name="mariadb")
    base_argv = db.argv
    db.argv = lambda: [a for a in base_argv() if not a.startswith("--max-binlog-size")] + [
        "--max-binlog-size=%d" % binlog_bytes, "--max-allowed-packet=64M"]
    try:
        db.install().start()
        db.sql("CREATE DATABASE t; CREATE TABLE t.b (id INT PRIMARY KEY AUTO_INCREMENT, "
               "v LONGBLOB) ENGINE=InnoDB;")
        for i in range(rows):
            db.sql("INSERT INTO t.b (v) VALUES (REPEAT(SHA2('%d', 256), 15625));" % i)
        db.stop()
    finally:
        db.close()
    ends = {n: os.path.getsize(os.path.join(d, n)) for n in mariadb.binlogs(d)}
    log("binlog backlog: %d binlogs, %.1f MiB", len(ends), sum(ends.values()) / MIB)
    return d, ends
