"""The synccost section's part of the report (report.py): its target and its
Markdown tables. Pure functions of the results dict."""

import math
import statistics


def get_path(d, *path):
    """d[path[0]][path[1]]..., or None where a key is missing or None."""
    for p in path:
        if not isinstance(d, dict) or p not in d or d[p] is None:
            return None
        d = d[p]
    return d


# The processes of a receiver whose CPU the section counts, by part
# (bench_synccost.PARTS).
PARTS = ("agent", "replica", "pg_receivewal", "relay_send", "relay_recv", "walsender")


def _fmt(v, spec):
    return "n/a" if v is None else spec % v


def span(s, spec):
    """A median_summary as "median (min–max)" ("n/a" when missing)."""
    if not s:
        return "n/a"
    if s["n"] == 1:
        return spec % s["median"]
    return (spec + " (" + spec + "–" + spec + ")") % (s["median"], s["min"], s["max"])


def _med(sc, variant, key):
    return get_path(sc, "summary", variant, key, "median")


def round_ratios(runs, variant, base):
    """Round by round, variant's TPS over base's in the same interleaved round
    (the drift of a busy machine between rounds cancels), in round order;
    [] without both."""
    a, b = (runs or {}).get(variant) or [], (runs or {}).get(base) or []
    return [x["tps"] / y["tps"] for x, y in zip(a, b) if x.get("tps") and y.get("tps")]


def median(values):
    """The median of a list of numbers; None when it is empty."""
    return statistics.median(values) if values else None


