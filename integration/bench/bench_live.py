"""The live section: a rate-paced writer, the lag of each write until it is
durable on the replica, histogram quantiles."""

import bisect
import os
import time

from integration import harness as kit
from integration.bench.bench_catchup import read_watch_log, start_watch, summarize
from integration.bench.bench_procs import dist, log, read_json_line, read_text, rm, rotate
from integration.walshiptest import daemons


# ---------------------------------------------------------------------------
# Section: live tailing (append format)


def writer_log(path, segsize):
    """[(global end offset, t)] from benchtool write --log."""
    out = []
    with open(path) as f:
        for line in f:
            idx, off, t = line.split()
            out.append(((int(idx) - 1) * segsize + int(off), int(t) / 1e9))
    return out


def running_max(durable):
    """`durable` ([(global, t)] in time order) with each position raised to
    the furthest one recorded by then."""
    best = []
    for g, t in durable:
        best.append((max(g, best[-1][0]) if best else g, t))
    return best


def flushed_at(durable):
    """A function of time t: the furthest position in `durable` ([(global,
    t)] in time order) recorded at or before t; None before the first."""
    best = running_max(durable)
    times = [t for _, t in best]

    def at(t):
        i = bisect.bisect_right(times, t)
        return best[i - 1][0] if i else None
    return at


def lags(records, durable):
    """Per record: time from its write to the first durable position at or
    past its end. `durable` is [(global, t)] in time order. Records never
    covered are returned separately."""
    lat, missing = [], 0
    j = 0
    best = running_max(durable)
    for g, t in records:
        while j < len(best) and best[j][0] < g:
            j += 1
        if j == len(best):
            missing += 1
            continue
        lat.append(max(0.0, best[j][1] - t))
    return lat, missing


def histogram_quantile(samples, name, q):
    """The q-quantile of histogram `name` in scraped samples, interpolated
    linearly inside its bucket (as Prometheus does); None when empty."""
    buckets = sorted((float(dict(l)["le"]), v) for (n, l), v in samples.items()
                     if n == name + "_bucket")
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    lo, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= q * total:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (q * total - below) / max(cum - below, 1e-12)
        lo, below = le, cum
    return lo


def seg_global(name, off, segsize):
    return (int(name.split("-")[1]) - 1) * segsize + off


