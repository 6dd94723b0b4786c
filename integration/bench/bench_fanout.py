"""The fan-out section: one agent, N replicas."""

import time

from integration import harness as kit
from integration.bench.bench_catchup import end_of, settle, start_watch, summarize
from integration.bench.bench_procs import log, read_json_line, rm, rotate, snapshot
from integration.walshiptest import daemons


# ---------------------------------------------------------------------------
# Section: fan-out


def run_fanout(ctx, src, n):
    nbytes = kit.total_size(src)
    ev = ctx.tool_json(["evict", "--dir=" + src])
    settle(ctx, (n + 1) * nbytes)  # the source read back, and n destinations
    end = end_of(src)
    agent = daemons.Agent(src, ctx.logdir, label="agent-fan%d" % n).start()
    replicas, watches, dests = [], [], []
    try:
        a0 = snapshot(agent.pid)
        for i in range(n):
            dests.append(ctx.fresh_dir("fan-dest"))
            watches.append(start_watch(ctx, dests[-1], end))
        t0 = time.monotonic()
        for i in range(n):
            replicas.append(daemons.Replica(agent, dests[i], "f%d" % i, ctx.logdir).start())
        ends = []
        for w in watches:
            rc, _ = w.wait_rusage(900)
            s = read_json_line(w.log_path)
            if rc != 0 or not s.get("reached"):
                raise RuntimeError("fan-out replica did not finish: %s\n%s" % (s, agent.tail()))
            ends.append(s["t_reached_ns"] / 1e9)
        a1 = snapshot(agent.pid)
        rss = [snapshot(r.pid)["hwm"] for r in replicas]
        t1 = max(ends)
        rb = a1["io"].get("read_bytes", 0) - a0["io"].get("read_bytes", 0)
        rc_ = a1["io"].get("rchar", 0) - a0["io"].get("rchar", 0)
        return {"replicas": n, "bytes_each": nbytes, "seconds": t1 - t0,
                "aggregate_mb_s": n * nbytes / 1e6 / (t1 - t0),
                "slowest_replica_mb_s": nbytes / 1e6 / (t1 - t0),
                "resident_after_evict": ev["resident_after"],
                "agent_read_bytes": rb, "agent_rchar": rc_,
                "read_bytes_per_source_byte": rb / float(nbytes),
                "rchar_per_source_byte": rc_ / float(nbytes),
                "agent_cpu_s": a1["cpu_s"] - a0["cpu_s"], "agent_hwm": a1["hwm"],
                "replica_hwm_max": max(rss)}
    finally:
        for r in replicas:
            r.stop()
        agent.stop()
        for w in watches:
            if w.alive():
                w.stop()
        for d in dests:
            rm(d)


def section_fanout(ctx, src):
    counts = ctx.cfg.fanout_counts
    runs = {str(n): [] for n in counts}
    for rnd in range(ctx.cfg.rounds):
        for n in rotate(counts, rnd):
            r = run_fanout(ctx, src, n)
            log("fan-out round %d: %d replica(s) %7.1f MB/s aggregate; agent read_bytes/source "
                "%.2f rchar/source %.2f", rnd + 1, n, r["aggregate_mb_s"],
                r["read_bytes_per_source_byte"], r["rchar_per_source_byte"])
            runs[str(n)].append(r)
    return {"backlog_bytes": kit.total_size(src), "runs": runs,
            "summary": summarize(runs, ["aggregate_mb_s", "read_bytes_per_source_byte",
                                        "rchar_per_source_byte", "agent_cpu_s", "agent_hwm",
                                        "replica_hwm_max"])}
