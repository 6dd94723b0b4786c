"""report.md and report.json of a campaign run."""

import json
import os
import platform
import time

from integration.chaos import checks
from integration.walshiptest import stats


def _converge_table(records):
    by_kind = {}
    for r in records:
        by_kind.setdefault("%s/%s" % (r["family"], r["kind"]), []).append(r["converge_s"])
    return {k: stats.percentiles(v, (50, 99)) for k, v in sorted(by_kind.items())}


def _bytes_held(worlds):
    total = 0
    for w in worlds:
        for r in w.replicas:
            for n in os.listdir(r.dest) if os.path.isdir(r.dest) else []:
                if not n.startswith("walship.") and not n.startswith("."):
                    try:
                        total += os.path.getsize(os.path.join(r.dest, n))
                    except OSError:
                        pass
    return total


def _outcomes(recs):
    """How often a fault ended in a documented error, by its first words."""
    out = {}
    for r in recs:
        if r.get("outcome"):
            key = r["outcome"].split(": ", 2)[-1].split(":")[0][:60]
            out[key] = out.get(key, 0) + 1
    return out


def summarize(args, camp, worlds, params, started, network):
    recs = sorted(camp.records, key=lambda r: r["index"])
    fam, kinds = {}, {}
    for r in recs:
        fam[r["family"]] = fam.get(r["family"], 0) + 1
        k = "%s/%s" % (r["family"], r["kind"])
        kinds[k] = kinds.get(k, 0) + 1
    return {
        "seed": args.seed, "quick": args.quick, "only": args.only,
        "faults_requested": args.faults if args.only is None else 1,
        "faults_injected": len(recs), "faults_by_kind": fam, "faults_by_subkind": kinds,
        "invariant_checks": sum(camp.checks.values()), "invariant_checks_by_name": camp.checks,
        "invariant_failures": camp.failures,
        "converge_seconds": _converge_table(recs),
        "outcomes": _outcomes(recs),
        "bytes_held_by_replicas": _bytes_held(worlds),
        "bytes_shipped": sum(w.bytes_shipped() for w in worlds),
        "bytes_written_by_append_source": sum(getattr(getattr(w, "writer", None), "written", 0)
                                              for w in worlds),
        "postgres_final": [w.final_detail for w in worlds if w.kind == "postgres"],
        "resources": {w.name: checks.resource_summary(w) for w in worlds},
        "network_faults": network,
        "wall_seconds": round(time.time() - started, 1),
        "machine": "%s, %d CPUs" % (platform.platform(), os.cpu_count() or 0),
        "faults": recs,
    }


def write(args, camp, worlds, params, started, network):
    s = summarize(args, camp, worlds, params, started, network)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(s, f, indent=1, sort_keys=True)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(markdown(s))
    return "%d faults, %d invariant checks, %d failed" % (
        s["faults_injected"], s["invariant_checks"], len(s["invariant_failures"]))


def markdown(s):
    out = ["# walship fault campaign, seed %d" % s["seed"], "",
           "Replay the whole run: `integration/chaos/run_chaos.sh --seed %d --faults %d%s`" % (
               s["seed"], s["faults_requested"], " --quick" if s["quick"] else ""), "",
           "| | |", "|---|---|",
           "| faults injected | %d |" % s["faults_injected"],
           "| invariant checks | %d |" % s["invariant_checks"],
           "| invariant failures | %d |" % len(s["invariant_failures"]),
           "| wall time | %.0f s |" % s["wall_seconds"],
           "| bytes shipped (agents' data sockets, all sessions) | %d |" % s["bytes_shipped"],
           "| bytes held by the replicas at the end | %d |" % s["bytes_held_by_replicas"],
           "| bytes the append source wrote | %d |" % s["bytes_written_by_append_source"],
           "| network faults by | %s |" % "; ".join(s["network_faults"]),
           "| machine | %s |" % s["machine"], ""]
    out += ["## Faults by kind", "", "| family | count |", "|---|---|"]
    out += ["| %s | %d |" % kv for kv in sorted(s["faults_by_kind"].items())]
    out += ["", "## Time to converge after each fault kind (seconds)", "",
            "| fault | n | p50 | p99 | max |", "|---|---|---|---|---|"]
    for k, v in s["converge_seconds"].items():
        out.append("| %s | %d | %.2f | %.2f | %.2f |" % (k, v["n"], v["p50"], v["p99"], v["max"]))
    out += ["", "## Invariant checks", "", "| invariant | checks |", "|---|---|"]
    out += ["| %s | %d |" % kv for kv in sorted(s["invariant_checks_by_name"].items())]
    if s["outcomes"]:
        out += ["", "## Documented errors the faults ended in (then repaired as an operator "
                "would)", "", "| error | times |", "|---|---|"]
        out += ["| %s | %d |" % kv for kv in sorted(s["outcomes"].items())]
    for d in s["postgres_final"]:
        out += ["", "PostgreSQL at the end: %s." % d]
    out += ["", "## Daemons' resources (peak over the run)", "",
            "| world | daemon | samples | max RSS KiB | max fds |", "|---|---|---|---|---|"]
    for w, res in sorted(s["resources"].items()):
        for label, v in sorted(res.items()):
            out.append("| %s | %s | %d | %d | %d |" % (w, label, v["samples"], v["max_rss_kib"],
                                                      v["max_fds"]))
    out += ["", "## Failures", ""]
    if not s["invariant_failures"]:
        out.append("None.")
    for f in s["invariant_failures"]:
        out += ["- **%s** after %s (seed %d, fault %s): %s" % (
            f["invariant"], f["fault"], f["seed"], f["fault_index"], f["detail"]),
            "  replay alone: `%s`" % (f["replay"] or "the whole run")]
    return "\n".join(out) + "\n"

