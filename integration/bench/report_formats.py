"""The formats section's Markdown (bench_formats.py): each database's own log
caught up with its format and with --format=append on the same bytes."""

from integration.bench import report_synccost

MIB = 1 << 20
_get = report_synccost.get_path
span = report_synccost.span

# (format variant, its append twin, label)
ROWS = [("etcd", "append-etcd", "etcd 3.4 WAL (`--format=etcd`)"),
        ("rocksdb", "append-rocksdb", "RocksDB 7.8 logs (`--format=rocksdb`)"),
        ("mysql-binlog", "append-mysql-binlog", "MariaDB 10.11 binlogs (`--format=mysql-binlog`)")]


def _ratio(s, v, twin, key):
    a = _get(s, v, key, "median")
    b = _get(s, twin, key, "median")
    return "%.2f" % (a / b) if a and b else "n/a"


def markdown(results):
    """The section's lines ([] when it did not run)."""
    f = _get(results, "sections", "formats")
    if not f or "summary" not in f:
        return []
    s = f["summary"]
    L = ["### Database logs: catch-up with each format, against `--format=append` on the "
         "same bytes", "",
         "| log | bytes shipped MiB (files) | with its format MB/s | append MB/s | "
         "format / append | CPU s/GiB agent: format / append | CPU s/GiB replica: format / "
         "append |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for v, twin, label in ROWS:
        if v not in s:
            continue
        L.append("| %s | %.0f (%d) | %s | %s | %s | %s / %s | %s / %s |" % (
            label, f["bytes"][v] / float(MIB), f["files"][v],
            span(_get(s, v, "mb_s"), "%.0f"), span(_get(s, twin, "mb_s"), "%.0f"),
            _ratio(s, v, twin, "mb_s"),
            span(_get(s, v, "agent_cpu_s_per_gib"), "%.2f"),
            span(_get(s, twin, "agent_cpu_s_per_gib"), "%.2f"),
            span(_get(s, v, "replica_cpu_s_per_gib"), "%.2f"),
            span(_get(s, twin, "replica_cpu_s_per_gib"), "%.2f")))
    L.append("")
    L.append("Method: %s. Medians of interleaved, rotated rounds after an unrecorded warm-up "
             "of every variant." % f["method"])
    L.append("")
    return L
