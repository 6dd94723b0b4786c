"""Turns the benchmark's results dict into results.json, results.md and
chart.svg (hand-written SVG, no plotting library), and evaluates the targets.

Pure functions of the results dict (see bench.py for its producer), so
report_test.py can check them on fake data.
"""

import json
import os
import re

from integration.bench import report_compress
from integration.bench import report_datatls
from integration.bench import report_formats
from integration.bench import report_synccost

MIB = 1 << 20
GIB = 1 << 30


_get = report_synccost.get_path


def med(results, section, variant, key, field="median"):
    """A median (or min/max) from results["sections"][section]["summary"]."""
    return _get(results, "sections", section, "summary", variant, key, field)


def live_med(results, rate, variant, key, field="median"):
    return _get(results, "sections", "live", "rates", rate, "summary", variant, key, field)


def _fmt(v, spec="%.1f"):
    return "n/a" if v is None else spec % v


# The pgbench section's physical references (integration/bench/raw_relay.h):
# segment files growing with every write, as walship-replica's; reserved at
# full size first (fallocate); zero-filled first, as pg_receivewal's (by
# hand: --pgbench-variants); following the flush position by query, with no
# walsender, as walship --pg-feed=false (by hand too).
# (variant, name in the targets, name on the chart)
RELAYS = [("raw-relay", "the raw relay", "raw relay"),
          ("raw-relay-query", "the raw relay following by query", "raw relay, by query"),
          ("raw-relay-fallocate", "the raw relay with fallocated segments",
           "raw relay, fallocated"),
          ("raw-relay-zero", "the raw relay with zero-filled segments", "raw relay, zero-filled")]


