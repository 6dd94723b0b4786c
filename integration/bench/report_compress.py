"""The compress section's part of the report (report.py): its target and
its Markdown table. Pure functions of the results dict."""

from integration.bench.report_synccost import get_path, span

MIB = 1 << 20


def _med(sc, variant, key):
    return get_path(sc, "summary", variant, key, "median")


def _round_ratio(sc, a, b):
    """Median over rounds of a's MB/s over b's in the same round (the
    machine is noisy; rounds are what can be compared)."""
    ra = [r["mb_s"] for r in get_path(sc, "runs", a) or []]
    rb = [r["mb_s"] for r in get_path(sc, "runs", b) or []]
    q = sorted(x / y for x, y in zip(ra, rb) if y)
    return q[len(q) // 2] if q else None


def targets(results):
    """The issue's target: on a 20 MB/s link, zstd ships pgbench WAL at
    least 2.5x faster than uncompressed. [] when the section did not run."""
    sc = get_path(results, "sections", "compress")
    if not sc:
        return []
    z, n = _med(sc, "link-zstd", "mb_s"), _med(sc, "link-none", "mb_s")
    speedup = None if z is None or not n else z / n
    rr = _round_ratio(sc, "link-zstd", "link-none")
    ratio = _med(sc, "walship-zstd", "ratio")
    return [{"id": "compress-link-zstd",
             "target": "on a %.0f MB/s link, zstd ships pgbench WAL >= 2.5x faster than "
                       "uncompressed" % ((sc.get("link_bytes_per_sec") or 0) / 1e6),
             "pass": None if speedup is None else speedup >= 2.5,
             "measured": "%s vs %s MB/s = %sx (round by round %sx); zstd ratio %s" % (
                 "n/a" if z is None else "%.1f" % z, "n/a" if n is None else "%.1f" % n,
                 "n/a" if speedup is None else "%.2f" % speedup,
                 "n/a" if rr is None else "%.2f" % rr,
                 "n/a" if ratio is None else "%.2f" % ratio),
             "note": "fault_proxy's bandwidth limit on the data socket"}]


def markdown(results):
    sc = get_path(results, "sections", "compress")
    if not sc:
        return []
    L = ["### Compression on the wire (%d MiB of pgbench WAL, scale %s, %d MiB segments)" % (
        sc["wal_bytes"] // MIB, sc.get("pgbench_scale"), sc["wal_segment_bytes"] // MIB), ""]
    L.append("Compressed frames take the copy path on both sides; the ratio is segment bytes "
             "over bytes on the wire (frames that did not shrink travel plain). `link-*`: "
             "the data socket through fault_proxy limited to %.0f MB/s." % (
                 (sc.get("link_bytes_per_sec") or 0) / 1e6))
    L.append("")
    L.append("| variant | MB/s | agent CPU s/GiB | replica CPU s/GiB | ratio |")
    L.append("|---|---|---|---|---|")
    for v in sorted(sc["summary"], key=lambda k: (k.startswith("link"), k)):
        s = sc["summary"][v]
        L.append("| %s | %s | %s | %s | %s |" % (
            v, span(s.get("mb_s"), "%.1f"), span(s.get("agent_cpu_s_per_gib"), "%.2f"),
            span(s.get("replica_cpu_s_per_gib"), "%.2f"),
            span(s.get("ratio"), "%.2f") if s.get("ratio") else "1 (plain)"))
    L.append("")
    return L
