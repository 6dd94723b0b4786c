#!/usr/bin/env python3
"""The walship benchmark: walship beside a raw sendfile -> splice pipeline and
pg_receivewal --synchronous, in one run, several interleaved rounds, medians.

    python3 -m integration.bench.bench [--quick] [--out DIR]   (see README.md)

Sections (each a module beside this one; --sections picks some):
  catchup   append-format backlog of full segments: raw (zerocopy, copy),
            walship --transport=zerocopy and copy; MB/s, CPU s/GiB per side,
            peak RSS; walship also on a small backlog (RSS must not grow).
  datatls   the same backlog with the data socket plaintext (zerocopy,
            copy) and under userspace TLS (--data-tls=on): MB/s and CPU
            s/GiB per side in the same rounds (bench_datatls.py).
  pg        the same PostgreSQL backlog (a big INSERT, receivers started
            afterwards) caught up by walship (--format=postgres) and by
            pg_receivewal --synchronous with a replication slot.
  live      a writer appends 8-64 KiB records at 20 and 100 MB/s; lag from
            write(2) returning to the replica's durable position covering the
            record; beside it the raw pipeline and an fdatasync probe.
  pgbench   TPC-B on the primary with walship, pg_receivewal or the raw relay
            (or nothing) beside it: the primary's TPS and flush lag.
  synccost  pgbench TPC-B with walship and pg_receivewal --synchronous both
            connected; rounds change only which one synchronous_standby_names
            names (or nobody): TPS, latency, latency added per commit; then
            a traced walship round: where a commit's time goes. With
            --synccost-relay the raw relay is a third synchronous standby.
  formats   each database's own log (etcd's WAL, RocksDB's logs) caught up
            with its format and with --format=append on the same bytes.
  fanout    1, 2 and 4 replicas of one agent from an evicted backlog:
            aggregate durable throughput; the agent's storage reads
            (/proc/PID/io read_bytes) against the bytes shipped.
  compress  pgbench's WAL shipped plain (zerocopy, copy) and compressed
            (--compress=zstd, lz4): MB/s, CPU s/GiB per side, the ratio;
            then none/zstd/lz4 through a 20 MB/s link (fault_proxy).

Timing-critical helpers are in benchtool (benchtool.cc). Every time is
CLOCK_MONOTONIC (time.monotonic() here, clock_gettime in benchtool).
Writes results.json, results.md and chart.svg (report.py) into --out.
Exit status: 0 if every section ran (targets may still be missed: they are
reported, not asserted), 1 if a section failed, 2 on bad usage.
"""

import argparse
import os
import sys
import tempfile
import time
import traceback

from integration.bench import report
from integration.bench.bench_compress import section_compress
from integration.bench.bench_catchup import (
    busy_processes, machine_info, make_backlogs, section_catchup)
from integration.bench.bench_datatls import section_datatls
from integration.bench.bench_fanout import section_fanout
from integration.bench.bench_formats import section_formats
from integration.bench.bench_live import section_live
from integration.bench.bench_pg import Pg, section_pg
from integration.bench.bench_pgbench import (
    PGBENCH_VARIANTS, known_pgbench_variant, section_pgbench)
from integration.bench.bench_procs import Config, Ctx, log, read_text, rm
from integration.bench.bench_synccost import ORDERS, section_synccost


# ---------------------------------------------------------------------------


SECTIONS = ["catchup", "datatls", "pg", "live", "pgbench", "synccost", "fanout", "formats",
            "compress"]