def _target(tid, text, passed, measured, note=""):
    return {"id": tid, "target": text, "pass": passed, "measured": measured, "note": note}


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def evaluate(results):
    """The issue's targets, each {id, target, pass (True/False/None), measured}."""
    t = []
    raw = med(results, "catchup", "raw-zerocopy", "mb_s")
    zc = med(results, "catchup", "walship-zerocopy", "mb_s")
    r = _ratio(zc, raw)
    t.append(_target("catchup-vs-raw", "durable catch-up >= 90% of the raw sendfile->splice "
                     "pipeline (same fdatasync policy)", None if r is None else r >= 0.9,
                     "%s vs %s MB/s = %s%%" % (_fmt(zc), _fmt(raw), _fmt(r and r * 100, "%.0f"))))
    wpg = med(results, "pg", "walship-pg", "mb_s")
    rw = med(results, "pg", "pg_receivewal", "mb_s")
    r = _ratio(wpg, rw)
    t.append(_target("catchup-vs-pg_receivewal", "durable catch-up >= 2x pg_receivewal "
                     "--synchronous (same PostgreSQL backlog)", None if r is None else r >= 2.0,
                     "%s vs %s MB/s = %sx" % (_fmt(wpg), _fmt(rw), _fmt(r, "%.2f"))))
    rz = med(results, "catchup", "walship-zerocopy", "replica_cpu_s_per_gib")
    rc = med(results, "catchup", "walship-copy", "replica_cpu_s_per_gib")
    r = _ratio(rz, rc)
    vz = med(results, "catchup", "raw-zerocopy-verify", "replica_cpu_s_per_gib")
    vc = med(results, "catchup", "raw-copy-verify", "replica_cpu_s_per_gib")
    vr = _ratio(vz, vc)
    t.append(_target("replica-cpu", "replica CPU per GiB with zerocopy <= 60% of copy",
                     None if r is None else r <= 0.6,
                     "%s vs %s s/GiB = %s%%" % (_fmt(rz, "%.2f"), _fmt(rc, "%.2f"),
                                                _fmt(r and r * 100, "%.0f")),
                     "" if vr is None else
                     "the raw pipeline with the same checksum passes: %s vs %s s/GiB = %s%%" % (
                         _fmt(vz, "%.2f"), _fmt(vc, "%.2f"), _fmt(vr * 100, "%.0f"))))
    az = med(results, "catchup", "walship-zerocopy", "agent_cpu_s_per_gib")
    ac = med(results, "catchup", "walship-copy", "agent_cpu_s_per_gib")
    r = _ratio(az, ac)
    vz = med(results, "catchup", "raw-zerocopy-verify", "agent_cpu_s_per_gib")
    vc = med(results, "catchup", "raw-copy-verify", "agent_cpu_s_per_gib")
    vr = _ratio(vz, vc)
    t.append(_target("agent-cpu", "agent CPU per GiB with zerocopy no worse than copy",
                     None if r is None else r <= 1.0,
                     "%s vs %s s/GiB = %s%%" % (_fmt(az, "%.2f"), _fmt(ac, "%.2f"),
                                                _fmt(r and r * 100, "%.0f")),
                     "" if vr is None else
                     "the raw pipeline with the same checksum passes: %s vs %s s/GiB = %s%%" % (
                         _fmt(vz, "%.2f"), _fmt(vc, "%.2f"), _fmt(vr * 100, "%.0f"))))
    lag = live_med(results, "100", "walship-zerocopy", "lag_p99_ms")
    own = live_med(results, "100", "walship-zerocopy", "own_fdatasync_p99_ms")
    fs = live_med(results, "100", "probe", "fdatasync_p99_ms")
    ok = None if lag is None or own is None else lag <= own + 1.0
    # The physical reference against the same kind of bound: whether the
    # machine lets any pipeline meet it.
    raw_lag = live_med(results, "100", "raw", "lag_p99_ms")
    raw_own = live_med(results, "100", "raw", "own_fdatasync_p99_ms")
    t.append(_target("live-lag-100", "live lag p99 at 100 MB/s <= the replica's own fdatasync "
                     "p99 + 1 ms", ok, "lag p99 %s ms vs its data fdatasync p99 %s ms + 1" % (
                         _fmt(lag, "%.2f"), _fmt(own, "%.2f")),
                     "" if raw_lag is None or raw_own is None else
                     "the raw sendfile->splice pipeline: lag p99 %s ms, %s its own fdatasync "
                     "p99 %s ms + 1" % (_fmt(raw_lag, "%.2f"),
                                        "within" if raw_lag <= raw_own + 1.0 else "over",
                                        _fmt(raw_own, "%.2f"))))
    ok = None if lag is None or fs is None else lag <= fs + 1.0
    t.append(_target("live-lag-100-probe", "(same target against a lone fdatasync probe on "
                     "the same disk)", ok, "lag p99 %s ms vs probe fdatasync p99 %s ms + 1" % (
                         _fmt(lag, "%.2f"), _fmt(fs, "%.2f"))))
    wl50 = med(results, "pgbench", "walship", "lag_p50_ms")
    wl99 = med(results, "pgbench", "walship", "lag_p99_ms")
    rl50 = med(results, "pgbench", "pg_receivewal", "lag_p50_ms")
    rl99 = med(results, "pgbench", "pg_receivewal", "lag_p99_ms")
    ok = None if None in (wl50, wl99, rl50, rl99) else (wl50 < rl50 and wl99 < rl99)
    # The physical references against the same bound: whether any agent
    # beside the primary plus a receiver could meet it on this machine.
    notes = []
    for v, label, _ in RELAYS:
        xl50 = med(results, "pgbench", v, "lag_p50_ms")
        xl99 = med(results, "pgbench", v, "lag_p99_ms")
        if None not in (xl50, xl99, rl50, rl99):
            notes.append("%s: p50 %s, p99 %s ms (%s)" % (
                label, _fmt(xl50, "%.2f"), _fmt(xl99, "%.2f"),
                "both below" if xl50 < rl50 and xl99 < rl99 else "not both below"))
    t.append(_target("pgbench-lag", "under pgbench, walship flush lag p50 and p99 both below "
                     "pg_receivewal --synchronous", ok,
                     "p50 %s vs %s ms, p99 %s vs %s ms" % (_fmt(wl50, "%.2f"), _fmt(rl50, "%.2f"),
                                                          _fmt(wl99, "%.2f"), _fmt(rl99, "%.2f")),
                     "; ".join(notes)))
    wb50 = med(results, "pgbench", "walship", "byte_lag_p50")
    wb99 = med(results, "pgbench", "walship", "byte_lag_p99")
    rb50 = med(results, "pgbench", "pg_receivewal", "byte_lag_p50")
    rb99 = med(results, "pgbench", "pg_receivewal", "byte_lag_p99")
    ok = None if None in (wb50, wb99, rb50, rb99) else (wb50 < rb50 and wb99 < rb99)
    t.append(_target("pgbench-byte-lag", "(same target, in bytes sampled at the same "
                     "instants for both)", ok,
                     "p50 %s vs %s KiB, p99 %s vs %s KiB" % tuple(
                         _fmt(v and v / 1024.0, "%.0f") if v is not None else "n/a"
                         for v in (wb50, rb50, wb99, rb99))))
    wt = med(results, "pgbench", "walship", "tps")
    rt = med(results, "pgbench", "pg_receivewal", "tps")
    notes = []
    for v, label, _ in [("walship-paced", "walship with --ack-interval-ms=100", ""),
                        ("walship-query-paced",
                         "walship with --pg-feed=false --ack-interval-ms=100", ""),
                        ("pg_receivewal-busy", "pg_receivewal beside a busy loop of %s cores" %
                         _fmt(med(results, "pgbench", "pg_receivewal-busy", "busy_cores"),
                              "%.2f"), "")] + RELAYS:
        xt = med(results, "pgbench", v, "tps")
        if xt is not None and rt is not None:
            rr = _round_ratio(results, v)
            notes.append("%s: %s TPS (%s%s)" % (
                label, _fmt(xt, "%.0f"), "not lower" if xt >= rt else "lower",
                "" if rr is None else "; round by round %s of pg_receivewal's" % _fmt(rr, "%.2f")))
    rr = _round_ratio(results, "walship")
    t.append(_target("pgbench-tps", "primary TPS with walship no lower than with pg_receivewal",
                     None if wt is None or rt is None else wt >= rt,
                     "%s vs %s TPS%s" % (_fmt(wt, "%.0f"), _fmt(rt, "%.0f"),
                                         "" if rr is None else
                                         " (round by round %s)" % _fmt(rr, "%.2f")),
                     "; ".join(notes)))
    sync = report_synccost.target(results)
    if sync is not None:
        t.append(sync)
    t += report_compress.targets(results)
    t += report_datatls.targets(results)
    for side in ("agent", "replica"):
        small = med(results, "catchup", "walship-zerocopy-small", side + "_hwm", "max")
        big = med(results, "catchup", "walship-zerocopy", side + "_hwm", "max")
        smallc = med(results, "catchup", "walship-copy-small", side + "_hwm", "max")
        bigc = med(results, "catchup", "walship-copy", side + "_hwm", "max")
        vals = [v for v in (small, big, smallc, bigc) if v is not None]
        ok = None
        if small is not None and big is not None:
            ok = max(vals) <= 64 * MIB and big <= small + 4 * MIB
            if smallc is not None and bigc is not None:
                ok = ok and bigc <= smallc + 4 * MIB
        sb = _get(results, "sections", "catchup", "small_backlog_bytes")
        bb = _get(results, "sections", "catchup", "backlog_bytes")
        t.append(_target("rss-" + side, "peak RSS of walship-%s <= 64 MiB, the same for a "
                         "small and a big backlog" % side, ok,
                         "zerocopy %s / %s MiB, copy %s / %s MiB (backlogs %s / %s MiB)" % (
                             _fmt(small and small / MIB), _fmt(big and big / MIB),
                             _fmt(smallc and smallc / MIB), _fmt(bigc and bigc / MIB),
                             _fmt(sb and sb / MIB, "%.0f"), _fmt(bb and bb / MIB, "%.0f")),
                         "max over rounds; 'same' = the big backlog's peak within 4 MiB"))
    rb = med(results, "fanout", "4", "read_bytes_per_source_byte")
    t.append(_target("fanout-reads-once", "fan-out to 4: the agent reads each source byte "
                     "from storage once", None if rb is None else rb <= 1.1,
                     "read_bytes / source bytes = %s (rchar / source = %s)" % (
                         _fmt(rb, "%.2f"),
                         _fmt(med(results, "fanout", "4", "rchar_per_source_byte"), "%.2f")),
                     "source evicted from the page cache before each run"))
    a1 = med(results, "fanout", "1", "aggregate_mb_s")
    a4 = med(results, "fanout", "4", "aggregate_mb_s")
    r = _ratio(a4, a1)
    t.append(_target("fanout-throughput", "fan-out to 4: aggregate durable throughput >= 80% "
                     "of one replica's", None if r is None else r >= 0.8,
                     "%s vs %s MB/s = %s%%" % (_fmt(a4), _fmt(a1), _fmt(r and r * 100, "%.0f"))))
    return t


