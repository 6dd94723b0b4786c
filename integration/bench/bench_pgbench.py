"""The pgbench section: pgbench with no standby, walship (paced, by query),
pg_receivewal --synchronous and the raw relay."""

import os
import re
import subprocess
import sys
import threading
import time

from integration import harness as kit
from integration.bench.bench_catchup import read_watch_log, start_watch, summarize
from integration.bench.bench_live import flushed_at, lags
from integration.bench.bench_procs import (
    dist, log, median_summary, proc_stat_cpu, read_text, rm, rotate, walship_threads)
from integration.walshiptest import daemons
from integration.walshiptest.lsn import parse_lsn
from integration.walshiptest.pg import SUPERUSER
from integration.walshiptest.waits import StepError


# ---------------------------------------------------------------------------
# Section: pgbench


def standby_flushed(pg, application_name):
    """flush_lsn of the walsender serving `application_name` (0 before it reports)."""
    return parse_lsn(pg.session().fetch(
        "SELECT coalesce((SELECT flush_lsn::text FROM pg_stat_replication "
        "WHERE application_name = '%s'), '0/0')" % application_name))


def start_raw_relay(ctx, pg, dest, prealloc="none", follow="feed", send_args=(),
                    both_args=()):
    """The raw relay (raw_relay.h): relay-recv into `dest` (new segments
    prepared as `prealloc` says), then relay-send following the primary by
    `follow` (feed or query) and connected to it. `send_args` go to
    relay-send, `both_args` to both. Returns (relay-send, relay-recv)."""
    port_file = dest + ".port"
    recv = ctx.procs.start("relay-recv", [
        ctx.tool, "relay-recv", "--dest=" + dest, "--port-file=" + port_file,
        "--segment-bytes=%d" % pg.segsize, "--prealloc=" + prealloc] + list(both_args))
    kit.wait_until(lambda: os.path.exists(port_file) and read_text(port_file).strip(),
                   10, "relay-recv to listen", interval=0.01)
    send = ctx.procs.start("relay-send", [
        ctx.tool, "relay-send", "--conninfo=" + pg.conninfo(),
        "--wal-dir=" + os.path.join(pg.datadir, "pg_wal"),
        "--connect=" + read_text(port_file).strip().split("=", 1)[1],
        "--system-id=" + pg.psql("SELECT system_identifier FROM pg_control_system()"),
        "--segment-bytes=%d" % pg.segsize, "--follow=" + follow] + list(send_args) +
        list(both_args))
    return send, recv


# Asks for argv[1] of a core: busy for that share of every 2 ms, asleep for
# the rest (a load that wakes about as often as a shipper per commit).
BUSY_LOOP = '''
import sys, time
share, period = float(sys.argv[1]), 0.002
while True:
    end = time.perf_counter() + period * share
    while time.perf_counter() < end:
        pass
    time.sleep(period * (1 - share))
'''