PG_SECTIONS = ("pg", "pgbench", "synccost", "compress")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny inputs, one round (~1 minute)")
    ap.add_argument("--out", default=None, help="report directory (default ./bench-out-TIME)")
    ap.add_argument("--work", default=None,
                    help="parent of the scratch directory (default /var/tmp; it must be on the "
                         "disk to measure and reachable by the PostgreSQL user)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per comparison")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help="comma-separated subset of %s" % ",".join(SECTIONS))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--pgbench-variants", default=None,
                    help="comma-separated subset of the pgbench section's receivers")
    ap.add_argument("--compare", "--synccost-compare", dest="compare", default=None,
                    metavar="DIR",
                    help="a second walship build (walship-agent and walship-replica in DIR) as "
                         "variant walship-b: synccost connects it beside the first; pgbench "
                         "runs it in rounds of its own")
    ap.add_argument("--synccost-relay", action="store_true",
                    help="synccost: the raw relay (benchtool relay-send / relay-recv) as a "
                         "third synchronous standby, connected in every round")
    ap.add_argument("--synccost-fifo", type=int, default=0, metavar="N",
                    help="synccost: walship's commit-path threads (agent and replica; not "
                         "walship-b's) under SCHED_FIFO at priority N (--sched-fifo-priority)")
    ap.add_argument("--synccost-order", choices=ORDERS, default=None,
                    help="synccost: sync-first (default) reconnects the receivers before each "
                         "round with a synchronous standby, that round's first, since "
                         "PostgreSQL wakes walsenders in the order they connected; "
                         "pg_receivewal-first and walship-first connect them once in that order")
    ap.add_argument("--synccost-clients", type=int, default=0, metavar="N",
                    help="synccost: pgbench clients (default 4, which keeps both CPUs of a "
                         "two-CPU machine busy; 1 leaves one idle for the receivers)")
    a = ap.parse_args(argv)
    sections = [s for s in a.sections.split(",") if s]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error("unknown sections %s" % bad)
    cfg = Config(a.quick, a.rounds)
    if a.pgbench_variants:
        picked = [v for v in a.pgbench_variants.split(",") if v]
        bad = [v for v in picked if not known_pgbench_variant(v)]
        if bad:
            ap.error("unknown pgbench variants %s (known: %s; those following by query may "
                     "end in -Nms, the pause between queries)" % (bad, ",".join(PGBENCH_VARIANTS)))
        if "walship-b" in picked and not a.compare:
            ap.error("pgbench variant walship-b needs --compare DIR (the other build)")
        cfg.pgbench_variants = picked
    if a.compare:
        cfg.compare_bin = os.path.abspath(a.compare)
    if a.synccost_relay:
        cfg.synccost_relay = True
    if a.synccost_fifo:
        cfg.synccost_fifo = a.synccost_fifo
    if a.synccost_order:
        cfg.synccost_order = a.synccost_order
    if a.synccost_clients < 0:
        ap.error("--synccost-clients must be at least 1")
    if a.synccost_clients:
        cfg.synccost_clients = a.synccost_clients
    out = a.out or os.path.abspath("bench-out-%s" % time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="walship-bench-", dir=a.work or "/var/tmp")
    os.chmod(work, 0o755)
    ctx = Ctx(cfg, work, out, a.keep)
    started = time.monotonic()
    results = {"schema": 1, "quick": cfg.quick, "config": cfg.to_json(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "machine": machine_info(work), "busy_at_start": busy_processes(),
               "seed": ctx.seed, "sections": {}, "errors": {}}
    log("walship benchmark%s: work %s, out %s, load %s", " (quick)" if cfg.quick else "", work,
        out, " ".join(results["machine"]["loadavg_start"]))
    pg = None
    try:
        big = small = fan = None
        if any(s in sections for s in ("catchup", "datatls", "fanout")):
            big, small, fan = make_backlogs(ctx)
        for name in sections:
            t = time.monotonic()
            try:
                if name == "catchup":
                    results["sections"][name] = section_catchup(ctx, big, small)
                elif name == "datatls":
                    results["sections"][name] = section_datatls(ctx, big)
                elif name == "live":
                    results["sections"][name] = section_live(ctx)
                elif name == "fanout":
                    results["sections"][name] = section_fanout(ctx, fan)
                elif name == "formats":
                    results["sections"][name] = section_formats(ctx)
                elif name in PG_SECTIONS:
                    if pg is None:
                        pg = Pg(ctx, cfg.pg_segsize_mb)
                        pg.setup()
                    results["sections"][name] = {"pg": section_pg, "pgbench": section_pgbench,
                                                 "synccost": section_synccost,
                                                 "compress": section_compress}[name](ctx, pg)
                results["sections"].setdefault(name, {})["elapsed_s"] = time.monotonic() - t
                log("section %s done in %.0fs", name, time.monotonic() - t)
            except Exception as e:  # record, go on with the next section
                traceback.print_exc()
                results["errors"][name] = "%s: %s" % (type(e).__name__, e)
                log("section %s FAILED: %s", name, e)
    finally:
        if pg is not None:
            pg.close()
        ctx.procs.kill_all()
        results["elapsed_s"] = time.monotonic() - started
        results["machine"]["loadavg_end"] = read_text("/proc/loadavg").split()[:3]
        if ctx.warm_costs:
            w = sorted(ctx.warm_costs)
            results["machine"]["warm_memory"] = {
                "runs": len(w), "s_per_gib_min": w[0], "s_per_gib_median": w[len(w) // 2],
                "s_per_gib_max": w[-1]}
        results["targets"] = report.evaluate(results)
        report.write_all(results, out)
        if a.keep:
            log("kept %s", work)
        else:
            rm(work)
    log("done in %.0fs: %s/results.md", results["elapsed_s"], out)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