# ---------------------------------------------------------------------------
# Markdown


def _span(s, scale=1.0, spec="%.1f"):
    """A median_summary as "median (min–max)" ("n/a" when missing)."""
    if not s:
        return "n/a"
    if s["n"] == 1:
        return spec % (s["median"] * scale)
    return (spec + " (" + spec + "–" + spec + ")") % (
        s["median"] * scale, s["min"] * scale, s["max"] * scale)


def _round_ratio(results, v):
    """Median over interleaved rounds of variant v's TPS over pg_receivewal's
    in the same round (drift between rounds cancels); None without both."""
    runs = _get(results, "sections", "pgbench", "runs")
    return report_synccost.median(report_synccost.round_ratios(runs, v, "pg_receivewal"))


# The pgbench section's rows, in the order shown.
PGBENCH_LABELS = [
    ("none", "none"), ("walship", "walship (flush feed)"),
    ("walship-b", "walship, the build compared (`--compare`)"),
    ("walship-paced", "walship, `--ack-interval-ms=100`"),
    ("walship-query", "walship, `--pg-feed=false`"),
    ("walship-query-paced", "walship, `--pg-feed=false --ack-interval-ms=100`"),
    ("pg_receivewal", "pg_receivewal --synchronous"),
    ("pg_receivewal-busy", "pg_receivewal --synchronous beside a busy loop (reference: CPU "
     "alone)"),
    ("raw-relay", "raw relay (reference)"),
    ("raw-relay-query", "raw relay following by query, no walsender (reference for the feed "
     "off)"),
    ("raw-relay-fallocate", "raw relay, segments fallocated first"),
    ("raw-relay-zero", "raw relay, segments zero-filled first")]


def _pgbench_wal_syncs(results, pb):
    """The primary's own WAL syncs beside each receiver (pg_stat_wal)."""
    rows = [(v, label) for v, label in PGBENCH_LABELS
            if v in pb["summary"] and (pb["summary"][v].get("wal_sync_us") or {}).get("median")]
    if not rows:
        return []
    L = ["The primary's own WAL syncs during the TPS phase (`pg_stat_wal` with "
         "`track_wal_io_timing`: PostgreSQL's fdatasync of its WAL):", "",
         "| receiver | µs per WAL sync | WAL syncs per transaction |", "|---|---:|---:|"]
    for v, label in rows:
        L.append("| %s | %s | %s |" % (label, _range(results, "pgbench", v, "wal_sync_us",
                                                      spec="%.0f"),
                                       _range(results, "pgbench", v, "wal_syncs_per_txn",
                                              spec="%.2f")))
    return L + [""]


