"""The compress section: walship's compression on the data socket
(wire_format.md section 9) on real PostgreSQL WAL made by pgbench.

The WAL: after a checkpoint, a slot holds it from its start; pgbench
initialises its TPC-B tables (cfg.compress_scale) and then runs TPC-B
(synchronous_commit off, so it makes WAL fast) until cfg.compress_wal_bytes
of WAL exist. Every variant ships that range with --format=postgres to an
empty destination, in rounds (rotated order, one unrecorded warm-up):

  * catch-up on the loopback: walship-zerocopy and walship-copy (plain
    frames), walship-zstd and walship-lz4 (--compress=..., default levels):
    MB/s of WAL made durable, CPU seconds per GiB on each side;
  * the compression ratio walship achieved on that WAL (segment bytes /
    bytes on the wire, from the agent's counters; frames that did not shrink
    count as sent plain);
  * through a thin link: the replica's data socket through fault_proxy
    limited to cfg.compress_link_bytes_per_sec (server -> client),
    link-none, link-zstd, link-lz4: the effective MB/s of WAL made durable.
"""

import os
import subprocess

from integration import fault_proxy
from integration import harness as kit
from integration.bench.bench_catchup import (
    WARM_UP_NOTE, cpu_per_gib, round_name, rounds_after_warm_up, run_walship_catchup, settle,
    summarize)
from integration.bench.bench_pgbench import pgbench_init
from integration.bench.bench_procs import MIB, log, proc_stat_cpu, rm
from integration.walshiptest.lsn import fmt_lsn, parse_lsn
from integration.walshiptest.pg import SUPERUSER

LOOPBACK = ["walship-zerocopy", "walship-copy", "walship-zstd", "walship-lz4"]
LINK = ["link-none", "link-zstd", "link-lz4"]


def pgbench_wal(ctx, pg):
    """Makes the pgbench WAL; returns (start of its first segment, end LSN)."""
    cfg = ctx.cfg
    for slot in ("bench_hold", "bench_rw", "bench_zhold"):
        pg.drop_slot(slot)
    pg.psql("DROP TABLE IF EXISTS bench_fill")
    pg.psql("CHECKPOINT")
    pg.psql("SELECT pg_create_physical_replication_slot('bench_zhold', true)")
    start = parse_lsn(pg.psql("SELECT restart_lsn FROM pg_replication_slots "
                              "WHERE slot_name = 'bench_zhold'"))
    pgbench_init(pg, cfg.compress_scale)
    target = start + cfg.compress_wal_bytes
    env = dict(os.environ, PGOPTIONS="-c synchronous_commit=off")
    while pg.flush_lsn() < target:
        r = subprocess.run([pg.tool("pgbench"), "-n", "-T", "3", "-c", "4", "-j", "2",
                            "-h", pg.sockdir, "-p", str(pg.port), "-U", SUPERUSER, "postgres"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600, env=env)
        if r.returncode != 0:
            raise RuntimeError("pgbench failed: %s" % r.stdout[-2000:])
    end = pg.flush_lsn()
    seg_start = start - start % pg.segsize
    log("pgbench WAL: %s .. %s (%d MiB, scale %d)", fmt_lsn(seg_start), fmt_lsn(end),
        (end - seg_start) // MIB, cfg.compress_scale)
    return seg_start, end


def codec_of(variant):
    for c in ("zstd", "lz4"):
        if variant.endswith(c):
            return c
    return None


def run_variant(ctx, pg, start, target, variant):
    """One shipment of [start, target) by `variant`; returns its result."""
    codec = codec_of(variant)
    transport = "zerocopy" if variant.endswith("zerocopy") or variant == "link-none" else "copy"
    proxies = []

    def through_link(agent):
        p = fault_proxy.FaultProxy(agent.data)
        p.set_rate(ctx.cfg.compress_link_bytes_per_sec, fault_proxy.S2C)
        proxies.append(p.start())
        return p.address

    def extra(agent, before):
        now = {p: proc_stat_cpu(p) or 0.0 for p in pg.backend_pids("walship-agent")}
        if before is None:
            return now
        entry = kit.replica_entry(kit.status(agent), "r1") or {}
        c = entry.get("agent_counters") or {}
        return {"agent_backend_cpu_s": sum(v - before.get(p, 0.0) for p, v in now.items()),
                "compressed_raw": int(c.get("bytes_compressed_raw", 0)),
                "compressed_wire": int(c.get("bytes_compressed_wire", 0)),
                "compression": entry.get("compression")}

    pg.drop_slot("walship")
    try:
        r, dest = run_walship_catchup(
            ctx, os.path.join(pg.datadir, "pg_wal"), transport, pg.segment_of(target),
            agent_args=["--format=postgres", "--pg-data=" + pg.datadir,
                        "--pg-conninfo=" + pg.conninfo(), "--pg-slot=walship",
                        "--state-dir=" + ctx.fresh_dir("agent-state")],
            extra=extra, replica_args=["--compress=" + codec] if codec else [],
            data_address=through_link if variant.startswith("link-") else None)
    finally:
        for p in proxies:
            p.close()
    rm(dest)
    nbytes = target - start
    r["bytes"] = nbytes
    r["mb_s"] = nbytes / 1e6 / r["seconds"]
    r["agent_cpu_s"] += r["agent_backend_cpu_s"]
    if codec:
        if r["compression"] != codec + ":1":
            raise RuntimeError("%s: the session's compression is %r" % (variant, r["compression"]))
        # Of the segment bytes shipped: those in ZDATA frames went as
        # compressed_wire bytes, the others as they are.
        shipped = r["shipped_bytes"]
        r["ratio"] = shipped / float(shipped - r["compressed_raw"] + r["compressed_wire"])
    return cpu_per_gib(r, nbytes)


def section_compress(ctx, pg):
    start, target = pgbench_wal(ctx, pg)
    variants = LOOPBACK + LINK
    runs = {v: [] for v in variants}
    for rnd, v in rounds_after_warm_up(variants, ctx.cfg.rounds):
        settle(ctx, target - start)
        r = run_variant(ctx, pg, start, target, v)
        log("compress %s %-16s %7.1f MB/s  cpu/GiB agent %.2fs replica %.2fs%s",
            round_name(rnd), v, r["mb_s"], r["agent_cpu_s_per_gib"], r["replica_cpu_s_per_gib"],
            "  ratio %.2f" % r["ratio"] if "ratio" in r else "")
        if rnd >= 0:
            runs[v].append(r)
    pg.drop_slot("bench_zhold")
    return {"wal_bytes": target - start, "wal_segment_bytes": pg.segsize,
            "pgbench_scale": ctx.cfg.compress_scale,
            "link_bytes_per_sec": ctx.cfg.compress_link_bytes_per_sec, "runs": runs,
            "warm_up": WARM_UP_NOTE,
            "summary": summarize(runs, ["mb_s", "agent_cpu_s_per_gib", "replica_cpu_s_per_gib",
                                        "ratio"])}