def run_live(ctx, variant, rate):
    cfg = ctx.cfg
    seg = cfg.segment_bytes
    src, dest = ctx.fresh_dir("live-src"), ctx.fresh_dir("live-dest")
    wlog = src + ".writes"
    writer_args = [ctx.tool, "write", "--dir=" + src, "--rate=%d" % rate,
                   "--seconds=%g" % cfg.live_seconds, "--min-record=8192",
                   "--max-record=65536", "--segment-bytes=%d" % seg,
                   "--seed=%d" % ctx.seed, "--log=" + wlog]
    res = {"rate_mb_s": rate / 1e6}
    agent = replica = recv = send = watch = None
    try:
        if variant == "probe":
            w = ctx.procs.start("writer", writer_args)
            probe = ctx.tool_json(["fsync-probe", "--dir=" + dest, "--rate=%d" % rate,
                                   "--seconds=%g" % cfg.live_seconds])
            w.wait_rusage(60)
            fs = probe["fdatasync"]
            res.update({"fdatasync_p50_ms": fs["p50_us"] / 1e3,
                        "fdatasync_p99_ms": fs["p99_us"] / 1e3,
                        "fdatasync_max_ms": fs["max_us"] / 1e3, "fdatasync_count": fs["count"]})
            return res
        if variant == "raw":
            port_file = dest + ".port"
            dlog = dest + ".durable"
            recv = ctx.procs.start("raw-recv", [ctx.tool, "raw-recv", "--dest=" + dest,
                                                "--port-file=" + port_file,
                                                "--durable-log=" + dlog])
            kit.wait_until(lambda: os.path.exists(port_file) and read_text(port_file),
                               10, "raw-recv to listen", interval=0.01)
            addr = read_text(port_file).strip().split("=", 1)[1]
            send = ctx.procs.start("raw-send", [ctx.tool, "raw-send", "--connect=" + addr,
                                                "--src=" + src, "--follow"])
            time.sleep(0.2)
        else:
            transport = "copy" if variant == "walship-copy" else "zerocopy"
            agent = daemons.Agent(src, ctx.logdir, label="agent-live", transport=transport)
            agent.start()
            replica = daemons.Replica(agent, dest, "live", ctx.logdir, transport=transport,
                                      extra_args=["--metrics-listen=127.0.0.1:0"])
            replica.start()
            kit.wait_until(lambda: os.path.exists(os.path.join(dest, "walship.state")),
                               20, "the replica to bind its directory", interval=0.02)
            watch = start_watch(ctx, dest)
        w = ctx.procs.start("writer", writer_args)
        rc, _ = w.wait_rusage(cfg.live_seconds + 60)
        if rc != 0:
            raise RuntimeError("writer failed: %s" % w.tail(15))
        wsum = read_json_line(w.log_path)
        records = writer_log(wlog, seg)
        end = records[-1][0] if records else 0
        if variant == "raw":
            time.sleep(1.0)  # let it drain, then end it: the final sync comes after
            send.stop()
            recv.wait_rusage(60)
            own = read_json_line(recv.log_path)["fdatasync"]
            res.update({"own_fdatasync_p50_ms": own["p50_us"] / 1e3,
                        "own_fdatasync_p99_ms": own["p99_us"] / 1e3})
            durable = []
            with open(dlog) as f:
                for line in f:
                    name, off, t = line.split()
                    durable.append((seg_global(name, int(off), seg), int(t) / 1e9))
        else:
            def caught_up():
                st = kit.read_state(dest)
                return st and st["segment"] and seg_global(st["segment"], st["offset"], seg) >= end
            kit.wait_until(caught_up, 60, "the replica to flush the writer's last byte",
                               interval=0.05)
            # The replica's own device flushes during the run (its data
            # fdatasyncs), the reference the live target names.
            samples = kit.scrape(replica.metrics_address())
            name = "walship_replica_data_fdatasync_seconds"
            for q, key in ((0.5, "own_fdatasync_p50_ms"), (0.99, "own_fdatasync_p99_ms")):
                v = histogram_quantile(samples, name, q)
                res[key] = v * 1e3 if v is not None else None
            watch.stop()
            durable = [(seg_global(s, o, seg), t) for s, o, _, t in read_watch_log(watch.watch_log)
                       if s != "-"]
        lat, missing = lags(records, durable)
        d = dist([x * 1e3 for x in lat])
        res.update({"written_mb_s": wsum["rate_mb_s"], "records": len(records),
                    "lag_p50_ms": d["p50"], "lag_p99_ms": d["p99"], "lag_max_ms": d["max"],
                    "uncovered_records": missing, "durable_updates": len(durable)})
        return res
    finally:
        for p in (send, recv, watch):
            if p is not None and p.alive():
                p.stop()
        if replica is not None:
            replica.stop()
        if agent is not None:
            agent.stop()
        rm(src)
        rm(dest)


def section_live(ctx):
    variants = ["probe", "raw", "walship-zerocopy"]
    out = {"writer": "benchtool write: records of 8-64 KiB appended with write(2) to "
                     "seg-%08d files; each record's time is taken when write(2) returns "
                     "(no fdatasync on the primary side)",
           "seconds": ctx.cfg.live_seconds, "rates": {}}
    for rate in ctx.cfg.live_rates:
        runs = {v: [] for v in variants}
        for rnd in range(ctx.cfg.rounds):
            for v in rotate(variants, rnd):
                r = run_live(ctx, v, rate)
                if v == "probe":
                    log("live %3d MB/s round %d %-18s fdatasync p50 %.2f ms p99 %.2f ms",
                        rate / 1e6, rnd + 1, v, r["fdatasync_p50_ms"], r["fdatasync_p99_ms"])
                else:
                    log("live %3d MB/s round %d %-18s lag p50 %.2f ms p99 %.2f ms max %.2f ms "
                        "(%d records, %d uncovered); its own fdatasync p50 %.2f p99 %.2f ms",
                        rate / 1e6, rnd + 1, v, r["lag_p50_ms"], r["lag_p99_ms"],
                        r["lag_max_ms"], r["records"], r["uncovered_records"],
                        r.get("own_fdatasync_p50_ms") or -1, r.get("own_fdatasync_p99_ms") or -1)
                runs[v].append(r)
        out["rates"]["%d" % (rate / 1e6)] = {
            "runs": runs,
            "summary": summarize(runs, ["lag_p50_ms", "lag_p99_ms", "lag_max_ms",
                                        "fdatasync_p50_ms", "fdatasync_p99_ms",
                                        "fdatasync_max_ms", "own_fdatasync_p50_ms",
                                        "own_fdatasync_p99_ms", "written_mb_s"])}
    return out