def run_pgbench(ctx, pg, variant):
    cfg = ctx.cfg
    pg.psql("CHECKPOINT")
    agent = replica = rw = watch = relay = recv = busy = metrics_addr = None
    dest = None
    variant, query_ms = split_query_interval(variant)
    try:
        ws = variant.startswith("walship")
        feed = not variant.startswith("walship-query")
        if ws:
            pg.drop_slot("walship")
            dest = ctx.fresh_dir("pgb-ws")
            # walship-b: the build --compare names, in rounds of its own.
            prog = ((lambda b: os.path.join(cfg.compare_bin, b)) if variant == "walship-b"
                    else (lambda b: None))
            agent = daemons.Agent(os.path.join(pg.datadir, "pg_wal"), ctx.logdir, label="agent-pgb",
                                  program=prog("walship-agent"),
                                  extra_args=["--format=postgres", "--pg-data=" + pg.datadir,
                                              "--pg-conninfo=" + pg.conninfo(),
                                              "--pg-slot=walship",
                                              "--state-dir=" + ctx.fresh_dir("agent-state"),
                                              "--pg-feed=%s" % ("true" if feed else "false")] +
                                  (["--ack-interval-ms=100"] if variant.endswith("-paced")
                                   else []) +
                                  (["--pg-query-interval-ms=%d" % query_ms] if query_ms
                                   else [])).start()
            replica = daemons.Replica(agent, dest, "pgb", ctx.logdir,
                                      program=prog("walship-replica"),
                                      extra_args=["--metrics-listen=127.0.0.1:0"]).start()
            metrics_addr = replica.metrics_address()
            now = pg.flush_lsn()

            def ws_flushed():
                st = kit.read_state(dest)
                return pg.lsn_of(st["segment"], st["offset"]) if st and st["segment"] else 0
            kit.wait_until(lambda: ws_flushed() >= now, 120, "walship to catch up",
                               interval=0.05)
            watch = start_watch(ctx, dest)
        elif variant.startswith("pg_receivewal"):
            pg.drop_slot("bench_rw")
            pg.psql("SELECT pg_create_physical_replication_slot('bench_rw', true)")
            dest = ctx.fresh_dir("pgb-rw")
            rw = ctx.procs.start("pg_receivewal", [pg.tool("pg_receivewal"), "-D", dest, "-S",
                                                   "bench_rw", "--synchronous", "-n",
                                                   "-d", pg.conninfo()])
            now = pg.flush_lsn()

            kit.wait_until(lambda: standby_flushed(pg, "pg_receivewal") >= now, 120,
                           "pg_receivewal to catch up", interval=0.05)
        elif variant.startswith("raw-relay"):
            # raw-relay-query follows the flush position by query, with no
            # walsender, as walship --pg-feed=false; the others by a feed.
            follow_query = variant == "raw-relay-query"
            dest = ctx.fresh_dir("pgb-relay")
            now = pg.flush_lsn()
            relay, recv = start_raw_relay(
                ctx, pg, dest,
                prealloc=(variant[len("raw-relay-"):]
                          if variant not in ("raw-relay", "raw-relay-query") else "none"),
                follow="query" if follow_query else "feed",
                send_args=["--query-interval-ms=%d" % query_ms] if query_ms else [])
            if follow_query:
                # It starts at the flush position it first asks for: nothing
                # to catch up once its query backend is there.
                kit.wait_until(lambda: pg.backend_pids("raw-relay"), 30,
                               "the raw relay's query backend", interval=0.05)
            else:
                kit.wait_until(lambda: standby_flushed(pg, "raw-relay") >= now, 120,
                               "the raw relay to catch up", interval=0.05)
        # CPU of each side during the load: walship-agent and its backends /
        # the walsender; walship-replica / pg_receivewal.
        if ws:
            # The agent, its query backends and its flush feed's walsender.
            if feed:
                kit.wait_until(lambda: pg.backend_pids("walship"), 30, "the agent's flush feed",
                               interval=0.05)
            sender_pids = ([agent.pid] + pg.backend_pids("walship-agent") +
                           pg.backend_pids("walship"))
            receiver_pids = [replica.pid]
        elif variant.startswith("pg_receivewal"):
            sender_pids = pg.backend_pids("pg_receivewal")  # the walsender
            receiver_pids = [rw.pid]
        elif relay is not None:
            sender_pids = [relay.pid] + pg.backend_pids("raw-relay")
            receiver_pids = [recv.pid]
        else:
            sender_pids = receiver_pids = []
        # Two phases on the same daemons. The first measures lag: every
        # variant's sampler, and for walship the observer of its replica-side
        # lag (watch-state, one wake-up per acknowledgement), which takes CPU
        # from the primary that no other variant's measurement does. The
        # second measures TPS and CPU with that observer gone, so the load
        # beside each receiver is the same (the sampler alone).
        samples = []
        query_waits = []  # client send to server execution, seconds
        sess = pg.session()

        def sampler(stop, samples, query_waits):
            # clock_timestamp() is read in the backend next to the flush
            # position: on two saturated CPUs the query can wait milliseconds
            # for a CPU, and a client-side time before it would count that
            # wait as replication lag.
            # Both receivers stand in pg_stat_replication: pg_receivewal
            # itself, walship through its agent's flush feed, which reports
            # what the replica acknowledged. PostgreSQL's lag tracker times
            # both the same way.
            q = ("SELECT pg_current_wal_flush_lsn()::text || ' ' || "
                 "extract(epoch from clock_timestamp())::text || ' ' || coalesce((SELECT "
                 "flush_lsn::text || ' ' || coalesce(extract(epoch from flush_lag)::text, '-') "
                 "FROM pg_stat_replication WHERE application_name = '%s'), '- -')"
                 % ("walship" if ws else "raw-relay" if relay else
                    "pg_receivewal" if rw else variant))
            while not stop.is_set():
                t_sent = time.monotonic()
                try:
                    p_lsn, p_epoch, r_lsn, r_lag = sess.fetch(q).split()
                except StepError:
                    break
                # The server's wall clock on this machine's monotonic clock.
                t = float(p_epoch) - (time.time() - time.monotonic())
                query_waits.append(max(0.0, t - t_sent))
                # walship's flushed LSN at this moment comes afterwards from
                # the watcher's log: reading its files here would load the
                # CPUs during walship's rounds only.
                ws_lsn = None
                if not ws and r_lsn != "-":
                    ws_lsn = parse_lsn(r_lsn)
                samples.append((t, parse_lsn(p_lsn), ws_lsn,
                                float(r_lag) if r_lag != "-" else None,
                                parse_lsn(r_lsn) if r_lsn != "-" else 0))
                stop.wait(0.01)

        def load(seconds, samples, query_waits):
            """pgbench for `seconds` with the sampler beside it: (TPS, transactions)."""
            stop = threading.Event()
            th = threading.Thread(target=sampler, args=(stop, samples, query_waits),
                                  daemon=True)
            th.start()
            out = subprocess.run([pg.tool("pgbench"), "-n", "-M", "prepared",
                                  "-c", str(cfg.pgbench_clients), "-j", "2",
                                  "-T", str(seconds), "-h", pg.sockdir, "-p", str(pg.port),
                                  "-U", SUPERUSER, "postgres"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=seconds + 120)
            stop.set()
            th.join(10)
            m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
            n = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
            if out.returncode != 0 or not m or not n:
                raise RuntimeError("pgbench failed: %s" % out.stdout[-2000:])
            return float(m.group(1)), int(n.group(1))

        # Only samples under load count: before pgbench's first commit the
        # byte lag is 0 for everyone, and pg_stat_replication shows the
        # flush_lag of the receiver's last reply before it, however old.
        load_from = pg.flush_lsn()
        if variant == "pg_receivewal-busy":
            busy = ctx.procs.start("busy", [sys.executable, "-c", BUSY_LOOP,
                                            str(cfg.pgbench_busy_cores)])
        # Phase 1: lag.
        watch_cpu0 = proc_stat_cpu(watch.pid) or 0.0 if watch is not None else None
        load(cfg.pgbench_lag_seconds, samples, query_waits)
        observer_cores = None
        if watch is not None:
            observer_cores = (((proc_stat_cpu(watch.pid) or watch_cpu0) - watch_cpu0) /
                              cfg.pgbench_lag_seconds)
            watch.stop()
        # Phase 2: TPS and CPU (and the primary's own WAL syncs).
        wal0 = wal_syncs(pg)
        cpu0 = {p: proc_stat_cpu(p) or 0.0 for p in sender_pids + receiver_pids}
        if busy is not None:
            busy_cpu0 = proc_stat_cpu(busy.pid) or 0.0
        # Where walship's CPU goes: per thread, and per flush cycle that made
        # new bytes durable (walship_replica_flush_seconds counts those).
        if ws:
            threads0 = walship_threads(pg, agent, replica)
            cycles0 = flush_cycles(metrics_addr)
        tps, transactions = load(cfg.pgbench_seconds, [], [])
        if variant == "raw-relay-query":
            # No pg_stat_replication row tells that it kept up: the
            # receiver's segment file does.
            end = pg.flush_lsn()
            seg = pg.psql("SELECT pg_walfile_name('%X/%X')" % (end >> 32, end & 0xffffffff))
            path = os.path.join(dest, seg)
            kit.wait_until(lambda: os.path.exists(path) and
                           pg.lsn_of(seg, os.path.getsize(path)) >= end, 30,
                           "the raw relay to hold the load's WAL", interval=0.05)
        cpu1 = {p: proc_stat_cpu(p) for p in cpu0}
        busy_cores = None
        if busy is not None:
            busy_cores = ((proc_stat_cpu(busy.pid) or busy_cpu0) - busy_cpu0) / cfg.pgbench_seconds
        if ws:
            threads1 = walship_threads(pg, agent, replica)
            cycles = flush_cycles(metrics_addr) - cycles0
        wal1 = wal_syncs(pg)

        def cores(pids):  # CPU seconds per second of load
            return sum((cpu1[p] or cpu0[p]) - cpu0[p] for p in pids) / cfg.pgbench_seconds
        qw = dist([x * 1e3 for x in query_waits])
        res = {"tps": tps, "samples": len(samples),
               "sample_query_wait_p50_ms": qw["p50"], "sample_query_wait_p99_ms": qw["p99"],
               "transactions": transactions,
               "sender_cores": cores(sender_pids), "receiver_cores": cores(receiver_pids)}
        syncs = wal1[0] - wal0[0]
        if syncs > 0:
            res["wal_sync_us"] = (wal1[1] - wal0[1]) * 1e3 / syncs
            res["wal_syncs_per_txn"] = syncs / max(1, transactions)
        if busy_cores is not None:
            res["busy_cores"] = busy_cores
        if observer_cores is not None:
            res["observer_cores"] = observer_cores
        # Replication CPU (both sides) per transaction the primary committed.
        res["cpu_us_per_txn"] = ((res["sender_cores"] + res["receiver_cores"]) * 1e6 /
                                 res["tps"] if res["tps"] else None)
        if variant == "none":
            return res
        if ws:
            res["flush_cycles_per_s"] = cycles / cfg.pgbench_seconds
            per = {}
            for side in ("agent", "replica", "feed"):
                for name, (c1, v1) in threads1[side].items():
                    c0, v0 = threads0[side].get(name, (0.0, 0))
                    if c1 - c0 <= 0 and v1 - v0 <= 0:
                        continue
                    per["%s/%s" % (side, name)] = {
                        "cores": (c1 - c0) / cfg.pgbench_seconds,
                        "us_per_cycle": (c1 - c0) * 1e6 / cycles if cycles else None,
                        "switches_per_cycle": (v1 - v0) / cycles if cycles else None}
            res["threads"] = per
            res["sender_us_per_cycle"] = (res["sender_cores"] * 1e6 / res["flush_cycles_per_s"]
                                          if cycles else None)
            res["receiver_us_per_cycle"] = (res["receiver_cores"] * 1e6 /
                                            res["flush_cycles_per_s"] if cycles else None)
        # A flush_lag counts once the receiver has replied about WAL of the load.
        td = dist([x * 1e3 for _, _, _, x, rep in samples if x is not None and rep > load_from])
        res.update({"lag_p50_ms": td["p50"], "lag_p99_ms": td["p99"], "lag_max_ms": td["max"],
                    "lag_n": td["n"]})
        if ws:
            # A second view of walship's lag, from the replica's side: a
            # flush-position sample (timed in its backend) until the replica's
            # walship.progress, rewritten before each acknowledgement, covers it
            # (phase 1).
            obs = [(pg.lsn_of(s, o), t) for s, o, _, t in read_watch_log(watch.watch_log)
                   if s != "-"]
            prim = [(p, t) for t, p, _, _, _ in samples if p > load_from]
            lat, _ = lags(prim, obs)
            sd = dist([x * 1e3 for x in lat])
            res.update({"state_lag_p50_ms": sd["p50"], "state_lag_p99_ms": sd["p99"],
                        "state_lag_max_ms": sd["max"]})
            at = flushed_at(obs)
            samples = [(t, p, at(t), lag, rep) for t, p, _, lag, rep in samples]
        byte_lag = [max(0, p - r) for _, p, r, _, _ in samples
                    if r is not None and p > load_from]
        bd = dist(byte_lag)
        res.update({"byte_lag_p50": bd["p50"], "byte_lag_p99": bd["p99"], "byte_lag_max": bd["max"]})
        return res
    finally:
        if watch is not None and watch.alive():
            watch.stop()
        if replica is not None:
            replica.stop()
        if agent is not None:
            agent.stop()
        for p in (rw, relay, recv, busy):
            if p is not None:
                p.stop()
        if dest:
            rm(dest)


def wal_syncs(pg):
    """(WAL syncs, milliseconds in them) of the primary so far (pg_stat_wal,
    with track_wal_io_timing). Backends report their share within a second
    and when they exit: read a second after the load's backends are gone."""
    time.sleep(1.0)
    n, ms = pg.session().fetch("SELECT wal_sync || ' ' || wal_sync_time FROM pg_stat_wal").split()
    return int(n), float(ms)


def flush_cycles(metrics_addr):
    """walship-replica's flush cycles that made new bytes durable, so far."""
    return kit.metric_total(kit.scrape(metrics_addr), "walship_replica_flush_seconds_count")


def thread_summary(rs):
    """Median over rounds of each thread's cores, CPU and switches per cycle."""
    names = sorted({n for r in rs for n in (r.get("threads") or {})})
    out = {}
    for n in names:
        out[n] = {k: median_summary([(r.get("threads") or {}).get(n, {}).get(k) for r in rs])
                  for k in ("cores", "us_per_cycle", "switches_per_cycle")}
    return out


def pgbench_init(pg, scale):
    """pgbench's TPC-B tables at `scale`, created afresh."""
    r = subprocess.run([pg.tool("pgbench"), "-i", "-q", "-s", str(scale),
                        "-h", pg.sockdir, "-p", str(pg.port), "-U", SUPERUSER, "postgres"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("pgbench -i failed: %s" % r.stdout[-2000:])


def section_pgbench(ctx, pg):
    cfg = ctx.cfg
    pg.drop_slot("bench_hold")
    pg.drop_slot("bench_rw")
    pg.psql("DROP TABLE IF EXISTS bench_fill")
    pg.psql("CHECKPOINT")
    pgbench_init(pg, cfg.pgbench_scale)
    variants = list(cfg.pgbench_variants)
    runs = {v: [] for v in variants}
    for rnd in range(cfg.rounds):
        for v in rotate(variants, rnd):
            res = run_pgbench(ctx, pg, v)
            if v == "none":
                log("pgbench round %d %-14s tps %.0f", rnd + 1, v, res["tps"])
            else:
                log("pgbench round %d %-14s tps %.0f  flush lag p50 %.2f ms p99 %.2f ms; "
                    "bytes p50 %d p99 %d; sample query waited p50 %.2f ms", rnd + 1, v,
                    res["tps"], *[-1 if res[k] is None else res[k] for k in (
                        "lag_p50_ms", "lag_p99_ms", "byte_lag_p50", "byte_lag_p99",
                        "sample_query_wait_p50_ms")])
            runs[v].append(res)
    return {"scale": cfg.pgbench_scale, "clients": cfg.pgbench_clients,
            "seconds": cfg.pgbench_seconds, "lag_seconds": cfg.pgbench_lag_seconds,
            "runs": runs,
            "lag_method": {
                "both": "pg_stat_replication.flush_lag (PostgreSQL's own lag tracker: from "
                        "the walsender sending WAL to the receiver's reply that it is "
                        "durable), sampled every ~10 ms; walship's row is its agent's flush "
                        "feed reporting what the replica acknowledged",
                "walship_state": "state_lag_*: time from a sample of "
                                 "pg_current_wal_flush_lsn() (timed by clock_timestamp() in "
                                 "the same backend) until walship.progress (rewritten before each "
                                 "acknowledgement; inotify) covers it",
                "bytes": "pg_current_wal_flush_lsn() minus the receiver's flushed LSN "
                         "at the same moment (walship: the newest walship.progress the "
                         "watcher saw by then; others: pg_stat_replication.flush_lsn, "
                         "sampled together)",
                "observer": "observer_cores: CPU of walship's replica-side lag watcher "
                            "during the load (it shares the primary's CPUs; the others "
                            "need none)"},
            "summary": summarize(runs, ["tps", "lag_p50_ms", "lag_p99_ms", "lag_max_ms",
                                        "state_lag_p50_ms", "state_lag_p99_ms",
                                        "byte_lag_p50", "byte_lag_p99", "sender_cores",
                                        "receiver_cores", "cpu_us_per_txn", "busy_cores",
                                        "observer_cores",
                                        "flush_cycles_per_s", "sender_us_per_cycle",
                                        "receiver_us_per_cycle", "wal_sync_us",
                                        "wal_syncs_per_txn"]),
            "threads": {v: thread_summary(rs) for v, rs in runs.items()
                        if any(r.get("threads") for r in rs)}}
# walship-b: the build --compare names (bench.py refuses it without).
PGBENCH_VARIANTS = ["none", "walship", "walship-b", "walship-paced", "walship-query",
                    "walship-query-paced",
                    "pg_receivewal",
                    "pg_receivewal-busy", "raw-relay", "raw-relay-query",
                    "raw-relay-zero", "raw-relay-fallocate", "raw-relay-keep-size"]



def split_query_interval(variant):
    """(base variant, N) for a variant that follows the flush position by
    query (walship-query*, raw-relay-query) with a "-Nms" suffix: the
    shortest pause between queries (walship-agent --pg-query-interval-ms);
    (variant, None) otherwise, 2 ms."""
    m = re.match(r"^(walship-query.*|raw-relay-query)-(\d+)ms$", variant)
    return (m.group(1), int(m.group(2))) if m else (variant, None)


def known_pgbench_variant(v):
    """One of PGBENCH_VARIANTS, or one following by query with "-Nms"."""
    return split_query_interval(v)[0] in PGBENCH_VARIANTS