def _query_interval_label(v):
    """The table label of a variant with a "-Nms" query interval; None for
    any other."""
    m = re.match(r"^(walship-query(-paced)?|raw-relay-query)-(\d+)ms$", v)
    if not m:
        return None
    if m.group(1) == "raw-relay-query":
        return "raw relay following by query, one per %s ms at most" % m.group(3)
    return "walship, `--pg-feed=false %s--pg-query-interval-ms=%s`" % (
        "--ack-interval-ms=100 " if m.group(2) else "", m.group(3))


def _range(results, section, variant, key, scale=1.0, spec="%.1f"):
    return _span(_get(results, "sections", section, "summary", variant, key), scale, spec)


def _live_range(results, rate, variant, key, spec="%.2f"):
    return _span(_get(results, "sections", "live", "rates", rate, "summary", variant, key),
                 spec=spec)


def machine_line(results):
    m = results.get("machine", {})
    line = ("%s × %s, %s MiB RAM, Linux %s, %s on %s (%s%s), mount options %s; "
            "load average %s at start, %s at end" % (
                m.get("nproc"), m.get("cpu_model"), m.get("mem_total_mib"), m.get("kernel"),
                m.get("fs_type"), m.get("disk_device"), m.get("disk_model"),
                ", kernel says rotational" if m.get("disk_rotational") else "",
                m.get("mount_options"), "/".join(m.get("loadavg_start", [])),
                "/".join(m.get("loadavg_end", []))))
    w = m.get("warm_memory")
    if w:
        line += ("; touching memory before each catch-up run (%d times) cost %.2f CPU s/GiB "
                 "median (%.2f–%.2f): the host takes back memory the guest frees, and a "
                 "first write to it faults in the host" % (
                     w["runs"], w["s_per_gib_median"], w["s_per_gib_min"], w["s_per_gib_max"]))
    return line


