"""report.md of a drill run."""

import json
import os
import time

from integration.drill import chart


# ---------------------------------------------------------------------------
# Report

def _n(v, unit=""):
    if v is None:
        return "-"
    if unit == "bytes":
        return "%d (%s)" % (v, chart.human_bytes(v)) if v >= 1024 else "%d" % v
    if isinstance(v, float):
        return "%.1f" % v
    return str(v)


def _patroni_comparison(results):
    """Host loss under Patroni with and without walship synchronous, side by side."""
    by = {r.name: r.metrics for r in results}
    rows = [(n, label) for n, label in [
        ("patroni-host-loss", "walship synchronous, promotion gate"),
        ("patroni-lagging", "walship synchronous, gate, standbys held back"),
        ("patroni-async", "walship asynchronous, no gate")] if n in by]
    if len(rows) < 2:
        return []
    L = ["## Host loss under Patroni: what walship adds", "",
         "| configuration | failovers | acknowledged commits | lost | RTO median / max (s) |",
         "|---|---|---|---|---|"]
    for n, label in rows:
        m = by[n]
        L.append("| %s | %s | %s | %s | %s / %s |" % (
            label, _n(m.get("failovers")), _n(m.get("acked_commits")), _n(m.get("acked_lost")),
            _n(m.get("rto_s")), _n(m.get("rto_max_s"))))
    return L + [""]