def sign_test_p(ratios):
    """Two-sided exact sign test of "neither is ahead" over round ratios:
    the chance that rounds of two equally fast receivers split at least as
    unevenly as these did. Tied rounds (ratio exactly 1) are left out; None
    when no round is left."""
    ahead = sum(1 for r in ratios if r > 1)
    behind = sum(1 for r in ratios if r < 1)
    n = ahead + behind
    if n == 0:
        return None
    tail = sum(math.comb(n, i) for i in range(min(ahead, behind) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def _fmt_p(p):
    return "p < 0.001" if p < 0.001 else ("p = %.3f" if p < 0.01 else "p = %.2f") % p


def _verdict(p):
    return "%s: %s" % (_fmt_p(p), "a difference these rounds show" if p < 0.05
                       else "these rounds cannot tell them apart")


def lag_ratios(runs, variant, base):
    """variant's flush lag p50 over base's, for every round of every
    standby in which both were sampled (at the same instants: each round
    samples all receivers connected)."""
    out = []
    for rounds in (runs or {}).values():
        for rd in rounds:
            a = rd.get("%s_lag_p50_ms" % variant)
            b = rd.get("%s_lag_p50_ms" % base)
            if a is not None and b:
                out.append(a / b)
    return out


def _lag_line(runs):
    """The report's line of pairwise flush lag comparisons; None without
    two receivers sampled together."""
    parts = []
    for a, b in (("walship", "pg_receivewal"), ("raw-relay", "pg_receivewal"),
                 ("walship", "raw-relay"), ("walship-b", "walship")):
        rs = lag_ratios(runs, a, b)
        p = sign_test_p(rs)
        if p is not None:
            parts.append("%s's above %s's in %d of %d (sign test %s)" % (
                a, b, sum(1 for r in rs if r > 1), len(rs), _verdict(p)))
    if not parts:
        return None
    return "Flush lag p50, round against round at the same instants: %s." % "; ".join(parts)


def _round_line(runs, variant, base):
    """The report's line of variant's TPS over base's round by round, with
    their median, the rounds variant led and whether that split tells the
    two apart; None when they share no round."""
    rs = round_ratios(runs, variant, base)
    if not rs:
        return None
    p = sign_test_p(rs)
    verdict = "" if p is None else "; sign test " + _verdict(p)
    return ("Round by round, %s's TPS over %s's in the same round: %s (median %.2f; %s "
            "ahead in %d of %d%s)." % (variant, base, ", ".join("%.2f" % r for r in rs),
                                       median(rs), variant, sum(1 for r in rs if r > 1),
                                       len(rs), verdict))


def target(results):
    """The issue's target for a synchronous commit through walship, or None
    when the section did not run."""
    sc = get_path(results, "sections", "synccost")
    if not sc:
        return None
    wt, rt = _med(sc, "walship", "tps"), _med(sc, "pg_receivewal", "tps")
    wa = get_path(sc, "added_latency_ms", "walship")
    ra = get_path(sc, "added_latency_ms", "pg_receivewal")
    rr = median(round_ratios(sc.get("runs"), "walship", "pg_receivewal"))
    ok = None
    if None not in (wt, rt, wa, ra):
        ok = wt >= rt and wa <= ra
    return {"id": "synccost", "pass": ok,
            "target": "synchronous commit through walship: TPS >= pg_receivewal --synchronous's "
                      "and latency added per commit no higher (both connected, rounds that "
                      "change only synchronous_standby_names)",
            "measured": "%s vs %s TPS%s; +%s vs +%s ms per commit (%sx)" % (
                _fmt(wt, "%.0f"), _fmt(rt, "%.0f"),
                "" if rr is None else " (round by round %.2f)" % rr,
                _fmt(wa, "%.3f"), _fmt(ra, "%.3f"), _fmt(sc.get("added_ratio"), "%.2f")),
            "note": ""}


LABELS = [("walship", "walship (agent's flush feed)"),
          ("walship-b", "walship, the build compared (`--compare`)"),
          ("raw-relay", "raw relay: agent beside the primary, separate receiver, nothing "
                        "else (`--synccost-relay`)"),
          ("pg_receivewal", "pg_receivewal --synchronous"),
          ("none", "nobody (both connected, asynchronous)")]


def markdown(results):
    """The section's Markdown lines ([] when it did not run)."""
    sc = get_path(results, "sections", "synccost")
    if not sc:
        return []
    L = ["### Synchronous commit cost (pgbench TPC-B scale %d, %d clients, %d s rounds; "
         "walship and pg_receivewal --synchronous both connected)" % (
             sc["scale"], sc["clients"], sc["seconds"]), ""]
    L.append("| synchronous standby | TPS | average latency ms | added per commit ms | "
             "its flush lag p50 / p90 ms | its CPU per transaction µs |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for v, label in LABELS:
        if v not in sc["summary"]:
            continue
        s = sc["summary"][v]
        added = get_path(sc, "added_latency_ms", v)
        lag = cpu = "–"
        if v != "none":
            parts = [(part, s.get("%s_cpu_%s_us_per_xact" % (v, part))) for part in PARTS]
            cpu = span(s.get("%s_cpu_us_per_xact" % v), "%.0f") + "".join(
                [" (" + ", ".join("%s %.0f" % (part, x["median"]) for part, x in parts if x)
                 + ")"] if any(x for _, x in parts) else [])
            lag = "%s / %s" % (span(s.get("%s_lag_p50_ms" % v), "%.2f"),
                               span(s.get("%s_lag_p90_ms" % v), "%.2f"))
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            label, span(s.get("tps"), "%.0f"), span(s.get("latency_ms"), "%.3f"),
            "–" if v == "none" else "+" + _fmt(added, "%.3f"), lag, cpu))
    L.append("")
    L.append("walship adds %s ms to each commit where pg_receivewal adds %s (%sx). Medians "
             "over %d interleaved, rotated rounds; %s." % (
                 _fmt(get_path(sc, "added_latency_ms", "walship"), "%.3f"),
                 _fmt(get_path(sc, "added_latency_ms", "pg_receivewal"), "%.3f"),
                 _fmt(sc.get("added_ratio"), "%.2f"), sc["rounds"], sc["method"]))
    if sc.get("walship_fifo_priority"):
        L[-1] += (" walship's commit-path threads ran under SCHED_FIFO at priority %d "
                  "(--sched-fifo-priority)%s." % (
                      sc["walship_fifo_priority"],
                      ", walship-b's under the normal policy" if "walship-b" in sc["summary"]
                      else ""))
    L.append("")
    for v, base in (("walship", "pg_receivewal"), ("walship-b", "walship"),
                    ("walship-b", "pg_receivewal"),
                    ("raw-relay", "pg_receivewal"), ("walship", "raw-relay")):
        line = _round_line(sc.get("runs"), v, base)
        if line:
            L += [line, ""]
    cpu = [(label, s_) for v, label in LABELS if v != "none"
           for s_ in [get_path(sc, "summary", "none", "%s_cpu_us_per_xact" % v)] if s_]
    if cpu:
        L.append("CPU each receiver used per transaction (its daemons and its "
                 "walsender, as in the table's last column) in the rounds where nobody "
                 "waited for anyone, so every receiver saw the same load: %s." % "; ".join(
                     "%s %s µs" % (label, span(s_, "%.0f")) for label, s_ in cpu))
        L.append("")
    every = sc.get("lag_all_rounds")
    if every:
        L.append("Flush lag p50 / p90 of each receiver over every round, synchronous or not "
                 "(all connected, sampled at the same instants: a pairwise comparison): %s." %
                 "; ".join("%s %s / %s ms" % (v, span(every[v]["p50"], "%.2f"),
                                               span(every[v]["p90"], "%.2f"))
                           for v, _ in LABELS if v in every))
        L.append("")
    lag_line = _lag_line(sc.get("runs"))
    if lag_line:
        L.append(lag_line)
        L.append("")
    tr = sc.get("traced")
    if tr:
        L.append("Where a synchronous commit's time goes (one more walship round with "
                 "`--trace-commits` in both daemons: %.0f TPS; %d of the %d frames sent "
                 "followed through every stage):" % (tr["tps"], tr["frames"], tr["sent"]))
        L.append("")
        L.append("| stage | p50 µs | p90 µs |")
        L.append("|---|---:|---:|")
        for b in tr["breakdown"]:
            L.append("| %s | %s | %s |" % (b["label"], _fmt(b["p50_us"], "%.0f"),
                                           _fmt(b["p90_us"], "%.0f")))
        rw50 = _med(sc, "pg_receivewal", "pg_receivewal_lag_p50_ms")
        rw90 = _med(sc, "pg_receivewal", "pg_receivewal_lag_p90_ms")
        L.append("| pg_receivewal: its whole path, flush lag (pg_stat_replication, its "
                 "synchronous rounds) | %s | %s |" % (_fmt(rw50 and rw50 * 1e3, "%.0f"),
                                                      _fmt(rw90 and rw90 * 1e3, "%.0f")))
        L.append("")
        L.append("Times on CLOCK_MONOTONIC, shared by both daemons; a frame's stages join "
                 "by its segment and end offset (integration/bench/commit_trace.py). Each "
                 "stage's percentiles are its own, so they do not add up to the total's. "
                 "The replica may read a header before the agent's sendfile returns "
                 "(negative). PostgreSQL's flush lag runs from the walsender sending WAL to "
                 "the reply, so it starts a little after walship's `feed` and ends a "
                 "little after its `status`.")
        L.append("")
    return L