def markdown(results):
    L = []
    q = results.get("quick")
    rounds = _get(results, "config", "rounds")
    L.append("## Benchmark results%s" % (" (--quick smoke run: numbers not meaningful)"
                                         if q else ""))
    L.append("")
    L.append("Machine: %s. %s interleaved round(s) per comparison; each cell is the median "
             "(min–max) over rounds. Run started %s, took %.0f s. Produced by "
             "`integration/bench/run_bench.sh`%s." % (
                 machine_line(results), rounds, results.get("started"),
                 results.get("elapsed_s", 0), " --quick" if q else ""))
    L.append("")
    c = _get(results, "sections", "catchup")
    if c:
        L.append("### Catch-up of an append-format backlog (%d MiB, %d MiB segments, "
                 "page cache warm)" % (c["backlog_bytes"] // MIB, c["segment_bytes"] // MIB))
        L.append("")
        L.append("| pipeline | durable MB/s | agent CPU s/GiB | replica CPU s/GiB | "
                 "agent peak RSS MiB | replica peak RSS MiB |")
        L.append("|---|---:|---:|---:|---:|---:|")
        labels = [("raw-zerocopy", "raw sendfile → splice (reference)"),
                  ("raw-copy", "raw pread/send → read/pwrite"),
                  ("raw-zerocopy-verify", "raw sendfile → splice + checksum passes"),
                  ("raw-copy-verify", "raw pread/send → read/pwrite + checksum passes"),
                  ("walship-zerocopy", "walship `--transport=zerocopy`"),
                  ("walship-copy", "walship `--transport=copy`"),
                  ("walship-zerocopy-small", "walship zerocopy, %d MiB backlog" % (
                      c["small_backlog_bytes"] // MIB)),
                  ("walship-copy-small", "walship copy, %d MiB backlog" % (
                      c["small_backlog_bytes"] // MIB))]
        for v, label in labels:
            if v not in c["summary"]:
                continue
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                label, _range(results, "catchup", v, "mb_s", spec="%.0f"),
                _range(results, "catchup", v, "agent_cpu_s_per_gib", spec="%.2f"),
                _range(results, "catchup", v, "replica_cpu_s_per_gib", spec="%.2f"),
                _range(results, "catchup", v, "agent_hwm", 1.0 / MIB),
                _range(results, "catchup", v, "replica_hwm", 1.0 / MIB)))
        L.append("")
        if c.get("warm_up"):
            L.append("Not counted: %s." % c["warm_up"])
            L.append("")
        L.append("Raw rows: the sending side's CPU is under \"agent\", the receiving side's "
                 "under \"replica\"; both raw ends fdatasync like walship-replica (a flusher "
                 "syncs whatever arrived, at least every 2 ms) and create/rename segment "
                 "files, but write no state file; only the \"+ checksum passes\" rows "
                 "checksum what they send (each frame, as walship-agent does) and what they "
                 "receive (as walship-replica verifies it).")
        L.append("")
    p = _get(results, "sections", "pg")
    if p:
        L.append("### Catch-up of a PostgreSQL backlog (%d MiB of WAL from a big INSERT, "
                 "%d MiB segments; receivers started afterwards)" % (
                     p["backlog_bytes"] // MIB, p["wal_segment_bytes"] // MIB))
        L.append("")
        L.append("| receiver | durable MB/s | sender CPU s/GiB | receiver CPU s/GiB | "
                 "receiver peak RSS MiB |")
        L.append("|---|---:|---:|---:|---:|")
        for v, label in [("walship-pg", "walship `--format=postgres` (zerocopy)"),
                         ("pg_receivewal", "pg_receivewal --synchronous --slot")]:
            L.append("| %s | %s | %s | %s | %s |" % (
                label, _range(results, "pg", v, "mb_s", spec="%.0f"),
                _range(results, "pg", v, "agent_cpu_s_per_gib", spec="%.2f"),
                _range(results, "pg", v, "replica_cpu_s_per_gib", spec="%.2f"),
                _range(results, "pg", v, "replica_hwm", 1.0 / MIB)))
        L.append("")
        L.append("Sender CPU: walship-agent plus its PostgreSQL backends; for pg_receivewal "
                 "the walsender process.")
        L.append("")
    lv = _get(results, "sections", "live")
    if lv:
        L.append("### Live tailing (ms from write(2) returning on the primary to the "
                 "replica's durable position covering the record)")
        L.append("")
        L.append("| rate | pipeline | lag p50 | lag p99 | lag max | its own fdatasync "
                 "p50 | its own fdatasync p99 |")
        L.append("|---|---|---:|---:|---:|---:|---:|")
        for rate in sorted(lv["rates"], key=int):
            for v, label in [("raw", "raw sendfile → splice"),
                             ("walship-zerocopy", "walship zerocopy"),
                             ("walship-copy", "walship copy")]:
                if v not in lv["rates"][rate]["summary"]:
                    continue
                L.append("| %s MB/s | %s | %s | %s | %s | %s | %s |" % (
                    rate, label, _live_range(results, rate, v, "lag_p50_ms"),
                    _live_range(results, rate, v, "lag_p99_ms"),
                    _live_range(results, rate, v, "lag_max_ms"),
                    _live_range(results, rate, v, "own_fdatasync_p50_ms"),
                    _live_range(results, rate, v, "own_fdatasync_p99_ms")))
            L.append("| %s MB/s | fdatasync probe (same disk, same load) | %s | %s | %s | | |" % (
                rate, _live_range(results, rate, "probe", "fdatasync_p50_ms"),
                _live_range(results, rate, "probe", "fdatasync_p99_ms"),
                _live_range(results, rate, "probe", "fdatasync_max_ms")))
        L.append("")
        L.append("Writer: %s. walship's durable time is when the replica rewrote "
                 "walship.progress, after the data's fdatasync and right before sending the "
                 "acknowledgement, seen with inotify. The probe "
                 "row is the fdatasync latency of a lone process appending and syncing (no "
                 "network, no second file synced beside it). \"Its own fdatasync\": every "
                 "fdatasync of a segment file the receiver made during the run (walship-replica's "
                 "walship_replica_data_fdatasync_seconds histogram, interpolated inside 25 %% "
                 "wide buckets; the raw receiver's exact list)." % lv["writer"])
        L.append("")
    pb = _get(results, "sections", "pgbench")
    if pb:
        if pb.get("lag_seconds"):
            L.append("### pgbench TPC-B (scale %d, %d clients; per run %d s measuring lag, "
                     "then %d s measuring TPS and CPU) with a receiver beside the primary"
                     % (pb["scale"], pb["clients"], pb["lag_seconds"], pb["seconds"]))
        else:
            L.append("### pgbench TPC-B (scale %d, %d clients, %d s per run) with a receiver "
                     "beside the primary" % (pb["scale"], pb["clients"], pb["seconds"]))
        L.append("")
        L.append("| receiver | primary TPS | flush lag p50 ms | flush lag p99 ms | "
                 "replica-side lag p50 / p99 ms | "
                 "byte lag p50 KiB | byte lag p99 KiB | sender CPU (cores) | "
                 "receiver CPU (cores) | CPU µs per transaction |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for v, label in PGBENCH_LABELS + [
                (v, _query_interval_label(v)) for v in sorted(pb["summary"])
                if _query_interval_label(v)]:
            if v not in pb["summary"]:
                continue
            L.append("| %s | %s | %s | %s | %s / %s | %s | %s | %s | %s | %s |" % (
                label, _range(results, "pgbench", v, "tps", spec="%.0f"),
                _range(results, "pgbench", v, "lag_p50_ms", spec="%.2f"),
                _range(results, "pgbench", v, "lag_p99_ms", spec="%.2f"),
                _range(results, "pgbench", v, "state_lag_p50_ms", spec="%.2f"),
                _range(results, "pgbench", v, "state_lag_p99_ms", spec="%.2f"),
                _range(results, "pgbench", v, "byte_lag_p50", 1 / 1024.0, "%.0f"),
                _range(results, "pgbench", v, "byte_lag_p99", 1 / 1024.0, "%.0f"),
                _range(results, "pgbench", v, "sender_cores", spec="%.2f"),
                _range(results, "pgbench", v, "receiver_cores", spec="%.2f"),
                _range(results, "pgbench", v, "cpu_us_per_txn", spec="%.0f")))
        L.append("")
        L += _pgbench_wal_syncs(results, pb)
        L.append("CPU in cores (CPU seconds per second of load). Sender: walship-agent with "
                 "its PostgreSQL backends (the flush feed's walsender and the safety-net "
                 "queries), or pg_receivewal's walsender; receiver: walship-replica or "
                 "pg_receivewal. CPU per transaction: sender and receiver together, divided "
                 "by the primary's TPS. The raw relay (`benchtool relay-send` / `relay-recv`) "
                 "is the physical reference of an agent beside the primary: one thread learns "
                 "the flush position from a walsender, sends the new bytes from pg_wal with "
                 "sendfile and reports acknowledgements back; one receiving thread splices, "
                 "fdatasyncs and acknowledges, as pg_receivewal does; no checksums, state "
                 "file, resume or control channel. Its segment files grow with every write, "
                 "as walship-replica's. The fallocated variant reserves each new segment at "
                 "full size first (fallocate(2): no size change per write, unwritten extents "
                 "converted as they are written); the zero-filled one prepares it as "
                 "pg_receivewal does (every byte written as zero, then fdatasync), so later "
                 "fdatasyncs change no metadata. The differences between those rows are what "
                 "the file policy costs; the rest of the gap to pg_receivewal is the second "
                 "process. The relay following by query has no walsender: PostgreSQL writing "
                 "into pg_wal prompts a prepared pg_current_wal_flush_lsn() query, at most one "
                 "per 2 ms, as walship does with the feed off, and acknowledgements go "
                 "nowhere (the reference for walship with `--pg-feed=false`).")
        L.append("")
        if pb.get("lag_seconds"):
            obs = [v for v in sorted(pb["summary"]) if v.startswith("walship")]
            L.append("Lags come from each run's first phase, TPS and CPU from its second, on "
                     "the same daemons. Every variant's load has the same sampler beside it "
                     "(a query every 10 ms); walship's first phase also has the observer of "
                     "its replica-side lag, which wakes for every acknowledgement (%s cores), "
                     "and stops before the TPS phase." % ", ".join(
                         "%s %s" % (v, _range(results, "pgbench", v, "observer_cores",
                                              spec="%.3f")) for v in obs))
            L.append("")
        th = _get(pb, "threads", "walship")
        if th:
            L.append("Where walship's CPU goes under pgbench (flush feed on): %s flush cycles "
                     "a second made new bytes durable; sender %s and receiver %s CPU µs per "
                     "cycle." % (_range(results, "pgbench", "walship", "flush_cycles_per_s",
                                        spec="%.0f"),
                                 _range(results, "pgbench", "walship", "sender_us_per_cycle",
                                        spec="%.0f"),
                                 _range(results, "pgbench", "walship", "receiver_us_per_cycle",
                                        spec="%.0f")))
            L.append("")
            L.append("| process/thread | cores | CPU µs per cycle | sleeps per cycle |")
            L.append("|---|---:|---:|---:|")
            rows = sorted(th.items(), key=lambda kv: -((kv[1].get("cores") or {}).get("median")
                                                      or 0))
            for name, d in rows:
                if not d.get("cores") or d["cores"]["median"] < 0.005:
                    continue
                L.append("| %s | %s | %s | %s |" % (name, _span(d["cores"], spec="%.3f"),
                                                     _span(d.get("us_per_cycle"), spec="%.0f"),
                                                     _span(d.get("switches_per_cycle"),
                                                           spec="%.1f")))
            L.append("")
            L.append("Per thread from /proc (utime + stime, voluntary context switches); "
                     "feed/walsender is the PostgreSQL walsender of the agent's flush feed. "
                     "Threads under 0.005 cores are left out.")
            L.append("")
        m = pb["lag_method"]
        L.append("Flush lag: %s (without the feed walship has no row there). Replica-side "
                 "lag: %s. Byte lag: %s." % (m["both"], m["walship_state"], m["bytes"]))
        L.append("")
    L += report_datatls.markdown(results)
    L += report_synccost.markdown(results)
    L += report_formats.markdown(results)
    L += report_compress.markdown(results)
    f = _get(results, "sections", "fanout")
    if f:
        L.append("### Fan-out (%d MiB backlog evicted from the page cache before each run)" %
                 (f["backlog_bytes"] // MIB))
        L.append("")
        L.append("| replicas | aggregate durable MB/s | agent read_bytes / source bytes | "
                 "agent rchar / source bytes | agent CPU s | agent peak RSS MiB |")
        L.append("|---:|---:|---:|---:|---:|---:|")
        for n in sorted(f["summary"], key=int):
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                n, _range(results, "fanout", n, "aggregate_mb_s", spec="%.0f"),
                _range(results, "fanout", n, "read_bytes_per_source_byte", spec="%.2f"),
                _range(results, "fanout", n, "rchar_per_source_byte", spec="%.2f"),
                _range(results, "fanout", n, "agent_cpu_s", spec="%.2f"),
                _range(results, "fanout", n, "agent_hwm", 1.0 / MIB)))
        L.append("")
        L.append("read_bytes counts what the agent made the kernel read from the disk; rchar "
                 "counts bytes through read/sendfile calls (page cache included).")
        L.append("")
    L.append("### Targets")
    L.append("")
    L.append("| target | measured (medians) | result |")
    L.append("|---|---|---|")
    for tg in results.get("targets", []):
        res = {True: "**pass**", False: "**FAIL**", None: "not measured"}[tg["pass"]]
        note = (" (%s)" % tg["note"]) if tg.get("note") else ""
        L.append("| %s | %s%s | %s |" % (tg["target"], tg["measured"], note, res))
    L.append("")
    if results.get("errors"):
        L.append("Sections that failed: " + "; ".join(
            "%s: %s" % kv for kv in sorted(results["errors"].items())))
        L.append("")
    L.append("![walship benchmark](chart.svg)")
    L.append("")
    return "\n".join(L)


# ---------------------------------------------------------------------------
# SVG


def _esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


COLORS = {"raw": "#7f7f7f", "walship": "#1f77b4", "copy": "#9ecae1", "pg": "#d62728",
          "probe": "#2ca02c", "none": "#bcbd22"}


def _panel(title, unit, rows, y, width=760, label_w=250, bar_h=16, gap=6):
    """Horizontal bars: rows = [(label, median, lo, hi, color)]. Returns
    (svg elements, height). Whiskers show min–max over rounds."""
    els = ['<text x="10" y="%d" font-size="14" font-weight="bold">%s</text>' % (
        y + 16, _esc(title))]
    y0 = y + 26
    vals = [r[3] if r[3] is not None else r[1] for r in rows if r[1] is not None]
    vmax = max(vals) if vals else 1.0
    vmax = vmax * 1.1 if vmax > 0 else 1.0
    plot_w = width - label_w - 90
    for i, (label, v, lo, hi, color) in enumerate(rows):
        yy = y0 + i * (bar_h + gap)
        els.append('<text x="%d" y="%d" font-size="12" text-anchor="end">%s</text>' % (
            label_w - 6, yy + bar_h - 4, _esc(label)))
        if v is None:
            els.append('<text x="%d" y="%d" font-size="12" fill="#999">n/a</text>' % (
                label_w + 4, yy + bar_h - 4))
            continue
        w = max(1.0, plot_w * v / vmax)
        els.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (
            label_w, yy, w, bar_h, color))
        if lo is not None and hi is not None and hi > lo:
            x1, x2 = label_w + plot_w * lo / vmax, label_w + plot_w * hi / vmax
            ym = yy + bar_h / 2.0
            els.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" '
                       'stroke-width="1"/>' % (x1, ym, x2, ym))
            for x in (x1, x2):
                els.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" '
                           'stroke-width="1"/>' % (x, ym - 4, x, ym + 4))
        els.append('<text x="%.1f" y="%d" font-size="12">%s</text>' % (
            label_w + max(w, plot_w * (hi or 0) / vmax) + 6, yy + bar_h - 4,
            _esc((("%.0f" if abs(v) >= 100 else "%.3g") % v) + " " + unit)))
    return els, 26 + len(rows) * (bar_h + gap) + 14


def _row(results, section, variant, key, label, color, scale=1.0):
    s = _get(results, "sections", section, "summary", variant, key)
    if not s:
        return (label, None, None, None, color)
    return (label, s["median"] * scale, s["min"] * scale, s["max"] * scale, color)


def _live_row(results, rate, variant, key, label, color):
    s = _get(results, "sections", "live", "rates", rate, "summary", variant, key)
    if not s:
        return (label, None, None, None, color)
    return (label, s["median"], s["min"], s["max"], color)


def svg(results):
    panels = []
    if _get(results, "sections", "catchup") or _get(results, "sections", "pg"):
        panels.append(("Durable catch-up throughput (higher is better)", "MB/s", [
            _row(results, "catchup", "raw-zerocopy", "mb_s", "raw sendfile→splice", COLORS["raw"]),
            _row(results, "catchup", "walship-zerocopy", "mb_s", "walship zerocopy",
                 COLORS["walship"]),
            _row(results, "catchup", "walship-copy", "mb_s", "walship copy", COLORS["copy"]),
            _row(results, "pg", "walship-pg", "mb_s", "PostgreSQL: walship", COLORS["walship"]),
            _row(results, "pg", "pg_receivewal", "mb_s", "PostgreSQL: pg_receivewal --sync",
                 COLORS["pg"])]))
        panels.append(("CPU seconds per GiB shipped (lower is better)", "s/GiB", [
            _row(results, "catchup", "raw-zerocopy", "agent_cpu_s_per_gib", "raw: sender",
                 COLORS["raw"]),
            _row(results, "catchup", "raw-zerocopy", "replica_cpu_s_per_gib", "raw: receiver",
                 COLORS["raw"]),
            _row(results, "catchup", "walship-zerocopy", "agent_cpu_s_per_gib",
                 "walship zerocopy: agent", COLORS["walship"]),
            _row(results, "catchup", "walship-copy", "agent_cpu_s_per_gib", "walship copy: agent",
                 COLORS["copy"]),
            _row(results, "catchup", "walship-zerocopy", "replica_cpu_s_per_gib",
                 "walship zerocopy: replica", COLORS["walship"]),
            _row(results, "catchup", "walship-copy", "replica_cpu_s_per_gib",
                 "walship copy: replica", COLORS["copy"]),
            _row(results, "pg", "walship-pg", "agent_cpu_s_per_gib", "PG walship: agent+backends",
                 COLORS["walship"]),
            _row(results, "pg", "pg_receivewal", "agent_cpu_s_per_gib", "PG: walsender",
                 COLORS["pg"]),
            _row(results, "pg", "walship-pg", "replica_cpu_s_per_gib", "PG walship: replica",
                 COLORS["walship"]),
            _row(results, "pg", "pg_receivewal", "replica_cpu_s_per_gib", "PG: pg_receivewal",
                 COLORS["pg"])]))
    lv = _get(results, "sections", "live", "rates")
    if lv:
        rows = []
        for rate in sorted(lv, key=int):
            rows += [_live_row(results, rate, "raw", "lag_p99_ms", "%s MB/s raw p99" % rate,
                               COLORS["raw"]),
                     _live_row(results, rate, "walship-zerocopy", "lag_p99_ms",
                               "%s MB/s walship p99" % rate, COLORS["walship"]),
                     _live_row(results, rate, "probe", "fdatasync_p99_ms",
                               "%s MB/s fdatasync p99" % rate, COLORS["probe"])]
        panels.append(("Live tailing: lag p99 vs the disk's fdatasync p99 (lower is better)",
                       "ms", rows))
    if _get(results, "sections", "pgbench"):
        panels.append(("pgbench: primary TPS (higher is better)", "TPS", [
            _row(results, "pgbench", "none", "tps", "no receiver", COLORS["none"]),
            _row(results, "pgbench", "walship", "tps", "walship", COLORS["walship"]),
            _row(results, "pgbench", "walship-paced", "tps", "walship, acks paced",
                 COLORS["walship"]),
            _row(results, "pgbench", "walship-query", "tps", "walship, feed off",
                 COLORS["copy"]),
            _row(results, "pgbench", "walship-query-paced", "tps", "walship, feed off, paced",
                 COLORS["copy"]),
            _row(results, "pgbench", "pg_receivewal", "tps", "pg_receivewal --sync",
                 COLORS["pg"]),
            _row(results, "pgbench", "pg_receivewal-busy", "tps", "pg_receivewal + busy loop",
                 COLORS["pg"])] + [
            _row(results, "pgbench", v, "tps", short, COLORS["raw"]) for v, _, short in RELAYS]))
        panels.append(("pgbench: flush lag (lower is better)", "ms", [
            _row(results, "pgbench", "walship", "lag_p50_ms", "walship p50", COLORS["walship"]),
            _row(results, "pgbench", "pg_receivewal", "lag_p50_ms", "pg_receivewal p50",
                 COLORS["pg"]),
            _row(results, "pgbench", "walship", "lag_p99_ms", "walship p99", COLORS["walship"]),
            _row(results, "pgbench", "pg_receivewal", "lag_p99_ms", "pg_receivewal p99",
                 COLORS["pg"])] + [
            _row(results, "pgbench", v, "lag_p%d_ms" % q, "%s p%d" % (short, q), COLORS["raw"])
            for q in (50, 99) for v, _, short in RELAYS]))
    f = _get(results, "sections", "fanout", "summary")
    if f:
        panels.append(("Fan-out: aggregate durable throughput (higher is better)", "MB/s", [
            _row(results, "fanout", n, "aggregate_mb_s", "%s replica(s)" % n, COLORS["walship"])
            for n in sorted(f, key=int)]))
    width = 760
    els, y = [], 40
    for title, unit, rows in panels:
        e, h = _panel(title, unit, [r for r in rows if r[0]], y, width)
        els += e
        y += h
    title = "walship benchmark%s — medians, whiskers min–max over rounds" % (
        " (quick: not meaningful)" if results.get("quick") else "")
    head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="sans-serif">\n'
            '<rect width="100%%" height="100%%" fill="#fff"/>\n'
            '<text x="10" y="22" font-size="16" font-weight="bold">%s</text>\n' % (
                width, y + 10, width, y + 10, _esc(title)))
    return head + "\n".join(els) + "\n</svg>\n"


def write_all(results, out):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(results))
    with open(os.path.join(out, "chart.svg"), "w") as f:
        f.write(svg(results))