def write_report(out, seed, params, results, started, argv):
    ok = all(r.ok for r in results)
    doc = {"ok": ok, "seed": seed, "quick": params.quick, "started": started,
           "duration_s": round(time.time() - started, 1), "command": argv,
           "segment_size_mb": params.segsize_mb, "load_seconds": params.load_seconds,
           "drills": [r.to_json() for r in results]}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    L = []
    L.append("# walship failover drill report")
    L.append("")
    L.append("- result: **%s**" % ("PASS" if ok else "FAIL"))
    L.append("- seed: `%d` (replay with `--seed %d`)" % (seed, seed))
    L.append("- mode: %s; WAL segment size %d MiB; load %ds per drill (drill-loader + pgbench "
             "-c %d)" % ("quick" if params.quick else "full", params.segsize_mb,
                        params.load_seconds, params.pgbench_clients))
    L.append("- started %s, took %.0fs" % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(
        started)), time.time() - started))
    L.append("- command: `%s`" % " ".join(argv))
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("| drill | result | RPO: acked commits lost | RPO: WAL bytes lost | RTO (s) "
             "| lag p99 (bytes) | lag p99 (ms) |")
    L.append("|---|---|---|---|---|---|---|")
    for r in results:
        m = r.metrics
        lag = m.get("lag", {})
        L.append("| [%s](#%s) | %s | %s | %s | %s | %s | %s |" % (
            r.name, r.name, "PASS" if r.ok else "**FAIL**", _n(m.get("acked_lost")),
            _n(m.get("wal_bytes_lost")), _n(m.get("rto_s")),
            _n(lag.get("replica_bytes", {}).get("p99")),
            _n(lag.get("replica_ms", {}).get("p99"))))
    L.append("")
    L += _patroni_comparison(results)
    for r in results:
        m = r.metrics
        L.append("## %s" % r.name)
        L.append("")
        L.append("Result: **%s**%s" % ("PASS" if r.ok else "FAIL",
                                      (" — %s" % r.error) if r.error else ""))
        L.append("")
        L.append("### RPO and RTO")
        L.append("")
        L.append("| measure | value |")
        L.append("|---|---|")
        rows = [("acknowledged commits", m.get("acked_commits")),
                ("acknowledged commits lost (RPO)", m.get("acked_lost")),
                ("WAL bytes lost (RPO)", m.get("wal_bytes_lost")),
                ("RTO: fault to first write on the promoted standby (s)", m.get("rto_s")),
                ("switchover RTOs (s)", m.get("switchover_rto_s")),
                ("replica catch-up after the fault (s)", m.get("catchup_s")),
                ("agent drain after the crash (s)", m.get("drain_s")),
                ("primary's end of valid WAL", m.get("primary_wal_end_lsn")),
                ("primary's last sampled flush LSN", m.get("primary_last_sampled_flush_lsn")),
                ("replica durable LSN", m.get("replica_durable_lsn")),
                ("standby replay LSN at promotion", m.get("standby_replay_lsn")),
                ("rows on the standby", m.get("rows_on_standby")),
                ("in-flight (unacknowledged) commits present", m.get("in_flight_present")),
                ("failovers", m.get("failovers")),
                ("RTO, the slowest failover (s)", m.get("rto_max_s")),
                ("Patroni ttl / loop_wait (s)", "%s / %s" % (m["patroni_ttl_s"],
                                                             m["patroni_loop_wait_s"])
                 if "patroni_ttl_s" in m else None),
                ("most WAL bytes the standbys lacked at a failure", m.get(
                    "standby_lag_bytes_max")),
                ("most WAL bytes the gate had the candidate replay", m.get(
                    "gate_replayed_bytes_max")),
                ("fault at (s after load start)", m.get("fault_after_load_s")),
                ("fault duration (s)", m.get("fault_duration_s"))]
        for k, v in rows:
            if v is not None:
                L.append("| %s | %s |" % (k, _n(v, "bytes") if "bytes" in k else _n(v)))
        L.append("")
        L.append("### Lag during load")
        L.append("")
        lag = m.get("lag")
        if lag:
            L.append("Samples every %.2fs from load start to the %s (%d samples). Bytes: the "
                     "primary's `pg_current_wal_flush_lsn()` minus the position; ms: age of the "
                     "oldest acknowledged commit beyond the position." % (
                         params.sample_period, "fault" if r.name != "switchover" else
                         "end of the first load", lag["samples"]))
            L.append("")
            L.append("| series | p50 | p90 | p99 | max |")
            L.append("|---|---|---|---|---|")
            for key, label, unit in [("replica_bytes", "replica flushed, bytes", "bytes"),
                                     ("replica_ms", "replica flushed, ms", ""),
                                     ("standby_bytes", "standby replayed, bytes", "bytes"),
                                     ("standby_ms", "standby replayed, ms", ""),
                                     ("agent_lag_ms", "agent-reported lag_ms", "")]:
                p = lag[key]
                L.append("| %s | %s | %s | %s | %s |" % (
                    label, _n(p["p50"], unit), _n(p["p90"], unit), _n(p["p99"], unit),
                    _n(p["max"], unit)))
            lwf = m.get("lag_with_fault")
            if lwf and r.name in ("replica-crash", "network-cut"):
                p, q = lwf["replica_bytes"], lwf["replica_ms"]
                L.append("")
                L.append("Including the fault: replica lag p99 %s bytes / %s ms, max %s bytes / "
                         "%s ms." % (_n(p["p99"]), _n(q["p99"]), _n(p["max"]), _n(q["max"])))
        else:
            L.append("No load samples.")
        L.append("")
        L.append("### Invariants")
        L.append("")
        L.append("| invariant | result | detail |")
        L.append("|---|---|---|")
        for inv in r.invariants:
            L.append("| %s | %s | %s |" % (inv["name"], "pass" if inv["ok"] else "**FAIL**",
                                          inv["detail"].replace("|", "/")))
        if r.error:
            L.append("| drill completed | **FAIL** | %s |" % r.error.replace("|", "/"))
        L.append("")
        if r.files.get("svg"):
            L.append("### Replication lag over time")
            L.append("")
            L.append("![%s lag](%s)" % (r.name, r.files["svg"]))
            L.append("")
            L.append("Data: [%s](%s). Dashed lines mark the events below." % (
                r.files["csv"], r.files["csv"]))
            L.append("")
        L.append("### Timeline")
        L.append("")
        for e in r.events:
            L.append("- %+.2fs %s" % (e["t_rel"], e["event"]))
        for n in r.notes:
            L.append("- note: %s" % n)
        L.append("")
        if r.files.get("logs"):
            L.append("Logs: " + ", ".join("[%s](%s)" % (os.path.basename(p), p)
                                          for p in r.files["logs"]))
            L.append("")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return ok
